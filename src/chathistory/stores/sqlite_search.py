"""SQLite's search index (issue 22): an FTS5 table of every message's words, kept with
the messages, scoped to the tenant by a token of each row.

What is indexed is ``search.indexed_words`` of each row (the one tokenizer of every
backend), in a contentless FTS5 table (``search_words``, ``tokenize='ascii'``) of two
columns: ``words``, the row's text as ``indexed_text`` gives it (ASCII text as it is,
which the ascii tokenizer cuts as ``words`` does, and so text whose non-ASCII characters
only cut words, each made a ``?``; other text its words, folded, joined by spaces: the
tokenizer takes every non-ASCII character as a letter), and ``tenant``,
one token of the row's tenant (``tenant_token``: 12 letters and digits from a SHA-256
of its name). A search over a tenant requires the caller's tenant token in that column
(and its hits are joined on the tenant besides); one within sessions reads their rowid
ranges, sessions of the caller's tenant. A row's FTS rowid is ``num << 32 | seq``,
``num`` numbering sessions in ``search_sessions``: a session's rows are one rowid range,
and the index stores no key text per message. (Until m006 each word carried the tenant
as a prefix: the words were cut and joined in Python, and each tenant's words were
terms of their own, which made the index's inserts three times as costly with 50
tenants as with one.)

An append does not tokenize: its rows are left to index, and they are indexed a batch at
a time: by the store's indexer thread, which an append that leaves ``FLUSH_AT`` rows to
index wakes (after its commit) and which indexes once the appends pause (``QUIET_S``);
by an append that leaves ``BACKLOG`` (appends back to back, or the indexer behind: the
backlog stays bounded); and by every search before it reads the index, so a search sees
every acknowledged message. (Tokenizing and writing FTS5 in each append's transaction
measured three times the cost of the append; in batches it costs a third of that per
message. Beside appends back to back, in another thread, it cost them more than in
them: ``QUIET_S``.) What is
left to index is a watermark per session, ``search_dirty (num, from_seq)``: the
session's rows from ``from_seq`` on are not indexed yet, those before it are. An append
writes it only when the session turns from indexed to not (its first row's position), so
a burst of appends to a session writes it once, not a row each (the per-row pending list
it replaced cost every append a row and a page: 12-15 us of the appending thread, and a
page of seven in each commit); a batch indexes each session's rows from its watermark on
and moves it past them, or drops it. The counts that wake the indexer are the store's
own (``IndexedSearch._pending_count``: rows its appends left, less what its flushes
indexed): another process's appends wake that process's indexer. An append also hands
its rows' data to the indexer in memory (``IndexedSearch._hand_off``, at most
``HANDOFF_BYTES``), so the indexer reads from the database only rows it was not handed:
those of other processes, of a transaction the caller opened, or handed before a row was
removed (``IndexedSearch._observe``). What removes rows (pop, clear, delete, erase,
purge) takes the indexed ones out of the index in its own transaction (FTS5's
``'delete'`` given the words recomputed from the row), and moves the session's watermark
back to the first removed position when it is past it (the positions are used again by
the next appends).

``search_state`` says whether the index is used: ``ready``; ``building`` (filled in
batches in key order: rows up to ``position`` are kept as in a ready index, later ones
are left to the build); ``stale`` (no longer kept: a store opened with ``search=off``
marks it so at its first write, and so does a process whose words are of another
``WORDS_VERSION``). A stale index is emptied and built again.
"""

from __future__ import annotations

import base64
import collections
import functools
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, TypeVar

from .backend import Span
from .model import Row, Session
from .search import (
    WORDS_VERSION,
    Cursor,
    Query,
    as_ascii,
    indexed_source,
    matching_rows,
    ranked_after,
    words,
)

__all__ = ["AUTO_BUILD_ROWS", "BACKLOG", "FLUSH_AT", "FLUSH_BYTES", "HANDOFF_BYTES",
           "HANDOFF_ROW_BYTES", "QUIET_S", "RANK_LIMIT", "SCORE", "SPAN_CANDIDATES",
           "WORDS_VERSION", "WRITTEN_SESSIONS", "IndexState", "IndexedSearch", "Known",
           "Pended", "fts_text", "fts_words", "in_snapshot", "indexed_text", "match_expression",
           "register_functions", "tenant_match", "tenant_token", "valid_known"]

log = logging.getLogger("chathistory.stores")
T = TypeVar("T")

FLUSH_AT = 512
"""Pending rows that make an append wake the indexer thread (after its commit), and the
rows it indexes per transaction: FTS5 writes a segment per transaction, and on 60,000
ShareGPT messages a batch cost 23.8 us a message at 128 rows, 19.2 at 512."""
BACKLOG = 1024
"""Pending rows that make an append index them itself (appends come back to back, and
the indexer thread waits for them to pause: ``QUIET_S``); at most what a search indexes
before it reads (about 20 ms of ShareGPT messages)."""
QUIET_S = 0.002
"""The indexer thread indexes once the store's appends have paused this long. Beside
appends back to back it slowed them more than indexing in them does: the two threads
take the GIL from each other (the appender, back from each SQLite call, waits for the
indexer's Python), so a call's p99 tripled. Measured (2026-11-26, 1,200 ShareGPT
appends a round, 30 rounds at ``NORMAL``, 20 at ``FULL``, the index's two ways and
``search=off`` taking turns, ratios to the round of ``search=off`` beside): at
``NORMAL`` 1.23x / 1.22x an append with the indexing in the appends past ``BACKLOG``
against 1.26x / 1.36x beside them, a call's p99 1.0 ms against 3.3-3.5 ms (0.9 without
the index); at ``FULL`` 1.15x / 1.13x against 1.15x / 1.14x, p99 1.3-1.5 ms against
1.7-1.8, p99.9 3.2-4.0 ms against 11.5-12.8. So appends back to back index their rows
themselves, ``BACKLOG`` at a time (one call in ``BACKLOG`` takes that much longer, 40-80
ms), and appends at a chat's pace leave them to the thread, in their pauses."""
AUTO_BUILD_ROWS = 20_000
"""Opening a store builds a missing or stale index at once when at most this many rows
are left to index (about a second); a larger one is built by ``build_search_index``
(``chathistory migrate``), and searches scan until it is ready."""
RANK_LIMIT = 10_000
"""A search over the tenant ranks (``SCORE``) at most this many matches: those of the
sessions created last."""
SPAN_CANDIDATES = 500
"""A search within sessions ranks at most this many matches, shared between the
sessions, each session's newest, by the reference score (``Query.score``: about 90 us
a ShareGPT message in Python)."""
BUILD_BATCH = 1_000
FLUSH_BYTES = 8 * 1024 * 1024
"""A batch of pending rows ends at the row whose data brings it to this many bytes,
however few rows that is (``rows_left``)."""

HANDOFF_BYTES = 8 * 1024 * 1024
"""Stored bytes of appended rows held in memory for the indexer at most (past it, the
indexer reads them from the database)."""
HANDOFF_ROW_BYTES = 256 * 1024
"""A row larger than this is never handed off (read, at most ``FLUSH_BYTES`` at a time,
when it is indexed)."""

_SEQ_BITS = 32
_SEQ_MASK = (1 << _SEQ_BITS) - 1

Progress = Callable[[int, int], None]
"""``progress(done, total)``: rows indexed so far, and rows to index in all."""


class Pended(NamedTuple):
    """What an append left to index (``note_appended``)."""

    rows: list[tuple[int, bytes]]
    """Each added row's FTS rowid and stored data."""
    data_version: int
    """The write connection's ``PRAGMA data_version`` in the append's transaction."""


class Known(NamedTuple):
    """What an append read of the index's upkeep, kept for the next append of the same
    store (``note_appended``): valid while the write connection's ``data_version`` is
    this one (no other connection committed) and no other transaction of the store ran
    since (``SQLiteStore._atomic`` drops it at every other transaction's start)."""

    data_version: int
    state: IndexState
    nums: dict[tuple[str, str], int]
    """Sessions' numbers read or made meanwhile."""
    dirty: set[int]
    """Sessions (by number) known to have a watermark (``search_dirty``) meanwhile."""
    written: dict[tuple[str, str], Session]
    """Sessions as the store's appends wrote them meanwhile (the next append of one
    plans on it without reading it: ``sqlite._Txn``); at most ``WRITTEN_SESSIONS``."""


WRITTEN_SESSIONS = 64


def valid_known(conn: sqlite3.Connection, known: Known | None) -> Known | None:
    """In a write transaction: ``known`` if no other connection committed since it was
    taken (``PRAGMA data_version`` unmoved: 3 us), else None."""
    if known is not None and conn.execute(_DATA_VERSION).fetchone()[0] != known.data_version:
        return None
    return known


class IndexState(NamedTuple):
    state: str
    """``ready``, ``building`` or ``stale``."""
    words: int
    """The ``WORDS_VERSION`` the index was built with."""
    position: tuple[str, str, int] | None
    """While building: the last ``(tenant, session_id, seq)`` indexed."""
    done: int
    """While building: rows indexed so far."""

    @property
    def kept(self) -> bool:
        """Whether this process keeps the index up to date (and uses it once ready)."""
        return self.words == WORDS_VERSION and self.state in ("ready", "building")

    @property
    def usable(self) -> bool:
        return self.words == WORDS_VERSION and self.state == "ready"

    def covers(self, tenant: str, session_id: str, seq: int) -> bool:
        """Whether the row is indexed (or pending), not left to the build. (SQLite's
        BINARY text order is code point order, as Python's.)"""
        return self.state == "ready" or (
            self.position is not None and (tenant, session_id, seq) <= self.position)


@functools.lru_cache(maxsize=4096)
def tenant_token(tenant: str) -> str:
    """The token of ``tenant`` in the ``tenant`` column of its rows: ``t`` and 11 base32
    characters of the SHA-256 of its name (55 bits; hits are joined on the tenant as
    well, so even a collision would find nothing of the other tenant)."""
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()
    return "t" + base64.b32encode(digest).decode("ascii")[:11].lower()


def indexed_text(data: bytes) -> str:
    """What the FTS5 table's ``words`` column holds for a stored row: text that its
    ``ascii`` tokenizer cuts into exactly the words of ``search.indexed_words``. ASCII
    text is given as it is: the tokenizer cuts it as ``words`` does (letters and digits,
    lowercased; a property test checks it), in C, where cutting and joining the words in
    Python cost 23 us of a ShareGPT message's 66 us of indexing; so is text whose
    characters that are not ASCII only cut words, each made a ``?`` (``search.as_ascii``).
    Other text is given as its words joined by spaces (folded: the tokenizer takes every
    character that is not ASCII as a letter)."""
    return fts_text(indexed_source(data))


def fts_text(text: str) -> str:
    """``text`` as the ``words`` column takes it (``indexed_text``): the ASCII text
    ``words`` cuts it as, where there is one (a character that only cuts words made a
    ``?``, which the ascii tokenizer cuts at too), else its words joined by spaces."""
    cut_as = as_ascii(text)
    return cut_as if cut_as is not None else " ".join(words(text))


def match_expression(tenant: str | None, query: Query) -> str:
    """The FTS5 query: each term a quoted phrase of its words in the ``words`` column
    (``"…" *`` for a prefix term), all of them required, and with ``tenant`` the
    tenant's token in the ``tenant`` column (a search over a tenant; one within rowid
    ranges, its own sessions', needs none). Words hold letters and digits only, and a
    token letters and digits: nothing in them is FTS5 syntax."""
    phrases = []
    for term in query.terms:
        phrase = '"' + " ".join(term.words) + '"'
        phrases.append(phrase + " *" if term.prefix else phrase)
    found = "words : (" + " AND ".join(phrases) + ")"
    return found if tenant is None else f'tenant : "{tenant_token(tenant)}" AND {found}'


def _rowid(num: int, seq: int) -> int:
    return num << _SEQ_BITS | seq


def tenant_match(conn: sqlite3.Connection, tenant: str, query: Query) -> str:
    """The FTS5 query of a search over ``tenant``, read on ``conn`` in the snapshot the
    search then reads (``in_snapshot``): the words alone when fewer than ``RANK_LIMIT``
    rows of any tenant match them (the hits, joined on the tenant, are then all of the
    tenant's), else with the tenant's token. The token's doclist is every row of the
    tenant, which FTS5 reads whole to walk it newest first: 3 ms against 0.17 for a rare
    word at 100,000 messages (a count of the matches, read forward, costs 0.05-0.1 ms
    for a rare word, 1-2 ms for a common one)."""
    words_only = match_expression(None, query)
    found = conn.execute(_MATCHING, {"match": words_only, "limit": RANK_LIMIT}).fetchone()[0]
    return words_only if found < RANK_LIMIT else match_expression(tenant, query)


def in_snapshot(conn: sqlite3.Connection, read: Callable[[sqlite3.Connection], T]) -> T:
    """``read(conn)`` in one read transaction (one snapshot of the database, so that no
    flush lands between its statements), or in the one ``conn`` is in already."""
    if conn.in_transaction:
        return read(conn)
    conn.execute("BEGIN")
    try:
        return read(conn)
    finally:
        conn.execute("COMMIT")


# ---------------------------------------------------------------- statements


def fts_words(sizes: bytes | None) -> int:
    """The words of a row in the index, from FTS5's sizes of it
    (``search_words_docsize.sz``): the first of its sizes, one a column, each a varint
    (7 bits a byte, high bits first, the top bit set on every byte but the last); a row
    holds fewer than 2**21 words (``search.INDEX_CHARS``), so three bytes at most.
    Registered on the store's connections as ``chathistory_fts_words``: over the 10,000
    candidates of a common word at 1,000,000 messages it cost 7-20 ms, against 35-50 for
    the same decoding in SQL (``hex``, ``substr`` and ``instr`` of each byte)."""
    if not sizes:
        return 0
    b0 = sizes[0]
    if b0 < 0x80:
        return b0
    b1 = sizes[1]
    if b1 < 0x80:
        return (b0 & 0x7F) << 7 | b1
    return ((b0 & 0x7F) << 7 | (b1 & 0x7F)) << 7 | sizes[2]


def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions the index's statements call, on a connection of the store."""
    conn.create_function("chathistory_fts_words", 1, fts_words, deterministic=True)


SCORE = "1.0 / (1 + chathistory_fts_words(d.sz))"
"""SQL: a hit's score over the tenant (higher is better; ``search_words_docsize AS
d``): the reference's damping by length without its count of hits, as PostgreSQL's
(``1 / sqrt(1 + bytes)``): the rows with the fewest words that have the query's words
rank first. Not BM25: its weights are counts over the whole table, every tenant's
(rows, their average length, the rows that hold each word), and a score that moved
with them would tell a tenant about the others' messages."""

_STATE = "SELECT state, words, tenant, session_id, seq, done FROM search_state"
_MARK_STALE = ("UPDATE search_state SET state = 'stale', tenant = NULL, session_id = NULL, "
               "seq = NULL, done = 0")
_NUM = "SELECT num FROM search_sessions WHERE tenant = ? AND session_id = ?"
# an append's one read: the state, the session's number, whether it has a watermark,
# and the connection's data_version (which moves when another connection commits)
_APPEND_STATE = ("SELECT st.state, st.words, st.tenant, st.session_id, st.seq, st.done, "
                 "ss.num, d.num IS NOT NULL, (SELECT data_version FROM pragma_data_version()) "
                 "FROM search_state AS st LEFT JOIN search_sessions AS ss ON ss.tenant = ?1 "
                 "AND ss.session_id = ?2 LEFT JOIN search_dirty AS d ON d.num = ss.num")
_DATA_VERSION = "PRAGMA data_version"
_NEW_NUM = "INSERT INTO search_sessions (tenant, session_id) VALUES (?, ?) RETURNING num"
# a session turns from indexed to not: its rows from this one on are left to index (a
# watermark already there is lower: it stays)
_DIRTY = "INSERT OR IGNORE INTO search_dirty (num, from_seq) VALUES (?, ?)"
_INDEX = "INSERT INTO search_words (rowid, words, tenant) VALUES (?, ?, ?)"
_UNINDEX = ("INSERT INTO search_words (search_words, rowid, words, tenant) "
            "VALUES ('delete', ?, ?, ?)")
# the sessions with rows left to index, in number order (a watermark without its
# session's number: no path leaves one; it is dropped and logged)
_WATERMARKS = ("SELECT d.num, d.from_seq, ss.tenant, ss.session_id FROM search_dirty AS d "
               "LEFT JOIN search_sessions AS ss ON ss.num = d.num ORDER BY d.num")
_ROWS_FROM = ("SELECT seq, data FROM messages WHERE tenant = ? AND session_id = ? "
              "AND seq >= ? ORDER BY seq LIMIT ?")
_ANY_FROM = "SELECT 1 FROM messages WHERE tenant = ? AND session_id = ? AND seq >= ? LIMIT 1"
# rows left to index in all: each watermarked session's rows from its watermark on
_LEFT = ("SELECT coalesce(sum(max(0, coalesce((SELECT max(m.seq) + 1 FROM messages AS m "
         "WHERE m.tenant = ss.tenant AND m.session_id = ss.session_id), 0) - d.from_seq)), 0) "
         "FROM search_dirty AS d JOIN search_sessions AS ss ON ss.num = d.num")
_NEXT_ROWS = "SELECT tenant, session_id, seq, data FROM messages{after} ORDER BY " \
             "tenant, session_id, seq LIMIT ?"
_AFTER_POSITION = " WHERE (tenant, session_id, seq) > (?, ?, ?)"

# A search over the tenant: the RANK_LIMIT newest matches (an FTS5 rowid range read
# backward), scored by their length in words (``SCORE``), the tenant joined, keyset-paged.
_CANDIDATES = ("SELECT search_words.rowid AS rid "
               "FROM search_words{user_join} WHERE search_words MATCH :match{user} "
               "ORDER BY search_words.rowid DESC LIMIT :candidates")
_USER_JOIN = (" CROSS JOIN search_sessions AS us ON us.num = search_words.rowid >> 32 "
              "CROSS JOIN sessions AS se ON se.tenant = us.tenant AND se.id = us.session_id")
_USER = " AND us.tenant = :tenant AND se.user = :user"
_RANKED = ("WITH cand AS MATERIALIZED ({candidates}), scored AS (SELECT c.rid AS rid, "
           f"{SCORE} AS score FROM cand AS c JOIN search_words_docsize AS d ON d.id = c.rid), "
           "ranked AS (SELECT c.score AS score, "
           "ss.session_id AS sid, c.rid & 4294967295 AS seq FROM scored AS c "
           "JOIN search_sessions AS ss ON ss.num = c.rid >> 32 WHERE ss.tenant = :tenant"
           "{after} ORDER BY c.score DESC, ss.session_id, seq LIMIT :limit) "
           "SELECT r.score, r.sid, {row} FROM ranked AS r CROSS JOIN messages AS m "
           "ON m.tenant = :tenant AND m.session_id = r.sid AND m.seq = r.seq "
           "ORDER BY r.score DESC, r.sid, r.seq")
_AFTER = (" AND (c.score < :score OR (c.score = :score AND "
          "(ss.session_id, c.rid & 4294967295) > (:session_id, :seq)))")
# within sessions: each session's newest matches, one rowid range each
_IN_RANGE = ("SELECT rowid FROM search_words WHERE search_words MATCH :match AND "
             "rowid >= :lo AND rowid < :hi ORDER BY rowid DESC LIMIT :candidates")
_NUMS = ("SELECT ss.session_id, ss.num FROM json_each(:ids) AS j CROSS JOIN "
         "search_sessions AS ss ON ss.tenant = :tenant AND ss.session_id = j.value")
_USERS = ("SELECT se.id FROM json_each(:ids) AS j CROSS JOIN sessions AS se "
          "ON se.tenant = :tenant AND se.id = j.value WHERE se.user = :user")
# A prefix term costs FTS5 a read of every word it begins, once per cursor (a "pyth*"
# over a million messages: 3 ms), so a query with one reads many sessions through one
# cursor over their rowids, joined to them; other queries probe each session's range.
_SPANS_TABLE = ("WITH sp(num, lo, hi) AS MATERIALIZED (SELECT json_extract(j.value, '$[0]'), "
                "json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]') FROM "
                "json_each(:spans) AS j) ")
_IN_SPANS = (_SPANS_TABLE + "SELECT {what} FROM search_words CROSS JOIN sp "
             "ON sp.num = search_words.rowid >> 32 WHERE search_words MATCH :match "
             "AND search_words.rowid >= :lo AND search_words.rowid < :hi "
             "AND search_words.rowid & 4294967295 >= sp.lo "
             "AND search_words.rowid & 4294967295 < sp.hi "
             "ORDER BY search_words.rowid DESC LIMIT :candidates")
# sessions with a match: a rowid range probe each; over the tenant, the distinct
# sessions of the newest matches (one cursor)
_SESSIONS_MATCHING = (_NUMS + " WHERE EXISTS (SELECT 1 FROM search_words WHERE "
                      "search_words MATCH :match AND rowid >= ss.num << 32 "
                      "AND rowid < (ss.num + 1) << 32) LIMIT :limit")
_NEWEST_SESSIONS = ("SELECT DISTINCT search_words.rowid >> 32 FROM search_words "
                    "CROSS JOIN search_sessions AS ss ON ss.num = search_words.rowid >> 32 "
                    "WHERE search_words MATCH :match AND ss.tenant = :tenant "
                    "ORDER BY search_words.rowid DESC LIMIT :limit")
# how many rows match, at most :limit (in rowid order: read forward, FTS5's fast way)
_MATCHING = ("SELECT count(*) FROM (SELECT rowid FROM search_words WHERE search_words "
             "MATCH :match LIMIT :limit)")
_SESSION_IDS = ("SELECT ss.num, ss.session_id FROM json_each(:nums) AS j CROSS JOIN "
                "search_sessions AS ss ON ss.num = j.value WHERE ss.tenant = :tenant")


# ---------------------------------------------------------------- in a write transaction

def _state(state: str, words: int, tenant: str | None, session_id: str, seq: int,
           done: int) -> IndexState:
    return IndexState(state, words, None if tenant is None else (tenant, session_id, seq),
                      done)


def read_state(conn: sqlite3.Connection) -> IndexState:
    return _state(*conn.execute(_STATE).fetchone())


def _session_num(conn: sqlite3.Connection, tenant: str, session_id: str, *,
                 create: bool) -> int | None:
    found = conn.execute(_NUM, (tenant, session_id)).fetchone()
    if found is not None:
        return int(found[0])
    if not create:
        return None
    return int(conn.execute(_NEW_NUM, (tenant, session_id)).fetchone()[0])


def _mark_stale(conn: sqlite3.Connection, state: IndexState) -> None:
    if state.state != "stale":
        conn.execute(_MARK_STALE)


def note_appended(conn: sqlite3.Connection, keep: bool, tenant: str, session_id: str,
                  rows: Sequence[Row], known: Known | None = None
                  ) -> tuple[Pended | None, Known | None]:
    """In an append's transaction: the rows are left to index (when the index is kept
    and covers them): the session gets a watermark at the first of them unless it has
    one; returns what was added (None if nothing was), and what the next append of the
    store may take as read (``Known``). A store that does not keep the index (``keep``
    False) marks it stale. With ``known`` (what the store's last transaction, an append,
    left, checked by ``valid_known`` in this transaction), the state, the session's
    number and whether it has a watermark are not read again: that read took 11-15 us
    of an append's 250 (a third of its bookkeeping), the pragma 3. So a burst of appends
    to a session writes nothing here but the first.

    Rows left to index are counted, not weighed: a few 9 MB pastes wait for the next
    search (about 70 ms each to index). Waking the indexer for each large append
    instead cost the other tenants' reads 10-15 ms of p99 while two clients posted 9 MB
    appends (the hostile run), for the same work."""
    if known is None:
        *found, num, dirty, data_version = conn.execute(
            _APPEND_STATE, (tenant, session_id)).fetchone()
        known = Known(int(data_version), _state(*found), {}, set(), {})
        if num is not None:
            known.nums[(tenant, session_id)] = int(num)
            if dirty:
                known.dirty.add(int(num))
    state = known.state
    if not keep or not state.kept:
        if state.state != "stale":
            conn.execute(_MARK_STALE)
            return None, None  # the state changed: read it again next time
        return None, known
    covered = [r for r in rows if state.covers(tenant, session_id, r.seq)]
    if not covered:
        return None, known
    num = known.nums.get((tenant, session_id))
    if num is None:
        made = _session_num(conn, tenant, session_id, create=True)
        assert made is not None
        num = known.nums[(tenant, session_id)] = made
    if num not in known.dirty:
        conn.execute(_DIRTY, (num, covered[0].seq))
        known.dirty.add(num)
    return Pended([(_rowid(num, r.seq), r.data) for r in covered], known.data_version), known


def unindex(conn: sqlite3.Connection, keep: bool, tenant: str, session_id: str,
            from_seq: int, *, forget: bool) -> int:
    """In the transaction that deletes the session's rows from ``from_seq`` on, before
    it does: take the indexed ones out of the index, and the session's watermark back
    to ``from_seq`` when it is past it (the next appends use those positions again).
    ``forget``: the session goes, and its number and watermark with it. Returns how
    many of the rows were left to index."""
    state = read_state(conn)
    if not keep or not state.kept:
        _mark_stale(conn, state)
        return 0
    num = _session_num(conn, tenant, session_id, create=False)
    if num is None:
        return 0  # none of its rows was ever indexed
    found = conn.execute("SELECT from_seq FROM search_dirty WHERE num = ?", (num,)).fetchone()
    left_from = None if found is None else int(found[0])
    rows = conn.execute("SELECT seq, data FROM messages WHERE tenant = ? AND session_id = ? "
                        "AND seq >= ?", (tenant, session_id, from_seq)).fetchall()
    indexed = [(seq, data) for seq, data in rows if left_from is None or seq < left_from]
    unindex_rows(conn, state, num, tenant, session_id, indexed)
    if forget:
        conn.execute("DELETE FROM search_dirty WHERE num = ?", (num,))
        conn.execute("DELETE FROM search_sessions WHERE num = ?", (num,))
    elif left_from is not None and left_from > from_seq:
        conn.execute("UPDATE search_dirty SET from_seq = ? WHERE num = ?", (from_seq, num))
    return len(rows) - len(indexed)


def unindex_rows(conn: sqlite3.Connection, state: IndexState, num: int, tenant: str,
                 session_id: str, rows: Iterable[tuple[int, bytes]]) -> None:
    """In a write transaction: the session's rows ``(seq, data)`` taken out of the index,
    those it holds (covered by ``state``), given their words recomputed from the data."""
    token = tenant_token(tenant)
    gone = []
    for seq, data in rows:
        if state.covers(tenant, session_id, seq):
            text = indexed_text(data)
            if text:
                gone.append((_rowid(num, seq), text, token))
    conn.executemany(_UNINDEX, gone)


class Left(NamedTuple):
    """Rows left to index, read from the sessions' watermarks (``rows_left``)."""

    rows: list[tuple[int, str | None, bytes | None]]
    """Each row read: its FTS rowid, its tenant and its stored data, in rowid order (a
    watermark without its session's number: one entry at it, tenant and data None)."""
    marks: dict[int, int | None]
    """Each session read (by number): its watermark once these rows are indexed, the
    position after the last of them; None when nothing is left past them."""
    keys: dict[int, tuple[str, str]]
    """Each session read: its tenant and id."""

    def taken(self) -> int:
        """The rows read, and each watermark dropped without a row: 0 when nothing was
        left to index."""
        read = {at >> _SEQ_BITS for at, _tenant, _data in self.rows}
        return len(self.rows) + sum(1 for num, mark in self.marks.items()
                                    if mark is None and num not in read)


def rows_left(conn: sqlite3.Connection, limit: int) -> Left:
    """The first ``limit`` rows left to index, the sessions in number order, each from
    its watermark; fewer once their data reaches ``FLUSH_BYTES``: read row by row (and
    no row past that read), so a backlog of 9 MB pastes is never read into memory
    whole."""
    out: list[tuple[int, str | None, bytes | None]] = []
    marks: dict[int, int | None] = {}
    keys: dict[int, tuple[str, str]] = {}
    size = 0
    for num, from_seq, tenant, session_id in conn.execute(_WATERMARKS).fetchall():
        if len(out) >= limit or size >= FLUSH_BYTES:
            break
        if tenant is None:
            out.append((_rowid(num, from_seq), None, None))
            marks[num] = None
            continue
        keys[num] = (tenant, session_id)
        want = limit - len(out)
        got, last, full = 0, from_seq - 1, False
        cursor = conn.execute(_ROWS_FROM, (tenant, session_id, from_seq, want))
        try:
            for seq, data in cursor:
                out.append((_rowid(num, seq), tenant, data))
                got, last = got + 1, seq
                size += len(data)
                if size >= FLUSH_BYTES:
                    full = True
                    break
        finally:
            cursor.close()
        marks[num] = last + 1 if full or got == want else None
    return Left(out, marks, keys)


def pending_texts(found: Sequence[tuple[int, str | None, bytes | None]]
                  ) -> dict[int, tuple[bytes, str]]:
    """Rows left to index (``Left.rows``), each row's rowid -> its data and what to
    index it by."""
    return {at: (data, indexed_text(data)) for at, tenant, data in found
            if tenant is not None and data is not None}


def _move_marks(conn: sqlite3.Connection, marks: Mapping[int, int | None]) -> None:
    """In a write transaction: the sessions' watermarks moved on, or dropped (None)."""
    gone = [(num,) for num, mark in marks.items() if mark is None]
    if gone:
        conn.executemany("DELETE FROM search_dirty WHERE num = ?", gone)
    moved = [(mark, num) for num, mark in marks.items() if mark is not None]
    if moved:
        conn.executemany("UPDATE search_dirty SET from_seq = ? WHERE num = ?", moved)


def flush(conn: sqlite3.Connection, limit: int,
          prepared: Mapping[int, tuple[bytes, str]] | None = None) -> int:
    """In a write transaction: index up to ``limit`` rows left to index (fewer past
    ``FLUSH_BYTES`` of data), the sessions in number order, and move their watermarks
    past them; ``prepared`` (``pending_texts``, made before the transaction, so that
    the words are cut without holding the write lock) serves each row whose data it
    has unchanged. Returns ``Left.taken`` (0: nothing was left)."""
    state = read_state(conn)
    if not state.kept:
        return 0
    left = rows_left(conn, limit)
    if not left.marks:
        return 0
    prepared = prepared or {}
    fresh = pending_texts([row for row in left.rows
                           if prepared.get(row[0], (None,))[0] != row[2]])
    docs = []
    for at, tenant, data in left.rows:
        num, seq = at >> _SEQ_BITS, at & _SEQ_MASK
        if tenant is None or data is None:
            log.warning("search index: session number %d has a watermark and no session; "
                        "dropped", num)
            continue
        if not state.covers(*left.keys[num], seq):
            continue  # the build's
        _data, text = fresh.get(at) or prepared[at]
        if text:
            docs.append((at, text, tenant_token(tenant)))
    conn.executemany(_INDEX, docs)
    _move_marks(conn, left.marks)
    return left.taken()


def flush_handed(conn: sqlite3.Connection, texts: Mapping[int, tuple[bytes, str]]
                 ) -> set[int]:
    """In a write transaction: index the handed-off rows of ``texts`` (``pending_texts``)
    that are each session's next rows left to index, from its watermark on without a
    gap, and move the watermark past them (a row after a gap, one not handed off, waits
    for the rows read back); the caller has checked that each is still the row at its
    rowid (``IndexedSearch._observe``). Returns the rowids it took."""
    if not texts or not read_state(conn).kept:
        return set()
    by_num: dict[int, set[int]] = {}
    for at in texts:
        by_num.setdefault(at >> _SEQ_BITS, set()).add(at & _SEQ_MASK)
    docs = []
    taken: set[int] = set()
    marks: dict[int, int | None] = {}
    for num, seqs in sorted(by_num.items()):
        found = conn.execute("SELECT d.from_seq, ss.tenant, ss.session_id FROM search_dirty "
                             "AS d JOIN search_sessions AS ss ON ss.num = d.num "
                             "WHERE d.num = ?", (num,)).fetchone()
        if found is None:
            continue  # indexed already (a search's flush)
        from_seq, tenant, session_id = found
        token = tenant_token(tenant)
        seq = from_seq
        while seq in seqs:
            at = _rowid(num, seq)
            if texts[at][1]:
                docs.append((at, texts[at][1], token))
            taken.add(at)
            seq += 1
        if seq > from_seq:
            more = conn.execute(_ANY_FROM, (tenant, session_id, seq)).fetchone()
            marks[num] = seq if more else None
    conn.executemany(_INDEX, docs)
    _move_marks(conn, marks)
    return taken


def build_step(conn: sqlite3.Connection, batch: int) -> IndexState:
    """In a write transaction, one step of building the index: one that is not kept
    (stale, or of another ``WORDS_VERSION``) is emptied first; then the next ``batch``
    rows in key order after the position are indexed and the position moves past them.
    Returns the state after the step (``ready`` once no row is left)."""
    state = read_state(conn)
    if state.usable:
        return state
    if not state.kept:
        conn.execute("INSERT INTO search_words (search_words) VALUES ('delete-all')")
        conn.execute("DELETE FROM search_dirty")
        conn.execute("DELETE FROM search_sessions")
        conn.execute(_MARK_STALE.replace("'stale'", "'building'") + ", words = ?",
                     (WORDS_VERSION,))
        state = read_state(conn)
    if state.position is None:
        rows = conn.execute(_NEXT_ROWS.format(after=""), (batch,)).fetchall()
    else:
        rows = conn.execute(_NEXT_ROWS.format(after=_AFTER_POSITION),
                            (*state.position, batch)).fetchall()
    nums: dict[tuple[str, str], int] = {}
    docs = []
    for tenant, session_id, seq, data in rows:
        num = nums.get((tenant, session_id))
        if num is None:
            num = _session_num(conn, tenant, session_id, create=True)
            assert num is not None
            nums[(tenant, session_id)] = num
        text = indexed_text(data)
        if text:
            docs.append((_rowid(num, seq), text, tenant_token(tenant)))
    conn.executemany(_INDEX, docs)
    if len(rows) < batch:
        conn.execute("UPDATE search_state SET state = 'ready', tenant = NULL, "
                     "session_id = NULL, seq = NULL, done = done + ?", (len(rows),))
    else:
        tenant, session_id, seq, _data = rows[-1]
        conn.execute("UPDATE search_state SET tenant = ?, session_id = ?, seq = ?, "
                     "done = done + ?", (tenant, session_id, seq, len(rows)))
    return read_state(conn)


# ---------------------------------------------------------------- the store's side

class IndexedSearch:
    """``SQLiteStore``'s search primitives over the index (``_b_search``,
    ``_b_search_sessions``) and its upkeep (``build_search_index``)."""

    search_indexed: bool
    """Whether this store keeps and uses the index (its ``search`` option)."""
    _pending_count: int
    """Rows this store's appends left to index, as it counts them (``_count_left``)."""

    def atomic(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        raise NotImplementedError

    def _read_with(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """``read(conn)`` on a connection that may read now (``_fetch``'s)."""
        raise NotImplementedError

    def _in_transaction(self) -> bool:
        """Whether this thread is inside a transaction of ``atomic``."""
        raise NotImplementedError

    def _rows_at(self, tenant: str, session_id: str, seqs: Sequence[int]) -> list[Row]:
        """The session's rows at these positions, ascending."""
        raise NotImplementedError

    def _keyed_rows(self, found: Iterable[Sequence[Any]], keys: int
                    ) -> list[tuple[Any, ...]]:
        """A statement's results: ``keys`` leading values, then a ``Row`` made of the
        ``row_columns`` it selects after them."""
        raise NotImplementedError

    row_columns: str
    """The columns of a ``Row``, of the messages table aliased ``m``."""

    # ------------------------------------------------------------ upkeep

    def search_index_state(self) -> IndexState:
        """The index's state as stored (``ready``, ``building`` with its position and
        rows done, ``stale``)."""
        return _state(*self._fetch(_STATE, ())[0])

    def build_search_index(self, *, batch: int | None = None,
                           progress: Progress | None = None) -> int:
        """Build the search index, ``batch`` rows per transaction (``BUILD_BATCH``),
        calling ``progress(done, total)`` after each; resumes where a build stopped (its
        position is stored with each batch), and empties a stale index first. Returns
        the rows indexed by this call. Searches scan until it is done."""
        if not self.search_indexed:
            raise ValueError("this store was opened with search=off: it does not keep "
                             "a search index")
        batch = BUILD_BATCH if batch is None else batch
        if batch < 1:
            raise ValueError("batch must be >= 1")
        state = self.search_index_state()
        if state.usable:
            return 0
        start = state.done if state.kept else 0
        total = start + self._rows_to_index(state, None)
        while True:
            with self.atomic() as conn:
                self._rows_changed()  # a stale index is emptied, its numbers with it
                state = build_step(conn, batch)
            if progress is not None:
                progress(state.done, total)
            if state.state == "ready":
                return state.done - start

    def _rows_to_index(self, state: IndexState, at_most: int | None) -> int:
        """Rows the build has still to index (all of them for an index not kept)."""
        position = state.position if state.kept else None
        after = "" if position is None else _AFTER_POSITION
        found = self._fetch(f"SELECT count(*) FROM (SELECT 1 FROM messages{after} LIMIT ?)",
                            (*(position or ()), -1 if at_most is None else at_most))
        return int(found[0][0])

    def _flush_pending(self, stop: Callable[[], bool] | None = None) -> None:
        """Index every row left to index, ``FLUSH_AT`` per transaction (fewer past
        ``FLUSH_BYTES``), their words cut before it: first the rows appends handed off,
        then the others, read from the last commit (``flush`` checks the data). With
        ``stop`` (the indexer thread): until ``stop()``, and only while full batches
        are waiting, so that it does not index the next appends one or two at a time
        (a transaction each, and a tiny FTS5 segment each to merge). One thread flushes
        at a time: a search or an append that comes meanwhile waits for it, then finds
        little or nothing left, rather than cutting the same rows' words beside it
        (three threads cutting a backlog of 9 MB pastes at once starved the other
        tenants' requests of the GIL). Inside a transaction of this thread (which holds
        the write lock the flusher may be waiting for) the rows are indexed in it,
        without that wait."""
        batch = FLUSH_AT
        if self._in_transaction():
            with self.atomic() as conn:
                while taken := flush(conn, batch):
                    self._count_left(-taken)
            return
        drain = stop is None
        carried: dict[int, tuple[bytes, str]] = {}  # handed off, after a gap: words cut
        with self._flush_lock:
            while stop is None or not stop():
                if not drain and len(self._handoff) < FLUSH_AT and self._not_handed() < FLUSH_AT:
                    return  # the appends made during the last batch wake it again
                handed = self._take_handoff(batch)
                if handed:
                    # epochs only grow: a row of an earlier one is stale already (it is
                    # read back), and its words are not cut here
                    texts = pending_texts([(at, tenant, data) for at, tenant, data, e
                                           in handed if e == self._epoch])
                    with self.atomic() as conn:
                        epoch = self._observe(conn.execute(_DATA_VERSION).fetchone()[0])
                        valid = {at: texts[at] for at, _t, _d, e in handed
                                 if e == epoch and at in texts}
                        used = flush_handed(conn, valid)
                    self._count_left(-len(used))
                    carried.update((at, t) for at, t in valid.items() if at not in used)
                    continue
                left = self._read_with(functools.partial(rows_left, limit=batch))
                if not left.marks:
                    return
                prepared = {at: carried.pop(at) for at, _t, data in left.rows
                            if at in carried and carried[at][0] == data}
                prepared.update(pending_texts([row for row in left.rows
                                               if row[0] not in prepared]))
                del left
                with self.atomic() as conn:
                    taken = flush(conn, batch, prepared)
                self._count_left(-taken)
                if not taken:
                    return

    def _not_handed(self) -> int:
        """About how many rows left to index the handoff does not hold."""
        return self._recount() - len(self._handoff)

    def _count_left(self, added: int) -> int:
        """The rows this store's appends left to index, less what its flushes indexed
        and its removals took: ``added`` more (fewer when negative). Returns the new
        count. It can be high (a rolled-back transaction's rows, rows another process
        indexed): the indexer thread and an append that finds it past ``BACKLOG`` count
        them again in the database (``_recount``) before they act on it."""
        with self._handoff_lock:
            self._pending_count = max(0, self._pending_count + added)
            return self._pending_count

    def _recount(self) -> int:
        """The rows left to index, counted in the database (``_LEFT``: a seek per
        session with a watermark), which ``_pending_count`` takes as its new value."""
        left = int(self._fetch(_LEFT, ())[0][0])
        with self._handoff_lock:
            self._pending_count = left
        return left

    # ------------------------------------------------------------ the indexer thread

    def _init_indexer(self) -> None:
        self._indexer: threading.Thread | None = None
        self._indexer_lock = threading.Lock()
        self._indexer_wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._indexer_stop = False
        # rows handed off by appends: (FTS rowid, tenant, data, epoch), oldest first
        self._handoff: collections.deque[tuple[int, str, bytes, int]] = collections.deque()
        self._handoff_bytes = 0
        self._handoff_lock = threading.Lock()
        self._pending_count = 0
        self._last_append = 0.0  # time.monotonic() of the last append that left rows
        self._epoch = 0
        self._seen_version: int | None = None

    # ------------------------------------------------------------ the handoff

    def _observe(self, data_version: int) -> int:
        """Under the write lock, in a transaction: the handoff's epoch, moved on when
        ``data_version`` (the write connection's ``PRAGMA data_version``) says another
        connection committed since this store's last look. A row handed off in an epoch
        is the row at its rowid while the epoch lasts: stored rows never change, and a
        position is reused only after a removal, which moves the epoch on
        (``_rows_changed``) when it is this store's, and is another connection's
        commit otherwise."""
        if data_version != self._seen_version:
            self._seen_version = data_version
            self._epoch += 1
        return self._epoch

    def _rows_changed(self) -> None:
        """Under the write lock, in a transaction that removes rows (or empties the
        index): what was handed off before it is read from the database instead."""
        self._epoch += 1

    def _unindex(self, conn: sqlite3.Connection, tenant: str, session_id: str,
                 from_seq: int, *, forget: bool) -> None:
        """``unindex`` in the transaction that removes the session's rows from
        ``from_seq`` on, the handoff's epoch moved on with it (``_rows_changed``):
        every removal of rows goes through here."""
        self._rows_changed()
        self._count_left(-unindex(conn, self.search_indexed, tenant, session_id, from_seq,
                                  forget=forget))

    def _hand_off(self, tenant: str, pended: Pended, epoch: int) -> None:
        """After an append's commit: its rows' data for the indexer (each row up to
        ``HANDOFF_ROW_BYTES``, all of them up to ``HANDOFF_BYTES``; the others are read
        from the database when indexed)."""
        with self._handoff_lock:
            for at, data in pended.rows:
                size = len(data)
                if size > HANDOFF_ROW_BYTES or self._handoff_bytes + size > HANDOFF_BYTES:
                    continue
                self._handoff.append((at, tenant, data, epoch))
                self._handoff_bytes += size

    def _take_handoff(self, limit: int) -> list[tuple[int, str, bytes, int]]:
        """Up to ``limit`` handed-off rows, oldest first, off the handoff: fewer once
        their data reaches ``FLUSH_BYTES``, as ``rows_left``."""
        out: list[tuple[int, str, bytes, int]] = []
        size = 0
        with self._handoff_lock:
            while self._handoff and len(out) < limit and size < FLUSH_BYTES:
                item = self._handoff.popleft()
                self._handoff_bytes -= len(item[2])
                size += len(item[2])
                out.append(item)
        return out

    def _after_append(self, pending: int) -> None:
        """After an append's commit that left ``pending`` rows to index."""
        self._last_append = time.monotonic()
        if pending >= BACKLOG and (pending := self._recount()) >= BACKLOG:
            self._flush_pending()
        elif pending >= FLUSH_AT:
            with self._indexer_lock:
                if self._indexer_stop:
                    return
                if self._indexer is None:
                    self._indexer = threading.Thread(target=self._index_pending,
                                                     name="chathistory-search-index",
                                                     daemon=True)
                    self._indexer.start()
            self._indexer_wake.set()

    def _index_pending(self) -> None:
        """The indexer thread: index the pending rows whenever an append asks, in the
        appends' pauses (``QUIET_S``), a batch at a time while they last."""
        while True:
            self._indexer_wake.wait()
            self._indexer_wake.clear()
            while self._quiet():
                try:
                    self._flush_pending(self._appending)
                except Exception:  # the rows stay pending: the next batch or search retries
                    log.exception("search index: indexing the pending rows failed")
                    break
                if not self._appending():
                    break  # every full batch indexed
            if self._indexer_stop:
                return

    def _quiet(self) -> bool:
        """The indexer thread: wait until the store's appends have paused for
        ``QUIET_S``; False when the store stops the thread instead."""
        while not self._indexer_stop:
            quiet = time.monotonic() - self._last_append
            if quiet >= QUIET_S:
                return True
            time.sleep(QUIET_S - quiet)
        return False

    def _appending(self) -> bool:
        """Whether the indexer thread stops after its batch: an append came within
        ``QUIET_S``, or the store stops the thread."""
        return self._indexer_stop or time.monotonic() - self._last_append < QUIET_S

    def _stop_indexer(self) -> None:
        """Stop the indexer thread (after its current transaction)."""
        with self._indexer_lock:
            self._indexer_stop = True
            thread = self._indexer
        self._indexer_wake.set()
        if thread is not None:
            thread.join()

    def _ready_index(self) -> bool:
        """Whether searches use the index: kept by this store, ready, and with every
        pending row indexed first (a search sees every acknowledged message)."""
        if not self.search_indexed:
            return False
        found = self._fetch("SELECT state, words, EXISTS (SELECT 1 FROM search_dirty) "
                            "FROM search_state", ())
        state, words, pending = found[0]
        if state != "ready" or words != WORDS_VERSION:
            return False
        if pending:
            self._flush_pending()
        return True

    # ------------------------------------------------------------ the primitives

    def _b_search(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                  user: str | None, after: Cursor | None, limit: int
                  ) -> list[tuple[float, str, int, Row]] | None:
        if not self._ready_index():
            return None
        if spans is not None:
            return self._indexed_in_spans(tenant, query, match_expression(None, query), spans,
                                          user, after, limit)
        params: dict[str, Any] = {"tenant": tenant, "user": user, "candidates": RANK_LIMIT,
                                  "limit": limit}
        candidates = _CANDIDATES.format(user_join=_USER_JOIN if user is not None else "",
                                        user=_USER if user is not None else "")
        if after is not None:
            params.update(score=after[0], session_id=after[1], seq=after[2])
        sql = _RANKED.format(candidates=candidates, after=_AFTER if after is not None else "",
                             row=self.row_columns)
        found = self._over_tenant(sql, params, tenant, query)
        return [(score, sid, row.seq, row) for score, sid, row in self._keyed_rows(found, 2)]

    def _over_tenant(self, sql: str, params: dict[str, Any], tenant: str, query: Query
                     ) -> list[Any]:
        """``sql``'s rows with ``:match`` the query over ``tenant`` (``tenant_match``),
        the count that picks it and ``sql`` read in one snapshot."""
        def read(conn: sqlite3.Connection) -> list[Any]:
            return conn.execute(sql, {**params, "match": tenant_match(conn, tenant, query)}
                                ).fetchall()

        return self._read_with(functools.partial(in_snapshot, read=read))

    def _indexed_in_spans(self, tenant: str, query: Query, match: str, spans: Sequence[Span],
                          user: str | None, after: Cursor | None, limit: int
                          ) -> list[tuple[float, str, int, Row]]:
        """Within sessions: the newest matches of each (``SPAN_CANDIDATES`` in all),
        read and ranked by the reference score. (BM25 reads every match of each word to
        count them, once per rowid range: a page of 50 sessions, 50 times.)"""
        ids = json.dumps(sorted({sid for sid, _lo, _hi in spans}))
        nums = dict(self._fetch(_NUMS, {"ids": ids, "tenant": tenant}))
        if user is not None:
            mine = {sid for (sid,) in self._fetch(_USERS, {"ids": ids, "tenant": tenant,
                                                           "user": user})}
            nums = {sid: num for sid, num in nums.items() if sid in mine}
        ranges = [(nums[sid], lo, hi) for sid, lo, hi in spans if sid in nums and lo < hi]
        if not ranges:
            return []
        hits: list[int] = []
        if any(term.prefix for term in query.terms):
            hits = [at for (at,) in self._fetch(
                _IN_SPANS.format(what="search_words.rowid"), self._spans_params(
                    match, ranges, SPAN_CANDIDATES))]
        else:
            each = max(1, SPAN_CANDIDATES // len(ranges))
            for num, lo, hi in ranges:
                hits.extend(at for (at,) in self._fetch(_IN_RANGE, {
                    "match": match, "lo": _rowid(num, lo), "hi": _rowid(num, hi),
                    "candidates": each}))
        by_num: dict[int, list[int]] = {}
        for at in hits:
            by_num.setdefault(at >> _SEQ_BITS, []).append(at & _SEQ_MASK)
        sessions = {num: sid for sid, num in nums.items()}
        found: list[tuple[float, str, int, Row]] = []
        for num, seqs in by_num.items():
            sid = sessions[num]
            found.extend(_scored(query, sid, self._rows_at(tenant, sid, sorted(seqs))))
        return ranked_after(found, after, limit)

    @staticmethod
    def _spans_params(match: str, ranges: Sequence[tuple[int, int, int]], candidates: int
                      ) -> dict[str, Any]:
        return {"spans": json.dumps(ranges), "match": match, "candidates": candidates,
                "lo": min(_rowid(num, lo) for num, lo, _hi in ranges),
                "hi": max(_rowid(num, hi) for num, _lo, hi in ranges)}

    def _b_search_sessions(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                           limit: int) -> set[str] | None:
        session_ids = None if spans is None else [sid for sid, _lo, _hi in spans]
        if not self._ready_index():
            return None
        if session_ids is None:
            found = self._over_tenant(_NEWEST_SESSIONS, {"tenant": tenant, "limit": limit},
                                      tenant, query)
        else:  # within sessions: their rowid ranges (the tenant's sessions') scope it
            match = match_expression(None, query)
            if not any(term.prefix for term in query.terms):
                return {sid for sid, _num in self._fetch(_SESSIONS_MATCHING, {
                    "ids": json.dumps(list(session_ids)), "tenant": tenant, "match": match,
                    "limit": limit})}
            nums = self._fetch(_NUMS, {"ids": json.dumps(list(session_ids)), "tenant": tenant})
            if not nums:
                return set()
            found = self._fetch(
                "SELECT DISTINCT num FROM (" + _IN_SPANS.format(what="sp.num") + ") LIMIT :limit",
                {**self._spans_params(match, [(num, 0, _SEQ_MASK) for _sid, num in nums], -1),
                 "limit": limit})
        if not found:
            return set()
        return {sid for _num, sid in self._fetch(_SESSION_IDS, {
            "nums": json.dumps([num for (num,) in found]), "tenant": tenant})}


def _scored(query: Query, session_id: str, rows: Sequence[Row]
            ) -> Iterator[tuple[float, str, int, Row]]:
    """The rows that ``query`` matches (the reference, ``Query.matches``: the index
    found them; this holds if it ever held a word too many), with the reference score."""
    for row, found in matching_rows(query, rows):
        yield query.score(found), session_id, row.seq, row
