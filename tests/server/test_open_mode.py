"""The request checks (issue 17, items 7, 8 and 14), against real servers on
loopback: open mode served to loopback ``Host`` names only and to no write from
another site, keys required for good once one was created, one credential per
request (``server.frontdoor``, ``server.auth``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import LiveServer, messages

from chathistory.server import ServerConfigError, auth, run
from chathistory.server.app import create_app
from chathistory.server.connections import ConnectionLimits
from chathistory.server.frontdoor import host_name
from chathistory.stores import MemoryStore
from chathistory.stores.sqlite import SQLiteStore

# ---------------------------------------------------------------- helpers


def connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def answer(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes (or a reset)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def live(app: Any, **limits: Any) -> LiveServer:
    return LiveServer(app, connections=ConnectionLimits(**limits)).start()


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[LiveServer]:
    """Open mode: no key in the store."""
    server = live(create_app(MemoryStore(counter="approx"), asset_dir=tmp_path / "assets",
                             allowed_hosts=["chat.example"]))
    yield server
    server.stop()


# ---------------------------------------------------------------- item 7: open mode


def test_open_mode_serves_loopback_host_names_only(open_server: LiveServer) -> None:
    port = open_server.port
    with httpx.Client(base_url=open_server.url, timeout=10) as client:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost",
                     f"LOCALHOST:{port}", f"chat.example:{port}"):
            response = client.get("/v1/sessions", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
        for host in (f"evil.example:{port}", "rebind.attacker.test", f"127.0.0.2:{port}",
                     f"127.0.0.1.nip.io:{port}", "localhost:80x", "[::1"):
            response = client.get("/v1/sessions", headers={"Host": host})
            assert response.status_code == 403, host
            assert "--allow-host" in response.json()["error"]["message"]
        assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 200
    with connect(open_server) as sock:  # (httpx will not send two)
        sock.sendall(f"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Host: evil.example:{port}\r\nConnection: close\r\n\r\n".encode())
        got = answer(sock)
    assert got.startswith(b"HTTP/1.1 400 ") and b"2 Host headers" in got, got


def test_allow_host_star_serves_any_host(tmp_path: Path) -> None:
    server = live(create_app(MemoryStore(), asset_dir=tmp_path, allowed_hosts=["*"]))
    try:
        response = httpx.get(server.url + "/v1/sessions", headers={"Host": "anything.test"})
        assert response.status_code == 200
    finally:
        server.stop()


def test_open_mode_refuses_writes_from_other_sites(open_server: LiveServer) -> None:
    own = open_server.url
    body = b'{"id": "x"}'
    json_type = {"Content-Type": "application/json"}
    with httpx.Client(base_url=own, timeout=10) as client:
        refused = [
            {**json_type, "Origin": "http://evil.example"},
            {**json_type, "Origin": f"http://localhost:{open_server.port}"},  # another origin
            {**json_type, "Origin": "null"},
            {**json_type, "Sec-Fetch-Site": "cross-site"},
            {**json_type, "Sec-Fetch-Site": "same-site"},
        ]
        for headers in refused:
            response = client.post("/v1/sessions", content=body, headers=headers)
            assert response.status_code == 403, headers
        for headers in ({}, {"Content-Type": "text/plain"},
                        {"Content-Type": "application/x-www-form-urlencoded"},
                        {"Content-Type": "multipart/form-data; boundary=x"}):
            response = client.post("/v1/sessions", content=body, headers=headers)
            assert response.status_code == 415, headers
            assert "application/json" in response.json()["error"]["message"]
        line = b'{"kind": "session", "id": "imported", "tenant": "default"}\n'
        for declared in (None, "text/plain"):
            response = client.post("/v1/import", content=line,
                                   headers={"Content-Type": declared} if declared else {})
            assert response.status_code == 415, declared
        upload = client.post("/v1/assets", content=b"hello", headers={"Content-Type":
                                                                        "text/plain"})
        assert upload.status_code == 415
        assert client.get("/v1/sessions").json()["items"] == []  # nothing was stored
        # the server's own origin, or no browser at all: served
        created = client.post("/v1/sessions", content=body, headers={
            **json_type, "Origin": own, "Sec-Fetch-Site": "same-origin"})
        assert created.status_code == 201, created.text
        appended = client.post("/v1/sessions/x/messages", json={"messages": messages("hi")})
        assert appended.status_code == 200, appended.text
        assert client.post("/v1/sessions/x/pop").status_code == 200  # no body, no type
        upload = client.post("/v1/assets", content=b"\x89PNG\r\n\x1a\n",
                             headers={"Content-Type": "application/octet-stream"})
        assert upload.status_code == 201, upload.text


def test_with_keys_neither_host_nor_origin_matters(tmp_path: Path) -> None:
    store = MemoryStore()
    _, key = auth.create_key(store, "t")
    server = live(create_app(store, asset_dir=tmp_path))
    try:
        response = httpx.post(server.url + "/v1/sessions", json={"id": "k"}, headers={
            "Authorization": f"Bearer {key}", "Host": "api.example.com",
            "Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site"})
        assert response.status_code == 201, response.text
    finally:
        server.stop()


def test_host_names_parse() -> None:
    assert host_name("[::1]:8000") == ("::1", 8000)
    assert host_name("LocalHost") == ("localhost", None)
    assert host_name("127.0.0.1:0") == ("127.0.0.1", 0)
    for bad in ("", ":80", "a b", "x:y", "[::1", "user@127.0.0.1", "h:1234567"):
        assert host_name(bad) is None, bad


def test_run_refuses_a_bad_allow_host() -> None:
    with pytest.raises(ServerConfigError, match="allow-host"):
        run("memory://", "127.0.0.1", 1, allowed_hosts=["a b"])


# ---------------------------------------------------------------- item 8: keys for good


def test_revoked_keys_keep_keys_required_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    store = SQLiteStore(path)
    key_id, key = auth.create_key(store, "t")
    auth.revoke_key(store, key_id)
    assert auth.has_keys(store)
    assert [k.id for k in auth.list_keys(store)] == [key_id]  # the record is no key
    with pytest.raises(KeyError):
        auth.revoke_key(store, auth.KEYS_CREATED)
    store.close()
    store = SQLiteStore(path)  # a restart: a new process would see this
    server = live(create_app(store, asset_dir=tmp_path / "assets"))
    try:
        response = httpx.get(server.url + "/v1/sessions")
        assert response.status_code == 401, response.text
        assert httpx.get(server.url + "/v1/me", headers={
            "Authorization": f"Bearer {key}"}).status_code == 401  # and it stays revoked
    finally:
        server.stop()
        store.close()


def test_a_store_with_old_key_rows_but_no_record_requires_keys() -> None:
    store = MemoryStore()
    auth.create_key(store, "t")
    store.delete_session(auth.KEYS_CREATED, tenant=auth.KEYS_TENANT)  # keys of 0.1
    assert auth.has_keys(store)
    assert not auth.has_keys(MemoryStore())


# ---------------------------------------------------------------- item 14: one credential


def test_two_credentials_are_a_400_naming_the_header(tmp_path: Path) -> None:
    store = MemoryStore()
    _, key = auth.create_key(store, "t")
    _, other = auth.create_key(store, "u")
    server = live(create_app(store, asset_dir=tmp_path))
    cases = [
        ([("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {other}")],
         "Authorization"),
        ([("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {key}")],
         "Authorization"),
        ([("X-API-Key", key), ("X-API-Key", other)], "X-API-Key"),
        ([("Authorization", f"Bearer {key}"), ("X-API-Key", other)], "X-API-Key"),
    ]
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for headers, named in cases:
                response = client.get("/v1/me", headers=headers)
                assert response.status_code == 400, headers
                assert named in response.json()["error"]["message"]
            same = client.get("/v1/me", headers=[("Authorization", f"Bearer {key}"),
                                                  ("X-API-Key", key)])
            assert same.status_code == 200 and same.json()["tenant"] == "t"
    finally:
        server.stop()


def test_remote_store_works_in_open_mode(open_server: LiveServer) -> None:
    """Our own client sends what open mode asks for: every kind of write passes."""
    from chathistory import Message
    from chathistory.stores.remote import RemoteStore

    remote = RemoteStore(open_server.url)
    try:
        session = remote.create_session("r")
        remote.append(session.id, [Message.user("a"), Message.assistant("b")])
        remote.update_session(session.id, metadata={"k": 1})
        assert remote.pop(session.id) is not None
        remote.fork(session.id, new_session_id="r2")
        digest = remote.upload_asset(b"\x89PNG\r\n\x1a\n" + b"0" * 32, name="x.png").sha256
        assert remote.get_asset(digest).startswith(b"\x89PNG")
        lines = list(remote.export())
        remote.delete_session("r", cascade=True)
        assert remote.import_(lines) > 0
        assert remote.count("r") == 1
        assert remote.purge_expired() == 0
    finally:
        remote.close()
