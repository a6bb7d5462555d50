"""PostgreSQL connections: the pool that reconnects within half a second of the
server's return, and the text dumpers that refuse NUL as bad input
(``InvalidMessage``) before anything is sent, where psycopg would raise a
``DataError`` from the server."""

from __future__ import annotations

from typing import Any

import psycopg
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

