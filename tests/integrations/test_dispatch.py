"""Every framework adapter calls its store from async code one way: through the
``AsyncStoreAdapter``'s dispatch (``chathistory.dispatch``), as the HTTP service and
``HistoryProvider``'s async methods do, never through a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from chathistory.dispatch import Dispatch
from chathistory.stores import MemoryStore
from chathistory.stores.aio import AsyncStoreAdapter


class Recording(MemoryStore):
    """A real memory store that notes the thread of every read and write."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def _note(self) -> None:
        self.threads.append(threading.current_thread().name)

    def append(self, *args: Any, **kwargs: Any) -> int:
        self._note()
        return super().append(*args, **kwargs)

    def range(self, *args: Any, **kwargs: Any) -> Any:
        self._note()
        return super().range(*args, **kwargs)

    def tail(self, *args: Any, **kwargs: Any) -> Any:
        self._note()
        return super().tail(*args, **kwargs)

    def window(self, *args: Any, **kwargs: Any) -> Any:
        self._note()
        return super().window(*args, **kwargs)

    def clear(self, *args: Any, **kwargs: Any) -> int:
        self._note()
        return super().clear(*args, **kwargs)


@pytest.fixture
def adapter() -> Iterator[tuple[Recording, AsyncStoreAdapter]]:
    store = Recording()
    dispatch = Dispatch(threads=1, name="adapter-test")
    yield store, AsyncStoreAdapter(store, dispatch=dispatch)
    dispatch.shutdown()


def _only_the_dispatch(store: Recording) -> None:
    assert store.threads, "the adapter called the store"
    assert all(name.startswith("adapter-test") for name in store.threads), store.threads


def test_langchain_history(adapter: tuple[Recording, AsyncStoreAdapter]) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage

    from chathistory.integrations.langchain import ChatHistoryMessageHistory

    store, aio = adapter
    history = ChatHistoryMessageHistory(aio, "s")

    async def run() -> list[Any]:
        await history.aadd_messages([HumanMessage("hi"), AIMessage("hello")])
        found = await history.aget_messages()
        await history.aclear()
        return [m.content for m in found]

    assert asyncio.run(run()) == ["hi", "hello"]
    _only_the_dispatch(store)


def test_openai_agents_session(adapter: tuple[Recording, AsyncStoreAdapter]) -> None:
    pytest.importorskip("agents")
    from chathistory.integrations.openai_agents import ChatHistorySession

    store, aio = adapter
    session = ChatHistorySession("s", aio)

    async def run() -> list[Any]:
        await session.add_items([{"role": "user", "content": "hi"}])
        return await session.get_items()

    assert [i.get("content") for i in asyncio.run(run())] == ["hi"]  # type: ignore[union-attr]
    _only_the_dispatch(store)


def test_agent_framework_provider(adapter: tuple[Recording, AsyncStoreAdapter]) -> None:
    pytest.importorskip("agent_framework")
    from agent_framework import Message as AFMessage

    from chathistory.integrations.agent_framework import ChatHistoryAgentProvider

    store, aio = adapter
    provider = ChatHistoryAgentProvider(aio)

    async def run() -> list[str]:
        await provider.save_messages("s", [AFMessage(role="user", contents=["hi"])])
        return [m.text for m in await provider.get_messages("s")]

    assert asyncio.run(run()) == ["hi"]
    _only_the_dispatch(store)
