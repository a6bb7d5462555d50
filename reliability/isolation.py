"""Tenant isolation and the security rules around it, against a live server.

- Routes: tenant B calls every route of ``ROUTES`` (the table itself, so a new
  route cannot be missed) with tenant A's session ids, message ids and asset
  digests, in the path, the query and the body. Each answer must be what a
  never-existing id gets, byte for byte once the ids are blanked out (so no
  status, message, header or length hints that A's id exists), must carry
  nothing of A's that B did not send, and A's data must be unchanged after.
  Routes without ids (list, search, export, upload, import, erase, purge, me)
  must show B only its own data.
- Metrics carry no tenant, id or key; the logs of the whole run carry no API key.
- Keys: stored as hashes only (the SQLite file is searched for the secrets),
  compared with ``hmac.compare_digest`` (observed on the code path), revoked
  keys answer 401 like unknown ones.
- Static: SQL in ``stores/*.py`` is built only from reviewed fixed identifiers
  and fragments (every interpolation is listed in ``SQL_FRAGMENTS`` with why it
  is safe; a new one fails until reviewed), and ``assets.py`` builds paths only
  from the root, a hash of the tenant and a validated hex digest.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec

from chathistory import Attachment, Message
from chathistory.server import auth
from chathistory.server.routes import ROUTES

from .common import Result
from .fuzz import World, png, served

__all__ = ["PATH_PARTS", "SQL_FRAGMENTS", "asset_paths", "path_parts", "routes_check", "run",
           "sql_building", "sql_interpolations"]

SRC = Path(__file__).resolve().parent.parent / "src" / "chathistory"


# ---------------------------------------------------------------- the two tenants


@dataclass
class Data:
    """One tenant's data: ids the other tenant will try, and markers of its content."""

    tenant: str
    sid: str
    fork: str
    expired: str
    message_ids: list[str]
    inline_sha: str
    uploaded_sha: str
    marker: str
    blobs: tuple[str, ...] = ()
    """The tenant's file bytes as they would travel in JSON (base64)."""

    def secrets(self) -> set[str]:
        """What must never reach the other tenant unless it sent it itself."""
        return {self.sid, self.fork, self.expired, self.inline_sha, self.uploaded_sha,
                self.marker, self.tenant, *self.message_ids, *self.blobs}

    def ids(self) -> set[str]:
        return {self.sid, self.fork, self.expired, self.inline_sha, self.uploaded_sha,
                *self.message_ids}


def _make_data(world: World, tenant: str, seed: int) -> Data:
    marker = f"private-{tenant}-{uuid.uuid4().hex[:10]}"
    sid = f"s-{uuid.uuid4().hex[:16]}"
    with world.client(tenant) as client:
        client.post("/v1/sessions", json={"id": sid, "user": f"user-{marker}",
                                          "metadata": {"note": marker}}).raise_for_status()
        picture = Message.user(f"{marker} look", Attachment.from_bytes(png(seed=seed),
                                                                       name="p.png"))
        call = f"call-{uuid.uuid4().hex[:8]}"
        chat = [picture, Message.assistant("", [{"id": call, "name": "f", "arguments": {}}]),
                Message.tool_result(call, f"{marker} result"),
                Message.assistant(f"{marker} answer")]
        client.post(f"/v1/sessions/{sid}/messages",
                    json={"messages": [m.to_dict() for m in chat]}).raise_for_status()
        fork = client.post(f"/v1/sessions/{sid}/fork", json={}).json()["id"]
        expired = f"x-{uuid.uuid4().hex[:16]}"
        client.post("/v1/sessions", json={"id": expired, "ttl_seconds": 0.3,
                                          "metadata": {"note": marker}}).raise_for_status()
        text = f"uploaded {marker}".encode()
        uploaded = client.post("/v1/assets", params={"name": f"{marker}.txt"}, content=text,
                               headers={"Content-Type": "text/plain"})
        uploaded.raise_for_status()
    blobs = tuple(base64.b64encode(b).decode() for b in (png(seed=seed), text))
    return Data(tenant, sid, fork, expired, [m.id for m in chat],
                picture.attachments[0].sha256, uploaded.json()["sha256"], marker, blobs)


def _ghost(data: Data) -> Data:
    """Ids of the same lengths that exist nowhere."""

    def like(text: str) -> str:
        fresh = uuid.uuid4().hex * 4
        return fresh[:len(text)] if re.fullmatch(r"[0-9a-f]+", text) else \
            text[:2] + fresh[:max(len(text) - 2, 1)]

    return Data(data.tenant, like(data.sid), like(data.fork), like(data.expired),
                [like(m) for m in data.message_ids], like(data.inline_sha),
                like(data.uploaded_sha), data.marker)


# ---------------------------------------------------------------- probes


@dataclass
class Probe:
    """One request of B's, made twice: with A's ids and with never-existing ones."""

    method: str
    name: str
    build: Callable[[Data, str], tuple[str, dict[str, Any]]]
    """(ids to try, B's own session id) -> (path, httpx keyword arguments)"""
    statuses: tuple[int, ...] = (404,)
    setup: Callable[[httpx.Client, Data, str], str] | None = None
    """Run on B's fresh session before the request; returns what it sent."""


def _path(route_path: str, ids: Data, own_sid: str, *, own_session: bool = False) -> str:
    return (route_path.replace("{session_id}", own_sid if own_session else ids.sid)
            .replace("{message_id}", ids.message_ids[0]).replace("{sha256}", ids.inline_sha))


def _json(body: Any) -> dict[str, Any]:
    return {"json": body}


def _msg(text: str) -> dict[str, Any]:
    return Message.user(text).to_dict()


def _reference(sha: str) -> dict[str, Any]:
    """A message referencing an asset by digest (no bytes)."""
    return {"role": "user", "parts": [{"type": "image", "attachment": {
        "name": "ref.png", "size": 69, "modality": "image", "mime_type": "image/png",
        "sha256": sha}}]}


BODIES: dict[tuple[str, str], Callable[[Data], dict[str, Any]]] = {
    ("PATCH", "/v1/sessions/{session_id}"): lambda d: _json({"state": {"stolen": True}}),
    ("DELETE", "/v1/sessions/{session_id}"): lambda d: {"params": {"cascade": "true"}},
    ("POST", "/v1/sessions/{session_id}/fork"): lambda d: _json(
        {"at_message_id": d.message_ids[1]}),
    ("POST", "/v1/sessions/{session_id}/edit"): lambda d: _json(
        {"message_id": d.message_ids[1], "message": _msg("b's edit")}),
    ("POST", "/v1/sessions/{session_id}/messages"): lambda d: _json(
        {"messages": [_msg("b's words")]}),
    ("GET", "/v1/sessions/{session_id}/messages"): lambda d: {"params": {"tail": 5}},
    ("GET", "/v1/sessions/{session_id}/context"): lambda d: {"params": {"tail": 5, "head": 1}},
    ("GET", "/v1/sessions/{session_id}/window"): lambda d: {"params": {"max_tokens": 1000}},
    ("POST", "/v1/sessions/{session_id}/mark"): lambda d: _json(
        {"ids": d.message_ids[:2], "status": 0}),
    ("POST", "/v1/sessions/{session_id}/reduce"): lambda d: _json(
        {"type": "count", "max_messages": 1}),
    ("POST", "/v1/sessions/{session_id}/window"): lambda d: _json({"max_tokens": 10}),
}
"""Request bodies and parameters that get past validation, so the store is asked."""

OWN_SESSION_PROBES: dict[tuple[str, str], tuple[str, Callable[[Data], dict[str, Any]], int]] = {
    # B's own session, A's message ids or digests inside: the answer must not differ
    ("GET", "/v1/sessions/{session_id}/messages/{message_id}"): (
        "A's message id in B's session", lambda d: {}, 404),
    ("POST", "/v1/sessions/{session_id}/fork"): (
        "fork B's session at A's message", lambda d: _json({"at_message_id": d.message_ids[1]}),
        404),
    ("POST", "/v1/sessions/{session_id}/edit"): (
        "edit A's message within B's session", lambda d: _json(
            {"message_id": d.message_ids[1], "message": _msg("b's edit")}), 404),
    ("POST", "/v1/sessions/{session_id}/mark"): (
        "mark A's message ids in B's session", lambda d: _json(
            {"ids": d.message_ids, "status": 0}), 404),
    ("POST", "/v1/sessions/{session_id}/messages"): (
        "reference A's digest from B's session", lambda d: _json(
            {"messages": [_reference(d.uploaded_sha), _reference(d.inline_sha)]}), 422),
}


def _reference_both(b: httpx.Client, ids: Data, own: str) -> str:
    """B's append referencing A's digests is refused as bytes B does not hold (422,
    the answer a digest nobody uploaded gets): the read after it sees B's own only."""
    body = {"messages": [_reference(ids.uploaded_sha), _reference(ids.inline_sha)]}
    answer = b.post(f"/v1/sessions/{own}/messages", json=body)
    if answer.status_code != 422:
        raise AssertionError(f"B referencing A's digests: {answer.status_code} {answer.text[:160]}")
    return repr(body)


def _probes() -> tuple[list[Probe], list[str], list[str]]:
    """Probes for every route of the table: (probes, routes probed generically, routes
    whose probe is a tenant-wide one in ``_tenant_wide``)."""
    probes: list[Probe] = []
    generic: list[str] = []
    tenant_wide: list[str] = []
    for route in ROUTES:
        if route.public:
            continue
        key = (route.method, route.path)
        label = f"{route.method} {route.path}"
        if "{" not in route.path:
            tenant_wide.append(label)
            continue
        body = BODIES.get(key)
        if body is None and route.method in ("POST", "PATCH", "PUT") and route.body is not None:
            generic.append(label)  # a new route: the answers must still be the same
            statuses: tuple[int, ...] = (400, 404, 409, 415, 422)
        else:
            statuses = (404,)

        def build(ids: Data, own: str, path: str = route.path,
                  make: Callable[[Data], dict[str, Any]] | None = body,
                  has_body: bool = route.body is not None) -> tuple[str, dict[str, Any]]:
            kwargs = make(ids) if make is not None else ({"json": {}} if has_body else {})
            return _path(path, ids, own), kwargs

        probes.append(Probe(route.method, label, build, statuses))
        if key in OWN_SESSION_PROBES:
            name, make_own, status = OWN_SESSION_PROBES[key]

            def build_own(ids: Data, own: str, path: str = route.path,
                          make: Callable[[Data], dict[str, Any]] = make_own
                          ) -> tuple[str, dict[str, Any]]:
                return _path(path, ids, own, own_session=True), make(ids)

            probes.append(Probe(route.method, f"{label}: {name}", build_own, (status,)))
    probes += [
        Probe("GET", "GET /v1/assets/{sha256}: A's uploaded file",
              lambda d, own: (f"/v1/assets/{d.uploaded_sha}", {})),
        Probe("GET", "GET /v1/export: session_id=A's",
              lambda d, own: ("/v1/export", {"params": {"session_id": d.sid}})),
        Probe("GET", "GET /v1/export: session_id=A's fork",
              lambda d, own: ("/v1/export", {"params": {"session_id": d.fork}})),
        Probe("GET", "GET /v1/sessions/{session_id}: A's fork",
              lambda d, own: (f"/v1/sessions/{d.fork}", {})),
        Probe("GET", "GET /v1/sessions/{session_id}/messages: B's, as openai_chat, "
              "A's digests referenced", lambda d, own: (
                  f"/v1/sessions/{own}/messages",
                  {"params": {"tail": 2, "format": "openai_chat"}}), (200,),
              setup=_reference_both),
    ]
    return probes, generic, tenant_wide


_VARYING_HEADERS = {"date", "x-request-id", "content-length", "server"}


def _normal(response: httpx.Response, ids: set[str]) -> tuple[Any, ...]:
    """The answer with the probed ids blanked out: what may not differ."""
    text = response.text
    for value in sorted(ids, key=len, reverse=True):
        text = text.replace(value, "<id>")
    text = re.sub(r'"request_id":"[^"]*"', '"request_id":"-"', text)
    text = re.sub(r"quote request id \w+", "quote request id -", text)
    headers = sorted(k for k in response.headers if k.lower() not in _VARYING_HEADERS)
    return response.status_code, text, headers


def _a_state(world: World, a: Data) -> bytes:
    return b"".join(world.store.export(tenant=a.tenant))


def routes_check(world: World, a: Data, b_tenant: str) -> Result:
    """B over every route with A's ids; answers identical to a never-existing id's."""
    started = time.monotonic()
    ghost = _ghost(a)
    probes, generic, tenant_wide = _probes()
    failures: list[str] = []
    sent: list[str] = []  # everything B sent: B may see again what it sent itself
    tried = 0
    with world.client(b_tenant) as b:
        before = _a_state(world, a)
        for probe in probes:
            answers = []
            for ids in (a, ghost):
                # a fresh session of B's for each request: no probe changes the next
                own = f"b-{uuid.uuid4().hex[:16]}"
                b.post("/v1/sessions", json={"id": own}).raise_for_status()
                b.post(f"/v1/sessions/{own}/messages",
                       json={"messages": [_msg("b's first"), _msg("b's second")]}
                       ).raise_for_status()
                path, kwargs = probe.build(ids, own)
                sent.append(f"{path} {kwargs!r}")
                if probe.setup is not None:
                    sent[-1] += probe.setup(b, ids, own)
                response = b.request(probe.method, path, **kwargs)
                leaked = {x for x in a.secrets() if x in response.text and x not in sent[-1]}
                if leaked:
                    failures.append(f"{probe.name}: the answer carries A's {sorted(leaked)}")
                answers.append((response, _normal(response, ids.ids() | {own})))
            tried += 1
            (mine, mine_normal), (_, ghost_normal) = answers
            if mine.status_code not in probe.statuses:
                failures.append(f"{probe.name}: status {mine.status_code} "
                                f"(wanted {probe.statuses}): {mine.text[:160]}")
            if mine_normal != ghost_normal:
                failures.append(f"{probe.name}: differs from a never-existing id's: "
                                f"{mine_normal!r} vs {ghost_normal!r}"[:400])
        if _a_state(world, a) != before:
            failures.append("A's data changed while B probed it")
        wide, wide_failures = _tenant_wide(world, a, b, b_tenant, "\n".join(sent))
        tried += wide
        failures += wide_failures
    covered = {p.name.split(":")[0] for p in probes} | set(tenant_wide)
    table = {f"{r.method} {r.path}" for r in ROUTES if not r.public}
    missed = table - covered
    if missed:
        failures.append(f"routes without a probe: {sorted(missed)}")
    detail = (f"{len(table)} routes of ROUTES: {len(probes)} probes with A's ids, each answered "
              f"as for ids that never existed; {wide} checks that lists, search, export, "
              f"upload, import, erase and purge show and touch B's data only")
    if generic:
        detail += f"; probed generically (add a body to BODIES): {generic}"
    if failures:
        detail += "\n    " + "\n    ".join(failures[:20])
    short = {t: re.sub(r"^tenant-|-[0-9a-f]{6}$", "", t) for t in (b_tenant, a.tenant)}
    direction = f"{short[b_tenant]} -> {short[a.tenant]}"
    return Result("isolation: every route", f"{world.backend} ({direction})", tried,
                  tried - len(failures), len(failures), time.monotonic() - started, detail)


def _tenant_wide(world: World, a: Data, b: httpx.Client, b_tenant: str, sent_before: str
                 ) -> tuple[int, list[str]]:
    """Routes without ids in the path: B sees and changes only B's data. ``sent_before``:
    what B sent so far (B's own references to A's digests may come back to it)."""
    failures: list[str] = []
    checks = 0

    def check(name: str, ok: bool, why: str = "") -> None:
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(f"{name}: {why}"[:300])

    def clean(name: str, response: httpx.Response, sent: str = "") -> None:
        leaked = {x for x in a.secrets() if x in response.text
                  and x not in sent and x not in sent_before}
        check(name, not leaked and response.status_code < 500,
              f"status {response.status_code}, carries A's {sorted(leaked)}")

    listed = b.get("/v1/sessions", params={"limit": 1000})
    clean("GET /v1/sessions", listed)
    check("GET /v1/sessions lists B's only", all(s["tenant"] == b_tenant
                                                 for s in listed.json()["items"]))
    for params in ({"user": f"user-{a.marker}"}, {"metadata.note": a.marker}, {"q": a.marker}):
        found = b.get("/v1/sessions", params=params)
        ghost = b.get("/v1/sessions", params={k: v.replace(a.marker, "nothing-" + a.marker[8:])
                                              for k, v in params.items()})
        if found.status_code == 400 and "q" in params:  # a store without search
            continue
        check(f"GET /v1/sessions?{next(iter(params))}=<A's>",
              found.status_code == 200 and found.json()["items"] == []
              and found.status_code == ghost.status_code,
              f"{found.status_code} {found.text[:150]}")
    exported = b.get("/v1/export")
    clean("GET /v1/export", exported)
    both = b.get("/v1/export", params=[("session_id", a.sid)])
    check("GET /v1/export?session_id=A's", both.status_code == 404, both.text[:100])
    me = b.get("/v1/me")
    clean("GET /v1/me", me)
    check("GET /v1/me", me.json().get("tenant") == b_tenant, me.text[:100])
    # B uploads the very bytes A uploaded: B's own copy, no sign that A has them
    theirs = b.post("/v1/assets", params={"name": "same.txt"},
                    content=f"uploaded {a.marker}".encode(), headers={"Content-Type": "text/plain"})
    fresh = b.post("/v1/assets", params={"name": "same.txt"},
                   content=f"uploaded {uuid.uuid4().hex[:len(a.marker)]}".encode(),
                   headers={"Content-Type": "text/plain"})
    check("POST /v1/assets of A's bytes", theirs.status_code == fresh.status_code == 201
          and sorted(theirs.json()) == sorted(fresh.json()), theirs.text[:150])
    line = {"kind": "session", "session": {"id": a.sid, "metadata": {"b": True}}}
    imported = b.post("/v1/import", content=msgspec.json.encode(line) + b"\n",
                      headers={"Content-Type": "application/x-ndjson"})
    clean("POST /v1/import of A's session id", imported, a.sid)
    check("POST /v1/import of A's session id", imported.status_code == 200, imported.text[:150])
    mine = b.get(f"/v1/sessions/{a.sid}")
    check("the import made B's own session", mine.status_code == 200
          and mine.json().get("metadata") == {"b": True}, mine.text[:150])
    time.sleep(0.35)  # A's session with a TTL of 0.3 s is past it now
    purged = b.post("/v1/purge-expired")
    clean("POST /v1/purge-expired", purged)
    check("B's purge", purged.status_code == 200, purged.text[:150])
    erased = b.post("/v1/erase", json={"all": True})
    clean("POST /v1/erase all", erased)
    with world.client(a.tenant) as client:
        kept = client.get(f"/v1/sessions/{a.sid}")
        check("B's erase leaves A's data", erased.status_code == 200
              and kept.status_code == 200 and kept.json().get("message_count") == 4,
              f"{erased.text[:100]} {kept.text[:100]}")
        check("A's files survive B's erase",
              client.get(f"/v1/assets/{a.uploaded_sha}").status_code == 200
              and client.get(f"/v1/assets/{a.inline_sha}").status_code == 200)
        a_purge = client.post("/v1/purge-expired").json()  # so B's purge left it
        check("A's purge finds A's expired session", a_purge.get("purged") == 1, str(a_purge))
    return checks, failures


# ---------------------------------------------------------------- metrics, logs, keys


def metrics_and_logs(world: World, a: Data, b: Data, secrets: list[str]) -> Result:
    started = time.monotonic()
    failures: list[str] = []
    metrics = httpx.get(world.url + "/metrics", timeout=30).text
    sensitive = (a.secrets() | b.secrets() | set(world.key_ids.values())
                 | set(world.keys.values()))
    found = sorted(x for x in sensitive if x in metrics)
    if found:
        failures.append(f"metrics carry {found}")
    labels = set(re.findall(r"(\w+)=\"", metrics))
    if labels - {"method", "route", "status", "le", "version", "implementation", "major",
                 "minor", "patchlevel", "gc", "generation"}:
        failures.append(f"metrics have labels {sorted(labels)}")
    routes = set(re.findall(r'route="([^"]*)"', metrics))
    templates = {r.path for r in ROUTES} | {"unmatched"}
    if routes - templates:
        failures.append(f"metrics name routes that are no templates: {sorted(routes - templates)}")
    logs = "\n".join(world.logs)
    leaked = [s[:12] + "..." for s in secrets if s in logs or s.split("_", 2)[2] in logs]
    if leaked:
        failures.append(f"the logs carry keys {leaked}")
    if re.search(r"bearer\s+chk_", logs, re.I):
        failures.append("the logs carry an Authorization header")
    if not world.logs:
        failures.append("no log line was captured: the check saw nothing")
    tried = 5
    detail = (f"metrics: {len(metrics.splitlines())} lines, labels {sorted(labels)}; "
              f"logs: {len(world.logs)} lines captured, no key of {len(secrets)}")
    if failures:
        detail += "\n    " + "\n    ".join(failures)
    return Result("isolation: metrics and logs", "sqlite", tried, tried - len(failures),
                  len(failures), time.monotonic() - started, detail)


def keys_check(world: World) -> tuple[Result, list[str]]:
    """Keys hashed at rest, compared in constant time, revocable. Returns the result
    and every secret used (for the log check)."""
    started = time.monotonic()
    failures: list[str] = []
    store = world.store
    key_id, secret = auth.create_key(store, "tenant-c", "short-lived")
    secrets = [*world.keys.values(), secret]
    # 1. at rest: no secret in the database file (and its WAL), the hash is SHA-256
    db = Path(getattr(store, "path", ""))  # the harness serves SQLite: a file to search
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    for s in secrets:
        if s.encode() in raw or s.split("_", 2)[2].encode() in raw:
            failures.append(f"a secret is stored in clear ({s[:12]}...)")
    stored = store.get_session(key_id, tenant=auth.KEYS_TENANT).metadata.get("hash")
    if stored != hashlib.sha256(secret.encode()).hexdigest():
        failures.append("the stored hash is not the key's SHA-256")
    listed = msgspec.json.encode(auth.list_keys(store)).decode()
    if stored in listed or "hash" in listed:
        failures.append("list_keys shows hashes")
    # 2. constant time: a key with a known id and a wrong secret reaches compare_digest
    calls: list[tuple[Any, Any]] = []
    original = auth.hmac.compare_digest

    def spy(x: Any, y: Any) -> bool:
        calls.append((x, y))
        return original(x, y)

    wrong = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    auth.hmac.compare_digest = spy  # type: ignore[assignment]
    try:
        refused = auth.lookup(store, wrong, cache=auth.KeyCache(0))
        accepted = auth.lookup(store, secret, cache=auth.KeyCache(0))
    finally:
        auth.hmac.compare_digest = original  # type: ignore[assignment]
    if refused is not None or accepted is None or len(calls) != 2:
        failures.append(f"lookup does not compare with hmac.compare_digest ({len(calls)} calls)")
    source = Path(auth.__file__).read_text()
    for number, line in enumerate(source.splitlines(), 1):
        if re.search(r"(hash|digest|secret)\w*\s*[!=]=|[!=]=\s*\w*(hash|digest|secret)", line):
            failures.append(f"auth.py:{number} compares a secret with ==: {line.strip()}")
    if hmac.compare_digest is not original:
        failures.append("compare_digest was not restored")
    # 3. revocation: 401 within the cache time, the same answer as an unknown key
    with httpx.Client(base_url=world.url, timeout=30) as client:
        def me(key: str) -> httpx.Response:
            return client.get("/v1/me", headers={"Authorization": f"Bearer {key}"})

        if me(secret).status_code != 200:
            failures.append("a new key is refused")
        auth.revoke_key(store, key_id)
        time.sleep(0.5)  # the server's key cache holds accepted keys for 0.2 s
        revoked = me(secret)
        unknown = me(f"chk_{uuid.uuid4().hex[:16]}_{'x' * 43}")
        garbage = me("nonsense")
        shapes = {(r.status_code, r.json()["error"]["type"], r.json()["error"]["message"],
                   r.headers.get("www-authenticate")) for r in (revoked, unknown, garbage)}
        if revoked.status_code != 401 or len(shapes) != 1:
            failures.append(f"revoked/unknown/garbage keys answer differently: {shapes}")
        if client.get("/v1/me").status_code != 401:
            failures.append("no key is not a 401")
    try:
        auth.create_key(store, "__keys__")
        failures.append("a key for the reserved tenant __keys__ was made")
    except Exception:
        pass
    tried = 7
    detail = ("hashed at rest (SQLite file and WAL searched), hmac.compare_digest on the "
              "lookup path, revoked key -> 401 like an unknown one, reserved tenants refused")
    if failures:
        detail += "\n    " + "\n    ".join(failures)
    return (Result("isolation: API keys", "sqlite", tried, tried - len(failures), len(failures),
                   time.monotonic() - started, detail), secrets)


# ---------------------------------------------------------------- static checks


SQL_FRAGMENTS: dict[str, dict[str, str]] = {
    "postgres.py": {
        "s": "the schema name from the store's config, through _quote(): [a-z_][a-z0-9_]{0,62}",
        "_quote(self.schema)": "the schema name, validated and quoted",
        "m": "f'{s}.messages': the quoted schema and a fixed table",
        "key": "a fixed WHERE fragment with %s placeholders",
        "named": "a fixed WHERE fragment with %(name)s placeholders",
        "at_seq": "a fixed join condition",
        "unused": "a fixed NOT EXISTS fragment built from s",
        "self.get_session": "a query built above from s and key",
        "_ROW": "a fixed column list",
        "t": "a table name from a tuple in the code",
        "table": "a table name from _PER_MESSAGE, a tuple in the code",
        "i": "an int from range()",
        "partitions": "the partition count, an int from the config",
        '", ".join(f"d_{t} AS (DELETE FROM {s}.{t} WHERE {key})" for t in per_session)':
            "fixed CTEs, one per table of a tuple in the code",
        "partition": "'' or a fixed PARTITION BY clause",
        "where": "'' or the fixed guard WHERE EXISTS (SELECT 1 FROM saved)",
        "inserts(False)": "fixed CTEs built from s, m, _ROW and where (rows come as a "
                          "parameter)",
        "inserts(True)": "the same CTEs, each guarded",
    },
    "sqlite.py": {
        "_ROW": "a fixed column list",
        "_SELECT_ROWS": "a fixed query prefix built from _ROW",
        "self.synchronous": "checked against _SYNCHRONOUS in __init__",
        "int(self.timeout * 1000)": "an int",
        "_M_ROW": "a fixed column list: _ROW's columns prefixed with m.",
        "_PAGE": "a fixed query prefix built from _M_ROW (spans come as a JSON parameter)",
        "_IN_SPAN": "a fixed subquery over a span of the JSON parameter",
    },
    "sqlite_search.py": {
        "_SPANS_TABLE": "a fixed CTE over the spans, which come as a JSON parameter",
        "_NUMS": "a fixed query: the session ids come as a JSON parameter",
        "after": "'' or _AFTER_POSITION, a fixed WHERE fragment with ? placeholders",
        '_IN_SPANS.format(what="sp.num")': "a fixed query with a fixed column put in",
        "SCORE": "a fixed expression: a registered function of FTS5's sizes of a row",
    },
}
"""Every expression that goes into SQL text in ``stores/*.py``, and why it is safe.
Values always travel as parameters (``?``, ``%s``); these are identifiers and fixed
fragments. A new interpolation fails the check until it is reviewed and listed."""

_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|WHERE|FROM|JOIN|VALUES|"
                  r"PRAGMA|WITH|SET|ORDER BY|LIMIT)\b")


def sql_interpolations(source: str) -> list[tuple[int, str]]:
    """(line, expression) for every expression formatted into SQL-looking text."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []

    def text_of(node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(text_of(v) for v in node.values)
        if isinstance(node, ast.BinOp):
            return text_of(node.left) + text_of(node.right)
        return ""

    def segment(node: ast.AST) -> str:
        return " ".join((ast.get_source_segment(source, node) or "?").split())

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _SQL.search(text_of(node)):
            found += [(node.lineno, segment(v.value)) for v in node.values
                      if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod) \
                and _SQL.search(text_of(node)):
            for side in (node.left, node.right):
                if not isinstance(side, ast.Constant | ast.JoinedStr | ast.BinOp):
                    found.append((node.lineno, segment(side)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = text_of(node.func.value)
            if node.func.attr == "format" and _SQL.search(receiver):
                found += [(node.lineno, segment(arg)) for arg in node.args]
            if node.func.attr == "replace" and len(node.args) == 2 \
                    and re.fullmatch(r"\{\w+\}", text_of(node.args[0])):
                found.append((node.lineno, segment(node.args[1])))  # template filling
    return found


def sql_building(quick: bool = True) -> Result:
    """Static: SQL text is built only from reviewed identifiers and fragments."""
    started = time.monotonic()
    failures: list[str] = []
    tried = 0
    for path in sorted((SRC / "stores").glob("*.py")):
        allowed = SQL_FRAGMENTS.get(path.name, {})
        for line, expression in sql_interpolations(path.read_text()):
            tried += 1
            if expression not in allowed:
                failures.append(f"{path.name}:{line}: {expression!r} goes into SQL text")
    # the two identifiers that come from configuration are validated
    from chathistory.stores.sqlite import SQLiteStore
    probes = 0
    try:
        from chathistory.stores import postgres
        probes += 1
        try:
            postgres._quote('x"; DROP SCHEMA public; --')
            failures.append("postgres._quote accepts a hostile schema name")
        except ValueError:
            pass
    except ImportError:
        pass
    probes += 1
    try:
        SQLiteStore(":memory:", synchronous="OFF; DROP TABLE sessions")
        failures.append("SQLiteStore accepts a hostile synchronous=")
    except ValueError:
        pass
    detail = (f"{tried} interpolations into SQL text in stores/*.py, each a reviewed "
              f"identifier or fragment (SQL_FRAGMENTS); values go as parameters; "
              f"{probes} config identifiers refuse hostile values")
    if failures:
        detail += "\n    " + "\n    ".join(failures)
    return Result("static: SQL built from parameters", "src", tried + probes,
                  tried + probes - len(failures), len(failures), time.monotonic() - started,
                  detail)


PATH_PARTS = {
    "self.root": "the asset directory from the config",
    'hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:32]': "a hash of the tenant",
    "self._dir(tenant)": "the tenant's directory (a hash)",
    "sha256[:2]": "the digest, after check_digest()",
    "sha256": "the digest, after check_digest()",
    'f".{digest}.{os.getpid()}.json"': "our own digest of the bytes and the pid",
    "final.parent": "the directory of a path made by _path()",
}
"""Every expression joined into a path in ``assets.py``."""


def path_parts(source: str) -> list[tuple[int, str]]:
    """(line, expression) for every operand of a ``/`` (pathlib's join) in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if not (isinstance(side, ast.BinOp) and isinstance(side.op, ast.Div)):
                    text = ast.get_source_segment(source, side) or "?"
                    found.append((node.lineno, " ".join(text.split())))
    return found


def asset_paths(world: World | None = None) -> Result:
    """Static and live: asset paths come only from the root, a hash of the tenant
    and a validated hex digest; client-sent names and digests never make a path."""
    from chathistory.assets import FileAssetStore
    from chathistory.errors import InvalidMessage

    started = time.monotonic()
    failures: list[str] = []
    source = (SRC / "assets.py").read_text()
    tree = ast.parse(source)
    tried = 0
    for line, expression in path_parts(source):
        tried += 1
        if expression not in PATH_PARTS:
            failures.append(f"assets.py:{line}: {expression!r} goes into a path")
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    path_fn = functions.get("_path")
    if path_fn is None or "check_digest(sha256)" not in (ast.get_source_segment(
            source, path_fn) or ""):
        failures.append("FileAssetStore._path does not check the digest first")
    # live: hostile digests and names
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        assets = FileAssetStore(tmp)
        for digest in ("../../etc/passwd", "..", "A" * 64, "0" * 63 + "/", "0" * 64 + "\n"):
            tried += 1
            try:
                assets.info("t", digest)
                failures.append(f"FileAssetStore takes the digest {digest!r}")
            except InvalidMessage:
                pass
        tried += 1
        attachment = assets.put("../../outside", b"hello", name="../../../evil.txt",
                                mime_type="text/plain")
        made = [p for p in Path(tmp).rglob("*") if p.is_file()]
        names = {p.name for p in made}
        if any(not p.resolve().is_relative_to(Path(tmp).resolve()) for p in made) \
                or "evil.txt" in names or attachment.sha256 not in names:
            failures.append(f"an upload's name or tenant made a path: {sorted(names)}")
    if world is not None:
        with world.client(next(iter(world.keys))) as client:
            for path in ("/v1/assets/..%2F..%2Fetc%2Fpasswd", "/v1/assets/%2E%2E",
                         "/v1/assets/" + "A" * 64):
                tried += 1
                answer = client.get(path)
                if answer.status_code != 404:
                    failures.append(f"GET {path}: {answer.status_code}")
    detail = ("paths from the root, a hash of the tenant and check_digest()ed hex only "
              f"({len(PATH_PARTS)} reviewed parts); hostile digests and names refused or inert")
    if failures:
        detail += "\n    " + "\n    ".join(failures)
    return Result("static: asset paths", "src", tried, tried - len(failures), len(failures),
                  time.monotonic() - started, detail)


# ---------------------------------------------------------------- entry point


def run(quick: bool = False) -> list[Result]:
    """Isolation over every route (both ways and over PostgreSQL too in the full run),
    metrics and logs, keys, and the static checks."""
    from .procs import postgres_reachable

    alpha, beta = f"tenant-alpha-{uuid.uuid4().hex[:6]}", f"tenant-beta-{uuid.uuid4().hex[:6]}"
    results: list[Result] = []
    if not quick:
        reason = postgres_reachable()
        if reason:
            results.append(Result("isolation", "postgres (skipped)", 0, 0, 0, 0.0, reason))
        else:
            with served(tenants=(alpha, beta), backend="postgres") as world:
                a = _make_data(world, alpha, seed=1)
                results.append(routes_check(world, a, beta))
    with served(tenants=(alpha, beta)) as world:
        a = _make_data(world, alpha, seed=1)
        b = _make_data(world, beta, seed=2)
        keys, secrets = keys_check(world)
        results.append(routes_check(world, a, beta))  # ends with B erasing all of B's
        if not quick:  # and the other way round, over fresh data of B's
            b = _make_data(world, beta, seed=3)
            results.append(routes_check(world, b, alpha))
        results.append(keys)
        results.append(asset_paths(world))
        results.append(metrics_and_logs(world, a, b, secrets))
    results.append(sql_building())
    return results

