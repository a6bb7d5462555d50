"""SQLiteStore: one file, the standard library's ``sqlite3`` (``sqlite:///path.db``).

Durability: the database runs in WAL mode with ``synchronous=NORMAL`` (the
default). A commit is written to the WAL file before ``append`` returns, so
every acknowledged write survives a crash of the *process*; a power loss or an
OS crash may lose the last transactions (the file stays consistent). Pass
``synchronous="FULL"`` to fsync the WAL on every commit and survive power loss
as well, at the price of one fsync per write.

Concurrency: a store object keeps one connection behind a lock that its
threads share. (Measured with 16 threads: as fast as a connection per thread
for appends, and 10-15% faster for a mix of windows and appends, because the
work is mostly Python under the GIL and a lock handoff is cheaper than
SQLite's sleeping busy handler.) Every write transaction is ``BEGIN
IMMEDIATE``, so writers in other processes on the same file queue on SQLite's
lock for up to ``timeout`` seconds instead of failing half-way, and readers in
other processes are never blocked (WAL). The connection is not carried across
``fork()``: open the store in the child.

Layout: a session is its whole ``Session`` as JSON beside the columns that are
searched (created_at, updated_at, user, parent_id, root_id, expires_at). Messages
are found by their words through an FTS5 index (``sqlite_search.py``; ``search=off``
turns it off, and a search then scans). Messages are keyed by ``(tenant, session_id, seq)``;
the running token total grows with ``seq``, so the same key finds "the newest
messages within N tokens", and ``tail`` and ``window`` are primary-key range
reads that never scan a session.
Schema changes are named migrations (``sqlite_schema.py``), each applied in one
transaction together with its record in the ``migrations`` table.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from os import PathLike, fspath
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote

import msgspec

from ..errors import Conflict
from ..tokens import TokenCounter
from .backend import AppendTxn, Span, keep_bounded, recent_key
from .base import BaseStore
from .model import SESSION_DECODER, Row, Session, make_row, utcnow
from .search import search_option
from .sqlite_schema import MIGRATIONS
from .sqlite_search import (
    AUTO_BUILD_ROWS,
    WRITTEN_SESSIONS,
    IndexedSearch,
    Known,
    Pended,
    note_appended,
    register_functions,
    valid_known,
)

__all__ = ["MIGRATIONS", "SQLiteStore"]

T = TypeVar("T")

log = logging.getLogger("chathistory.stores")

_SYNCHRONOUS = ("NORMAL", "FULL", "EXTRA")
SCAN_LIMIT = 20_000
"""Rows a search reads at most when it scans (``search=off``, or an index still being
built): ``search_scan_limit``."""

# ---------------------------------------------------------------- statements

_ROW = "seq, id, role, data, tokens, cum_before, cut_ok, orphan, status, version"
_SELECT_ROWS = f"SELECT {_ROW} FROM messages WHERE tenant = ? AND session_id = ?"
ROWS = _SELECT_ROWS + " AND seq >= ? AND seq < ? ORDER BY seq"
# pinned: without statistics the planner may prefer a range of the primary key
KEPT = (f"SELECT {_ROW} FROM messages INDEXED BY messages_kept WHERE tenant = ? "
        "AND session_id = ? AND seq < ? AND role IN ('system', 'developer') ORDER BY seq")
BY_ID = _SELECT_ROWS + " AND id = ?"
# "Smallest seq with cum_before >= cum" is one past the newest row below cum:
# scan back from the newest row (a window reads those rows anyway) at most
# _SCAN rows; past that, bisect the primary key, O(log n).
_SCAN = 256
SEQ_AT_CUM = (
    "WITH top(seq) AS (SELECT seq FROM messages WHERE tenant = ?1 AND session_id = ?2 "
    "ORDER BY seq DESC LIMIT 1) "
    "SELECT top.seq, (SELECT m.seq FROM messages AS m WHERE m.tenant = ?1 "
    "AND m.session_id = ?2 AND m.seq >= top.seq - ?4 AND m.cum_before < ?3 "
    "ORDER BY m.seq DESC LIMIT 1), (SELECT seq FROM messages WHERE tenant = ?1 "
    "AND session_id = ?2 ORDER BY seq LIMIT 1) FROM top")
# Lower bound of cum_before >= ?5 in seq [?3, ?4] (?4 known to qualify). Rows
# alternate: probe the middle (c), then halve. A correlated subquery, not a join:
# with statistics the planner would build a Bloom filter over the whole table.
BISECT_CUM = (
    "WITH RECURSIVE b(lo, hi, c) AS (SELECT ?3, ?4, NULL UNION ALL SELECT "
    "CASE WHEN c IS NULL OR c >= ?5 THEN lo ELSE (lo + hi) / 2 + 1 END, "
    "CASE WHEN c IS NULL THEN hi WHEN c >= ?5 THEN (lo + hi) / 2 ELSE hi END, "
    "CASE WHEN c IS NULL THEN ifnull((SELECT cum_before FROM messages WHERE tenant = ?1 "
    "AND session_id = ?2 AND seq = (lo + hi) / 2), ?5) END "
    "FROM b WHERE lo < hi) SELECT lo FROM b WHERE lo = hi")
# CROSS JOIN keeps the given ids as the outer loop: one key lookup per id
FIND_CALLS = ("SELECT c.call_id, c.seq FROM json_each(?) AS j CROSS JOIN calls AS c "
              "WHERE c.tenant = ? AND c.session_id = ? AND c.call_id = j.value AND c.seq < ?")
_EXISTING_ONE = "SELECT id, version FROM messages WHERE tenant = ? AND session_id = ? AND id = ?"
EXISTING = ("SELECT m.id, m.version FROM json_each(?) AS j CROSS JOIN messages AS m "
            "WHERE m.tenant = ? AND m.session_id = ? AND m.id = j.value")
_CALLS = ("SELECT c.call_id, c.seq FROM json_each(?) AS j CROSS JOIN calls AS c "
          "WHERE c.tenant = ? AND c.session_id = ? AND c.call_id = j.value")
_INSERT_MESSAGE = ("INSERT INTO messages (tenant, session_id, " + _ROW + ") "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_CALL = "INSERT OR REPLACE INTO calls (tenant, session_id, call_id, seq) VALUES (?, ?, ?, ?)"
_CLEAR_CUT = ("UPDATE messages SET cut_ok = 0 WHERE tenant = ? AND session_id = ? "
              "AND seq >= ? AND seq < ?")
_GET_SESSION = "SELECT payload FROM sessions WHERE tenant = ? AND id = ?"
_BUMP_SESSION = ("UPDATE sessions SET version = ?, updated_at = ?, payload = ? "
                 "WHERE tenant = ? AND id = ?")
_INSERT_SESSION = ("INSERT INTO sessions (version, created_at, user, parent_id, root_id, "
                   "expires_at, updated_at, payload, tenant, id) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
_SAVE_SESSION = ("UPDATE sessions SET version = ?, created_at = ?, user = ?, parent_id = ?, "
                 "root_id = ?, expires_at = ?, updated_at = ?, payload = ? WHERE tenant = ? "
                 "AND id = ? AND version = ?")
# a page's reads, one statement each: spans as JSON [[session_id, lo, hi], ...]
_M_ROW = ", ".join(f"m.{column}" for column in _ROW.split(", "))
_PAGE = (f"SELECT j.key, {_M_ROW} FROM json_each(?1) AS j CROSS JOIN messages AS m "
         "WHERE m.tenant = ?2 AND m.session_id = json_extract(j.value, '$[0]') AND m.seq ")
_IN_SPAN = ("SELECT seq FROM messages WHERE tenant = ?2 AND session_id = "
            "json_extract(j.value, '$[0]') AND seq >= json_extract(j.value, '$[1]') "
            "AND seq < json_extract(j.value, '$[2]')")
FIRST_USER = _PAGE + f"= ({_IN_SPAN} AND role = 'user' ORDER BY seq LIMIT 1)"
ROWS_AT = (f"SELECT {_M_ROW} FROM json_each(?) AS j CROSS JOIN messages AS m "
           "WHERE m.tenant = ? AND m.session_id = ? AND m.seq = j.value ORDER BY m.seq")
# the tenant's sessions (an index range), less the expired ones (the expiry index)
_COUNT = ("SELECT (SELECT count(*) FROM sessions WHERE tenant = ?1{user}) - (SELECT count(*) "
          "FROM sessions INDEXED BY sessions_by_expiry WHERE expires_at IS NOT NULL AND "
          "expires_at <= ?2 AND tenant = ?1{user})")
COUNT = {False: _COUNT.format(user=""), True: _COUNT.format(user=" AND user = ?3")}

_encode = msgspec.json.Encoder().encode


def _stamp(value: datetime | None) -> str | None:
    """A fixed-width UTC timestamp, so that text order is time order."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _session_params(s: Session) -> tuple[Any, ...]:
    return (s.version, s.created_at.isoformat(), s.user, s.parent_id, s.root_id or s.id,
            _stamp(s.expires_at), recent_key(s), _encode(s).decode(), s.tenant, s.id)


def _rows(cursor: Iterable[Sequence[Any]]) -> list[Row]:
    return [make_row((seq, mid, role, data, tokens, cum, cut == 1, orphan == 1, status, version))
            for seq, mid, role, data, tokens, cum, cut, orphan, status, version in cursor]


class _Txn(AppendTxn):
    """``AppendTxn`` over a connection inside ``BEGIN IMMEDIATE``. ``search``: whether
    the store keeps the search index; ``pending``: what ``write`` left to index."""

    __slots__ = ("conn", "known", "pending", "search", "session", "session_id", "tenant")

    def __init__(self, conn: sqlite3.Connection, tenant: str, session_id: str,
                 search: bool, known: Known | None) -> None:
        self.conn, self.tenant, self.session_id = conn, tenant, session_id
        self.search = search
        self.pending: Pended | None = None
        # in: what the last append left (if still valid); out: what this one does
        self.known = known = valid_known(conn, known)
        written = None if known is None else known.written.get((tenant, session_id))
        if written is not None:  # as this store's last append of it wrote it
            self.session: Session | None = written
            return
        found = conn.execute(_GET_SESSION, (tenant, session_id)).fetchone()
        self.session = None if found is None else SESSION_DECODER.decode(found[0])

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        if len(ids) == 1:
            cursor = self.conn.execute(_EXISTING_ONE, (self.tenant, self.session_id, ids[0]))
        else:
            cursor = self.conn.execute(EXISTING, (_encode(list(ids)), self.tenant,
                                                  self.session_id))
        return dict(cursor.fetchall())

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(_CALLS, (_encode(list(call_ids)), self.tenant,
                                            self.session_id))
        return dict(cursor.fetchall())

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        conn, key = self.conn, (self.tenant, self.session_id)
        if clear is not None and clear[0] < clear[1]:
            conn.execute(_CLEAR_CUT, (*key, *clear))
        if len(rows) == 1:
            conn.execute(_INSERT_MESSAGE, (*key, *rows[0]))
        else:
            conn.executemany(_INSERT_MESSAGE, [(*key, *r) for r in rows])
        if calls:
            conn.executemany(_INSERT_CALL, [(*key, c, seq) for c, seq in calls.items()])
        self.pending, self.known = note_appended(conn, self.search, *key, rows, self.known)
        if self.known is not None:  # the next append of this session plans on it
            self.known.written.pop(key, None)  # kept newest
            keep_bounded(self.known.written, key, session, WRITTEN_SESSIONS)
        for sha, (data, mime_type) in assets.items():
            conn.execute("INSERT OR IGNORE INTO assets (tenant, sha256, mime_type, data) "
                         "VALUES (?, ?, ?, ?)", (self.tenant, sha, mime_type, data))
            conn.execute("INSERT OR IGNORE INTO asset_refs (tenant, sha256, session_id) "
                         "VALUES (?, ?, ?)", (self.tenant, sha, self.session_id))
        conn.execute(_BUMP_SESSION, (session.version, recent_key(session),
                                     _encode(session).decode(), *key))


class SQLiteStore(IndexedSearch, BaseStore):
    """A store in one SQLite file (``sqlite:///path.db``), or ``:memory:``.

    ``synchronous`` is ``"NORMAL"`` (survives a process crash; the default) or
    ``"FULL"`` / ``"EXTRA"`` (survives power loss too). ``timeout`` is how many
    seconds a write waits for another process holding the file's write lock.
    ``with store.atomic():`` makes several writes (appends included) one transaction.
    ``search=False`` (``?search=off``): no search index is kept (nor used: a search
    scans, at most ``search_scan_limit`` rows); its first write marks an existing index
    stale, to be rebuilt by a store that keeps it (``sqlite_search.py``).
    """

    search_scan_limit: int | None = SCAN_LIMIT
    row_columns = _M_ROW

    def __init__(self, path: str | PathLike[str] = "chathistory.db",
                 counter: str | TokenCounter | None = None, *, timeout: float = 30.0,
                 synchronous: str = "NORMAL", search: bool = True) -> None:
        super().__init__(counter)
        synchronous = synchronous.upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}")
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        self.path = fspath(path)
        self.timeout = float(timeout)
        self.synchronous = synchronous
        self.search_indexed = bool(search)
        self._lock = threading.RLock()
        self._known: Known | None = None
        self._known_before: Known | None = None
        self._known_after: Known | None = None
        # Writes go through one connection behind one lock (a transaction at a time);
        # reads outside a transaction use a connection of their own thread, so a long
        # read (a search over many sessions) never holds up another thread's read or
        # write (WAL: readers see the last commit and never block the writer).
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._shared_only = self.path in ("", ":memory:") or self.path.startswith("file:")
        self._conn = self._connect()
        self._init_indexer()
        self._migrate()
        self._open_index()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        """``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``sqlite:///:memory:``;
        ``?synchronous=FULL&timeout=5&search=off`` in the URL or as keyword options."""
        scheme, sep, rest = url.partition("://")
        if scheme.lower() != "sqlite" or not sep or not rest.startswith("/") or rest == "/":
            raise ValueError(f"not a SQLite URL: {url!r} (use sqlite:///path.db or "
                             "sqlite:///:memory:)")
        location, _, query = rest[1:].partition("?")
        for name, value in parse_qsl(query, strict_parsing=bool(query)):
            if name == "timeout":
                options.setdefault("timeout", float(value))
            elif name == "synchronous":
                options.setdefault("synchronous", value)
            elif name == "search":
                options.setdefault("search", search_option(value))
            else:
                raise ValueError(f"unknown SQLite URL option {name!r}")
        return cls(unquote(location), **options)

    # ---------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; we say BEGIN and COMMIT
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                               check_same_thread=False, cached_statements=256)
        conn.execute("PRAGMA journal_mode=WAL")  # persistent in the file
        # synchronous is one of _SYNCHRONOUS; busy_timeout is a number
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys=ON")
        # SQLite's own checkpoint interval (1,000 pages, ~4 MB of WAL), said out loud: a
        # WAL that stays small is rewritten in place, and fdatasync after an overwrite
        # need not flush the file's size as well. At 10,000 pages the WAL kept growing
        # and a synchronous=FULL append took 380-570 us against 250-285 us (issue 18,
        # 2,000 ShareGPT appends on this VM's disk); at NORMAL the two were even.
        conn.execute("PRAGMA wal_autocheckpoint=1000")
        register_functions(conn)
        return conn

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``: take the write lock now, not at the first write, so
        that two writers never deadlock; wait for other processes up to ``timeout``
        (busy_timeout waits; this loop covers the SQLITE_BUSY it does not)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.002)

    @contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, other threads kept out until it ends; nested
        calls are savepoints, so an inner failure rolls back only its own part."""
        with self._lock:
            depth = getattr(self._local, "atomic", 0)
            self._local.atomic = depth + 1
            try:
                with self._atomic() as conn:
                    yield conn
            finally:
                self._local.atomic = depth

    @contextmanager
    def _atomic(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            if conn.in_transaction:
                conn.execute("SAVEPOINT nested")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK TO nested")
                    conn.execute("RELEASE nested")
                    raise
                conn.execute("RELEASE nested")
                return
            # what the last transaction, when it was an append, left for the next one
            # (note_appended): any other transaction drops it
            self._known_before, self._known = self._known, None
            self._known_after = None
            self._begin(conn)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._known, self._known_after = self._known_after, None

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read connection; None inside a transaction of this thread
        (which reads its own writes) or for an in-memory database (one connection)."""
        depth: int = getattr(self._local, "atomic", 0)
        if self._shared_only or depth:
            return None
        conn: sqlite3.Connection | None = getattr(self._local, "reader", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False, cached_statements=256)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.execute("PRAGMA query_only=ON")
            register_functions(conn)
            self._local.reader = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        reader = self._reader()
        if reader is not None:
            return reader.execute(sql, params).fetchall()
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _read_with(self, read: Callable[[sqlite3.Connection], T]) -> T:
        reader = self._reader()
        if reader is not None:
            return read(reader)
        with self._lock:
            return read(self._conn)

    def _in_transaction(self) -> bool:
        return bool(getattr(self._local, "atomic", 0))

    def _fetch_rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        reader = self._reader()
        if reader is not None:
            return _rows(reader.execute(sql, params))
        with self._lock:
            return _rows(self._conn.execute(sql, params))

    def _migrate(self) -> None:
        with self._lock:
            conn = self._conn
            conn.execute("CREATE TABLE IF NOT EXISTS migrations "
                         "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {name for (name,) in conn.execute("SELECT name FROM migrations")}
            for name, statements in MIGRATIONS:
                if name in done:
                    continue
                with self.atomic():
                    # another process may have applied it while we waited
                    if conn.execute("SELECT 1 FROM migrations WHERE name = ?",
                                    (name,)).fetchone():
                        continue
                    for statement in statements:
                        if callable(statement):
                            statement(conn)
                        else:
                            conn.execute(statement)
                    conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                                 (name, _stamp(utcnow())))

    def _open_index(self) -> None:
        """A store that keeps the search index builds it now when few rows are left to
        index (``AUTO_BUILD_ROWS``), else says so once: searches scan until
        ``build_search_index`` (``chathistory migrate``) has built it."""
        if not self.search_indexed:
            return
        state = self.search_index_state()
        if state.usable:
            return
        if self._rows_to_index(state, AUTO_BUILD_ROWS + 1) <= AUTO_BUILD_ROWS:
            self.build_search_index()
        else:
            log.warning("%s: the search index is %s, with more than %d rows to index; "
                        "searches scan (at most %s rows) until `chathistory migrate` or "
                        "build_search_index() builds it", self.path, state.state,
                        AUTO_BUILD_ROWS, self.search_scan_limit)

    def close(self) -> None:
        """Close the connection (the last one to close checkpoints the WAL)."""
        self._stop_indexer()
        with self._lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
            self._conn.close()

    # ---------------------------------------------------------------- sessions

    def _b_insert_session(self, session: Session) -> None:
        with self.atomic() as conn:
            if conn.execute(_INSERT_SESSION, _session_params(session)).rowcount != 1:
                raise Conflict(f"session {session.id!r} exists")

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        found = self._fetch(_GET_SESSION, (tenant, session_id))
        return SESSION_DECODER.decode(found[0][0]) if found else None

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        with self.atomic() as conn:
            params = (*_session_params(session), expected_version)
            return conn.execute(_SAVE_SESSION, params).rowcount == 1

    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        # built from fixed fragments only; every value is a parameter
        sql = "SELECT payload FROM sessions WHERE tenant = ?"
        params: list[Any] = [tenant]
        if user is not None:
            sql += " AND user = ?"
            params.append(user)
        if after is not None:
            sql += " AND (updated_at, id) < (?, ?)" if recent else " AND (created_at, id) > (?, ?)"
            params.extend(after)
        sql += (" ORDER BY updated_at DESC, id DESC LIMIT ?" if recent
                else " ORDER BY created_at, id LIMIT ?")
        params.append(limit)
        return [SESSION_DECODER.decode(p) for (p,) in self._fetch(sql, params)]

    def _b_count_sessions(self, tenant: str, user: str | None, now: datetime) -> int:
        params = (tenant, _stamp(now)) if user is None else (tenant, _stamp(now), user)
        return int(self._fetch(COUNT[user is not None], params)[0][0])

    def _b_first_user_rows(self, tenant: str, spans: Sequence[Span]) -> list[Row | None]:
        out: list[Row | None] = [None] * len(spans)
        for key, *row in self._fetch(FIRST_USER, (_encode(spans), tenant)):
            out[key] = _rows([row])[0]
        return out

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        found = self._fetch("SELECT payload FROM sessions INDEXED BY sessions_by_parent "
                            "WHERE tenant = ? AND parent_id = ?",
                            (tenant, session_id))
        return [SESSION_DECODER.decode(p) for (p,) in found]

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        found = self._fetch("SELECT payload FROM sessions INDEXED BY sessions_by_root "
                            "WHERE tenant = ? AND root_id = ?", (tenant, root_id))
        return [SESSION_DECODER.decode(p) for (p,) in found]

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        # messages, calls, status overrides and asset references go by ON DELETE CASCADE
        with self.atomic() as conn:
            self._unindex(conn, tenant, session_id, 0, forget=True)
            conn.execute("DELETE FROM sessions WHERE tenant = ? AND id = ?", (tenant, session_id))

    # ---------------------------------------------------------------- messages

    def _b_append(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                  ids: Sequence[str] = ()) -> T:
        # BEGIN IMMEDIATE holds the file's write lock for the whole function, so
        # there is no write race to retry: fn runs exactly once.
        with self.atomic() as conn:
            alone = self._local.atomic == 1  # this append's own transaction
            txn = _Txn(conn, tenant, session_id, self.search_indexed,
                       self._known_before if alone else None)
            result = fn(txn)
            pended = txn.pending
            epoch = 0 if pended is None else self._observe(pended.data_version)
            if alone:
                self._known_after = txn.known  # kept if the transaction commits
        if pended is None:
            return result
        if self._in_transaction():  # counted now, acted on by the store's next append
            self._count_left(len(pended.rows))
            return result
        self._hand_off(tenant, pended, epoch)
        try:  # committed: a failure here is the next search's to report
            self._after_append(self._count_left(len(pended.rows)))
        except sqlite3.Error:
            log.exception("%s: indexing the rows left for search failed; the next "
                          "search tries again", self.path)
        return result

    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        return self._fetch_rows(ROWS, (tenant, session_id, lo, hi))

    def _rows_at(self, tenant: str, session_id: str, seqs: Sequence[int]) -> list[Row]:
        return self._fetch_rows(ROWS_AT, (_encode(list(seqs)), tenant, session_id))

    def _keyed_rows(self, found: Iterable[Sequence[Any]], keys: int
                    ) -> list[tuple[Any, ...]]:
        return [(*one[:keys], _rows([one[keys:]])[0]) for one in found]

    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        found = self._fetch(SEQ_AT_CUM, (tenant, session_id, cum, _SCAN))
        if not found:
            return None
        top, below, first = found[0]
        if below is not None:
            return int(below) + 1 if below < top else None
        if top - _SCAN <= first:
            return int(first)  # every own row is at or above cum
        hit = self._fetch(BISECT_CUM, (tenant, session_id, first, top - _SCAN, cum))
        return int(hit[0][0])

    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        return self._fetch_rows(KEPT, (tenant, session_id, hi))

    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        rows = self._fetch_rows(BY_ID, (tenant, session_id, message_id))
        return rows[0] if rows else None

    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        if not call_ids:
            return {}
        return dict(self._fetch(FIND_CALLS, (_encode(list(call_ids)), tenant, session_id, hi)))

    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        with self.atomic() as conn:
            conn.executemany("UPDATE messages SET status = ? WHERE tenant = ? AND session_id = ? "
                             "AND seq = ?", [(status, tenant, session_id, s) for s in seqs])
            conn.executemany("INSERT OR REPLACE INTO status_overrides "
                             "(tenant, session_id, seq, status) VALUES (?, ?, ?, ?)",
                             [(tenant, session_id, s, status) for s in overrides])

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        return dict(self._fetch("SELECT seq, status FROM status_overrides "
                                "WHERE tenant = ? AND session_id = ?", (tenant, session_id)))

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        with self.atomic() as conn:
            params = (*_session_params(session), expected_version)
            if conn.execute(_SAVE_SESSION, params).rowcount != 1:
                return False
            key = (tenant, session_id)
            if restore:
                conn.executemany("UPDATE messages SET cut_ok = 1 WHERE tenant = ? AND "
                                 "session_id = ? AND seq = ?", [(*key, at) for at in restore])
            self._unindex(conn, tenant, session_id, seq, forget=False)
            conn.execute("DELETE FROM messages WHERE tenant = ? AND session_id = ? "
                         "AND seq >= ?", (*key, seq))
            conn.execute("DELETE FROM calls WHERE tenant = ? AND session_id = ? AND seq >= ?",
                         (*key, seq))
            if seq == 0:
                conn.execute("DELETE FROM status_overrides WHERE tenant = ? AND session_id = ?",
                             key)
                conn.execute("DELETE FROM asset_refs WHERE tenant = ? AND session_id = ?", key)
            return True

    @contextmanager
    def _b_held(self, tenant: str, session_id: str) -> Iterator[None]:
        with self.atomic():  # the file's write lock: other writers wait
            yield

    def _b_rewrite_from(self, tenant: str, session_id: str, seq: int, rows: Sequence[Row],
                        calls: dict[str, int], session: Session, expected_version: int
                        ) -> bool:
        pending = 0
        with self.atomic() as conn:
            params = (*_session_params(session), expected_version)
            if conn.execute(_SAVE_SESSION, params).rowcount != 1:
                return False
            key = (tenant, session_id)
            self._unindex(conn, tenant, session_id, seq, forget=False)
            conn.execute("DELETE FROM messages WHERE tenant = ? AND session_id = ? "
                         "AND seq >= ?", (*key, seq))
            conn.execute("DELETE FROM calls WHERE tenant = ? AND session_id = ? AND seq >= ?",
                         (*key, seq))
            conn.executemany(_INSERT_MESSAGE, [(*key, *r) for r in rows])
            conn.executemany(_INSERT_CALL, [(*key, c, at) for c, at in calls.items()])
            pended, _ = note_appended(conn, self.search_indexed, *key, rows)
            pending = 0 if pended is None else len(pended.rows)
        self._count_left(pending)  # read from the database when indexed (not handed off)
        return True

    # ---------------------------------------------------------------- assets, retention

    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        found = self._fetch("SELECT data FROM assets WHERE tenant = ? AND sha256 = ?",
                            (tenant, sha256))
        return bytes(found[0][0]) if found else None

    def _b_gc_assets(self, tenant: str) -> int:
        with self.atomic() as conn:
            return conn.execute(
                "DELETE FROM assets WHERE tenant = ? AND NOT EXISTS (SELECT 1 FROM asset_refs r "
                "WHERE r.tenant = assets.tenant AND r.sha256 = assets.sha256)", (tenant,)
            ).rowcount

    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        found = self._fetch("SELECT tenant, id FROM sessions WHERE expires_at <= ?",
                            (_stamp(now),))
        return [(tenant, sid) for tenant, sid in found]
