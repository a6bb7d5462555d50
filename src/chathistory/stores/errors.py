"""Driver errors that mean "the store cannot serve now", as chathistory's own.

``translate_store_error(exc)`` maps an exception from sqlite3, psycopg,
psycopg_pool, redis-py or the file system to ``StoreUnavailable`` (unreachable,
timed out, read-only, locked) or ``StorageFull`` (no space left), naming the
database file or directory where it can; anything else is left as it is (None).
The drivers are imported only if they are loaded already.
"""

from __future__ import annotations

import errno
import sqlite3
import sys
from typing import Any

from ..errors import ChatHistoryError, StorageFull, StoreUnavailable

__all__ = ["translate_store_error"]


def translate_store_error(exc: BaseException, where: str = "") -> ChatHistoryError | None:
    """``StoreUnavailable`` / ``StorageFull`` for a driver error that means the
    store cannot serve now; ``exc`` itself when it is one already; else None."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if isinstance(exc, sqlite3.OperationalError):
        return _sqlite(exc, where)
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError | TimeoutError):
        if exc.errno == errno.ENOSPC:
            place = exc.filename or where or "the store"
            return StorageFull(f"no space left on the disk of {place}", where=str(place))
        if exc.errno == errno.EROFS:
            return StoreUnavailable(f"{exc.filename or where or 'the store'} is on a read-only "
                                    "file system", retry_after=30.0, unreachable=False)
        if exc.errno in (errno.EIO, errno.EDQUOT):
            return StoreUnavailable(f"disk error on {exc.filename or where or 'the store'}: "
                                    f"{exc.strerror}", retry_after=5.0)
        return None
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        # a lost or refused connection (no SQLSTATE: the client's own), a connection
        # exception (08) or the server going down (57P01-57P03); not a statement that
        # timed out or a serialization failure, which are one request's own
        state = getattr(exc, "sqlstate", None) or ""
        if not state or state.startswith("08") or state in ("57P01", "57P02", "57P03"):
            return StoreUnavailable(f"PostgreSQL unreachable: {_first_line(exc)}")
        if state == "53100":  # disk_full: "could not extend file ...: No space left"
            return StorageFull(f"no space left on PostgreSQL's disk: {_first_line(exc)}",
                               where=where or "PostgreSQL")
        return None
    pool = sys.modules.get("psycopg_pool")
    if pool is not None and isinstance(exc, pool.PoolTimeout | pool.PoolClosed):
        return StoreUnavailable(f"PostgreSQL: no connection within the pool's timeout "
                                f"({_first_line(exc)})")
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None and isinstance(
            exc, redis_errors.ConnectionError | redis_errors.TimeoutError
            | redis_errors.BusyLoadingError | redis_errors.ClusterDownError
            | redis_errors.TryAgainError | redis_errors.MasterDownError):
        return StoreUnavailable(f"Redis unreachable: {_first_line(exc)}")
    if redis_errors is not None and isinstance(exc, redis_errors.ResponseError):
        return _redis_refused(exc, redis_errors)
    if isinstance(exc, ConnectionError | TimeoutError):
        return StoreUnavailable(f"the store is unreachable: {_first_line(exc)}")
    return None


def _sqlite(exc: sqlite3.OperationalError, where: str) -> ChatHistoryError | None:
    text = str(exc).lower()
    name = where or "the SQLite database"
    if "disk is full" in text or "database or disk is full" in text:
        return StorageFull(f"no space left for {name}", where=where)
    if "readonly" in text or "read-only" in text:
        return StoreUnavailable(f"{name} is read-only (check the file's and its directory's "
                                "permissions and the file system)", retry_after=30.0,
                                unreachable=False)
    if "locked" in text or "busy" in text:
        return StoreUnavailable(f"{name} is locked by another writer", retry_after=1.0,
                                unreachable=False)
    if "disk i/o error" in text:  # e.g. the file made immutable, a failing disk
        return StoreUnavailable(f"{name} cannot be written ({exc}): check the file and its "
                                "disk", retry_after=5.0, unreachable=False)
    if "unable to open" in text:
        return StoreUnavailable(f"{name} cannot be opened: {exc}", retry_after=5.0)
    return None


def _redis_refused(exc: BaseException, redis_errors: Any) -> ChatHistoryError | None:
    """Redis refusing writes for want of room: its memory (``maxmemory`` with
    ``noeviction``) or its disk (MISCONF: the AOF or a snapshot cannot be written)."""
    text = _first_line(exc)
    if isinstance(exc, redis_errors.OutOfMemoryError):
        return StorageFull(f"Redis is out of memory (maxmemory): {text}", where="Redis")
    if "MISCONF" in text:
        if "No space left" in text:
            return StorageFull(f"no space left on Redis's disk: {text}", where="Redis")
        return StoreUnavailable(f"Redis cannot persist writes: {text}", retry_after=30.0,
                                unreachable=False)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
