"""``AsyncStore``: the same protocol, async, for any store.

Backends are written once, on their natural (sync) side; ``AsyncStoreAdapter``
runs each call in a worker thread so an event loop never blocks on I/O, through
``chathistory.dispatch``: the pool and the store's circuit the HTTP service runs
its store calls through (an unreachable store is a fast ``StoreUnavailable``, a
driver's "unreachable", "full" or "read-only" error comes out as chathistory's).
A parity test checks that every method of ``Store`` has its async twin here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal, ParamSpec, TypeVar

from ..dispatch import SYSTEM_KEY, Dispatch, StoreHealth, default_dispatch
from ..model import KVStatus, Message
from ..tokens import TokenCounter
from .base import Store
from .model import DEFAULT_TENANT, Page, Session
from .search import SearchPage

__all__ = ["AsyncStore", "AsyncStoreAdapter", "open_async_store"]

P = ParamSpec("P")
T = TypeVar("T")


class AsyncStoreAdapter:
    """Any ``Store`` as an ``AsyncStore``: each call in ``dispatch``'s threads (the
    process's ``default_dispatch()`` unless given), counted against its tenant,
    through the store's circuit ``health`` (``StoreHealth.of(store)`` unless given)."""

    def __init__(self, store: Store, *, dispatch: Dispatch | None = None,
                 health: StoreHealth | None = None) -> None:
        self.store = store
        self.counter: TokenCounter = store.counter
        self.dispatch = dispatch if dispatch is not None else default_dispatch()
        self.health = health if health is not None else StoreHealth.of(store)

    async def call(self, tenant: str | None, fn: Callable[P, T], /, *args: P.args,
                   **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, a sync function that calls this store, run as the
        adapter's own methods are: in the dispatch's threads on behalf of ``tenant``,
        through the store's circuit."""
        return await self.dispatch.call_store(self.health, tenant or SYSTEM_KEY, fn,
                                              *args, **kwargs)

    async def create_session(self, session_id: str | None = None, *,
                             tenant: str = DEFAULT_TENANT, user: str | None = None,
                             metadata: dict[str, Any] | None = None,
                             state: dict[str, Any] | None = None,
                             ttl: timedelta | float | None = None) -> Session:
        return await self.call(tenant, self.store.create_session, session_id, tenant=tenant,
                               user=user, metadata=metadata, state=state, ttl=ttl)

    async def get_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> Session:
        return await self.call(tenant, self.store.get_session, session_id, tenant=tenant)

    async def list_sessions(self, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
                            metadata: Mapping[str, Any] | None = None, limit: int = 50,
                            cursor: str | None = None,
                            order: Literal["created", "recent"] = "created",
                            query: str | None = None) -> Page[Session]:
        return await self.call(tenant, self.store.list_sessions, tenant=tenant, user=user,
                               metadata=metadata, limit=limit, cursor=cursor,
                               order=order, query=query)

    async def search(self, query: str, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
                     session_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                     limit: int = 20, cursor: str | None = None) -> SearchPage:
        return await self.call(tenant, self.store.search, query, tenant=tenant, user=user,
                               session_id=session_id, metadata=metadata, limit=limit,
                               cursor=cursor)

    async def update_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                             metadata: dict[str, Any] | None = None,
                             state: dict[str, Any] | None = None,
                             ttl: timedelta | float | None = None,
                             expected_version: int | None = None) -> Session:
        return await self.call(tenant, self.store.update_session, session_id, tenant=tenant,
                               metadata=metadata, state=state, ttl=ttl,
                               expected_version=expected_version)

    async def delete_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                             cascade: bool = False) -> None:
        await self.call(tenant, self.store.delete_session, session_id, tenant=tenant,
                        cascade=cascade)

    async def append(self, session_id: str, messages: Iterable[Message], *,
                     tenant: str = DEFAULT_TENANT, expected_version: int | None = None,
                     state: dict[str, Any] | None = None, reject_orphans: bool = False) -> int:
        batch = list(messages)
        return await self.call(tenant, self.store.append, session_id, batch, tenant=tenant,
                               expected_version=expected_version, state=state,
                               reject_orphans=reject_orphans)

    async def context(self, session_id: str, head: int, tail: int, *,
                      tenant: str = DEFAULT_TENANT) -> list[Message]:
        return await self.call(tenant, self.store.context, session_id, head, tail, tenant=tenant)

    async def tail(self, session_id: str, n: int, *, tenant: str = DEFAULT_TENANT,
                   include_marked: bool = False) -> list[Message]:
        return await self.call(tenant, self.store.tail, session_id, n, tenant=tenant,
                               include_marked=include_marked)

    async def window(self, session_id: str, max_tokens: int,
                     counter: str | TokenCounter | None = None, *,
                     tenant: str = DEFAULT_TENANT, keep_system: bool = False) -> list[Message]:
        return await self.call(tenant, self.store.window, session_id, max_tokens, counter,
                               tenant=tenant, keep_system=keep_system)

    async def range(self, session_id: str, start: int = 0, stop: int | None = None, *,
                    tenant: str = DEFAULT_TENANT, include_marked: bool = True) -> list[Message]:
        return await self.call(tenant, self.store.range, session_id, start, stop, tenant=tenant,
                               include_marked=include_marked)

    async def since_compaction(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                               keep_system: bool = False) -> list[Message]:
        return await self.call(tenant, self.store.since_compaction, session_id, tenant=tenant,
                               keep_system=keep_system)

    async def get(self, session_id: str, message_id: str, *,
                  tenant: str = DEFAULT_TENANT) -> Message:
        return await self.call(tenant, self.store.get, session_id, message_id, tenant=tenant)

    async def pop(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                  expected_version: int | None = None) -> Message | None:
        return await self.call(tenant, self.store.pop, session_id, tenant=tenant,
                               expected_version=expected_version)

    async def delete_message(self, session_id: str, message_id: str, *,
                             tenant: str = DEFAULT_TENANT,
                             expected_version: int | None = None) -> Session:
        return await self.call(tenant, self.store.delete_message, session_id, message_id,
                               tenant=tenant, expected_version=expected_version)

    async def clear(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        return await self.call(tenant, self.store.clear, session_id, tenant=tenant)

    async def mark(self, session_id: str, message_ids: Iterable[str], status: KVStatus, *,
                   tenant: str = DEFAULT_TENANT) -> int:
        ids = list(message_ids)
        return await self.call(tenant, self.store.mark, session_id, ids, status, tenant=tenant)

    async def fork(self, session_id: str, at_message_id: str | None = None, *,
                   tenant: str = DEFAULT_TENANT, new_session_id: str | None = None) -> Session:
        return await self.call(tenant, self.store.fork, session_id, at_message_id,
                               tenant=tenant, new_session_id=new_session_id)

    async def edit(self, session_id: str, message_id: str, message: Message, *,
                   tenant: str = DEFAULT_TENANT) -> Session:
        return await self.call(tenant, self.store.edit, session_id, message_id, message,
                               tenant=tenant)

    async def lineage(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> list[Session]:
        return await self.call(tenant, self.store.lineage, session_id, tenant=tenant)

    async def erase(self, *, tenant: str, user: str | None = None) -> int:
        return await self.call(tenant, self.store.erase, tenant=tenant, user=user)

    async def purge_expired(self, *, tenant: str | None = None) -> int:
        return await self.call(tenant, self.store.purge_expired, tenant=tenant)

    async def get_asset(self, sha256: str, *, tenant: str = DEFAULT_TENANT) -> bytes:
        return await self.call(tenant, self.store.get_asset, sha256, tenant=tenant)

    async def export(self, *, tenant: str = DEFAULT_TENANT,
                     session_ids: Iterable[str] | None = None) -> AsyncIterator[bytes]:
        iterator = iter(self.store.export(tenant=tenant, session_ids=session_ids))
        done = object()
        while True:
            line = await self.call(tenant, next, iterator, done)
            if line is done:
                return
            assert isinstance(line, bytes)
            yield line

    async def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int:
        return await self.call(tenant, self.store.import_, lines, tenant=tenant)

    async def close(self) -> None:
        await self.dispatch.run_as(SYSTEM_KEY, self.store.close)

    async def __aenter__(self) -> AsyncStoreAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


AsyncStore = AsyncStoreAdapter
"""The async protocol: ``AsyncStoreAdapter``'s methods (every ``Store`` method, async)."""


def open_async_store(url: str = "memory://", **options: object) -> AsyncStoreAdapter:
    """An ``AsyncStore`` for ``url`` (see ``open_store``)."""
    from . import open_store

    return AsyncStoreAdapter(open_store(url, **options))
