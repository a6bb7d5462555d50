"""Bad input against a live server: fuzzing from the OpenAPI document, and
hand-written hostile requests.

1. schemathesis reads ``/openapi.json`` and sends every operation generated
   requests, valid and invalid (its coverage and fuzzing phases), with path
   parameters drawn half of the time from real ids (sessions with tool calls
   and attachments, their messages, uploaded assets). Checks: no 5xx, status
   codes, media types, headers and bodies as documented, invalid data refused,
   a 405 with ``Allow`` for undeclared methods.
2. The cases DESIGN.md invariant 7 names: invalid JSON, wrong types, roles a
   provider format cannot carry, tool results answering no call, oversized
   bodies and attachments, deep nesting, invalid UTF-8, too many parts. Each
   must get a 4xx whose error body names the field or the problem, and the
   store (every tenant's export, the asset directory) must be byte for byte
   what it was.

The server is uvicorn in a thread of this process, on a loopback port, over a
SQLite file in a temporary directory (and, in the full run, a scratch PostgreSQL
schema too), with API keys of tenants ``A`` and ``B`` (``served()``;
``isolation.py`` uses it too). The quick run uses a fixed seed; the full run a
random one, printed in the row so that a failure can be replayed
(``fuzz_openapi(world, quick, seed=...)``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import struct
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec

from chathistory import Attachment, Message
from chathistory.server import auth
from chathistory.server.app import Limits, create_app
from chathistory.server.logging import JSONFormatter
from chathistory.stores import BaseStore
from chathistory.stores.sqlite import SQLiteStore

from .common import Result

__all__ = ["World", "png", "run", "seed_tenant", "served"]

MB = 1024 * 1024


# ---------------------------------------------------------------- the live server


class _Capture(logging.Handler):
    """Every log record of the run, formatted the way the server writes them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JSONFormatter())
        self.lines: list[str] = []
        self._lines_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            line = self.format(record)
            with self._lines_lock:
                self.lines.append(line)


@dataclass
class World:
    """A running server and what the checks need of it."""

    url: str
    store: BaseStore
    asset_dir: Path
    keys: dict[str, str]
    """tenant -> API key"""
    key_ids: dict[str, str]
    logs: list[str] = field(default_factory=list)
    """Log lines captured while the server ran (the access log included)."""
    backend: str = "sqlite"

    def client(self, tenant: str | None = "A", **headers: str) -> httpx.Client:
        if tenant is not None:
            headers["Authorization"] = f"Bearer {self.keys[tenant]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def snapshot(self) -> bytes:
        """Everything stored, every tenant: exports and the asset files."""
        parts = [b"".join(self.store.export(tenant=t)) for t in sorted(self.keys)]
        files = sorted(str(p.relative_to(self.asset_dir)) for p in self.asset_dir.rglob("*")
                       if p.is_file())
        return b"\n--\n".join([*parts, "\n".join(files).encode()])


def _open_store(backend: str, directory: Path) -> BaseStore:
    if backend == "sqlite":
        return SQLiteStore(directory / "store.db", counter="approx")
    if backend == "postgres":
        from chathistory.stores.postgres import PostgresStore

        from .procs import PG_URL

        return PostgresStore(PG_URL, counter="approx", drop_schema_on_close=True,
                             schema=f"fuzz_{uuid.uuid4().hex[:12]}")
    raise ValueError(f"unknown backend {backend!r}")


@contextlib.contextmanager
def served(tenants: tuple[str, ...] = ("A", "B"), limits: Limits | None = None,
           backend: str = "sqlite") -> Iterator[World]:
    """A server over a fresh store (a SQLite file in a temporary directory, or a
    scratch PostgreSQL schema) with a key per tenant; logs captured."""
    import uvicorn

    with tempfile.TemporaryDirectory(prefix="chathistory-reliability-") as tmp:
        store = _open_store(backend, Path(tmp))
        keys: dict[str, str] = {}
        key_ids: dict[str, str] = {}
        for tenant in tenants:
            key_ids[tenant], keys[tenant] = auth.create_key(store, tenant, f"key of {tenant}")
        capture = _Capture()
        watched = [logging.getLogger(name) for name in
                   ("chathistory", "chathistory.access", "uvicorn", "uvicorn.error")]
        saved = [(lg, lg.level, lg.disabled, lg.propagate) for lg in watched]
        for lg in watched:  # captured, not printed: hostile requests make noisy logs
            lg.addHandler(capture)
            lg.setLevel(logging.DEBUG)
            lg.disabled = False
            lg.propagate = False
        app = create_app(store, keys_required=True, asset_dir=Path(tmp) / "assets",
                         limits=limits, key_cache_seconds=0.2)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False,
                                               lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the reliability server did not start")
            time.sleep(0.01)
        world = World(f"http://127.0.0.1:{port}", store, Path(tmp) / "assets", keys, key_ids,
                      capture.lines, backend)
        world.asset_dir.mkdir(exist_ok=True)
        try:
            yield world
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()
            for lg, level, disabled, propagate in saved:
                lg.removeHandler(capture)
                lg.setLevel(level)
                lg.disabled = disabled
                lg.propagate = propagate
            store.close()


def png(width: int = 4, height: int = 3, seed: int = 0) -> bytes:
    """A valid RGB PNG (distinct bytes per ``seed``)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = b"\x00" + bytes([seed % 256, 0, 0]) * width
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


def seed_tenant(world: World, tenant: str, sessions: int = 4) -> dict[str, list[str]]:
    """Sessions with text, a tool call and its result, an inline image; an uploaded
    file. Returns the ids: ``sessions``, ``messages``, ``call_ids``, ``assets``."""
    ids: dict[str, list[str]] = {"sessions": [], "messages": [], "call_ids": [], "assets": []}
    with world.client(tenant) as client:
        for i in range(sessions):
            sid = f"{tenant.lower()}-seed-{i}-{uuid.uuid4().hex[:8]}"
            response = client.post("/v1/sessions", json={"id": sid, "user": f"user-{i % 2}",
                                                         "metadata": {"n": i}})
            response.raise_for_status()
            call = f"call-{uuid.uuid4().hex[:8]}"
            picture = Attachment.from_bytes(png(seed=i + 1), name=f"p{i}.png")
            chat = [Message.system("be brief"), Message.user(f"question {i}", picture),
                    Message.assistant("", [{"id": call, "name": "lookup",
                                            "arguments": {"q": i}}]),
                    Message.tool_result(call, f"result {i}", name="lookup"),
                    Message.assistant(f"answer {i}")]
            client.post(f"/v1/sessions/{sid}/messages",
                        json={"messages": [m.to_dict() for m in chat]}).raise_for_status()
            ids["sessions"].append(sid)
            ids["messages"] += [m.id for m in chat]
            ids["call_ids"].append(call)
            ids["assets"].append(picture.sha256)
        upload = client.post("/v1/assets", params={"name": "notes.txt"},
                             content=f"notes of {tenant}".encode(),
                             headers={"Content-Type": "text/plain"})
        upload.raise_for_status()
        ids["assets"].append(upload.json()["sha256"])
    return ids


# ---------------------------------------------------------------- schemathesis


CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance",
          "negative_data_rejection", "unsupported_method")
"""What every generated request is held to. ``positive_data_acceptance`` is left
out: the API has rules its document does not state (exactly one selector on
``GET .../messages``, a reducer's fields by ``type``), so valid-looking requests
are rightly refused."""

DESTRUCTIVE = ("DELETE /v1/sessions/{session_id}", "POST /v1/erase")
"""Run after everything else, so that the seeded sessions live through the rest."""


def _schemathesis_config(world: World, ids: dict[str, list[str]], examples: int,
                         coverage: bool, seed: int) -> Any:
    from schemathesis.config import SchemathesisConfig

    def pick(name: str) -> dict[str, Any]:
        return {"dictionary": name, "probability": 0.5}

    return SchemathesisConfig.from_dict({
        "headers": {"Authorization": f"Bearer {world.keys['A']}"},
        "seed": seed,
        "workers": 1,
        "warnings": False,
        "generation": {"max-examples": examples, "mode": "all", "database": "none",
                       "no-shrink": True},
        "phases": {"examples": {"enabled": False}, "coverage": {"enabled": coverage},
                   "fuzzing": {"enabled": True}, "stateful": {"enabled": False}},
        "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        "dictionaries": {"sessions": {"values": ids["sessions"]},
                         "messages": {"values": ids["messages"]},
                         "assets": {"values": ids["assets"]}},
        "parameters": {"path.session_id": pick("sessions"), "path.message_id": pick("messages"),
                       "path.sha256": pick("assets"), "query.session_id": pick("sessions"),
                       "body.message_id": pick("messages"),
                       "body.at_message_id": pick("messages")},
    })


def _register_ndjson() -> None:
    import schemathesis
    from schemathesis.transport.requests import REQUESTS_TRANSPORT

    if REQUESTS_TRANSPORT.get_first_matching_media_type("application/x-ndjson") is None:
        schemathesis.serializer.alias("application/x-ndjson", "text/plain")


@dataclass
class _Tally:
    cases: int = 0
    failed: int = 0
    operations: set[str] = field(default_factory=set)
    failures: dict[str, str] = field(default_factory=dict)
    """check name / operation -> the first failure's title and message."""
    errors: list[str] = field(default_factory=list)


def _run_engine(config: Any, url: str, tally: _Tally, *, destructive: bool) -> None:
    import schemathesis
    from schemathesis.engine import Status, events, from_schema

    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config)
    names = list(DESTRUCTIVE)
    schema = (schema.include(name=names) if destructive else schema.exclude(name=names))
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            tally.operations.add(recorder.label)
            tally.cases += len(recorder.cases)
            for case_id, checks in recorder.checks.items():
                failed = [c for c in checks if c.status == Status.FAILURE]
                if failed:
                    tally.failed += 1
                for check in failed:
                    key = f"{check.name} on {recorder.label}"
                    if key not in tally.failures and check.failure_info is not None:
                        failure = check.failure_info.failure
                        text = " ".join(f"{failure.title}: {failure.message}".split())
                        sent = recorder.interactions.get(case_id)
                        if sent is not None:
                            text += f" [{sent.request.method} {sent.request.uri[:200]}]"
                        tally.failures[key] = text
        elif isinstance(event, events.NonFatalError | events.FatalError):
            value = getattr(event, "value", None) or getattr(event, "exception", None)
            label = getattr(event, "label", "engine")
            tally.errors.append(f"{label}: {type(value).__name__}: {value}")


def fuzz_openapi(world: World, quick: bool, seed: int | None = None,
                 examples: int | None = None) -> Result:
    """Every operation of ``/openapi.json``, fuzzed by schemathesis: up to
    ``examples`` generated requests per operation, valid and invalid (default 8
    quick, else 300), plus the coverage phase (boundary values, every type
    mutation) unless quick."""
    started = time.monotonic()
    _register_ndjson()
    ids = seed_tenant(world, "A", sessions=3 if quick else 8)
    examples = examples or (8 if quick else 300)
    if seed is None:
        seed = 20260101 if quick else random.SystemRandom().randrange(10**9)
    config = _schemathesis_config(world, ids, examples, coverage=not quick, seed=seed)
    tally = _Tally()
    _run_engine(config, world.url, tally, destructive=False)
    _run_engine(config, world.url, tally, destructive=True)
    failed = tally.failed + len(tally.errors)
    detail = (f"seed {seed}; {len(tally.operations)} operations, up to {examples} examples "
              f"each{' + coverage phase' if not quick else ''}; checks: {', '.join(CHECKS)}")
    if tally.failures or tally.errors:
        shown = [f"{k}: {v}" for k, v in tally.failures.items()] + tally.errors
        detail += "\n    " + "\n    ".join(line[:400] for line in shown[:12])
    return Result("fuzz openapi (schemathesis)", world.backend, tally.cases + len(tally.errors),
                  tally.cases - tally.failed, failed, time.monotonic() - started, detail)


# ---------------------------------------------------------------- hand-written cases


@dataclass
class Case:
    """One hostile request and what its answer must say."""

    name: str
    method: str
    path: str
    status: int | tuple[int, ...]
    says: tuple[str, ...]
    """Each must appear in the error's message or path (case-insensitive)."""
    json: Any = None
    content: bytes | Callable[[], Iterator[bytes]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    error_path: str | None = None
    """The exact ``error.path`` expected, when the problem is a field."""


def _msg(role: str = "user", text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}], **extra}


def _chunks(data: bytes, size: int = MB) -> Callable[[], Iterator[bytes]]:
    def chunks() -> Iterator[bytes]:
        for i in range(0, len(data), size):
            yield data[i:i + size]
    return chunks


def bad_input_cases(sid: str, message_id: str, limits: Limits, quick: bool) -> list[Case]:
    """The hostile requests, against tenant A's session ``sid``."""
    messages = f"/v1/sessions/{sid}/messages"
    session = f"/v1/sessions/{sid}"
    deep = b"[" * 100_000 + b"]" * 100_000
    json_type = {"Content-Type": "application/json"}
    big_text = b'{"messages": [{"role": "user", "parts": [{"type": "text", "text": "' + \
        b"x" * (limits.json_bytes + 1) + b'"}]}]}'
    tool_call = {"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c-known", "name": "f", "arguments": {}}]}
    tool_result = {"role": "tool", "parts": [
        {"type": "tool_result", "call_id": "c-nobody-made", "content": "42"}]}
    inline_image = Message.user("", Attachment.from_bytes(png(seed=200), name="x.png")
                                ).to_dict()["parts"][0]["attachment"]
    lying_size = {**inline_image, "size": inline_image["size"] + 1}
    cases = [
        # not JSON at all
        Case("invalid JSON", "POST", messages, 400, ("not valid json",),
             content=b'{"messages": [', headers=json_type),
        Case("trailing garbage", "POST", messages, 400, ("not valid json",),
             content=b'{"messages": []} x', headers=json_type),
        Case("empty body", "POST", messages, 400, ("json body",), content=b"",
             headers=json_type),
        Case("JSON null body", "POST", messages, 422, ("expected `object`",),
             content=b"null", headers=json_type, error_path="$"),
        Case("invalid UTF-8 in a string", "POST", messages, 400, ("utf-8",),
             content=b'{"messages": [{"role": "user", "parts": [{"type": "text", '
                     b'"text": "\xff\xfe"}]}]}', headers=json_type),
        Case("invalid UTF-8 in a key", "POST", "/v1/sessions", 400, ("utf-8",),
             content=b'{"metadata": {"\xc3\x28": 1}}', headers=json_type),
        Case("lone surrogate escape", "POST", "/v1/sessions", 400, ("not valid json",),
             content=b'{"id": "x\\ud800y"}', headers=json_type),
        Case("JSON nested 100,000 deep", "POST", messages, 422, ("expected `object`",),
             content=deep, headers=json_type, error_path="$"),
        Case("objects nested 100,000 deep", "POST", "/v1/sessions", 400,
             ("nested too deeply",), content=b'{"state": ' + b'{"a": ' * 100_000 + b"1"
             + b"}" * 100_001, headers=json_type),
        Case("deep nesting in metadata", "POST", messages, 400, ("nested too deeply",),
             content=b'{"messages": [{"role": "user", "parts": [{"type": "text", '
                     b'"text": "x"}], "metadata": {"a": ' + deep + b"}}]}",
             headers=json_type),
        Case("deep nesting in state", "PATCH", session, 400, ("nested too deeply",),
             content=b'{"state": {"a": ' + deep + b"}}", headers=json_type),
        Case("form body on a JSON route", "POST", messages, 415, ("application/json",),
             content=b"messages=1",
             headers={"Content-Type": "application/x-www-form-urlencoded"}),
        # wrong types, with the field named
        Case("messages is a string", "POST", messages, 422, ("expected `array`",),
             json={"messages": "hello"}, error_path="$.messages"),
        Case("role is a number", "POST", messages, 422, ("expected `str`",),
             json={"messages": [_msg(), {**_msg(), "role": 7}]},
             error_path="$.messages[1].role"),
        Case("empty role", "POST", messages, 422, ("role",),
             json={"messages": [_msg(), _msg(role=" ")]}, error_path="$.messages[1].role"),
        Case("unknown part type", "POST", messages, 422, ("hologram",),
             json={"messages": [{"role": "user", "parts": [{"type": "hologram"}]}]},
             error_path="$.messages[0].parts[0].type"),
        Case("text is an object", "POST", messages, 422, ("expected `str`",),
             json={"messages": [{"role": "user", "parts": [{"type": "text", "text": {}}]}]},
             error_path="$.messages[0].parts[0].text"),
        Case("unknown field", "POST", messages, 422, ("unknown field",),
             json={"messages": [_msg()], "sneaky": True}),
        Case("a message without content", "POST", messages, 422, ("non-empty text",),
             json={"messages": [_msg(), _msg(text="  ")]}, error_path="$.messages[1].parts"),
        Case("NUL in a message id", "POST", messages, 422, ("nul",),
             json={"messages": [_msg(id="a\u0000b")]}, error_path="$.messages[0].id"),
        Case("NUL in a role", "POST", messages, 422, ("nul",),
             json={"messages": [_msg(role="us\u0000er")]}, error_path="$.messages[0].role"),
        Case("NUL in a tool call id", "POST", messages, 422, ("nul",),
             json={"messages": [{"role": "assistant", "parts": [
                 {"type": "tool_call", "id": "c\u0000", "name": "f", "arguments": {}}]}]},
             error_path="$.messages[0].parts[0].id"),
        Case("NUL in a user", "POST", "/v1/sessions", 422, ("nul",),
             json={"user": "a\u0000b"}, error_path="$.user"),
        Case("NUL in the session id of a path", "GET", "/v1/sessions/a%00b", (404, 422),
             ("a",)),
        Case("NUL in an exported session id", "GET", "/v1/export", (404, 422), ("a",),
             params={"session_id": "a\u0000b"}),
        Case("NUL in ids to mark", "POST", f"{session}/mark", (404, 422), ("a",),
             json={"ids": ["a\u0000b"], "status": 0}),
        Case("NUL in the user to erase", "POST", "/v1/erase", (200, 422), (),
             json={"user": "a\u0000b"}),
        Case("NUL in an imported session id", "POST", "/v1/import", 422, ("nul",),
             content=b'{"kind": "session", "session": {"id": "x\\u0000y"}}\n',
             headers={"Content-Type": "application/x-ndjson"}),
        Case("session id of 201 characters", "POST", "/v1/sessions", 422, ("length",),
             json={"id": "s" * 201}, error_path="$.id"),
        Case("negative TTL", "POST", "/v1/sessions", 422, (">", "0"),
             json={"ttl_seconds": -5}, error_path="$.ttl_seconds"),
        Case("window max_tokens a string", "POST", f"{session}/window", 422,
             ("expected `int`",), json={"max_tokens": "ten"}, error_path="$.max_tokens"),
        Case("window max_tokens 1e400", "POST", f"{session}/window", 422, ("out of range",),
             content=b'{"max_tokens": 1e400}', headers=json_type, error_path="$.max_tokens"),
        Case("TTL past the year 9999", "POST", "/v1/sessions", 422, ("<=",),
             json={"ttl_seconds": 1e308}, error_path="$.ttl_seconds"),
        Case("TTL update past the year 9999", "PATCH", session, 422, ("<=",),
             json={"ttl_seconds": 1e12}, error_path="$.ttl_seconds"),
        Case("mark with a status of 7", "POST", f"{session}/mark", 422, ("status",),
             json={"ids": [message_id], "status": 7}, error_path="$.status"),
        Case("reduce of an unknown type", "POST", f"{session}/reduce", 422, ("type",),
             json={"type": "shred"}, error_path="$.type"),
        Case("reduce count without max_messages", "POST", f"{session}/reduce", 400,
             ("max_messages",), json={"type": "count"}),
        Case("edit with a bad message", "POST", f"{session}/edit", 422, ("role",),
             json={"message_id": message_id, "message": _msg(role="")},
             error_path="$.message.role"),
        Case("If-Match that is no version", "POST", messages, 400, ("if-match",),
             json={"messages": [_msg()]}, headers={"If-Match": "yesterday"}),
        Case("tail=abc", "GET", messages, 400, ("tail", "integer"), params={"tail": "abc"}),
        Case("tail=-1", "GET", messages, 400, ("tail",), params={"tail": "-1"}),
        Case("tail of 10**30", "GET", messages, 400, ("tail",), params={"tail": str(10**30)}),
        Case("two selectors", "GET", messages, 400, ("exactly one selector",),
             params={"tail": 2, "start": 0}),
        Case("a selector given twice", "GET", messages, 400, ("tail", "once"),
             params={"tail": ["1", "2"]}),
        Case("bool that is no bool", "DELETE", session, 400, ("cascade",),
             params={"cascade": "perhaps"}),
        Case("unknown format", "GET", messages, 400, ("unknown format",),
             params={"tail": 5, "format": "morse"}),
        # roles where they are not allowed, tool results without their call
        Case("tool result answering no call (reject_orphans)", "POST", messages, 422,
             ("c-nobody-made",), json={"messages": [_msg(), tool_result],
                                       "reject_orphans": True}),
        Case("tool result before its call (reject_orphans)", "POST", messages, 422,
             ("c-known",), json={"messages": [
                 {"role": "tool", "parts": [{"type": "tool_result", "call_id": "c-known",
                                             "content": "early"}]}, tool_call],
                 "reject_orphans": True}),
        Case("tool call without an id", "POST", messages, 422, ("id",),
             json={"messages": [{"role": "assistant", "parts": [
                 {"type": "tool_call", "id": "", "name": "f", "arguments": {}}]}]},
             error_path="$.messages[0].parts[0].id"),
        Case("tool result without a call_id", "POST", messages, 422, ("call_id",),
             json={"messages": [{"role": "tool", "parts": [
                 {"type": "tool_result", "call_id": "", "content": "x"}]}]},
             error_path="$.messages[0].parts[0].call_id"),
        Case("tool arguments not an object", "POST", messages, 422, ("arguments",),
             json={"messages": [{"role": "assistant", "parts": [
                 {"type": "tool_call", "id": "c1", "name": "f", "arguments": [1, 2]}]}]}),
        # too big, too many
        Case("JSON body over the limit (declared)", "POST", messages, 413, ("over",),
             content=big_text, headers=json_type),
        Case("JSON body over the limit (chunked)", "POST", messages, 413, ("over",),
             content=_chunks(big_text), headers=json_type),
        Case("10,001 messages in one append", "POST", messages, 422, ("length",),
             json={"messages": [_msg()] * 10_001}, error_path="$.messages"),
        Case("1,001 parts in one message", "POST", messages, 422, ("1000 parts",),
             json={"messages": [_msg(), {"role": "user", "parts": [
                 {"type": "text", "text": "p"}] * 1001}]}, error_path="$.messages[1].parts"),
        Case("20,000 parts in one message", "POST", messages, 422, ("1000 parts",),
             json={"messages": [{"role": "user", "parts": [
                 {"type": "text", "text": "p"}] * 20_000}]},
             error_path="$.messages[0].parts"),
        Case("inline attachment whose size lies", "POST", messages, 422, ("size",),
             json={"messages": [{"role": "user", "parts": [
                 {"type": "image", "attachment": lying_size}]}]},
             error_path="$.messages[0].parts[0].attachment.size"),
        Case("attachment reference over 50 MB", "POST", messages, 422, ("limit",),
             json={"messages": [{"role": "user", "parts": [{"type": "image", "attachment": {
                 **{k: v for k, v in inline_image.items() if k != "data"},
                 "size": 51 * MB}}]}]},
             error_path="$.messages[0].parts[0].attachment.size"),
        Case("attachment whose sha256 is not its bytes'", "POST", messages, 422,
             ("does not match",), json={"messages": [{"role": "user", "parts": [
                 {"type": "image", "attachment": {**inline_image, "sha256": "0" * 64}}]}]},
             error_path="$.messages[0].parts[0].attachment.sha256"),
        Case("attachment reference with a path for a sha256", "POST", messages, 422,
             ("hex",), json={"messages": [{"role": "user", "parts": [{"type": "image",
                 "attachment": {**{k: v for k, v in inline_image.items() if k != "data"},
                                "sha256": ("../" * 22)[:64]}}]}]},
             error_path="$.messages[0].parts[0].attachment.sha256"),
        Case("attachment of an unsupported type", "POST", messages, 422, ("media type",),
             json={"messages": [{"role": "user", "parts": [{"type": "file", "attachment": {
                 **inline_image, "mime_type": "application/x-msdownload"}}]}]},
             error_path="$.messages[0].parts[0].attachment.mime_type"),
        Case("asset over the limit (declared)", "POST", "/v1/assets", 413, ("over",),
             content=b"x" * (limits.asset_bytes + 1), headers={"Content-Type": "text/plain"}),
        Case("asset over the limit (chunked)", "POST", "/v1/assets", 413, ("over",),
             content=_chunks(b"x" * (limits.asset_bytes + 1)),
             headers={"Content-Type": "text/plain"}),
        Case("empty asset", "POST", "/v1/assets", 422, ("empty",), content=b"",
             headers={"Content-Type": "text/plain"}),
        Case("asset of a forbidden type", "POST", "/v1/assets", 415, ("unsupported",),
             content=b"MZ\x90\x00", params={"mime_type": "application/x-msdownload"}),
        Case("asset name with a path", "POST", "/v1/assets", (201, 415, 422), (),
             content=b"\x00\x01", params={"name": "../../etc/passwd",
                                          "mime_type": "application/x-sh"}),
        Case("import of a line that is not JSON", "POST", "/v1/import", (400, 422), ("json",),
             content=b"{nope\n", headers={"Content-Type": "application/x-ndjson"}),
        Case("import of a record of the wrong shape", "POST", "/v1/import", 422,
             ("record",), content=b'{"kind": "session", "session": 5}\n',
             headers={"Content-Type": "application/x-ndjson"}),
        Case("erase without a user", "POST", "/v1/erase", 400, ("user",), json={}),
    ]
    if quick:  # the slow ones (100 MB of JSON, 50 MB uploads) run in the full harness only
        slow = {"asset over the limit (chunked)", "JSON nested 100,000 deep",
                "20,000 parts in one message"}
        cases = [c for c in cases if c.name not in slow]
    return cases


def _check_case(client: httpx.Client, world: World, case: Case) -> str | None:
    """None when the case held, else what went wrong."""
    before = world.snapshot()
    content = case.content() if callable(case.content) else case.content
    response = client.request(case.method, case.path, json=case.json, content=content,
                              headers=case.headers, params=case.params)
    allowed = case.status if isinstance(case.status, tuple) else (case.status,)
    problems = []
    if world.snapshot() != before:  # whatever the answer: none of these may change anything
        problems.append("the store changed")
    if response.status_code not in allowed:
        problems.append(f"status {response.status_code}, wanted {allowed}")
    if response.status_code >= 500:
        problems.append("a server error")
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            said = f"{error['message']} {error.get('path', '')}".lower()
        except (ValueError, KeyError, TypeError):
            problems.append(f"no error body: {response.text[:100]!r}")
            said = ""
        missing = [s for s in case.says if s.lower() not in said]
        if said and missing:
            problems.append(f"the error does not say {missing}: {said[:200]!r}")
        if case.error_path is not None and said and error.get("path") != case.error_path:
            problems.append(f"error.path {error.get('path')!r}, wanted {case.error_path!r}")
    return "; ".join(problems) or None


def bad_input(world: World, quick: bool, limits: Limits) -> Result:
    """The hand-written hostile requests; each must be a clear 4xx that stores nothing.
    ``limits``: the server's."""
    started = time.monotonic()
    ids = seed_tenant(world, "B", sessions=1)
    sid, message_id = ids["sessions"][0], ids["messages"][1]
    cases = bad_input_cases(sid, message_id, limits, quick)
    failures: list[str] = []
    with world.client("B") as client:
        for case in cases:
            problem = _check_case(client, world, case)
            if problem:
                failures.append(f"{case.name}: {problem}")
        # a provider format that cannot carry a role: a 4xx on read, nothing changes;
        # the append of that role is accepted (any non-empty role is) and, as a control,
        # must show in the snapshot: a snapshot blind to writes would prove nothing
        before = world.snapshot()
        client.post(f"/v1/sessions/{sid}/messages",
                    json={"messages": [_msg(role="narrator", text="once upon a time")]})
        if world.snapshot() == before:
            failures.append("control: an accepted append left the snapshot unchanged")
        for fmt in ("openai_chat", "anthropic", "gemini", "openai_responses"):
            case = Case(f"role narrator as {fmt}", "GET", f"/v1/sessions/{sid}/messages",
                        422, ("narrator",), params={"tail": 1, "format": fmt},
                        error_path="$[0].role")
            cases.append(case)
            problem = _check_case(client, world, case)
            if problem:
                failures.append(f"{case.name}: {problem}")
    alive = httpx.get(world.url + "/healthz", timeout=10).status_code == 200
    if not alive:
        failures.append("the server stopped answering")
    detail = f"{len(cases)} hostile requests: 4xx, error names the field, store unchanged"
    if failures:
        detail += "\n    " + "\n    ".join(failures)
    return Result("bad input (hand-written)", world.backend, len(cases),
                  len(cases) - len(failures),
                  len(failures), time.monotonic() - started, detail)


_LIMITS = Limits(json_bytes=2 * MB, asset_bytes=4 * MB)
"""Smaller than the defaults (10 MB, 50 MB), so oversized bodies stay quick to send;
the code paths are the same, and tests/server/test_limits.py sends the real sizes."""


def run(quick: bool = False) -> list[Result]:
    """Fuzz the API from its document, then the hand-written cases: over SQLite,
    and (full run only) over PostgreSQL too, whose text columns refuse NUL."""
    from .procs import postgres_reachable

    results: list[Result] = []
    for backend in ("sqlite",) if quick else ("sqlite", "postgres"):
        reason = postgres_reachable() if backend == "postgres" else None
        if reason:
            results.append(Result("fuzz", f"{backend} (skipped)", 0, 0, 0, 0.0, reason))
            continue
        with served(limits=_LIMITS, backend=backend) as world:
            results.append(fuzz_openapi(world, quick,
                                        examples=100 if backend == "postgres" else None))
        with served(limits=_LIMITS, backend=backend) as world:
            results.append(bad_input(world, quick, _LIMITS))
    return results


if __name__ == "__main__":  # python -m reliability.fuzz [--quick]
    import sys

    for result in run(quick="--quick" in sys.argv):
        print(msgspec.json.encode(result.__dict__).decode())
