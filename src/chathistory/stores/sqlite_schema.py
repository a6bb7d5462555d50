"""The SQLite schema: its named steps (``MIGRATIONS``), oldest first.

``SQLiteStore`` applies the steps a file has not had, each in one transaction
together with its record in the ``migrations`` table (simonw/sqlite-utils style);
``chathistory migrate`` lists them. Append new steps; never edit a released one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from .backend import recent_key
from .model import SESSION_DECODER
from .regroup import regroup_spans

__all__ = ["MIGRATIONS"]


def _backfill_updated_at(conn: sqlite3.Connection) -> None:
    """Fill the new ``updated_at`` column from each session's payload, in key order,
    a batch at a time (in Python: the exact text ``recent_key`` writes)."""
    after: tuple[str, str] = ("", "")
    while True:
        batch = conn.execute("SELECT tenant, id, payload FROM sessions WHERE (tenant, id) > "
                             "(?, ?) ORDER BY tenant, id LIMIT 1000", after).fetchall()
        if not batch:
            return
        conn.executemany("UPDATE sessions SET updated_at = ? WHERE tenant = ? AND id = ?",
                         [(recent_key(SESSION_DECODER.decode(payload)), tenant, sid)
                          for tenant, sid, payload in batch])
        after = (batch[-1][0], batch[-1][1])


def _require_fts5(conn: sqlite3.Connection) -> None:
    """The search index needs FTS5 (in every common build of SQLite; not in all)."""
    options = {option for (option,) in conn.execute("PRAGMA compile_options")}
    if "ENABLE_FTS5" not in options:
        raise sqlite3.OperationalError(
            f"this SQLite ({sqlite3.sqlite_version}) was built without FTS5, which the "
            "search index (migration m004_search) needs")


def _regroup(conn: sqlite3.Connection) -> None:
    """Clear the group-start flags that a batch append of earlier releases left set
    (a result joined the batch's earlier messages to its call only in memory)."""
    sessions = {(tenant, sid): SESSION_DECODER.decode(payload) for tenant, sid, payload
                in conn.execute("SELECT tenant, id, payload FROM sessions")}

    def rows_of(key: tuple[str, str]) -> list[tuple[int, bytes]]:
        return [(seq, bytes(data)) for seq, data in conn.execute(
            "SELECT seq, data FROM messages WHERE tenant = ? AND session_id = ? "
            "AND instr(data, ?) > 0 ORDER BY seq", (*key, b'"tool_result"'))]

    def calls_of(key: tuple[str, str]) -> dict[str, int]:
        return dict(conn.execute("SELECT call_id, seq FROM calls WHERE tenant = ? "
                                 "AND session_id = ?", key).fetchall())

    for key, lo, hi in regroup_spans(sessions, rows_of, calls_of):
        conn.execute("UPDATE messages SET cut_ok = 0 WHERE tenant = ? AND session_id = ? "
                     "AND seq >= ? AND seq <= ? AND cut_ok", (*key, lo, hi))


def _pending_to_watermarks(conn: sqlite3.Connection) -> None:
    """The rows left to index become a watermark per session (``search_dirty``): its
    first row of the per-row list (``search_pending``). A later row of the session
    that was indexed already (a row handed off after one that was not could be) is
    taken out of the index, to be indexed again with the rest: the words are those of
    this release, which are the index's while it is kept (an index that is not is
    emptied and built again)."""
    from .sqlite_search import read_state, unindex_rows

    state = read_state(conn)
    firsts = conn.execute("SELECT id >> 32, min(id & 4294967295) FROM search_pending "
                          "GROUP BY id >> 32").fetchall()
    for num, first in firsts:
        conn.execute("INSERT INTO search_dirty (num, from_seq) VALUES (?, ?)", (num, first))
        key = conn.execute("SELECT tenant, session_id FROM search_sessions WHERE num = ?",
                           (num,)).fetchone()
        if not state.kept or key is None:
            continue
        left = {seq for (seq,) in conn.execute(
            "SELECT id & 4294967295 FROM search_pending WHERE id >= ? AND id < ?",
            (num << 32, (num + 1) << 32))}
        rows = conn.execute("SELECT seq, data FROM messages WHERE tenant = ? "
                            "AND session_id = ? AND seq > ?", (*key, first)).fetchall()
        unindex_rows(conn, state, num, key[0], key[1],
                     [(seq, data) for seq, data in rows if seq not in left])


MIGRATIONS: list[tuple[str, tuple[str | Callable[[sqlite3.Connection], None], ...]]] = [
    ("m001_initial", (
        # The whole Session as JSON text (json_extract works on it); the columns
        # beside it exist to be searched, and `version` for compare-and-set.
        """CREATE TABLE sessions (
            tenant TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL,
            created_at TEXT NOT NULL, user TEXT, parent_id TEXT, root_id TEXT NOT NULL,
            expires_at TEXT, payload TEXT NOT NULL,
            PRIMARY KEY (tenant, id)) WITHOUT ROWID""",
        "CREATE INDEX sessions_by_created ON sessions (tenant, created_at, id)",
        "CREATE INDEX sessions_by_user ON sessions (tenant, user, created_at, id)",
        "CREATE INDEX sessions_by_parent ON sessions (tenant, parent_id) "
        "WHERE parent_id IS NOT NULL",
        "CREATE INDEX sessions_by_root ON sessions (tenant, root_id)",
        "CREATE INDEX sessions_by_expiry ON sessions (expires_at) WHERE expires_at IS NOT NULL",
        # Clustered on the position: a range of a session is one contiguous
        # b-tree range. `cum_before` (tokens before the row) grows with `seq`,
        # so it needs no index of its own (one b-tree fewer written per append:
        # about a third of an append's cost); see SEQ_AT_CUM.
        # `data` last: the small columns stay on the b-tree page when a large
        # message spills into overflow pages.
        """CREATE TABLE messages (
            tenant TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
            id TEXT NOT NULL, role TEXT NOT NULL, tokens INTEGER NOT NULL,
            cum_before INTEGER NOT NULL, cut_ok INTEGER NOT NULL, orphan INTEGER NOT NULL,
            status INTEGER NOT NULL, version INTEGER NOT NULL, data BLOB NOT NULL,
            PRIMARY KEY (tenant, session_id, seq),
            FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
                ON DELETE CASCADE) WITHOUT ROWID""",
        "CREATE UNIQUE INDEX messages_by_id ON messages (tenant, session_id, id)",
        "CREATE INDEX messages_kept ON messages (tenant, session_id, seq) "
        "WHERE role IN ('system', 'developer')",
        """CREATE TABLE calls (
            tenant TEXT NOT NULL, session_id TEXT NOT NULL, call_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (tenant, session_id, call_id),
            FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
                ON DELETE CASCADE) WITHOUT ROWID""",
        "CREATE INDEX calls_by_seq ON calls (tenant, session_id, seq)",
        """CREATE TABLE status_overrides (
            tenant TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
            status INTEGER NOT NULL,
            PRIMARY KEY (tenant, session_id, seq),
            FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
                ON DELETE CASCADE) WITHOUT ROWID""",
        """CREATE TABLE assets (
            tenant TEXT NOT NULL, sha256 TEXT NOT NULL, mime_type TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (tenant, sha256))""",
        """CREATE TABLE asset_refs (
            tenant TEXT NOT NULL, sha256 TEXT NOT NULL, session_id TEXT NOT NULL,
            PRIMARY KEY (tenant, sha256, session_id),
            FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
                ON DELETE CASCADE) WITHOUT ROWID""",
        "CREATE INDEX asset_refs_by_session ON asset_refs (tenant, session_id)",
    )),
    ("m002_updated_at", (
        # order="recent": updated_at as recent_key() text, kept in step on every save
        "ALTER TABLE sessions ADD COLUMN updated_at TEXT NOT NULL DEFAULT ''",
        _backfill_updated_at,
        "CREATE INDEX sessions_by_updated ON sessions (tenant, updated_at, id)",
    )),
    # parallel calls stored as consecutive messages in one batch are one group
    ("m003_regroup", (_regroup,)),
    # The search index (sqlite_search.py): a contentless FTS5 table of each message's
    # words with its tenant's prefix, rowid num << 32 | seq; the sessions' numbers; the
    # rows appended since the last batch was indexed; and the index's state, which a
    # database with messages starts as 'building' (SQLiteStore.build_search_index
    # fills it, resumably; on open when it is small).
    ("m004_search", (
        _require_fts5,
        "CREATE VIRTUAL TABLE search_words USING fts5(words, content='', "
        "tokenize='ascii', detail=full)",
        # merge 16 segments of a level rather than 4: each batch's insert 54 -> 37 us a
        # message at 200,000 (merges are most of it), searches unchanged (0.03 ms a
        # rare word, 2.7 ms a common one's 10,000 newest), 13% more index before merges
        "INSERT INTO search_words (search_words, rank) VALUES ('automerge', 16)",
        """CREATE TABLE search_sessions (
            num INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL,
            session_id TEXT NOT NULL, UNIQUE (tenant, session_id))""",
        "CREATE TABLE search_pending (id INTEGER PRIMARY KEY)",
        """CREATE TABLE search_state (
            id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL,
            words INTEGER NOT NULL, tenant TEXT, session_id TEXT, seq INTEGER,
            done INTEGER NOT NULL)""",
        "INSERT INTO search_state (id, state, words, done) SELECT 1, CASE WHEN EXISTS "
        "(SELECT 1 FROM messages) THEN 'building' ELSE 'ready' END, 1, 0",
    )),
    # What is left to index is a watermark per session, written when the session turns
    # from indexed to not, instead of a row per appended message (a row and a page in
    # every append's commit): the session's rows from from_seq on are not indexed.
    ("m005_search_watermarks", (
        "CREATE TABLE search_dirty (num INTEGER PRIMARY KEY, from_seq INTEGER NOT NULL)",
        _pending_to_watermarks,
        "DROP TABLE search_pending",
    )),
    # The tenant in a column of its own, a token per row, instead of a prefix on each
    # word (sqlite_search.py): the words of ASCII text are given to FTS5 as the text is,
    # its tokenizer cutting them in C, and one tenant's words are not another's terms (50
    # tenants made FTS5's insert 88 us a ShareGPT message, against 29 with the column).
    # The index is built again from the messages (on open when small, else by
    # `chathistory migrate`); searches scan until it is ready.
    ("m006_search_tenant_column", (
        "DROP TABLE search_words",
        "CREATE VIRTUAL TABLE search_words USING fts5(words, tenant, content='', "
        "tokenize='ascii', detail=full)",
        "INSERT INTO search_words (search_words, rank) VALUES ('automerge', 16)",
        "DELETE FROM search_dirty",
        "UPDATE search_state SET state = CASE WHEN EXISTS (SELECT 1 FROM messages) "
        "THEN 'building' ELSE 'ready' END, tenant = NULL, session_id = NULL, seq = NULL, "
        "done = 0",
    )),
]
"""Named schema steps, oldest first: SQL statements, or functions given the connection
(inside the step's transaction). Append new ones; never edit a released one."""
