"""An append's statement sent through libpq's own prepared-statement calls
(``psycopg.pq``), past psycopg's cursors, adapters and pool context manager.

Worth its code because an append is short: callgrind counted 394,000 instructions
of this process per one-message append through ``conn.execute`` and the pool's
``connection()``, 259,000 through ``run_prepared`` (the cursor and the parameters'
adaptation took ~120,000), and ``python -m bench writes`` runs a fifth of the time
of our single writer in psycopg. Only plain values travel here (``str``, ``int``,
``bool``, ``None``, ``bytes`` in binary, ``datetime``); the server infers their
types from the statement, as it did for psycopg's untyped text.
``test_postgres`` checks it against ``conn.execute``: the same random operations
give the same answers and rows.
"""

from __future__ import annotations

import itertools
import re
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from .pool import refuse_nul

_NAMED = re.compile(r"%\((\w+)\)s")
_NUMBERS = itertools.count()


class Prepared:
    """A statement with ``%(name)s`` placeholders, as libpq takes it: a name for the
    server, the text with ``$n`` and the order of the parameters."""

    __slots__ = ("name", "names", "sql", "statement")

    def __init__(self, statement: str) -> None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        self.statement = statement
        self.sql = _NAMED.sub(number, statement).encode()
        self.names = tuple(names)
        self.name = f"chathistory_{next(_NUMBERS)}".encode()


class _Connection:
    """What this module keeps per connection: its encoding and what it prepared."""

    __slots__ = ("encoding", "prepared")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.encoding = conn.info.encoding
        self.prepared: set[bytes] = set()


_connections: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Connection] = (
    weakref.WeakKeyDictionary())


def run_prepared(conn: psycopg.Connection[Any], statement: Prepared,
                 params: Mapping[str, Any]) -> int:
    """Run ``statement`` on ``conn`` (idle, autocommit) and return its one integer:
    prepared on the connection the first time, then one round trip. Errors are
    psycopg's own classes (``UniqueViolation``...; ``OperationalError`` for a lost
    connection). A connection that prepares nothing (``prepare_threshold`` None, as
    behind a transaction-mode pgbouncer) runs it through ``conn.execute``."""
    if conn.prepare_threshold is None:
        (value,) = conn.execute(statement.statement, params).fetchone() or (0,)
        return int(value)
    known = _connections.get(conn)
    if known is None:
        known = _connections[conn] = _Connection(conn)
    values: list[Any] = []  # (bytes, or None for NULL)
    formats: list[int] = []
    encoding = known.encoding
    for name in statement.names:
        value = params[name]
        kind = type(value)
        if kind is str:
            refuse_nul(value)
            values.append(value.encode(encoding))
        elif kind is bytes:
            values.append(value)
        elif kind is int:
            values.append(str(value).encode())
        elif kind is bool:
            values.append(b"t" if value else b"f")
        elif value is None:
            values.append(None)
        elif isinstance(value, datetime):
            values.append(value.isoformat().encode())
        else:
            raise TypeError(f"{name}: {kind.__name__} is not sent by run_prepared")
        formats.append(1 if kind is bytes else 0)
    pgconn = conn.pgconn
    for attempt in (1, 2):
        if statement.name not in known.prepared:
            _check(pgconn, pgconn.prepare(statement.name, statement.sql), encoding)
            known.prepared.add(statement.name)
        result = pgconn.exec_prepared(statement.name, values, formats)
        try:
            _check(pgconn, result, encoding)
        except pg_errors.InvalidSqlStatementName:  # deallocated by someone: not run
            known.prepared.discard(statement.name)
            if attempt == 2:
                raise
            continue
        value = result.get_value(0, 0) if result.ntuples else None
        return int(value) if value is not None else 0
    raise AssertionError("unreachable")  # pragma: no cover


def _check(pgconn: pq.abc.PGconn, result: pq.abc.PGresult, encoding: str) -> None:
    if result.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        return
    if pgconn.status == pq.ConnStatus.BAD:  # as psycopg says a lost connection
        message = result.get_error_message(encoding) or "the connection was lost"
        raise psycopg.OperationalError(f"consuming input failed: {message}")
    raise pg_errors.error_from_result(result, encoding=encoding)
