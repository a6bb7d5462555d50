"""The async twin: same methods, same behaviour (parity)."""

from __future__ import annotations

import asyncio
import inspect

from chathistory import Message, open_async_store
from chathistory.stores import BaseStore, MemoryStore, Store
from chathistory.stores.aio import AsyncStoreAdapter


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
