"""PostgreSQL schema: the tables (their DDL), the named migrations that create
and change them, ``migrate`` and the check of schema names."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg

from ..model import SESSION_DECODER
from ..regroup import regroup_spans
from ..search import WORDS_VERSION

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PER_MESSAGE = ("messages", "message_ids", "calls")  # partitioned with partitions=N

_SESSIONS = """
CREATE TABLE {s}.sessions (
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    created_iso text COLLATE "C" NOT NULL,  -- created_at.isoformat(): the listing order
    user_id     text COLLATE "C",
    parent_id   text COLLATE "C",
    root_id     text COLLATE "C" NOT NULL,
    expires_at  timestamptz,
    version     bigint NOT NULL,
    payload     json NOT NULL,              -- the whole Session, as msgspec wrote it
    PRIMARY KEY (tenant, session_id)
);
CREATE INDEX sessions_by_created ON {s}.sessions (tenant, created_iso, session_id);
CREATE INDEX sessions_by_user ON {s}.sessions (tenant, user_id, created_iso, session_id);
CREATE INDEX sessions_by_parent ON {s}.sessions (tenant, parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX sessions_by_root ON {s}.sessions (tenant, root_id);
CREATE INDEX sessions_by_expiry ON {s}.sessions (expires_at) WHERE expires_at IS NOT NULL;
"""

_MESSAGES = """
CREATE TABLE {s}.messages (
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    id          text COLLATE "C" NOT NULL,
    role        text COLLATE "C" NOT NULL,
    data        bytea NOT NULL,
    tokens      integer NOT NULL,
    cum_before  bigint NOT NULL,              -- non-decreasing in seq: binary-searchable
    cut_ok      boolean NOT NULL,
    orphan      boolean NOT NULL,
    status      smallint NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
){partition};
CREATE TABLE {s}.message_ids (                -- a message id is unique in its session
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, id)
){partition};
CREATE TABLE {s}.calls (                      -- tool calls made by the session's messages
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    call_id     text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, call_id)
){partition};
CREATE TABLE {s}.kept (                       -- positions of system and developer messages
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);
"""

_OTHERS = """
CREATE TABLE {s}.overrides (
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    status      smallint NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);
CREATE TABLE {s}.assets (
    tenant      text COLLATE "C" NOT NULL,
    sha256      text COLLATE "C" NOT NULL,
    media_type  text NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (tenant, sha256)
);
CREATE TABLE {s}.asset_refs (
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    sha256      text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, session_id, sha256)
);
CREATE INDEX asset_refs_by_sha ON {s}.asset_refs (tenant, sha256);
"""


def _m001_initial(conn: psycopg.Connection[Any], schema: str, partitions: int | None) -> None:
    s = quote_schema(schema)
    partition = "" if not partitions else " PARTITION BY HASH (tenant, session_id)"
    for script in (_SESSIONS, _MESSAGES.replace("{partition}", partition), _OTHERS):
        conn.execute(script.replace("{s}", s))
    for table in _PER_MESSAGE if partitions else ():
        for i in range(partitions or 0):  # (or 0: never reached without partitions)
            conn.execute(f"CREATE TABLE {s}.{table}_p{i} PARTITION OF {s}.{table} "
                         f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})")


def _m002_updated_at(conn: psycopg.Connection[Any], schema: str, partitions: int | None
                     ) -> None:
    """``updated_iso``: ``recent_key()`` of the session (the ``order="recent"`` key),
    backfilled from the payload, kept in step on every save."""
    s = quote_schema(schema)
    # the default: a process of the previous release (a rolling upgrade) can still
    # create sessions; they list last in recent order until their next save
    conn.execute(f"ALTER TABLE {s}.sessions ADD COLUMN updated_iso text COLLATE \"C\" "
                 "NOT NULL DEFAULT ''")
    # the same text as datetime.astimezone(UTC).isoformat(timespec="microseconds")
    conn.execute(f"UPDATE {s}.sessions SET updated_iso = to_char((payload->>'updated_at')"
                 "::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')")
    conn.execute(f"CREATE INDEX sessions_by_updated ON {s}.sessions "
                 "(tenant, updated_iso, session_id)")


def _m003_regroup(conn: psycopg.Connection[Any], schema: str, partitions: int | None
                  ) -> None:
    """Clear the group-start flags that a batch append of earlier releases left set
    (a result joined the batch's earlier messages to its call only in memory)."""
    s = quote_schema(schema)
    sessions = {(tenant, sid): SESSION_DECODER.decode(payload) for tenant, sid, payload
                in conn.execute(f"SELECT tenant, session_id, payload::text FROM {s}.sessions")}

    def rows_of(key: tuple[str, str]) -> list[tuple[int, bytes]]:
        return [(seq, bytes(data)) for seq, data in conn.execute(
            f"SELECT seq, data FROM {s}.messages WHERE tenant = %s AND session_id = %s "
            "AND position('\"tool_result\"'::bytea IN data) > 0 ORDER BY seq", key)]

    def calls_of(key: tuple[str, str]) -> dict[str, int]:
        return {call_id: seq for call_id, seq in conn.execute(
            f"SELECT call_id, seq FROM {s}.calls WHERE tenant = %s AND session_id = %s", key)}

    for key, lo, hi in regroup_spans(sessions, rows_of, calls_of):
        conn.execute(f"UPDATE {s}.messages SET cut_ok = false WHERE tenant = %s AND "
                     "session_id = %s AND seq >= %s AND seq <= %s AND cut_ok", (*key, lo, hi))


def _m004_listing_indexes(conn: psycopg.Connection[Any], schema: str, partitions: int | None
                           ) -> None:
    """The sessions' listing indexes become partial on ``updated_iso >= ''`` (true of
    every row), a condition only the listing statements state: a lookup by
    ``(tenant, session_id)`` can then use the primary key only. Without table
    statistics (a new table, autovacuum off) the planner found each session of an
    append or a read through one of these (``(tenant, ...)``: any of them fits the
    tenant), walking every entry of the tenant, dead ones included (each save leaves
    one), and a generic plan keeps that choice for the connection's life. (A process of
    an earlier release lists without the condition: by a scan, until it is upgraded.)"""
    s = quote_schema(schema)
    for name, columns in (("sessions_by_created", "tenant, created_iso, session_id"),
                          ("sessions_by_user", "tenant, user_id, created_iso, session_id"),
                          ("sessions_by_root", "tenant, root_id"),
                          ("sessions_by_updated", "tenant, updated_iso, session_id")):
        conn.execute(f"DROP INDEX {s}.{name}")
        conn.execute(f"CREATE INDEX {name} ON {s}.sessions ({columns}) "
                     "WHERE updated_iso >= ''")


SEARCH_CONFIG = "simple"
"""The text search configuration of a new schema's index: the words as the tokenizer
cut them (``search.words``), no stemming and no stop words."""
WORD_CHARS = 64
"""A word longer than this is indexed (and looked up) by its first ``WORD_CHARS``
characters; such a search checks its candidates' words in Python."""
_CONFIG_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_config(config: str) -> str:
    """``config`` when it names a text search configuration as this module writes it
    into SQL (``ValueError`` otherwise; whether the server has it is checked apart)."""
    if not isinstance(config, str) or not _CONFIG_NAME.fullmatch(config):
        raise ValueError(f"search_config must match {_CONFIG_NAME.pattern} (got {config!r})")
    return config


def search_vector(config: str) -> str:
    """The expression the search index holds for a ``messages`` row: its words
    (``words``: distinct, space-separated, as the engine's tokenizer cut them)
    and two markers, one of the row's session and one of its tenant. Only the tokenizer
    makes words; the markers start with ``!``, which no word holds, so no query word can
    match one. With ``simple`` the words are the lexemes as they are (no parser, no
    dictionary); another configuration (``english``) stems them and drops its stop
    words. A search states this expression as it is here, or the index is not used."""
    marks = "ARRAY['!s' || md5(md5(tenant) || session_id), '!t' || md5(tenant)]"
    if check_config(config) == "simple":
        return f"array_to_tsvector({marks} || string_to_array(words, ' '))"
    return (f"(to_tsvector('{config}'::regconfig, words) "
            f"|| array_to_tsvector({marks}))")


def search_index_name(config: str) -> str:
    return f"messages_search_{check_config(config)}"


def create_search_index(config: str, schema: str, concurrently: bool = False) -> str:
    """The statement creating the search index of ``config``: GIN over ``search_vector``,
    rows with words only (``words`` NULL: not indexed yet, see ``messages_unindexed``).
    GIN's pending list (``fastupdate``, on) takes an append's entries in one page write;
    without it an append cost ~290 us more of the server's CPU (65 distinct words, each a
    descent of the tree)."""
    how = "CONCURRENTLY " if concurrently else ""
    return (f"CREATE INDEX {how}{search_index_name(config)} ON {quote_schema(schema)}.messages "
            f"USING gin (({search_vector(config)})) WHERE words IS NOT NULL")


def _m005_search(conn: psycopg.Connection[Any], schema: str, partitions: int | None
                 ) -> None:
    """The search index (``search.py`` in this package): each message row's words
    (``words``, NULL until they are written: rows of earlier releases, and rows a
    ``search=off`` store writes), a GIN index over them, the rows still without words
    (``messages_unindexed``: a tenant with any is searched by a scan; the fill walks
    them), and ``search_index``: the index's configuration, the version of the words
    its rows hold (``search.WORDS_VERSION``: the engine's tokenizer) and where an
    interrupted fill stopped. Adding the column rewrites nothing; both indexes start
    empty."""
    s = quote_schema(schema)
    conn.execute(f"ALTER TABLE {s}.messages ADD COLUMN words text")
    conn.execute(f"CREATE INDEX messages_unindexed ON {s}.messages (tenant, session_id, seq) "
                 "WHERE words IS NULL")
    conn.execute(create_search_index(SEARCH_CONFIG, schema))
    conn.execute(f"CREATE TABLE {s}.search_index (one boolean PRIMARY KEY DEFAULT true "
                 "CHECK (one), config text NOT NULL, words_version integer NOT NULL, "
                 "fill_after json)")
    conn.execute(f"INSERT INTO {s}.search_index (config, words_version) VALUES (%s, %s)",
                 (SEARCH_CONFIG, WORDS_VERSION))


MIGRATIONS: list[tuple[str, Callable[[psycopg.Connection[Any], str, int | None], None]]] = [
    ("m001_initial", _m001_initial),
    ("m002_updated_at", _m002_updated_at),
    # parallel calls stored as consecutive messages in one batch are one group
    ("m003_regroup", _m003_regroup),
    # a session is found by its primary key, never by walking a listing index
    ("m004_listing_indexes", _m004_listing_indexes),
    # word search: each row's words, a GIN index over them, the rows without
    ("m005_search", _m005_search),
]
"""Named steps, applied in order, each in one transaction with its record."""


def migrate(conn: psycopg.Connection[Any], schema: str, partitions: int | None = None
            ) -> list[str]:
    """Apply the migrations ``schema`` lacks; returns their names. Safe to run from
    several processes at once: each step takes a transaction-scoped advisory lock."""
    s = quote_schema(schema)
    applied: list[str] = []
    for name, step in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                         (f"chathistory:{schema}",))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.migrations (name text PRIMARY KEY, "
                         "applied_at timestamptz NOT NULL DEFAULT now())")
            done = conn.execute(f"SELECT 1 FROM {s}.migrations WHERE name = %s", (name,))
            if done.fetchone() is not None:
                continue
            step(conn, schema, partitions)
            conn.execute(f"INSERT INTO {s}.migrations (name) VALUES (%s)", (name,))
            applied.append(name)
    return applied


def quote_schema(schema: str) -> str:
    """The schema's name quoted for SQL, once it matches ``_SCHEMA_NAME`` (a
    ``ValueError`` otherwise): the only identifier the statements are built from."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema must match {_SCHEMA_NAME.pattern} (got {schema!r})")
    return f'"{schema}"'

