"""Stores: where sessions and their messages live.

``open_store(url)`` picks a backend by URL: ``memory://``, ``sqlite:///path``,
``postgresql://...``, ``redis://...``, ``http(s)://...`` (our own service).
"""

from __future__ import annotations

from .base import BaseStore, Store
from .memory import MemoryStore
from .model import DEFAULT_TENANT, Page, Row, Session

__all__ = ["DEFAULT_TENANT", "BaseStore", "MemoryStore", "Page", "Row", "Session", "Store",
           "open_store"]


def open_store(url: str = "memory://", **options: object) -> Store:
    """A store for ``url``. Options go to the backend (e.g. ``counter=``)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "memory":
        return MemoryStore(**options)  # type: ignore[arg-type]
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        store: Store = SQLiteStore.from_url(url, **options)
        return store
    if scheme in ("postgres", "postgresql"):
        from .postgres import PostgresStore

        store = PostgresStore.from_url(url, **options)
        return store
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from .redis import RedisStore

        store = RedisStore.from_url(url, **options)
        return store
    if scheme in ("http", "https"):
        from .remote import RemoteStore

        store = RemoteStore.from_url(url, **options)
        return store
    raise ValueError(f"unknown store URL scheme {scheme!r}: use memory://, sqlite:///path, "
                     "postgresql://..., redis://..., http(s)://...")
