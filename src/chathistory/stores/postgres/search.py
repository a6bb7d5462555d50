"""PostgreSQL's search index: each message row's words, a GIN index over them, and
the searches and the fill that use them (the schema is ``schema.m005_search``).

What is stored. ``messages.words`` holds a row's distinct words, space-separated, as
the engine's tokenizer cut them (``row_words``, from ``search.index_words``), written
by the append's own statement (one round trip, one transaction: a searchable message
is an acknowledged one). The GIN index is over an expression of that column
(``schema.search_vector``), not over a stored ``tsvector``: measured on 100,000
ShareGPT messages, a ``tsvector`` column with positions took 1,069 bytes a row and a
stripped one 629, the distinct words 423, beside 1,290 for everything else a row
costs; the index itself ~320. No positions are kept, so a phrase (``"a b"``) is found
as its words, and the candidates' own words are then checked in Python (as is a word
longer than ``WORD_CHARS``, indexed by its start). The score is the reference's
damping by length without the count of hits, which the index does not keep:
``1 / sqrt(1 + bytes of the distinct words)``, so a short message that has the words
ranks first.

Scope. The expression adds two markers to each row's lexemes, ``!t`` + md5 of its
tenant and ``!s`` + md5 of its session (no word holds ``!``), and every search ANDs
its tenant's marker (and its sessions', when it has spans) to the query: the index
only yields the tenant's rows, and ``tenant = %(tenant)s`` filters them again. So a
search costs what its matches in its tenant cost, whatever other tenants hold.

Plans. The index scan sits in a subquery fenced with ``OFFSET 0`` whose only
condition is the index's, and the statement runs with sequential scans off: the
planner cannot walk the tenant's primary-key range computing the expression row by row
(10 us a row), which it may find cheaper without statistics or for a common word.

Rows without words (``words IS NULL``: written before this index, or by a store with
``search=off``) are listed by the partial index ``messages_unindexed``. A tenant with
any is searched by the engine's bounded scan instead (results are never incomplete),
until ``build_search_index`` has filled them. ``search_index`` holds the index's
configuration and the version of the words its rows hold (``WORDS_VERSION``, the
tokenizer's); a store of another configuration or version scans until its
``build_search_index`` rebuilds the index (every row's words cut again for a new
version), and a store older than the index writes no words.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from ..backend import Span
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
"""Opening a store that keeps the index fills it at once when at most this many rows
lack their words; more are left to ``build_search_index`` (``chathistory migrate``)."""
WORDS_CHARS = 200_000
"""A row's words are cut after this many characters (at most 800 KB of UTF-8: a
``tsvector`` holds 1 MB of lexemes); no text but generated data has that many distinct
words, and a search misses those past the cut."""
SCORE = "1 / sqrt((1 + octet_length(words))::float8)"
"""The length of the row's distinct words damps its score (in float8, as the cursor
carries it back): their bytes, which the column's header holds, where counting them
(``length`` and ``replace``) took 250 of a common word's 295 ms at 100,000 messages."""
_ROW_OF_M = ", ".join(f"m.{column}" for column in _ROW.split(", "))
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
        # usable: the index is of this configuration and has every row of the tenant
        ready = (f"WITH ready AS (SELECT coalesce((SELECT config = %(config)s AND "
                 f"words_version = %(words_version)s FROM {s}.search_index), false) AND "
                 f"NOT EXISTS (SELECT 1 FROM {s}.messages WHERE words IS NULL AND "
                 "tenant = %(tenant)s) AS ok) ")
        # (a configuration with stop words can make a query of none: it finds nothing)
        some = "" if config == "simple" else f" AND numnode({user_query}) > 0"

        def candidates(columns: str, sessions: bool) -> str:
            marks = f"{tenant_mark} && {session_marks}" if sessions else tenant_mark
            return (f"(SELECT {columns} FROM {s}.messages WHERE words IS NOT NULL AND "
                    f"{search_vector(config)} @@ ({user_query} && {marks}) OFFSET 0) AS m "
                    f"WHERE r.ok{some} AND m.tenant = %(tenant)s")

        self.search: dict[tuple[bool, bool, bool], str] = {}
        for spans in (False, True):
            for user in (False, True):
                for after in (False, True):
                    where = candidates(f"tenant, session_id, {SCORE} AS score, {_ROW}", spans)
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
                    self.search[spans, user, after] = (
                        f"{ready}SELECT r.ok, h.* FROM ready AS r LEFT JOIN LATERAL ("
                        f"SELECT m.score, m.session_id, {_ROW_OF_M} FROM {where} "
                        "ORDER BY m.score DESC, m.session_id, m.seq LIMIT %(limit)s) AS h "
                        "ON true")
        self.sessions: dict[bool, str] = {}
        for given in (False, True):
            where = candidates("tenant, session_id", given)
            if given:
                where += " AND m.session_id = ANY(%(ids)s::text[])"
            self.sessions[given] = (
                f"{ready}SELECT r.ok, h.session_id FROM ready AS r LEFT JOIN LATERAL ("
                f"SELECT DISTINCT m.session_id FROM {where} LIMIT %(limit)s) AS h ON true")
        # the fill: rows without words in key order (messages_unindexed), or every row
        # (``recut``: words of another version), a batch at a time, each batch its own
        # transaction with the position it reached
        self.unindexed = (f"SELECT count(*) FROM (SELECT 1 FROM {s}.messages "
                          "WHERE words IS NULL LIMIT %s) AS u")
        self.rows = f"SELECT count(*) FROM {s}.messages"
        self.fill_batch: dict[bool, str] = {}
        for recut in (False, True):
            unset = "" if recut else "words IS NULL AND "
            self.fill_batch[recut] = (
                f"SELECT tenant, session_id, seq, data FROM {s}.messages WHERE {unset}"
                "(tenant, session_id, seq) > (%s, %s, %s) ORDER BY tenant, session_id, seq "
                "LIMIT %s FOR UPDATE SKIP LOCKED")
        # (the batch's rows are locked since it read them: no condition on ``words``,
        # which would let the planner read all of messages_unindexed per batch)
        self.fill_rows = (
            f"UPDATE {s}.messages AS m SET words = v.words FROM unnest(%s::text[], "
            "%s::text[], %s::bigint[], %s::text[]) AS v(tenant, session_id, seq, words) "
            "WHERE m.tenant = v.tenant AND m.session_id = v.session_id AND m.seq = v.seq")
        self.state = f"SELECT config, words_version, fill_after::text FROM {s}.search_index"
        self.set_position = f"UPDATE {s}.search_index SET fill_after = %s"
        self.set_config = f"UPDATE {s}.search_index SET config = %s, fill_after = NULL"
        self.set_version = (f"UPDATE {s}.search_index SET words_version = %s, "
                            "fill_after = NULL")
        self.search_indexes = ("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND "
                               "tablename = 'messages' AND indexname LIKE 'messages\\_search\\_%%'")
        self.empty = f"SELECT NOT EXISTS (SELECT 1 FROM {s}.messages)"


class SearchState(NamedTuple):
    """The index as stored: its configuration, the version of its rows' words, rows
    still without words (counted up to ``AUTO_BUILD_ROWS + 1``), and whether it answers
    this store's searches."""

    config: str
    words_version: int
    unindexed: int
    usable: bool


class IndexedSearch:
    """``_b_search``, ``_b_search_sessions`` and ``build_search_index`` of
    ``PostgresStore`` over its pool. ``search_writes_words``: whether the store's
    appends write their rows' words (it keeps the index, and its words are not older
    than the index's)."""

    schema: str
    partitions: int | None
    search_indexed: bool
    search_config: str
    search_writes_words: bool = False
    search_scan_limit: int | None = SCAN_LIMIT
    _connections: Connections
    _search: Statements

    def _search_params(self, tenant: str, text: str) -> dict[str, Any]:
        return {"tenant": tenant, "config": self.search_config, "q": text,
                "words_version": WORDS_VERSION}

    def _ask(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]] | None:
        """Rows of a search statement, or None when the index cannot answer (the
        statement's ``ok``): another configuration, or rows of the tenant without words."""
        with self._connections.connection() as conn, conn.pipeline(), _planned(conn):
            found = conn.cursor(binary=True).execute(query, params).fetchall()
        if not found or not found[0][0]:
            return None
        return [r[1:] for r in found if r[1] is not None]

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

    # ---------------------------------------------------------------- the index itself

    def _index_state(self, conn: psycopg.Connection[Any]) -> tuple[str, int, Any, int]:
        """``search_index``'s configuration, words version and fill position, and the
        rows without words (at most ``AUTO_BUILD_ROWS + 1`` counted)."""
        with _planned(conn):
            config, version, stored = conn.execute(self._search.state).fetchone() or (
                "", 0, None)
            (left,) = conn.execute(self._search.unindexed,
                                   (AUTO_BUILD_ROWS + 1,)).fetchone() or (0,)
        return str(config), int(version), json.loads(stored) if stored else None, int(left)

    def search_index_state(self) -> SearchState:
        """The index as stored, and whether searches of this store use it."""
        with self._connections.connection() as conn:
            config, version, _position, left = self._index_state(conn)
        usable = (self.search_indexed and config == self.search_config
                  and version == WORDS_VERSION and left == 0)
        return SearchState(config, version, left, usable)

    def _open_search_index(self, conn: psycopg.Connection[Any]) -> None:
        """At open: a store that keeps the index makes it of its configuration and
        words when the schema holds no message yet, and fills it when few rows lack
        their words; else it says once what ``build_search_index`` would do. Its
        appends write no words where the index holds a newer tokenizer's."""
        if not self.search_indexed:
            self.search_writes_words = False
            return
        config, version, _position, left = self._index_state(conn)
        self.search_writes_words = version <= WORDS_VERSION
        if config == self.search_config and version == WORDS_VERSION:
            if 0 < left <= AUTO_BUILD_ROWS:
                self._fill(conn, 1000, None)
            elif left:
                log.warning("%s: more than %d messages are not in the search index yet; "
                            "their tenants' searches scan (at most %s rows) until "
                            "`chathistory migrate` or build_search_index() fills it",
                            self.schema, AUTO_BUILD_ROWS, self.search_scan_limit)
            return
        with _planned(conn):
            (empty,) = conn.execute(self._search.empty).fetchone() or (False,)
        if empty and version <= WORDS_VERSION:
            self._build(conn, 1000, None)
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
        another version of the tokenizer, then every row without words given its
        words; ``batch`` rows a transaction, ``progress(done, total)`` after each.
        Stopped, it resumes where it was. Returns how many rows it gave words."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        with self._connections.connection() as conn:
            return self._build(conn, batch, progress)

    def _build(self, conn: psycopg.Connection[Any], batch: int,
               progress: Callable[[int, int], None] | None) -> int:
        config, version, _position, _left = self._index_state(conn)
        if version > WORDS_VERSION:
            raise ValueError(f"the search index holds words of version {version}, newer "
                             f"than this release's {WORDS_VERSION}: build it with that one")
        if config != self.search_config:
            self._use_config(conn)
        done = 0
        if version != WORDS_VERSION:
            done = self._fill(conn, batch, progress, recut=True)
        return done + self._fill(conn, batch, progress, start=done)

    def _use_config(self, conn: psycopg.Connection[Any]) -> None:
        """The index of this store's configuration in place of any other."""
        concurrently = not self.partitions
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

    def _fill(self, conn: psycopg.Connection[Any], batch: int,
              progress: Callable[[int, int], None] | None, recut: bool = False,
              start: int = 0) -> int:
        """Give words to the rows without (``recut``: to every row, then record this
        release's words version), in key order from where the last fill of the same
        kind stopped; then, for the rows without, once more from the start for rows
        that were locked or written without words meanwhile (a few passes at most: a
        ``search=off`` store may go on writing such rows)."""
        kind = f"recut{WORDS_VERSION}" if recut else "unset"
        with _planned(conn):
            (total,) = conn.execute(self._search.rows if recut else self._search.unindexed,
                                    () if recut else (NO_LIMIT,)).fetchone() or (0,)
        _config, _version, stored, _left = self._index_state(conn)
        position = tuple(stored["after"]) if stored and stored["kind"] == kind else _START
        total += start
        done = start
        for attempt in range(_PASSES):
            while True:
                with _planned(conn, joins=_PROBES):
                    rows = conn.execute(self._search.fill_batch[recut],
                                        (*position, batch)).fetchall()
                    if rows:
                        conn.execute(self._search.fill_rows, (
                            [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                            [row_words(bytes(r[3])) for r in rows]))
                        position = tuple(rows[-1][:3])
                    if len(rows) == batch:
                        conn.execute(self._search.set_position,
                                     (json.dumps({"kind": kind, "after": position}),))
                    elif recut:
                        conn.execute(self._search.set_version, (WORDS_VERSION,))
                    else:
                        conn.execute(self._search.set_position, (None,))
                done += len(rows)
                if progress is not None and rows:
                    progress(done, max(total, done))
                if len(rows) < batch:
                    break
            if recut:
                break
            with _planned(conn):
                (left,) = conn.execute(self._search.unindexed, (1,)).fetchone() or (0,)
            if left == 0:
                break
            position = _START
            time.sleep(0.05 * attempt)
        return done - start


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
_START = ("", "", -1)  # before every key
_PASSES = 5
