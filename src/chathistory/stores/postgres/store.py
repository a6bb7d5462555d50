"""``PostgresStore``: the ``_b_*`` primitives on the pool, and the ways an append
is written (planned on this process's copy of the session, optimistic, or under
the session's row lock)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import args_row
from psycopg_pool import ConnectionPool

from ...errors import ChatHistoryError, Conflict
from ...model import KEPT_ROLES
from ...tokens import TokenCounter
from ..backend import AppendTxn, Span, keep_bounded
from ..base import BaseStore
from ..model import SESSION_DECODER, Row, Session, make_row
from ..search import search_option
from .pool import Connections, Pool, configure
from .queries import (
    NO_LIMIT,
    Queries,
    batch_json,
    position_runs,
    rows_params,
    session_params,
    sessions_of,
)
from .schema import SEARCH_CONFIG, check_config, migrate, quote_schema
from .search import IndexedSearch, Statements, row_words
from .wire import Prepared, run_prepared

T = TypeVar("T")
_CONNECT_TIMEOUT = 3  # seconds: an unreachable server fails the constructor promptly
_RETRIES = 20  # an append that lost a deadlock is run again, this many times at most
_OPTIMISTIC_TRIES = 1  # optimistic plans an append tries before it takes the row lock
_RACED_SECONDS = 2.0  # after a lost race, appends to that session take the row lock
_WRITTEN_SESSIONS = 4096  # sessions kept as this process last appended to them
_MISSED = object()


@functools.lru_cache(maxsize=_WRITTEN_SESSIONS)
def _isoformat(stamp: datetime) -> str:
    """A session's creation time as ``created_iso`` holds it (13,000 instructions a
    call, for the same few sessions over and over)."""
    return stamp.isoformat()


class _Txn:
    """One append's view of its session, inside the transaction holding its row lock
    (the reads are those of every append)."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], tenant: str,
                 session_id: str, session: Session | None) -> None:
        self.q, self.conn = store._q, conn
        self.key = (tenant, session_id)
        self.session = session
        self.indexed = store.search_writes_words

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(self.q.existing, (list(ids), *self.key))
        return {i: v for i, v in cursor}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(self.q.find_calls, (list(call_ids), *self.key, NO_LIMIT))
        return {c: seq for c, seq in cursor}

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        q, conn, key = self.q, self.conn, self.key
        _, version, expires_at, updated, payload = session_params(session)
        with conn.pipeline():  # one round trip for all of it
            if clear is not None and clear[0] < clear[1]:
                conn.execute(q.clear_cuts, (*key, *clear))
            if rows or calls:
                conn.execute(q.insert_batch_for(any(r.role in KEPT_ROLES for r in rows),
                                                bool(calls)),
                             {"tenant": key[0], "session_id": key[1],
                              "batch": batch_json(rows, calls, _words(rows, self.indexed))})
            for sha in sorted(assets):  # one order everywhere: no deadlocks between appends
                data, media_type = assets[sha]
                conn.execute(q.keep_asset, (key[0], sha, media_type, data))
            if assets:
                conn.execute(q.add_refs, (*key, sorted(assets)))
            conn.execute(q.save_session, (version, expires_at, updated, payload, *key))


def _words(rows: Sequence[Row], indexed: bool) -> list[str | None]:
    """Each row's ``messages.words``: None when the store keeps no search index."""
    return [row_words(r.data) for r in rows] if indexed else [None] * len(rows)


class _Planned(Exception):
    """What an optimistic append's function asked to write (raised past the function's
    own return, so a retry can run it again from the start)."""


class _OptimisticTxn(_Txn):
    """An append planned without a lock: the session and the batch's stored ids were
    read together in one round trip; ``write`` keeps what to store, which is then
    written by one statement only if the session's version has not moved."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], tenant: str,
                 session_id: str, session: Session | None, asked: Sequence[str],
                 existing: dict[str, int]) -> None:
        super().__init__(store, conn, tenant, session_id, session)
        self._asked, self._existing = set(asked), existing
        self.planned: dict[str, Any] | None = None
        self.statement: Prepared | None = None  # the statement that writes ``planned``
        self.updated: Session | None = None

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        if self._asked.issuperset(ids):
            return {i: self._existing[i] for i in ids if i in self._existing}
        return super().existing(ids)

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        if assets:
            raise _Planned  # attachments take the locked path (their upserts order locks)
        assert self.session is not None
        self.updated = session
        _, version, expires_at, updated, payload = session_params(session)
        params, one = rows_params(rows, calls, _words(rows, self.indexed))
        cleared = clear is not None and clear[0] < clear[1]
        self.statement = self.q.append_statement(
            one, cleared, any(r.role in KEPT_ROLES for r in rows), bool(calls))
        self.planned = {
            "tenant": self.key[0], "session_id": self.key[1], "version": version,
            "expires_at": expires_at, "updated": updated, "payload": payload,
            "expected": self.session.version,
            # and the same session: one deleted and created again restarts its versions
            "created": _isoformat(self.session.created_at),
            "clear_lo": clear[0] if clear else 0, "clear_hi": clear[1] if clear else 0,
            **params,
        }



class PostgresStore(IndexedSearch, BaseStore):
    """A store in a PostgreSQL schema (``postgresql://user@host/db?schema=chathistory``).

    ``schema`` is created and migrated on first use. ``partitions=N`` (at
    creation only) hash-partitions the messages table by ``(tenant, session_id)``.
    ``drop_schema_on_close`` is for tests: ``close()`` drops the whole schema.
    ``pool_timeout``: how long a call waits for a pooled connection before it raises
    ``StoreUnavailable`` (the server is down, or every connection is busy). While the
    server is down the pool tries to reconnect every half second at most.
    ``search=False`` (``?search=off``): messages are stored without their words and
    searches scan (at most ``search_scan_limit`` rows); the rows it writes are not in
    the index, so a store that keeps it scans their tenants too until
    ``build_search_index`` has filled them. ``search_config``: the text search
    configuration of the index (``simple``, the words as they are, for a new schema;
    ``english`` stems them), None for the one the schema has (``search.py`` here).
    """

    def __init__(self, url: str, counter: str | TokenCounter | None = None, *,
                 schema: str = "chathistory", pool_size: int = 10,
                 partitions: int | None = None, drop_schema_on_close: bool = False,
                 pool_timeout: float = 1.5, search: bool = True,
                 search_config: str | None = None) -> None:
        super().__init__(counter)
        quote_schema(schema)
        if search_config is not None:
            check_config(search_config)
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        if partitions is not None and not 1 <= partitions <= 4096:
            raise ValueError("partitions must be between 1 and 4096")
        self.schema = schema
        self.partitions = partitions
        self.search_indexed = bool(search)
        self._q = Queries(schema)
        self._drop_schema_on_close = drop_schema_on_close
        self._closed = False
        options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(url):
            options["connect_timeout"] = _CONNECT_TIMEOUT
        # connect once first: an unreachable server raises its own error, promptly
        with psycopg.connect(url, **options) as conn:
            migrate(conn, schema, partitions)
            self.search_config = _config_of(conn, schema, search_config)
            self._search = Statements(schema, self.search_config)
            self._open_search_index(conn)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = Pool(
            url, min_size=1, max_size=pool_size, kwargs=options, open=False,
            name=f"chathistory-{schema}", configure=configure,
            timeout=pool_timeout)
        # (tenant, id) -> the session as an append of this process last wrote it: the
        # next append plans on it and writes in one round trip, if the session has not
        # moved since (checked by the write itself; a cache that is never trusted)
        self._written: dict[tuple[str, str], Session] = {}
        self._raced: dict[tuple[str, str], float] = {}  # (tenant, id) -> lost a race then
        self._pool.open(wait=True, timeout=10)
        self._connections = Connections(self._pool)

    def recover(self) -> None:
        """After a call found the server gone: test the idle pooled connections and
        replace the broken ones now, instead of failing one call per connection."""
        self._connections.return_all()
        self._pool.check()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        """A store for ``postgresql://...``; ``schema``, ``pool_size``, ``partitions``,
        ``search`` (``on``/``off``) and ``search_config`` may be given in the query string
        (other query parameters go to libpq); keyword ``options`` win over the URL."""
        parts = urlsplit(url)
        ours: dict[str, Any] = {}
        rest = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name in ("schema", "search_config"):
                ours[name] = value
            elif name == "search":
                ours[name] = search_option(value)
            elif name in ("pool_size", "partitions"):
                ours[name] = int(value)
            elif name == "pool_timeout":
                ours[name] = float(value)
            else:
                rest.append((name, value))
        ours.update(options)
        return cls(urlunsplit(parts._replace(query=urlencode(rest))), **ours)

    def close(self) -> None:
        """Close the pool (dropping the schema first with ``drop_schema_on_close``)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._drop_schema_on_close:
                with self._connections.connection() as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {quote_schema(self.schema)} CASCADE")
        finally:
            self._connections.close()

    def _execute(self, query: str, params: Sequence[Any] | Mapping[str, Any]
                 ) -> list[tuple[Any, ...]]:
        with self._connections.connection() as conn:
            return conn.execute(query, params).fetchall()

    def _rows(self, query: str, params: Sequence[Any]) -> list[Row]:
        with self._connections.connection() as conn:
            cursor = conn.cursor(binary=True, row_factory=args_row(Row))
            return cursor.execute(query, params).fetchall()

    def _fetch_sessions(self, query: str, params: Sequence[Any]) -> list[Session]:
        with self._connections.connection() as conn:
            return sessions_of(conn.execute(query, params))

    # ---------------------------------------------------------------- sessions

    def _b_insert_session(self, session: Session) -> None:
        sid, version, expires_at, updated, payload = session_params(session)
        params = (session.tenant, sid, session.created_at.isoformat(), session.user,
                  session.parent_id, session.root_id or sid, expires_at, version, updated,
                  payload)
        try:
            with self._connections.connection() as conn:
                conn.execute(self._q.insert_session, params)
        except pg_errors.UniqueViolation:
            raise Conflict(f"session {session.id!r} exists") from None

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        found = self._fetch_sessions(self._q.get_session, (tenant, session_id))
        return found[0] if found else None

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        sid, version, expires_at, updated, payload = session_params(session)
        with self._connections.connection() as conn:
            cursor = conn.execute(self._q.save_if, (version, expires_at, updated, payload,
                                                    session.tenant, sid, expected_version))
            return cursor.rowcount == 1

    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        params: list[Any] = [tenant]
        if user is not None:
            params.append(user)
        if after is not None:
            params.extend(after)
        query = self._q.list_sessions[recent, user is not None, after is not None]
        return self._fetch_sessions(query, [*params, limit])

    def _b_count_sessions(self, tenant: str, user: str | None, now: datetime) -> int:
        found = self._execute(self._q.count_sessions[user is not None],
                              {"tenant": tenant, "user": user, "now": now})
        return int(found[0][0])

    def _page_rows(self, query: str, tenant: str, spans: Sequence[Span]
                   ) -> list[tuple[int, Row]]:
        """``(index of the span, row)`` of a statement over ``spans`` (``Queries``)."""
        values = {"ids": [s[0] for s in spans], "los": [s[1] for s in spans],
                  "his": [s[2] for s in spans], "tenant": tenant}
        with self._connections.connection() as conn:
            found = conn.cursor(binary=True).execute(query, values).fetchall()
        return [(int(r[0]) - 1, make_row(r[1:])) for r in found]

    def _b_first_user_rows(self, tenant: str, spans: Sequence[Span]) -> list[Row | None]:
        out: list[Row | None] = [None] * len(spans)
        for i, row in self._page_rows(self._q.first_user, tenant, spans):
            out[i] = row
        return out

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        return self._fetch_sessions(self._q.children, (tenant, session_id))

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        return self._fetch_sessions(self._q.tree, (tenant, root_id))

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        self._execute_only(self._q.delete_session,
                           (tenant, session_id) * self._q.delete_session_keys)

    def _execute_only(self, query: str, params: Sequence[Any]) -> None:
        with self._connections.connection() as conn:
            conn.execute(query, params)

    # ---------------------------------------------------------------- messages

    def _b_append(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                  ids: Sequence[str] = ()) -> T:
        # The cheapest way that can answer: after this store's own append to the session,
        # one round trip planned on its copy (``_append_as_written``); otherwise, or when
        # that copy is stale, two (``_append_optimistic``); the row lock
        # (``_append_locked``) for attachments, and for a while after a lost race.
        key = (tenant, session_id)
        raced = self._raced.get(key)
        if raced is not None and time.monotonic() - raced < _RACED_SECONDS:
            return self._append_locked(tenant, session_id, fn)  # writers queue up here
        cached = self._written.pop(key, None)
        if cached is not None:
            result = self._append_as_written(tenant, session_id, fn, ids, cached)
            if result is not _MISSED:
                return result  # type: ignore[return-value]
        return self._append_optimistic(tenant, session_id, fn, ids)

    def _append_optimistic(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                           ids: Sequence[str]) -> T:
        """Read the session and the batch's stored ids in one round trip, plan, and write
        everything in one statement that only takes effect if the session is still at
        the version read (two round trips, no BEGIN/COMMIT). When another writer moved
        the session meanwhile, or attachments are written, the append queues on the
        session's row lock instead."""
        key = (tenant, session_id)
        for _ in range(_OPTIMISTIC_TRIES):
            try:
                with self._connections.connection() as conn:
                    with conn.pipeline():
                        session_cursor = conn.execute(self._q.get_session,
                                                      (tenant, session_id))
                        ids_cursor = conn.execute(self._q.existing,
                                                  (list(ids), tenant, session_id))
                    found = sessions_of(session_cursor)
                    tx = _OptimisticTxn(self, conn, tenant, session_id,
                                        found[0] if found else None, ids,
                                        {i: v for i, v in ids_cursor})
                    result = fn(tx)
                    if tx.planned is None:  # nothing to write (a retry, or an error raised)
                        return result
                    assert tx.statement is not None
                    if run_prepared(conn, tx.statement, tx.planned):
                        self._remember(key, tx.updated)
                        return result
            except _Planned:  # attachments: not a race, no mark
                return self._append_locked(tenant, session_id, fn)
        # lost the race: other writers are busy on this session, queue on its row lock
        # (for a while, where a plan would mostly be made in vain)
        keep_bounded(self._raced, key, time.monotonic(), _WRITTEN_SESSIONS)
        return self._append_locked(tenant, session_id, fn)

    def _append_as_written(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                           ids: Sequence[str], cached: Session) -> T | object:
        """One round trip: plan on the session as this process last wrote it, taking
        none of the batch's ids to be stored, and write if the session is still at
        that version and creation time. ``_MISSED`` when that cannot be known here:
        another writer moved the session, the append is a retry of a stored one (its
        ids are taken), or the plan raised (it may have read the stale copy).

        Worth its code (``python -m bench.pg_paths``, paths interleaved, a 2-CPU VM):
        one writer, one ShareGPT message per call, 546 us per append against 791 us
        planned the optimistic way (-31%); 8 threads on sessions of their own, 3,120
        messages/s against 1,855 (+68%). With both CPUs busy elsewhere the single
        writer waits for a CPU more than for PostgreSQL (-1% to -14%), 8 threads still
        gain 28-34%. ``test_postgres`` checks it against the optimistic path: the same
        random operations give the same answers and rows."""
        if cached.parent_id is not None:  # a fork checks its ancestors' ids: the long way
            return _MISSED
        conn = self._connections.take()  # (not a context manager: fewer instructions)
        try:
            tx = _OptimisticTxn(self, conn, tenant, session_id, cached, ids, {})
            try:
                result = fn(tx)
            except (ChatHistoryError, _Planned):
                return _MISSED
            if tx.statement is None or tx.planned is None:
                return _MISSED
            try:
                if not run_prepared(conn, tx.statement, tx.planned):
                    return _MISSED
            except pg_errors.UniqueViolation:
                return _MISSED
        finally:
            self._connections.give(conn)
        self._remember((tenant, session_id), tx.updated)
        return result

    def _remember(self, key: tuple[str, str], session: Session | None) -> None:
        """Keep the session as this append wrote it, for the next append's plan."""
        if session is None:
            return
        keep_bounded(self._written, key, session, _WRITTEN_SESSIONS)

    def _append_locked(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T]) -> T:
        for attempt in range(_RETRIES):
            try:
                # pipeline mode: BEGIN travels with the lock, COMMIT with the writes
                with self._connections.connection() as conn, conn.pipeline(), conn.transaction():
                    found = sessions_of(conn.execute(self._q.lock_session, (tenant, session_id)))
                    return fn(_Txn(self, conn, tenant, session_id, found[0] if found else None))
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                if attempt == _RETRIES - 1:
                    raise
                time.sleep(0.005 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        if lo >= hi:
            return []
        return self._rows(self._q.rows, (tenant, session_id, lo, hi))

    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        found = self._execute(self._q.seq_at_cum,
                              {"tenant": tenant, "session_id": session_id, "cum": cum})
        return int(found[0][0]) if found else None

    def _b_window_probe(self, tenant: str, session_id: str, budget: int
                        ) -> tuple[Session | None, list[Row]]:
        params = {"tenant": tenant, "session_id": session_id, "budget": budget}
        with self._connections.connection() as conn:
            found = conn.cursor(binary=True).execute(self._q.window_probe, params).fetchall()
        if not found:
            return None, []
        session = SESSION_DECODER.decode(found[0][0])
        return session, [make_row(r[1:]) for r in found if r[1] is not None]

    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        return self._rows(self._q.kept_rows, (tenant, session_id, hi))

    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        found = self._rows(self._q.row_by_id, (tenant, session_id, message_id))
        return found[0] if found else None

    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        if not call_ids:
            return {}
        found = self._execute(self._q.find_calls, (list(call_ids), tenant, session_id, hi))
        return {c: seq for c, seq in found}

    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        with self._connections.connection() as conn, conn.transaction():
            if seqs:  # whole groups: a few runs of positions, each an index range
                with conn.cursor() as cursor:
                    cursor.executemany(self._q.set_status, [(status, tenant, session_id, lo, hi)
                                                            for lo, hi in position_runs(seqs)])
            if overrides:
                conn.execute(self._q.set_overrides,
                             (tenant, session_id, list(overrides), status))

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        return {seq: status for seq, status in self._execute(self._q.overrides,
                                                             (tenant, session_id))}

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        key = (tenant, session_id)
        _, version, expires_at, updated, payload = session_params(session)
        with self._connections.connection() as conn, conn.transaction():
            found = sessions_of(conn.execute(self._q.lock_session, key))
            if not found or found[0].version != expected_version:
                return False
            q = self._q
            if seq == 0:  # everything of the session but the session itself
                with conn.pipeline():
                    for query in q.clear_all:
                        conn.execute(query, key)
                    conn.execute(q.save_session, (version, expires_at, updated, payload, *key))
                return True
            gone = [mid for (mid,) in conn.execute(q.truncate_rows, (*key, seq))]
            with conn.pipeline(), conn.cursor() as cursor:
                if gone:
                    cursor.executemany(q.truncate_id, [(*key, mid) for mid in gone])
                if restore:
                    cursor.execute(q.restore_cuts, (*key, list(restore)))
                cursor.execute(q.truncate_kept, (*key, seq))
                cursor.execute(q.truncate_calls, (*key, seq))
                cursor.execute(q.save_session, (version, expires_at, updated, payload, *key))
            return True

    @contextmanager
    def _b_held(self, tenant: str, session_id: str) -> Iterator[None]:
        # the session's row lock, in a transaction whose connection serves this thread's
        # statements meanwhile (appends queue on the lock; other sessions are not held)
        with self._connections.connection() as conn, conn.transaction():
            conn.execute(self._q.lock_session, (tenant, session_id))
            with self._connections.routed(conn):
                yield

    def _b_rewrite_from(self, tenant: str, session_id: str, seq: int, rows: Sequence[Row],
                        calls: dict[str, int], session: Session, expected_version: int
                        ) -> bool:
        key = (tenant, session_id)
        _, version, expires_at, updated, payload = session_params(session)
        q = self._q
        with self._connections.connection() as conn, conn.transaction():
            found = sessions_of(conn.execute(q.lock_session, key))
            if not found or found[0].version != expected_version:
                return False
            gone = [mid for (mid,) in conn.execute(q.truncate_rows, (*key, seq))]
            with conn.pipeline(), conn.cursor() as cursor:
                if gone:
                    cursor.executemany(q.truncate_id, [(*key, mid) for mid in gone])
                cursor.execute(q.truncate_kept, (*key, seq))
                cursor.execute(q.truncate_calls, (*key, seq))
                if rows or calls:
                    cursor.execute(
                        q.insert_batch_for(any(r.role in KEPT_ROLES for r in rows), bool(calls)),
                        {"tenant": tenant, "session_id": session_id,
                         "batch": batch_json(rows, calls,
                                             _words(rows, self.search_writes_words))})
                cursor.execute(q.save_session, (version, expires_at, updated, payload, *key))
            return True

    # ---------------------------------------------------------------- assets, retention

    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        found = self._execute(self._q.get_asset, (tenant, sha256))
        return bytes(found[0][0]) if found else None

    def _b_gc_assets(self, tenant: str) -> int:
        # lock the unreferenced assets, then delete those still unreferenced in a
        # fresh snapshot: an append that referenced one meanwhile has committed
        with self._connections.connection() as conn, conn.transaction():
            unused = [sha for (sha,) in conn.execute(self._q.lock_unused, (tenant,))]
            if not unused:
                return 0
            return conn.execute(self._q.delete_unused, (tenant, unused)).rowcount

    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        return [(tenant, sid) for tenant, sid in self._execute(self._q.expired, (now,))]

    def _b_clock(self) -> datetime:
        """PostgreSQL's ``now()``: every process judges TTLs by the server's clock."""
        stamp: datetime = self._execute("SELECT now()", ())[0][0]
        return stamp.astimezone(UTC)


def _config_of(conn: psycopg.Connection[Any], schema: str, asked: str | None) -> str:
    """The search configuration a store uses: ``asked`` (which the server must have), or
    the one the schema's index has."""
    if asked is None:
        found = conn.execute(f"SELECT config FROM {quote_schema(schema)}.search_index"
                             ).fetchone()
        return str(found[0]) if found else SEARCH_CONFIG
    if conn.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", (asked,)).fetchone() is None:
        raise ValueError(f"search_config: PostgreSQL has no text search configuration {asked!r}")
    return asked
