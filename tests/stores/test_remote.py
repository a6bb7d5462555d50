"""The whole conformance suite again, on a ``RemoteStore`` talking to a real
server (uvicorn on a loopback port) over a MemoryStore and over SQLite.

The server requires keys; the RemoteStore holds one per tenant the suite
names, so tenant isolation is checked through the real authentication path.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import test_conformance as conformance  # the suite's functions, rerun here over HTTP

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from serverkit import LiveServer

from chathistory import Attachment, Conflict, InvalidMessage, Message, NotFound
from chathistory.server import auth
from chathistory.server.app import create_app
from chathistory.stores import BaseStore, MemoryStore, open_store
from chathistory.stores.remote import AsyncRemoteStore, RemoteError, RemoteStore

TENANTS = ("default", "t2", "a", "b", "other", "t")

for _name in dir(conformance):
    if _name.startswith("test_"):
        globals()[_name] = getattr(conformance, _name)


def _backend(kind: str, tmp_path: Path) -> BaseStore:
    if kind == "memory":
        return MemoryStore(counter="approx")
    from chathistory.stores.sqlite import SQLiteStore

    return SQLiteStore(tmp_path / "remote.db", counter="approx")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    app = create_app(MemoryStore(), keys_required=True,
                     asset_dir=tmp_path_factory.mktemp("assets"))
    live = LiveServer(app).start()
    yield live
    live.stop()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          server: LiveServer) -> Iterator[RemoteStore]:
    backend = _backend(request.param, tmp_path)
    keys = {tenant: auth.create_key(backend, tenant, "conformance")[1] for tenant in TENANTS}
    server.app.state.service.store = backend  # one server for the module; a fresh store each
    remote = RemoteStore(server.url, keys["default"], tenant_keys=keys)
    try:
        yield remote
    finally:
        remote.close()
        backend.close()


# ---------------------------------------------------------------- RemoteStore itself


def _fresh(server: LiveServer) -> tuple[MemoryStore, str]:
    """A new store behind the module's server, and a key of tenant ``default``."""
    backend = MemoryStore(counter="approx")
    _, secret = auth.create_key(backend, "default")
    server.app.state.service.store = backend
    return backend, secret


class LoseFirstResponse(httpx.HTTPTransport):
    """Forwards requests to the real server but loses the first answer to a
    POST (the server did the work; the client sees a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and not self.lost:
            self.lost += 1
            response.read()
            raise httpx.ReadTimeout("answer lost", request=request)
        return response


def test_a_retried_append_is_stored_once(server: LiveServer) -> None:
    backend, key = _fresh(server)
    transport = LoseFirstResponse()
    remote = RemoteStore(server.url, key, transport=transport)
    session = backend.create_session()
    batch = [Message.user("once"), Message.assistant("only once")]
    assert remote.append(session.id, batch) == 1
    assert transport.lost == 1 and backend.count(session.id) == 2
    remote.close()


def test_retries_and_error_mapping() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if request.url.path == "/v1/sessions" and request.method == "POST":
            return httpx.Response(503, json={"error": {"type": "unavailable", "message": "x"}})
        if len(calls) < 3:
            return httpx.Response(503)
        return httpx.Response(422, json={"error": {"type": "invalid_message", "message": "bad",
                                                   "path": "$.messages[0].role"}})

    remote = RemoteStore("http://test", "key", transport=httpx.MockTransport(handler),
                         retries=3)
    with pytest.raises(InvalidMessage) as info:  # retried twice, then the real answer
        remote.append("s", [Message.user("x")])
    assert info.value.path == "$[0].role" and calls == ["POST"] * 3
    calls.clear()
    with pytest.raises(RemoteError) as refused:  # creating is not idempotent: no retry
        remote.create_session("s")
    assert refused.value.status == 503 and calls == ["POST"]
    with pytest.raises(ValueError, match="tenant"):
        RemoteStore("http://test", tenant_keys={"x": "k"}, counter="approx",
                    transport=httpx.MockTransport(
                        lambda r: httpx.Response(200, json={"tenant": "x", "counter": "approx"})
                    )).get_session("s", tenant="y")


def test_connection_errors_are_retried_then_raised() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    remote = RemoteStore(f"http://127.0.0.1:{port}", retries=2, timeout=2)
    start = time.monotonic()
    with pytest.raises(httpx.ConnectError):
        remote.create_session("s")
    assert time.monotonic() - start < 5


def test_open_store_and_async(server: LiveServer) -> None:
    _, key = _fresh(server)
    remote = open_store(server.url, api_key=key)
    assert isinstance(remote, RemoteStore) and remote.counter.name == "approx:4"

    async def go() -> list[str]:
        store = AsyncRemoteStore(server.url, key)
        session = await store.create_session()
        await store.append(session.id, [Message.user("async hi")])
        got = [m.text for m in await store.tail(session.id, 5)]
        await store.close()
        return got

    assert asyncio.run(go()) == ["async hi"]


def test_large_attachments_go_through_the_asset_route(server: LiveServer,
                                                      png_bytes: bytes) -> None:
    backend, key = _fresh(server)
    remote = RemoteStore(server.url, key, upload_over=10)
    session = remote.create_session()
    att = Attachment.from_bytes(png_bytes, name="p.png")
    remote.append(session.id, [Message.user("pic", att)])
    stored = backend.tail(session.id, 1)[0].attachments[0]
    assert stored.data is None and stored.sha256 == att.sha256
    assert remote.get_asset(att.sha256) == png_bytes  # from the server's asset directory
    resolved = remote.resolve(remote.tail(session.id, 1))
    assert resolved[0].attachments[0].data == png_bytes


def test_store_outages_are_retried_after_retry_after_then_raised() -> None:
    """A 503 store_unavailable is retried (an append: idempotent) after the server's
    Retry-After, then raised as StoreUnavailable; a 429 is retried even for a create
    (refused before any work); a 507 is StorageFull."""
    from chathistory import StorageFull, StoreUnavailable

    calls: list[str] = []
    answers: list[httpx.Response] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return answers.pop(0)

    def unavailable() -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "0"}, json={
            "error": {"type": "store_unavailable", "message": "Redis unreachable"}})

    remote = RemoteStore("http://test", "key", transport=httpx.MockTransport(handler),
                         retries=2)
    answers[:] = [unavailable(), unavailable(), unavailable()]
    with pytest.raises(StoreUnavailable, match="Redis unreachable") as info:
        remote.append("s", [Message.user("x")])
    assert len(calls) == 3 and info.value.retry_after == 0
    calls.clear()
    answers[:] = [httpx.Response(429, headers={"Retry-After": "0"}, json={
        "error": {"type": "too_many_requests", "message": "slow down"}}),
        httpx.Response(201, json={"schema_version": 1, "id": "s", "root_id": "s"})]
    assert remote.create_session("s").id == "s" and calls == ["POST", "POST"]
    calls.clear()
    answers[:] = [httpx.Response(507, json={"error": {"type": "storage_full",
                                                      "message": "no space left"}})]
    with pytest.raises(StorageFull):
        remote.create_session("t")
    assert calls == ["POST"]


def test_delete_message_over_http(store: RemoteStore) -> None:
    """``delete_message`` through ``DELETE /v1/sessions/{id}/messages/{message_id}``:
    the session answered, the rest in order, a stale version and a shared message
    refused with nothing changed."""
    msgs = conformance.chat(6)
    s = store.create_session()
    version = store.append(s.id, msgs)
    with pytest.raises(Conflict):
        store.delete_message(s.id, msgs[2].id, expected_version=version - 1)
    session = store.delete_message(s.id, msgs[2].id, expected_version=version)
    assert (session.version, session.message_count) == (version + 1, 5)
    kept = [m.id for m in msgs if m.id != msgs[2].id]
    assert [m.id for m in store.range(s.id)] == kept
    assert [m.id for m in store.tail(s.id, 2)] == kept[-2:]
    store.fork(s.id, msgs[3].id)
    with pytest.raises(Conflict):
        store.delete_message(s.id, msgs[0].id)
    with pytest.raises(NotFound):
        store.delete_message(s.id, "no-such-message")
    assert [m.id for m in store.range(s.id)] == kept
