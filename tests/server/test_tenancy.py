"""Tenants, keys and the open (keyless) mode.

Tenant B, with its own key, calls every route of the table with tenant A's
ids: it gets 404s, never sees A's data in a list, an export or an asset, and
no answer (errors included) or metric carries an id of A's that B did not
send itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import msgspec
import pytest
from serverkit import KEY_CACHE_SECONDS, Served, messages
from starlette.testclient import TestClient

from chathistory import Attachment, InvalidMessage, Message
from chathistory.server import ServerConfigError, auth, run
from chathistory.server.app import create_app
from chathistory.server.routes import ROUTES
from chathistory.stores import MemoryStore

BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/sessions"): {"metadata": {"b": 1}},
    ("PATCH", "/v1/sessions/{session_id}"): {"state": {"stolen": True}},
    ("POST", "/v1/sessions/{session_id}/fork"): {},
    ("POST", "/v1/sessions/{session_id}/edit"): "EDIT",
    ("POST", "/v1/sessions/{session_id}/messages"): "APPEND",
    ("POST", "/v1/sessions/{session_id}/mark"): "MARK",
    ("POST", "/v1/sessions/{session_id}/reduce"): {"type": "count", "max_messages": 1},
    ("POST", "/v1/sessions/{session_id}/window"): {"max_tokens": 10},
    ("POST", "/v1/assets"): "UPLOAD",
    ("POST", "/v1/import"): "IMPORT",
    ("POST", "/v1/erase"): {"all": True},
}
SESSION_SCOPED = re.compile(r"\{session_id\}|\{sha256\}")


def _a_world(served: Served, a: httpx.Client, png: bytes) -> dict[str, Any]:
    """Tenant A's data: a session with messages, a fork, an inline and an uploaded asset."""
    marker = f"secret-of-a-{uuid.uuid4().hex[:8]}"
    sid = served.new_session(a, user=f"user-{marker}", metadata={"note": marker})
    pic = Message.user(marker, Attachment.from_bytes(png, name="p.png"))
    chat = [pic.to_dict(), *messages(f"{marker} 1", f"{marker} 2")]
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": chat})
    fork = a.post(f"/v1/sessions/{sid}/fork", json={}).json()["id"]
    uploaded = a.post("/v1/assets", params={"name": "doc.txt"},
                      content=f"uploaded {marker}".encode(),
                      headers={"Content-Type": "text/plain"}).json()
    return {"sid": sid, "fork": fork, "message_ids": [m["id"] for m in chat],
            "sha": pic.attachments[0].sha256, "uploaded": uploaded["sha256"],
            "marker": marker, "key_id": served.key_ids["A"]}


def _b_request(route_method: str, route_path: str, world: dict[str, Any]
               ) -> tuple[str, dict[str, Any]]:
    path = route_path.replace("{session_id}", world["sid"])
    path = path.replace("{message_id}", world["message_ids"][0]).replace("{sha256}", world["sha"])
    body = BODIES.get((route_method, route_path))
    kwargs: dict[str, Any] = {}
    if body == "EDIT":
        kwargs["json"] = {"message_id": world["message_ids"][1],
                          "message": Message.user("b's edit").to_dict()}
    elif body == "APPEND":
        kwargs["json"] = {"messages": messages("b's message")}
    elif body == "MARK":
        kwargs["json"] = {"ids": world["message_ids"][:1], "status": 0}
    elif body == "UPLOAD":
        kwargs["content"] = b"b's own bytes"
        kwargs["headers"] = {"Content-Type": "text/plain"}
    elif body == "IMPORT":
        line = {"kind": "session", "session": {"id": f"b-{uuid.uuid4().hex[:6]}"}}
        kwargs["content"] = msgspec.json.encode(line) + b"\n"
    elif body is not None:
        kwargs["json"] = body
    if route_path.endswith(("/messages", "/context")) and route_method == "GET":
        kwargs["params"] = {"tail": 5}
    if route_path.endswith("/window") and route_method == "GET":  # the preview: a valid query
        kwargs["params"] = {"max_tokens": 1000}
    if route_path == "/v1/search":  # A's words, in every way a search can be narrowed
        kwargs["params"] = {"q": world["marker"], "user": f"user-{world['marker']}",
                            "metadata.note": world["marker"]}
    return path, kwargs


def test_b_never_reaches_a(served: Served, a: httpx.Client, b: httpx.Client,
                           png_bytes: bytes) -> None:
    world = _a_world(served, a, png_bytes)
    before = a.get(f"/v1/sessions/{world['sid']}").json()
    a_ids = {world["sid"], world["fork"], world["sha"], world["uploaded"], world["key_id"],
             world["marker"], *world["message_ids"]}
    covered = set()
    for route in ROUTES:
        if route.public:
            continue
        covered.add((route.method, route.path))
        path, kwargs = _b_request(route.method, route.path, world)
        response = b.request(route.method, path, **kwargs)
        sent = path + repr(kwargs)
        leaked = {x for x in a_ids if x in response.text and x not in sent}
        assert not leaked, (route.method, route.path, response.text)
        if SESSION_SCOPED.search(route.path):
            assert response.status_code == 404, (route.method, route.path, response.text)
            assert response.json()["error"]["type"] == "not_found"
        else:
            assert response.status_code < 300, (route.method, route.path, response.text)
    assert covered == {(r.method, r.path) for r in ROUTES if not r.public}
    assert b.get(f"/v1/assets/{world['uploaded']}").status_code == 404
    assert b.get("/v1/me").json()["tenant"] == "B"
    # A finds its own words; B, asking the same, finds nothing (no parameter names a tenant)
    assert a.get("/v1/search", params={"q": world["marker"]}).json()["items"]
    for params in ({"q": world["marker"]}, {"q": world["marker"], "tenant": "A"},
                   {"q": world["marker"], "session_id": world["sid"]}):
        found = b.get("/v1/search", params=params)
        if "session_id" in params:  # A's session id names no session of B's
            assert found.status_code == 404, found.text
        else:
            assert found.status_code == 200 and found.json()["items"] == [], params
    # A's data is as it was
    after = a.get(f"/v1/sessions/{world['sid']}").json()
    assert after == before
    assert a.get(f"/v1/assets/{world['uploaded']}").status_code == 200
    assert a.get(f"/v1/assets/{world['sha']}").content == png_bytes
    metrics = httpx.get(served.url + "/metrics").text
    assert not {x for x in a_ids if x in metrics}
    assert 'tenant' not in metrics


def test_same_session_id_in_two_tenants(served: Served, a: httpx.Client,
                                        b: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("a's words")})
    assert served.new_session(b, id=sid) == sid  # B's own session of that name
    assert b.get(f"/v1/sessions/{sid}/messages", params={"tail": 5}).json() == {"messages": []}
    assert [m["parts"][0]["text"] for m in a.get(
        f"/v1/sessions/{sid}/messages", params={"tail": 5}).json()["messages"]] == ["a's words"]


def test_keys_are_hashed_at_rest(served: Served) -> None:
    rows = b"".join(served.store.export(tenant=auth.KEYS_TENANT))
    for tenant, secret in served.keys.items():
        assert secret.encode() not in rows
        key = auth.lookup(served.store, secret)
        assert key is not None and key.tenant == tenant
    if served.kind == "sqlite":
        db = served.asset_dir.parent / "server.db"
        raw = b"".join(p.read_bytes() for p in db.parent.glob("server.db*"))
        assert raw and not any(s.encode() in raw for s in served.keys.values())
    listed = auth.list_keys(served.store, "A")
    assert [k.id for k in listed][:1] == [served.key_ids["A"]]
    assert "hash" not in msgspec.json.encode(listed).decode()


def test_bad_keys_and_revocation(served: Served) -> None:
    key_id, secret = auth.create_key(served.store, "C", "short-lived")
    with httpx.Client(base_url=served.url) as client:
        assert client.get("/v1/me", headers={"X-API-Key": secret}).json()["tenant"] == "C"
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"},
                        {"Authorization": f"Bearer {secret[:-2]}xx"},
                        {"X-API-Key": secret.replace("chk_", "chk_0")}):
            response = client.get("/v1/me", headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"] == "Bearer"
        auth.revoke_key(served.store, key_id)
        time.sleep(KEY_CACHE_SECONDS + 0.1)
        assert client.get("/v1/me", headers={"X-API-Key": secret}).status_code == 401
    assert [k.revoked for k in auth.list_keys(served.store, "C")] == [True]


def test_reserved_tenants_are_refused() -> None:
    store = MemoryStore()
    for tenant in ("__keys__", "__x", "", " "):
        with pytest.raises(InvalidMessage):
            auth.create_key(store, tenant)


def test_open_mode_serves_loopback_only(tmp_path: Any) -> None:
    store = MemoryStore()
    app = create_app(store, asset_dir=tmp_path)
    # in-process clients: the client address is a value of the ASGI scope, no traffic
    local = TestClient(app, base_url="http://localhost", client=("127.0.0.1", 5000))
    remote = TestClient(app, base_url="http://localhost", client=("10.1.2.3", 5000))
    assert local.get("/v1/me").json()["tenant"] == "default"
    assert local.post("/v1/sessions", json={"id": "s"}).status_code == 201
    refused = remote.get("/v1/sessions/s")
    assert refused.status_code == 403 and "loopback" in refused.json()["error"]["message"]
    assert remote.get("/healthz").status_code == 200
    _, secret = auth.create_key(store, "team")
    time.sleep(1.05)  # the "no keys yet" answer is rechecked at most once a second
    assert local.get("/v1/me").status_code == 401  # a key exists: keys are required now
    assert local.get("/v1/me", headers={"X-API-Key": secret}).json()["tenant"] == "team"


def test_run_refuses_a_public_address_without_keys() -> None:
    with pytest.raises(ServerConfigError, match="no API keys"):
        run("memory://", "0.0.0.0", 1)


def test_run_prints_where_and_warns(tmp_path: Any) -> None:
    script = ("from chathistory.server import run; "
              f"run('sqlite:///{tmp_path}/x.db', '127.0.0.1', 0, '{tmp_path}/assets')")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        second = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(10)
    assert "http://127.0.0.1:0/" in first
    assert second.startswith("warning: no API keys") and "loopback" in second
