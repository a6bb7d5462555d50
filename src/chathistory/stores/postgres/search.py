"""PostgreSQL's search index: each message's words in a table of their own, a GIN
index over them, the store's indexer that writes them after the appends, and the
searches and the build that use them (the schema is ``schema.m006_search_words``).

What is stored. ``message_words`` holds a row's distinct words, space-separated, as the
engine's tokenizer cut them (``row_words``, from ``search.index_words``), keyed as the
row. The GIN index is over an expression of that column (``schema.search_vector``), not
over a stored ``tsvector``: measured on 100,000 ShareGPT messages, a ``tsvector`` with
positions took 1,069 bytes a row and a stripped one 629, the distinct words 423. No
positions are kept, so a phrase (``"a b"``) is found as its words, and the candidates'
own words are then checked in Python (as is a word longer than ``WORD_CHARS``, indexed
by its start). The score is the reference's damping by length without the count of
hits, which the index does not keep: ``1 / sqrt(1 + bytes of the distinct words)``.

When it is written. Not by the append: writing the words and their GIN entries in each
append's statement cost it 25-45% (80-157 us of the server's CPU and the words' cut in
this process, docs/stores.md), so the append's statement only marks its session,
``sessions.unindexed_from`` (its rows from there on are left to index; an append sets it
only where it is not set already), which ``sessions_unindexed`` lists. The store's
indexer thread (``_run_indexer``), woken once its appends have left ``FLUSH_AT`` rows, or
``IDLE_S`` after they left fewer, indexes the marked sessions a batch at a time: it reads
the rows from the mark on, cuts their words outside any transaction, then in one
transaction (``synchronous_commit`` off: the words can be rebuilt from the messages, and a
crash loses a batch's mark move with its words) inserts the words of the rows still
there, locks the session row (``FOR NO KEY UPDATE``: appends wait for that lock only
until the commit, not through the insert), checks that the mark has not moved and that
the rows are still those it read (a pop and new appends at the same positions may have
come between), and moves the mark. A search indexes its tenant's marked sessions first,
so it sees every acknowledged message; pop, clear, delete, erase and purge remove their
rows' words in their own transaction and keep the mark only below what they removed.

Scope. The expression adds two markers to each row's lexemes, ``!t`` + md5 of its
tenant and ``!s`` + md5 of its session (no word holds ``!``), and every search ANDs
its tenant's marker (and its sessions', when it has spans) to the query: the index
only yields the tenant's rows, and ``tenant = %(tenant)s`` filters them again. So a
search costs what its matches in its tenant cost, whatever other tenants hold.

Plans. The index scan sits in a subquery fenced with ``OFFSET 0`` whose only
condition is the index's, and the statement runs with sequential scans off: the
planner cannot walk the tenant's primary-key range computing the expression row by row
(10 us a row), which it may find cheaper without statistics or for a common word.

A tenant with more than ``AUTO_BUILD_ROWS`` rows left (a database just migrated) is
searched by the engine's bounded scan instead (results are never incomplete), until
``build_search_index`` has indexed them. ``search_index`` holds the index's
configuration and the version of the words its rows hold (``WORDS_VERSION``, the
tokenizer's); a store of another configuration or version scans until its
``build_search_index`` rebuilds the index (every row's words cut again for a new
version), and a store of another version indexes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from ..backend import Span
from ..indexer import IndexerThread
from ..model import Row, make_row
from ..search import WORDS_VERSION, Cursor, Query, indexed_words, row_matches
from .pool import Connections
from .queries import _ROW, NO_LIMIT
from .schema import (
    WORD_CHARS,
    check_config,
    create_search_index,
    quote_schema,
    search_index_name,
    search_vector,
)

__all__ = ["AUTO_BUILD_ROWS", "SCAN_LIMIT", "IndexedSearch", "row_words"]

log = logging.getLogger("chathistory.stores")

SCAN_LIMIT = 20_000
"""Rows a search reads at most when it scans (``search=off``, or a tenant with rows
the index lacks): ``search_scan_limit``."""
AUTO_BUILD_ROWS = 20_000
"""Opening a store that keeps the index indexes the marked rows at once when at most
this many are left; more are left to ``build_search_index`` (``chathistory migrate``). A
search indexes at most this many of its tenant's rows first; past that it scans."""
BATCH = 512
"""Rows the indexer writes in one transaction at most."""
FLUSH_AT = 512
"""Rows this store's appends left that wake its indexer thread. Batches this large cost
about half as much a row as batches of 32 (per batch: the session row's update, with its
indexes, a commit and three round trips)."""
IDLE_S = 1.0
"""Fewer rows left than ``FLUSH_AT`` are indexed once the store's appends have paused
this long (or by the next search of their tenant)."""
FLUSH_BYTES = 8 * 1024 * 1024
"""A batch's rows' data at most (at least one row): a backlog of large pastes is never
read whole."""
HANDOFF_BYTES = 8 * 1024 * 1024
"""Rows' data this store's appends hand to its indexer at most (it reads the others)."""
HANDOFF_ROW_BYTES = 256 * 1024
"""A row larger than this is not handed off (the indexer reads it)."""
WORDS_CHARS = 200_000
"""A row's words are cut after this many characters (at most 800 KB of UTF-8: a
``tsvector`` holds 1 MB of lexemes); no text but generated data has that many distinct
words, and a search misses those past the cut."""
SCORE = "1 / sqrt((1 + octet_length(words))::float8)"
"""The length of the row's distinct words damps its score (in float8, as the cursor
carries it back): their bytes, which the column's header holds, where counting them
(``length`` and ``replace``) took 250 of a common word's 295 ms at 100,000 messages."""
_ROW_OF_X = ", ".join(f"x.{column}" for column in _ROW.split(", "))
_SETTINGS = ("SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true), "
             "set_config('work_mem', '32MB', true)")


def row_words(data: bytes) -> str:
    """What ``messages.words`` holds for a stored message: the distinct words of
    ``search.indexed_words``, each cut to ``WORD_CHARS`` characters, in the order they
    first occur; past ``WORDS_CHARS``, those that occur first. (``array_to_tsvector``
    sorts them, in C. Distinct and sorted here, with a set, they took 19.7 against 14.5
    us a ShareGPT message in a loop; inside appends the two read the same.)"""
    found = dict.fromkeys(indexed_words(data))
    if max(map(len, found), default=0) > WORD_CHARS:
        found = dict.fromkeys(w[:WORD_CHARS] for w in found)
    text = " ".join(found)
    if len(text) > WORDS_CHARS:
        text = text[:max(0, text.rfind(" ", 0, WORDS_CHARS + 1))]
    return text


class _Plan(NamedTuple):
    """A query as the index takes it: ``text`` (``tsquery`` input: quoted lexemes
    joined by ``&``, ``:*`` on a prefix), and ``recheck``, the terms the index cannot
    decide (phrases, long words), which a candidate's words must match too."""

    text: str
    recheck: Query | None


def _lexeme(word: str) -> str:
    """A quoted ``tsquery`` lexeme: the word is data, whatever it holds."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def plan(query: Query) -> _Plan:
    parts: list[str] = []
    inexact = []
    for term in query.terms:
        last = len(term.words) - 1
        for k, word in enumerate(term.words):
            parts.append(_lexeme(word[:WORD_CHARS]) + (":*" if term.prefix and k == last
                                                        else ""))
        if last > 0 or any(len(w) > WORD_CHARS for w in term.words):
            inexact.append(term)
    return _Plan(" & ".join(parts), Query(query.text, tuple(inexact)) if inexact else None)


class Statements:
    """The search index's statements, rendered once for a schema and configuration."""

    def __init__(self, schema: str, config: str) -> None:
        s = quote_schema(schema)
        self.config = check_config(config)
        user_query = ("%(q)s::tsquery" if config == "simple"
                      else f"to_tsquery('{config}'::regconfig, %(q)s)")
        tenant_mark = "('''!t' || md5(%(tenant)s::text) || '''')::tsquery"
        session_marks = ("(SELECT string_agg('''!s' || md5(md5(%(tenant)s::text) || i) "
                         "|| '''', ' | ') FROM unnest(%(ids)s::text[]) AS i)::tsquery")
        # usable: the index is of this configuration and has every row of the tenant (no
        # session of the tenant is marked: ``sessions_unindexed``)
        ready = (f"WITH ready AS (SELECT coalesce((SELECT config = %(config)s AND "
                 f"words_version = %(words_version)s FROM {s}.search_index), false) AND "
                 f"NOT EXISTS (SELECT 1 FROM {s}.sessions WHERE unindexed_from IS NOT NULL "
                 "AND tenant = %(tenant)s) AS ok) ")
        # (a configuration with stop words can make a query of none: it finds nothing)
        some = "" if config == "simple" else f" AND numnode({user_query}) > 0"

        def candidates(columns: str, sessions: bool) -> str:
            marks = f"{tenant_mark} && {session_marks}" if sessions else tenant_mark
            return (f"(SELECT {columns} FROM {s}.message_words WHERE "
                    f"{search_vector(config)} @@ ({user_query} && {marks}) OFFSET 0) AS m "
                    f"WHERE r.ok{some} AND m.tenant = %(tenant)s")

        self.search: dict[tuple[bool, bool, bool], str] = {}
        for spans in (False, True):
            for user in (False, True):
                for after in (False, True):
                    where = candidates(f"tenant, session_id, seq, {SCORE} AS score", spans)
                    if spans:
                        where += (" AND EXISTS (SELECT 1 FROM unnest(%(ids)s::text[], "
                                  "%(los)s::bigint[], %(his)s::bigint[]) AS k(id, lo, hi) "
                                  "WHERE k.id = m.session_id AND m.seq >= k.lo "
                                  "AND m.seq < k.hi)")
                    if user:
                        where += (f" AND EXISTS (SELECT 1 FROM {s}.sessions AS o WHERE "
                                  "o.tenant = m.tenant AND o.session_id = m.session_id "
                                  "AND o.user_id = %(user)s)")
                    if after:
                        where += (" AND (m.score < %(score)s::float8 OR (m.score = "
                                  "%(score)s::float8 AND (m.session_id, m.seq) > "
                                  "(%(after_id)s::text, %(after_seq)s::bigint)))")
                    # the page's rows are read from messages once ranked (a probe each)
                    self.search[spans, user, after] = (
                        f"{ready}SELECT r.ok, h.* FROM ready AS r LEFT JOIN LATERAL ("
                        f"SELECT c.score, c.session_id, {_ROW_OF_X} FROM (SELECT m.score, "
                        f"m.session_id, m.seq FROM {where} "
                        "ORDER BY m.score DESC, m.session_id, m.seq LIMIT %(limit)s) AS c "
                        f"CROSS JOIN LATERAL (SELECT {_ROW} FROM {s}.messages WHERE "
                        "tenant = %(tenant)s AND session_id = c.session_id AND seq = c.seq "
                        "OFFSET 0) AS x ORDER BY c.score DESC, c.session_id, c.seq) AS h "
                        "ON true")
        self.sessions: dict[bool, str] = {}
        for given in (False, True):
            where = candidates("tenant, session_id", given)
            if given:
                where += " AND m.session_id = ANY(%(ids)s::text[])"
            self.sessions[given] = (
                f"{ready}SELECT r.ok, h.session_id FROM ready AS r LEFT JOIN LATERAL ("
                f"SELECT DISTINCT m.session_id FROM {where} LIMIT %(limit)s) AS h ON true")
        # the indexing: marked sessions (``sessions_unindexed``), in key order, of a
        # tenant or of all; their rows from the mark on; the words inserted only for rows
        # still there (a removal may have come since they were read)
        count = "(payload->>'message_count')::bigint"
        marked = (f"SELECT tenant, session_id FROM {s}.sessions WHERE unindexed_from IS NOT "
                  "NULL AND (tenant, session_id) > (%(after_tenant)s, %(after_id)s)")
        self.marked = {
            False: f"{marked} ORDER BY tenant, session_id LIMIT %(limit)s",
            True: f"{marked} AND tenant = %(tenant)s ORDER BY tenant, session_id "
                  "LIMIT %(limit)s"}
        self.mark = (f"SELECT unindexed_from, {count} FROM {s}.sessions "
                     "WHERE tenant = %(tenant)s AND session_id = %(session_id)s")
        self.lock_mark = f"{self.mark} FOR NO KEY UPDATE"
        # a session is indexed by one process at a time: the others' indexer threads pass
        # it by (a search's or a build's indexing waits for it)
        claim = ("hashtextextended(length(%s::text) || ':' || %s::text || ':' || %s::text, "
                 f"{_CLAIM_SEED})")
        self.claim = {False: f"SELECT pg_advisory_lock({claim})",
                      True: f"SELECT pg_try_advisory_lock({claim})"}
        self.release = f"SELECT pg_advisory_unlock({claim})"
        self.left = (f"SELECT coalesce(sum(greatest({count} - unindexed_from, 0)), 0) FROM "
                     f"(SELECT payload, unindexed_from FROM {s}.sessions WHERE "
                     "unindexed_from IS NOT NULL LIMIT %s) AS u")
        named = "tenant = %(tenant)s AND session_id = %(session_id)s"
        # a batch: the mark, the session's length, and its rows from the mark on, at most
        # ``batch`` of them and fewer once their data reaches ``cap`` (at least one; a row
        # past the cap is never read whole), with how many the batch's first cut held
        self.batch_rows = (
            "SELECT s.lo, s.n, w.seq, w.id, w.data, w.taken FROM (SELECT unindexed_from AS lo, "
            f"{count} AS n FROM {s}.sessions WHERE {named}) AS s LEFT JOIN LATERAL ("
            "SELECT seq, id, data, taken FROM (SELECT seq, id, data, count(*) OVER () AS taken, "
            "sum(octet_length(data)) OVER (ORDER BY seq) - octet_length(data) AS before FROM "
            f"(SELECT seq, id, data FROM {s}.messages WHERE {named} AND seq >= s.lo AND "
            "seq < s.n ORDER BY seq LIMIT %(batch)s) AS l) AS c WHERE c.before < %(cap)s "
            "ORDER BY seq) AS w ON true")
        there = (f"EXISTS (SELECT 1 FROM {s}.messages AS m WHERE m.tenant = %(tenant)s AND "
                 "m.session_id = %(session_id)s AND m.seq = k.seq AND m.id = k.id)")
        # (words of rows gone since they were read may be inserted: the mark's move then
        # fails, and the transaction is rolled back)
        self.insert_words = (
            f"INSERT INTO {s}.message_words (tenant, session_id, seq, words) "
            "SELECT %(tenant)s, %(session_id)s, k.seq, k.words FROM unnest(%(seqs)s::bigint[], "
            "%(words)s::text[]) AS k(seq, words) ON CONFLICT DO NOTHING")
        # under the session row's lock (``lock_mark``, an earlier statement: this one's
        # snapshot then holds every removal that committed before it): the mark moves only
        # if it is where the batch read it and the batch's rows are all still there
        self.still_there = ("SELECT count(*) FROM unnest(%(seqs)s::bigint[], %(ids)s::text[]) "
                            f"AS k(seq, id) WHERE {there}")
        self.move_mark = (f"UPDATE {s}.sessions SET unindexed_from = CASE WHEN %(hi)s < "
                          f"{count} THEN %(hi)s END WHERE {named} AND unindexed_from = %(lo)s "
                          f"AND ({self.still_there}) = %(rows)s RETURNING 1")
        # the build of a new version of the words: every row cut again
        self.forget_words = f"TRUNCATE {s}.message_words"
        self.mark_all = f"UPDATE {s}.sessions SET unindexed_from = 0 WHERE {count} > 0"
        self.state = f"SELECT config, words_version FROM {s}.search_index"
        self.set_config = f"UPDATE {s}.search_index SET config = %s, fill_after = NULL"
        self.set_version = (f"UPDATE {s}.search_index SET words_version = %s, "
                            "fill_after = NULL")
        self.search_indexes = (
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = "
            "'message_words' AND indexname LIKE 'message\\_words\\_search\\_%%'")
        self.empty = f"SELECT NOT EXISTS (SELECT 1 FROM {s}.messages)"


class SearchState(NamedTuple):
    """The index as stored: its configuration, the version of its rows' words, rows
    still to index (counted over at most ``AUTO_BUILD_ROWS + 1`` marked sessions), and
    whether it answers this store's searches."""

    config: str
    words_version: int
    unindexed: int
    usable: bool


class _Moved(Exception):
    """A batch's session changed since its rows were read: nothing of it is written."""


class IndexedSearch(IndexerThread):
    """``_b_search``, ``_b_search_sessions``, ``build_search_index`` and the indexer of
    ``PostgresStore`` over its pool. ``search_writes_words``: whether the store indexes
    (it keeps the index, and the index holds words of this release's tokenizer)."""

    schema: str
    partitions: int | None
    search_indexed: bool
    search_config: str
    search_writes_words: bool = False
    search_scan_limit: int | None = SCAN_LIMIT
    _connections: Connections
    _search: Statements

    def _init_indexer(self) -> None:
        self._init_indexer_thread()
        # rows of this store's appends, for the indexer: (tenant, session) -> seq -> (id,
        # data), at most HANDOFF_BYTES of them (the others are read from the database)
        self._handoff: dict[tuple[str, str], dict[int, tuple[str, bytes]]] = {}
        self._handoff_bytes = 0
        self._last_append = 0.0  # time.monotonic() of this store's last append
        self._indexer_idle = threading.Event()  # set while the thread is not in a pass
        self._indexer_idle.set()
        self._flush_lock = threading.Lock()  # one session indexed at a time
        self._pending_count = 0  # rows this store's appends left since the last pass

    def _search_params(self, tenant: str, text: str) -> dict[str, Any]:
        return {"tenant": tenant, "config": self.search_config, "q": text,
                "words_version": WORDS_VERSION}

    def _ask(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]] | None:
        """Rows of a search statement, or None when the index cannot answer (the
        statement's ``ok``): another configuration, or sessions of the tenant still
        marked. The tenant's marked sessions are indexed first, and again when an append
        marked one meanwhile: a search sees every acknowledged message. A tenant with more
        than ``AUTO_BUILD_ROWS`` rows left (after a migration, say) scans instead."""
        for _ in range(_ASKS):
            if self.search_writes_words and not self._catch_up(params["tenant"]):
                return None  # more than a search indexes: it scans
            with self._connections.connection() as conn, conn.pipeline(), _planned(conn):
                found = conn.cursor(binary=True).execute(query, params).fetchall()
            if found and found[0][0]:
                return [r[1:] for r in found if r[1] is not None]
            if not self.search_writes_words:
                return None
        return None

    def _catch_up(self, tenant: str) -> bool:
        """Index the tenant's marked sessions; False when ``AUTO_BUILD_ROWS`` rows were
        indexed and more may be left."""
        with self._connections.connection() as conn:
            return self._index_marked(conn, tenant=tenant, limit=AUTO_BUILD_ROWS) < (
                AUTO_BUILD_ROWS)

    def _b_search(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                  user: str | None, after: Cursor | None, limit: int
                  ) -> list[tuple[float, str, int, Row]] | None:
        if not self.search_indexed:
            return None
        if spans is not None and not spans:
            return []
        text, recheck = plan(query)
        params = self._search_params(tenant, text)
        if spans is not None:
            params.update(ids=[s[0] for s in spans], los=[s[1] for s in spans],
                          his=[s[2] for s in spans])
        if user is not None:
            params["user"] = user
        out: list[tuple[float, str, int, Row]] = []
        # pages of candidates until ``limit`` pass the recheck (each page ranks every
        # candidate again: a recheck takes larger pages)
        page = limit if recheck is None else max(limit, _RECHECK_PAGE)
        while True:
            if after is not None:
                params.update(score=after[0], after_id=after[1], after_seq=after[2])
            params["limit"] = page
            found = self._ask(self._search.search[spans is not None, user is not None,
                                                  after is not None], params)
            if found is None:
                return None
            for score, session_id, *columns in found:
                row = make_row(columns)
                after = (score, session_id, row.seq)
                if recheck is None or row_matches(recheck, row):
                    out.append((score, session_id, row.seq, row))
                if len(out) == limit:
                    return out
            if len(found) < page:
                return out

    def _b_search_sessions(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                           limit: int) -> set[str] | None:
        session_ids = None if spans is None else [sid for sid, _lo, _hi in spans]
        if not self.search_indexed:
            return None
        if session_ids is not None and not session_ids:
            return set()
        text, recheck = plan(query)
        if recheck is not None:  # phrases: the best rows of those sessions, checked
            whole = None if session_ids is None else [(i, 0, NO_LIMIT) for i in session_ids]
            found: set[str] = set()
            after: Cursor | None = None
            while len(found) < limit:
                hits = self._b_search(tenant, query, whole, None, after, 100)
                if hits is None:
                    return None
                found.update(sid for _score, sid, _seq, _row in hits)
                if len(hits) < 100:
                    break
                after = hits[-1][:3]
            return found
        params = {**self._search_params(tenant, text), "limit": limit}
        if session_ids is not None:
            params["ids"] = list(session_ids)
        got = self._ask(self._search.sessions[session_ids is not None], params)
        return None if got is None else {sid for (sid,) in got}

    # ---------------------------------------------------------------- the indexer

    def _after_append(self, tenant: str, session_id: str, rows: Sequence[Row]) -> None:
        """After an append's commit that wrote ``rows``: hand them to the indexer (up to
        ``HANDOFF_BYTES``) and wake its thread once ``FLUSH_AT`` are left (fewer wait for
        its next look, ``IDLE_S`` later)."""
        if not rows or not self.search_writes_words:
            return
        with self._indexer_lock:
            if not self._ensure_indexer(self._run_indexer, "chathistory-pg-search-index"):
                return
            self._last_append = time.monotonic()
            self._pending_count += len(rows)
            wake = self._pending_count >= FLUSH_AT
            handed = self._handoff.setdefault((tenant, session_id), {})
            for r in rows:
                size = len(r.data)
                if size <= HANDOFF_ROW_BYTES and self._handoff_bytes + size <= HANDOFF_BYTES:
                    handed[r.seq] = (r.id, r.data)
                    self._handoff_bytes += size
        if wake:
            self._indexer_wake.set()

    def _handed(self, key: tuple[str, str], lo: int, hi: int) -> list[tuple[int, str, bytes]]:
        """The handed-off rows of the session from ``lo`` on, while they follow each
        other, below ``hi``, and up to ``FLUSH_BYTES`` (at least one)."""
        out: list[tuple[int, str, bytes]] = []
        size = 0
        with self._indexer_lock:
            handed = self._handoff.get(key, {})
            for seq in range(lo, hi):
                found = handed.get(seq)
                if found is None or (out and size + len(found[1]) > FLUSH_BYTES):
                    break
                out.append((seq, *found))
                size += len(found[1])
        return out

    def _forget_handed(self, key: tuple[str, str], below: int | None) -> None:
        """Drop the session's handed-off rows below ``below`` (None: all of them)."""
        with self._indexer_lock:
            handed = self._handoff.get(key)
            if handed is None:
                return
            for seq in [s for s in handed if below is None or s < below]:
                self._handoff_bytes -= len(handed.pop(seq)[1])
            if not handed:
                del self._handoff[key]

    def _run_indexer(self) -> None:
        """The indexer thread: every marked session's rows, a batch at a time, once this
        store's appends have left ``FLUSH_AT`` rows, or have left fewer and paused for
        ``IDLE_S``. A pass indexes each session up to where it was when the pass reached
        it: rows appended meanwhile wait for the next pass, in a batch of their own,
        instead of being chased a few at a time (a batch of 32 rows costs about twice as
        much a row as one of 512)."""
        while True:
            woken = self._indexer_wake.wait(IDLE_S)
            self._indexer_wake.clear()
            with self._indexer_lock:
                if self._indexer_stop:
                    return
                paused = time.monotonic() - self._last_append >= IDLE_S
                if self._pending_count <= 0 or not (woken or paused):
                    continue
                self._indexer_idle.clear()
            try:
                with self._connections.connection() as conn:
                    self._index_marked(conn, stop=lambda: self._indexer_stop)
            except Exception:  # the marks stay: the next pass or a search retries
                log.exception("search index: indexing the marked sessions failed")
            finally:
                self._indexer_idle.set()

    def _flush_pending(self) -> None:
        """Index every marked session now, in this thread (a store that indexes)."""
        if not self.search_writes_words:
            return
        with self._connections.connection() as conn:
            self._index_marked(conn)

    def _count_indexed(self, rows: int) -> None:
        with self._indexer_lock:
            self._pending_count = max(0, self._pending_count - rows)

    def _index_marked(self, conn: psycopg.Connection[Any], *, tenant: str | None = None,
                      limit: int | None = None, batch: int = BATCH,
                      progress: Callable[[int], None] | None = None,
                      stop: Callable[[], bool] | None = None) -> int:
        """Index the marked sessions (of ``tenant``, or all), in key order, until none is
        left or ``limit`` rows were indexed; returns how many. ``progress(rows)`` after
        each batch; ``stop()`` is asked between batches."""
        done = 0
        params: dict[str, Any] = {"tenant": tenant, "after_tenant": "", "after_id": "",
                                  "limit": _MARKED_PAGE}
        while True:
            with _planned(conn):
                found = conn.execute(self._search.marked[tenant is not None],
                                     params).fetchall()
            for t, sid in found:
                if stop is not None and stop():
                    return done
                done += self._index_session(conn, t, sid, batch, progress, stop)
                if limit is not None and done >= limit:
                    return done
            if len(found) < _MARKED_PAGE:
                return done
            params.update(after_tenant=found[-1][0], after_id=found[-1][1])

    def _index_session(self, conn: psycopg.Connection[Any], tenant: str, session_id: str,
                       batch: int, progress: Callable[[int], None] | None,
                       stop: Callable[[], bool] | None) -> int:
        """Index the session's rows from its mark, ``batch`` at a time (fewer once their
        data reaches ``FLUSH_BYTES``), each batch in a transaction that inserts the words
        of the rows still there and moves the mark, only if nothing moved the mark since
        it was read; returns the rows indexed. One thread of the store indexes at a time,
        and one process a session (an advisory lock, its claim): the indexer thread
        (``stop`` given) passes by a session another process holds, a search or a build
        waits for it (and then finds the mark moved)."""
        claim = (tenant, tenant, session_id)
        with self._flush_lock:
            claimed = conn.execute(self._search.claim[stop is not None], claim).fetchone()
            if stop is not None and not (claimed and claimed[0]):
                return 0  # another process's indexer has it
            try:
                return self._index_claimed(conn, {"tenant": tenant, "session_id": session_id,
                                                  "batch": batch, "cap": FLUSH_BYTES},
                                           batch, progress, stop)
            finally:
                conn.execute(self._search.release, claim)

    def _index_claimed(self, conn: psycopg.Connection[Any], key: dict[str, Any], batch: int,
                       progress: Callable[[int], None] | None,
                       stop: Callable[[], bool] | None) -> int:
        """``_index_session`` once this process holds the session's claim: three round
        trips a batch (its mark; the words, the lock and the mark's move, pipelined; the
        commit), a fourth for rows this store's appends did not hand off."""
        session = (key["tenant"], key["session_id"])
        done = 0
        end: int | None = None  # the indexer thread's: where the session was at the start
        while True:
            mark = conn.execute(self._search.mark, key).fetchone()
            if mark is None or mark[0] is None:
                self._forget_handed(session, None)
                return done  # no session, or nothing left
            lo, n = int(mark[0]), int(mark[1])
            if stop is not None:
                end = n if end is None else end
                if lo >= end:
                    return done
            rows = self._handed(session, lo, min(n, lo + batch))
            if rows:
                whole = rows[-1][0] + 1 >= n
            else:
                found = conn.cursor(binary=True).execute(self._search.batch_rows, key).fetchall()
                rows = [(int(seq), str(mid), bytes(data)) for _lo, _n, seq, mid, data, _taken
                        in found if seq is not None and _lo == lo]
                whole = not rows or (len(rows) == found[0][5] and len(rows) < batch)
            hi = max(lo, n) if whole else rows[-1][0] + 1
            values = {**key, "lo": lo, "hi": hi, "rows": len(rows),
                      "seqs": [r[0] for r in rows], "ids": [r[1] for r in rows],
                      "words": [row_words(data) for _seq, _id, data in rows]}
            try:
                with conn.pipeline(), conn.transaction():
                    # the words are the messages': a crash may lose the last batches,
                    # and their marks' moves with them (the same transaction)
                    conn.execute(_ASYNC_COMMIT)
                    if rows:
                        conn.execute(self._search.insert_words, values)
                    conn.execute(self._search.lock_mark, key)
                    if conn.execute(self._search.move_mark, values).fetchone() is None:
                        raise _Moved  # a removal, or another indexer, came first
            except _Moved:
                self._forget_handed(session, None)
                return done
            self._forget_handed(session, hi)
            self._count_indexed(len(rows))
            done += len(rows)
            if progress is not None and rows:
                progress(len(rows))
            if hi >= n or (stop is not None and stop()):
                return done

    # ---------------------------------------------------------------- the index itself

    def _index_state(self, conn: psycopg.Connection[Any]) -> tuple[str, int, int]:
        """``search_index``'s configuration and words version, and the rows left to index
        (over at most ``AUTO_BUILD_ROWS + 1`` marked sessions)."""
        with _planned(conn):
            config, version = conn.execute(self._search.state).fetchone() or ("", 0)
            (left,) = conn.execute(self._search.left,
                                   (AUTO_BUILD_ROWS + 1,)).fetchone() or (0,)
        return str(config), int(version), int(left)

    def search_index_state(self) -> SearchState:
        """The index as stored, and whether searches of this store use it."""
        with self._connections.connection() as conn:
            config, version, left = self._index_state(conn)
        usable = (self.search_indexed and config == self.search_config
                  and version == WORDS_VERSION and left == 0)
        return SearchState(config, version, left, usable)

    def _open_search_index(self, conn: psycopg.Connection[Any]) -> None:
        """At open: a store that keeps the index makes it of its configuration and
        words when the schema holds no message yet, and indexes the marked rows when
        they are few; else it says once what ``build_search_index`` would do. It indexes
        only where the index holds words of its tokenizer."""
        if not self.search_indexed:
            self.search_writes_words = False
            return
        config, version, left = self._index_state(conn)
        self.search_writes_words = version == WORDS_VERSION
        if config == self.search_config and version == WORDS_VERSION:
            if 0 < left <= AUTO_BUILD_ROWS:
                self._index_marked(conn)
            elif left:
                log.warning("%s: more than %d messages are not in the search index yet; "
                            "their tenants' searches scan (at most %s rows) until "
                            "`chathistory migrate` or build_search_index() indexes them",
                            self.schema, AUTO_BUILD_ROWS, self.search_scan_limit)
            return
        with _planned(conn):
            (empty,) = conn.execute(self._search.empty).fetchone() or (False,)
        if empty and version <= WORDS_VERSION:
            self._build(conn, BATCH, None)
        else:
            log.warning("%s: the search index holds configuration %r and words of version "
                        "%d, not %r and %d; searches scan (at most %s rows) until "
                        "build_search_index() rebuilds it", self.schema, config, version,
                        self.search_config, WORDS_VERSION, self.search_scan_limit)

    def build_search_index(self, *, batch: int = 1000,
                           progress: Callable[[int, int], None] | None = None) -> int:
        """Make the index answer this store's searches: rebuilt for its configuration
        when it is of another (``CREATE INDEX CONCURRENTLY`` where the table is not
        partitioned: appends go on), every row's words cut again when they are of
        another version of the tokenizer, then every marked session's rows indexed,
        ``batch`` rows a transaction at most, ``progress(done, total)`` after each.
        Stopped, it resumes where it was (each batch moves its session's mark). Returns
        how many rows it indexed."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        with self._connections.connection() as conn:
            return self._build(conn, batch, progress)

    def _build(self, conn: psycopg.Connection[Any], batch: int,
               progress: Callable[[int, int], None] | None) -> int:
        config, version, _left = self._index_state(conn)
        if version > WORDS_VERSION:
            raise ValueError(f"the search index holds words of version {version}, newer "
                             f"than this release's {WORDS_VERSION}: build it with that one")
        if config != self.search_config:
            self._use_config(conn)
        if version != WORDS_VERSION:
            with conn.transaction():
                conn.execute(self._search.forget_words)
                conn.execute(self._search.mark_all)
                conn.execute(self._search.set_version, (WORDS_VERSION,))
        self.search_writes_words = True
        with _planned(conn):
            (total,) = conn.execute(self._search.left, (NO_LIMIT,)).fetchone() or (0,)
        done = 0

        def step(rows: int) -> None:
            nonlocal done
            done += rows
            if progress is not None:
                progress(done, max(int(total), done))

        return self._index_marked(conn, batch=batch, progress=step)

    def _use_config(self, conn: psycopg.Connection[Any]) -> None:
        """The index of this store's configuration in place of any other."""
        concurrently = not _partitioned(conn, self.schema)
        how = "CONCURRENTLY " if concurrently else ""
        name = search_index_name(self.search_config)
        conn.execute(f"DROP INDEX {how}IF EXISTS {quote_schema(self.schema)}.{name}")
        conn.execute(create_search_index(self.search_config, self.schema, concurrently))
        with conn.transaction():
            conn.execute(self._search.set_config, (self.search_config,))
        for (other,) in conn.execute(self._search.search_indexes, (self.schema,)).fetchall():
            if other != name:
                conn.execute(sql.SQL("DROP INDEX {}{}.{}").format(
                    sql.SQL(how), sql.Identifier(self.schema), sql.Identifier(other)))


def _partitioned(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema's ``message_words`` is partitioned."""
    found = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = "
                         "%s::regclass)", (f"{quote_schema(schema)}.message_words",)
                         ).fetchone()
    return bool(found and found[0])


@contextmanager
def _planned(conn: psycopg.Connection[Any], joins: str = "") -> Iterator[None]:
    """A transaction whose statements plan with sequential scans off (and no JIT,
    which a disabled scan's cost would start): the index's statements only ever walk
    an index, whatever the statistics say. ``work_mem`` 32 MB: a common word's bitmap
    stays exact (one bit a row) to about 4 million matches; past the default 4 MB it
    turned lossy at 1,000,000 messages, and every row of a lossy page had its words
    computed again: 4.0 s against 0.6 s for a word in 73% of them. ``joins``: more
    settings (``_PROBES``)."""
    with conn.transaction():
        conn.execute(_SETTINGS + joins)
        yield


_PROBES = (", set_config('enable_hashjoin', 'off', true), "
           "set_config('enable_mergejoin', 'off', true)")
"""For the fill's update: a batch's rows are found by one primary-key probe each (a
hash join may read the whole table's key index for every batch)."""


_RECHECK_PAGE = 200
_MARKED_PAGE = 256  # marked sessions read at a time
_ASKS = 3  # a search statement's tries while appends keep marking the tenant's sessions
_ASYNC_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"
_CLAIM_SEED = 0x63686973  # a session's claim: its key's hash with this seed
