"""``AsyncStore``: the same protocol, async, for any store.

Backends are written once, on their natural (sync) side; ``AsyncStoreAdapter``
runs each call in a worker thread so an event loop never blocks on I/O. A
parity test checks that every method of ``Store`` has its async twin here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal

from ..model import KVStatus, Message
from ..tokens import TokenCounter
from .base import Store
from .model import DEFAULT_TENANT, Page, Session

__all__ = ["AsyncStore", "AsyncStoreAdapter", "open_async_store"]


class AsyncStoreAdapter:
    """Any ``Store`` as an ``AsyncStore``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.counter: TokenCounter = store.counter

    async def create_session(self, session_id: str | None = None, *,
                             tenant: str = DEFAULT_TENANT, user: str | None = None,
                             metadata: dict[str, Any] | None = None,
                             state: dict[str, Any] | None = None,
                             ttl: timedelta | float | None = None) -> Session:
        return await asyncio.to_thread(self.store.create_session, session_id, tenant=tenant,
                                       user=user, metadata=metadata, state=state, ttl=ttl)

    async def get_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> Session:
        return await asyncio.to_thread(self.store.get_session, session_id, tenant=tenant)

    async def list_sessions(self, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
                            metadata: Mapping[str, Any] | None = None, limit: int = 50,
                            cursor: str | None = None,
                            order: Literal["created", "recent"] = "created",
                            query: str | None = None) -> Page[Session]:
        return await asyncio.to_thread(self.store.list_sessions, tenant=tenant, user=user,
                                       metadata=metadata, limit=limit, cursor=cursor,
                                       order=order, query=query)

    async def update_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                             metadata: dict[str, Any] | None = None,
                             state: dict[str, Any] | None = None,
                             ttl: timedelta | float | None = None,
                             expected_version: int | None = None) -> Session:
        return await asyncio.to_thread(self.store.update_session, session_id, tenant=tenant,
                                       metadata=metadata, state=state, ttl=ttl,
                                       expected_version=expected_version)

    async def delete_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                             cascade: bool = False) -> None:
        await asyncio.to_thread(self.store.delete_session, session_id, tenant=tenant,
                                cascade=cascade)

    async def append(self, session_id: str, messages: Iterable[Message], *,
                     tenant: str = DEFAULT_TENANT, expected_version: int | None = None,
                     state: dict[str, Any] | None = None, reject_orphans: bool = False) -> int:
        batch = list(messages)
        return await asyncio.to_thread(self.store.append, session_id, batch, tenant=tenant,
                                       expected_version=expected_version, state=state,
                                       reject_orphans=reject_orphans)

    async def context(self, session_id: str, head: int, tail: int, *,
                      tenant: str = DEFAULT_TENANT) -> list[Message]:
        return await asyncio.to_thread(self.store.context, session_id, head, tail, tenant=tenant)

    async def tail(self, session_id: str, n: int, *, tenant: str = DEFAULT_TENANT,
                   include_marked: bool = False) -> list[Message]:
        return await asyncio.to_thread(self.store.tail, session_id, n, tenant=tenant,
                                       include_marked=include_marked)

    async def window(self, session_id: str, max_tokens: int,
                     counter: str | TokenCounter | None = None, *,
                     tenant: str = DEFAULT_TENANT, keep_system: bool = False) -> list[Message]:
        return await asyncio.to_thread(self.store.window, session_id, max_tokens, counter,
                                       tenant=tenant, keep_system=keep_system)

    async def range(self, session_id: str, start: int = 0, stop: int | None = None, *,
                    tenant: str = DEFAULT_TENANT, include_marked: bool = True) -> list[Message]:
        return await asyncio.to_thread(self.store.range, session_id, start, stop, tenant=tenant,
                                       include_marked=include_marked)

    async def get(self, session_id: str, message_id: str, *,
                  tenant: str = DEFAULT_TENANT) -> Message:
        return await asyncio.to_thread(self.store.get, session_id, message_id, tenant=tenant)

    async def pop(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                  expected_version: int | None = None) -> Message | None:
        return await asyncio.to_thread(self.store.pop, session_id, tenant=tenant,
                                       expected_version=expected_version)

    async def clear(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        return await asyncio.to_thread(self.store.clear, session_id, tenant=tenant)

    async def mark(self, session_id: str, message_ids: Iterable[str], status: KVStatus, *,
                   tenant: str = DEFAULT_TENANT) -> int:
        ids = list(message_ids)
        return await asyncio.to_thread(self.store.mark, session_id, ids, status, tenant=tenant)

    async def fork(self, session_id: str, at_message_id: str | None = None, *,
                   tenant: str = DEFAULT_TENANT, new_session_id: str | None = None) -> Session:
        return await asyncio.to_thread(self.store.fork, session_id, at_message_id,
                                       tenant=tenant, new_session_id=new_session_id)

    async def edit(self, session_id: str, message_id: str, message: Message, *,
                   tenant: str = DEFAULT_TENANT) -> Session:
        return await asyncio.to_thread(self.store.edit, session_id, message_id, message,
                                       tenant=tenant)

    async def lineage(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> list[Session]:
        return await asyncio.to_thread(self.store.lineage, session_id, tenant=tenant)

    async def erase(self, *, tenant: str, user: str | None = None) -> int:
        return await asyncio.to_thread(self.store.erase, tenant=tenant, user=user)

    async def purge_expired(self, *, tenant: str | None = None) -> int:
        return await asyncio.to_thread(self.store.purge_expired, tenant=tenant)

    async def get_asset(self, sha256: str, *, tenant: str = DEFAULT_TENANT) -> bytes:
        return await asyncio.to_thread(self.store.get_asset, sha256, tenant=tenant)

    async def export(self, *, tenant: str = DEFAULT_TENANT,
                     session_ids: Iterable[str] | None = None) -> AsyncIterator[bytes]:
        iterator = iter(self.store.export(tenant=tenant, session_ids=session_ids))
        done = object()
        while True:
            line = await asyncio.to_thread(next, iterator, done)
            if line is done:
                return
            assert isinstance(line, bytes)
            yield line

    async def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int:
        return await asyncio.to_thread(self.store.import_, lines, tenant=tenant)

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

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
