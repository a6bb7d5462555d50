"""PostgreSQL connections: the pool that reconnects within half a second of the
server's return, the stack of connections in front of it (``Connections``), and the
text dumpers that refuse NUL as bad input (``InvalidMessage``) before anything is
sent, where psycopg would raise a ``DataError`` from the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from ...errors import InvalidMessage


def refuse_nul(text: str) -> None:
    """``InvalidMessage`` for text PostgreSQL cannot hold (NUL)."""
    if "\x00" in text:
        raise InvalidMessage("PostgreSQL text cannot hold NUL (\\u0000): not in an id, "
                             "a role, a user or a key", "$")


class _Text(StrDumperUnknown):
    """psycopg's own, refusing NUL with ``InvalidMessage`` (a 422) rather than its
    ``DataError`` (a 500), before anything is sent: a lookup or a write of an id
    with NUL is bad input, whatever the route. (JSON payloads escape NUL.)"""

    def dump(self, obj: str) -> Buffer | None:
        refuse_nul(obj)
        return super().dump(obj)


class _BinaryText(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        refuse_nul(obj)
        return super().dump(obj)


def configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_dumper(str, _BinaryText)
    conn.adapters.register_dumper(str, _Text)  # last: the one %s uses, as before


class _QuickRetry(AttemptWithBackoff):
    """Reconnect attempts every 0.1 s, backing off to at most every 0.5 s (psycopg_pool's
    own back off to minutes): the store serves again within half a second of its
    server being back."""

    INITIAL_DELAY = 0.1

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, 0.5)


class Pool(ConnectionPool[Any]):
    """psycopg_pool's pool with ``_QuickRetry`` reconnect attempts (its one private
    hook for the back-off; ``test_postgres`` pins the behaviour)."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False
                        ) -> None:
        super()._add_connection(attempt or _QuickRetry(timeout=self.reconnect_timeout),
                                growing)



_RETURN_EVERY = 5.0  # seconds: the stack goes back to the pool this often


class Connections:
    """The store's connections: those it gave back wait on a stack of its own and are
    taken from there first, most recently used first; the pool behind makes, bounds,
    checks and replaces them (the stack goes back to it every few seconds, so its
    lifetimes and idle limits apply, and whenever a caller waits in it). A round of
    ``take``/``give`` costs a list's pop and append where psycopg_pool's
    ``getconn``/``putconn`` cost 30,800 instructions (callgrind), an eighth of a
    one-message append's. Only idle connections go on the stack; anything else goes
    back to the pool, which rolls back or discards it."""

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool
        self._stack: list[psycopg.Connection[Any]] = []
        self._waiting: list[None] = []  # one entry per caller waiting in the pool
        self._returned = time.monotonic()
        self._closed = False
        self._local = threading.local()

    def take(self) -> psycopg.Connection[Any]:
        """A connection, from the stack or else the pool (``PoolTimeout`` after the
        pool's timeout)."""
        try:
            return self._stack.pop()
        except IndexError:
            pass
        self._waiting.append(None)  # from now on ``give`` hands connections to the pool
        try:
            try:  # one given to the stack before this caller said it waits
                return self._stack.pop()
            except IndexError:
                conn: psycopg.Connection[Any] = self.pool.getconn()
                return conn
        finally:
            self._waiting.pop()

    def give(self, conn: psycopg.Connection[Any]) -> None:
        """Back on the stack when idle and nobody waits in the pool; else to the pool."""
        if (self._waiting or self._closed
                or conn.pgconn.transaction_status != pq.TransactionStatus.IDLE):
            self.pool.putconn(conn)
            return
        self._stack.append(conn)
        if self._waiting:  # a caller began to wait after the test above and may have
            with suppress(IndexError):  # missed the stack: the pool hands it one
                self.pool.putconn(self._stack.pop())
        elif time.monotonic() - self._returned > _RETURN_EVERY:
            self.return_all()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one use; inside ``routed``, that one (its transaction)."""
        routed: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if routed is not None:
            yield routed
            return
        conn = self.take()
        try:
            yield conn
        finally:
            self.give(conn)

    @contextmanager
    def routed(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Every ``connection()`` of this thread is ``conn`` meanwhile (a transaction
        holding a lock that the thread's own statements must not wait for)."""
        self._local.conn = conn
        try:
            yield
        finally:
            self._local.conn = None

    def return_all(self) -> None:
        """Every connection of the stack back to the pool."""
        self._returned = time.monotonic()
        while True:
            try:
                conn = self._stack.pop()
            except IndexError:
                return
            self.pool.putconn(conn)

    def close(self) -> None:
        self._closed = True
        self.return_all()
        self.pool.close()
