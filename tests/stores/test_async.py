"""The async twin: same methods, same results as the sync store on every backend, and
the same dispatch as the HTTP service (``chathistory.dispatch``: pool, fairness per
key, the store's circuit)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from chathistory import Message, NotFound, StoreUnavailable, open_async_store
from chathistory.dispatch import Dispatch, StoreHealth, default_dispatch
from chathistory.model import KVStatus
from chathistory.stores import BaseStore, MemoryStore, Store
from chathistory.stores.aio import AsyncStoreAdapter

PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def public_methods(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


def test_every_store_method_has_an_async_twin() -> None:
    sync = {n for n in dir(Store) if not n.startswith("_") and n != "counter"}
    twins = public_methods(AsyncStoreAdapter)
    assert sync <= twins, sync - twins
    for name in sync:
        s_params = list(inspect.signature(getattr(BaseStore, name)).parameters)
        a_params = list(inspect.signature(getattr(AsyncStoreAdapter, name)).parameters)
        assert s_params == a_params, name
        assert inspect.iscoroutinefunction(getattr(AsyncStoreAdapter, name)) or \
            inspect.isasyncgenfunction(getattr(AsyncStoreAdapter, name)), name


def test_async_behaves_like_sync() -> None:
    async def run() -> None:
        store = open_async_store("memory://", counter="approx")
        s = await store.create_session("a")
        msgs = [Message.user("hi"), Message.assistant("hello")]
        assert await store.append(s.id, msgs) == 1
        assert await store.append(s.id, msgs) == 1
        assert [m.id for m in await store.tail(s.id, 5)] == [m.id for m in msgs]
        assert [m.id for m in await store.window(s.id, 1000)] == [m.id for m in msgs]
        lines = [line async for line in store.export()]
        other = MemoryStore(counter="approx")
        assert other.import_(lines) == 2
        await store.close()

    asyncio.run(run())


# ---------------------------------------------------------------- parity, every backend


class SyncCalls:
    """The sync store behind the async surface, called directly (the reference)."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)
        return call


def conversation() -> list[Message]:
    return [Message.system("be brief"), Message.user("weather?"),
            Message.assistant("", [{"id": "c1", "name": "weather", "arguments": {"at": "Paris"}}]),
            Message.tool_result("c1", "sunny"), Message.assistant("Sunny."),
            Message.user("and tomorrow?"), Message.assistant("Rain.")]


async def script(api: Any, sid: str, msgs: list[Message]) -> list[object]:
    """Every kind of call, in a row; what each returned (or raised), ids made neutral."""
    def plain(session: Any) -> dict[str, Any]:
        found = session.to_dict() if hasattr(session, "to_dict") else dict(session)
        for key in ("created_at", "updated_at", "expires_at"):
            found.pop(key, None)
        return {k: (v.replace(sid, "S") if isinstance(v, str) else v) for k, v in found.items()}

    async def outcome(call: Awaitable[Any]) -> object:
        try:
            return await call
        except Exception as exc:  # the same error class on both sides
            return type(exc).__name__

    out: list[object] = [plain(await api.create_session(sid, metadata={"k": 1}, state={"x": 1}))]
    out += [await api.append(sid, msgs[:4]), await api.append(sid, msgs[:4]),
            await api.append(sid, msgs[4:], state={"y": 2}),
            await api.tail(sid, 2), await api.window(sid, 40), await api.context(sid, 1, 2),
            await api.range(sid, 1, 5), await api.get(sid, msgs[1].id),
            await api.mark(sid, [msgs[1].id], KVStatus.MARKED),
            await api.range(sid, include_marked=False), await api.tail(sid, 9),
            plain(await api.update_session(sid, metadata={"k": 2})),
            plain(await api.get_session(sid)), await api.pop(sid),
            plain(await api.delete_message(sid, msgs[2].id)), await api.range(sid),
            await outcome(api.delete_message(sid, "no-such-message")),
            plain(await api.fork(sid, msgs[4].id, new_session_id=f"{sid}-fork")),
            [plain(s) for s in await api.lineage(f"{sid}-fork")],
            await api.range(f"{sid}-fork"),
            await outcome(api.get(sid, "no-such-message")),
            await outcome(api.get_session(f"{sid}-missing")),
            await outcome(api.append(sid, [Message.tool_result("nowhere", "x")],
                                     reject_orphans=True)),
            await api.delete_session(f"{sid}-fork"), await api.clear(sid),
            plain(await api.get_session(sid))]
    return out


def test_the_adapter_returns_what_the_sync_store_returns(store: BaseStore) -> None:
    adapter = AsyncStoreAdapter(store)
    msgs = conversation()
    tag = uuid.uuid4().hex[:8]

    async def run() -> tuple[list[object], list[object], list[bytes], list[bytes]]:
        by_sync = await script(SyncCalls(store), f"sync-{tag}", msgs)
        by_adapter = await script(adapter, f"aio-{tag}", msgs)
        await adapter.append(f"aio-{tag}", msgs[:2])
        lines = [line async for line in adapter.export(session_ids=[f"aio-{tag}"])]
        return by_sync, by_adapter, lines, list(store.export(session_ids=[f"aio-{tag}"]))

    by_sync, by_adapter, exported, expected = asyncio.run(run())
    assert by_adapter == by_sync
    assert exported == expected and len(exported) == 3


# ---------------------------------------------------------------- one dispatch


def test_the_adapter_the_provider_and_the_server_share_one_dispatch() -> None:
    from chathistory import HistoryProvider

    adapter = AsyncStoreAdapter(MemoryStore())
    assert type(adapter.dispatch) is Dispatch and adapter.dispatch is default_dispatch()
    assert isinstance(adapter.health, StoreHealth)
    provider = HistoryProvider(adapter)  # shares the adapter's pool and circuit
    assert provider.aio is adapter
    pytest.importorskip("starlette")
    from chathistory.server.work import Work, store_call

    with served_app(MemoryStore()) as app:
        service = app.service
    assert isinstance(service.work, Dispatch) and isinstance(service.health, StoreHealth)
    # the server's store calls and the adapter's run the same method of the same class
    assert Work.call_store is Dispatch.call_store and Work.run_as is Dispatch.run_as
    assert "call_store" in inspect.getsource(store_call)
    assert "call_store" in inspect.getsource(AsyncStoreAdapter.call)


def test_adapter_calls_run_in_the_pool_with_the_callers_context_on_any_loop() -> None:
    adapter = AsyncStoreAdapter(MemoryStore())
    request = contextvars.ContextVar("request", default="none")

    async def where() -> tuple[str, str]:
        request.set("r-1")
        return await adapter.call("t", lambda: (threading.current_thread().name, request.get()))

    for _ in range(3):  # a new event loop each time: the pool serves them all
        name, seen = asyncio.run(where())
        assert name.startswith("chathistory-dispatch") and seen == "r-1"


def test_a_key_past_its_share_is_refused_and_others_still_run() -> None:
    dispatch = Dispatch(threads=4, per_key=2, queue=3)
    adapter = AsyncStoreAdapter(MemoryStore(), dispatch=dispatch)
    release = threading.Event()

    async def main() -> list[object]:
        hog = [asyncio.ensure_future(adapter.call("hog", release.wait, 5)) for _ in range(5)]
        await asyncio.sleep(0.1)  # 2 running, 3 waiting: the queue is full
        with pytest.raises(StoreUnavailable, match="too many calls of 'hog'") as refused:
            await adapter.call("hog", time.sleep, 0)
        assert not refused.value.unreachable
        assert adapter.health.down is None  # a refusal says nothing of the store
        assert await adapter.call("other", sum, [1, 2]) == 3
        release.set()
        return await asyncio.gather(*hog)

    assert asyncio.run(main()) == [True] * 5
    assert dispatch.load() == {"tenants": 0, "running": 0, "waiting": 0}
    dispatch.shutdown()


# ---------------------------------------------------------------- an unreachable store


class Forwarder:
    """A TCP port of ours that forwards to ``target``; ``close()`` closes it and every
    connection through it, so the port is then closed (connections refused)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for s in (self.listener, *self.sockets):  # (a listener's shutdown ends accept())
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_an_unreachable_postgres_is_a_fast_store_unavailable_as_in_the_server() -> None:
    """PostgreSQL behind a port that is then closed (no mock): through the adapter, as
    through the server's work pool and its HTTP answer, the first call fails with
    ``StoreUnavailable`` within the pool's timeout and the next ones at once."""
    pytest.importorskip("psycopg")
    from urllib.parse import urlsplit

    from chathistory.stores.postgres import PostgresStore

    parts = urlsplit(PG_URL)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2).close()
    except OSError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL unreachable: {exc} (CI=true: it must be tested)")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    proxy = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}").geturl()
    store = PostgresStore(url, counter="approx", schema=schema, pool_timeout=0.5)
    try:
        sid = store.create_session().id
        store.append(sid, [Message.user("hi")])
        proxy.close()
        adapter = AsyncStoreAdapter(store)
        assert_fast_failures(lambda sid: adapter.tail(sid, 5), sid)
        pytest.importorskip("starlette")
        from chathistory.server.work import Work, store_call

        work, health = Work(), StoreHealth.of(store)
        try:
            assert_fast_failures(lambda sid: store_call(work, health, store.tail, sid, 5), sid)
        finally:
            work.shutdown()
        assert_fast_http_503(store, sid)
    finally:
        proxy.close()
        store.close()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def assert_fast_failures(call: Callable[[str], Awaitable[object]], sid: str) -> None:
    async def main() -> tuple[float, float]:
        started = time.perf_counter()
        with pytest.raises(StoreUnavailable) as first:
            await call(sid)
        assert first.value.unreachable and first.value.retry_after > 0
        took_first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(20):
            with pytest.raises(StoreUnavailable):
                await call(sid)
        return took_first, time.perf_counter() - started

    took_first, took_next = asyncio.run(main())
    # bounds that hold on a machine at load 12 and that a call waiting for the store
    # (a connect timeout each) misses: the circuit answers without the store
    assert took_first < 3.0 and took_next < 2.0, (took_first, took_next)


def assert_fast_http_503(store: BaseStore, sid: str) -> None:
    import httpx

    async def main(app: Any) -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return [await client.get(f"/v1/sessions/{sid}/messages?tail=5") for _ in range(5)]

    started = time.perf_counter()
    with served_app(store) as app:
        answers = asyncio.run(main(app))
    assert time.perf_counter() - started < 3.0
    assert {r.status_code for r in answers} == {503}, [r.text for r in answers]
    assert all(r.headers.get("Retry-After") for r in answers)
    assert answers[-1].json()["error"]["type"] == "store_unavailable"


@contextlib.contextmanager
def served_app(store: BaseStore) -> Iterator[Any]:
    """The HTTP service's app over ``store``, in this process; what ``create_app`` sets
    for the whole process (the switch interval, counting in processes) put back after."""
    from chathistory import tokens
    from chathistory.server.app import create_app

    interval, offload = sys.getswitchinterval(), tokens._offload
    app = create_app(store, asset_dir=os.devnull)
    try:
        yield app
    finally:
        app.service.work.shutdown()
        sys.setswitchinterval(interval)
        tokens.offload_large_texts(offload)


def test_a_missing_session_is_not_a_store_outage() -> None:
    adapter = AsyncStoreAdapter(MemoryStore())

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(NotFound):
                await adapter.get_session("nobody")
        assert adapter.health.down is None

    asyncio.run(main())
