"""PostgresStore: sessions and messages in PostgreSQL (psycopg 3, a connection pool).

Every table's primary key starts with ``(tenant, session_id)`` (assets with
``(tenant, sha256)``), so either column can serve as a distribution column
(Citus) or partition key; ``partitions=N`` creates the per-message tables
``PARTITION BY HASH (tenant, session_id)``.

Every read the engine makes is an index lookup or range on one session, and the
plans do not depend on table statistics: each per-session table has exactly one
index that fits (its primary key; messages by id, the kept system rows and the
calls live in tables of their own), multi-key lookups probe key by key, and
"the first row past N tokens" is a binary search of primary-key probes. (With
several ``(tenant, session_id, ...)`` indexes on one table, a table without
fresh statistics - new, bulk-loaded, or autovacuum off - lets the planner pick
any of them and filter the whole session.)

An append is one transaction that locks the session row (``SELECT ... FOR
UPDATE``): writers to one session queue up, across processes too, while
different sessions never wait for each other. Acknowledged writes are committed
transactions, as durable as the server's ``fsync``/``synchronous_commit`` make them.

Sessions are listed by an index range: ``(tenant, created_iso, session_id)``, or
``(tenant, updated_iso, session_id)`` for ``order="recent"`` (``updated_iso`` is
``recent_key()``, written with every save). A search (``query=``) is an ``ILIKE``
over each listed session's messages (see ``_b_matching``): it scans.

Message JSON is kept as ``bytea``, byte for byte what the engine wrote. The
session is kept as ``json`` (not ``jsonb``, which rewrites ``1e20`` as an
integer and refuses ``\\u0000``) beside the columns that are searched.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from ..errors import ChatHistoryError, Conflict, InvalidMessage, MissingDependency
from ..model import KEPT_ROLES
from ..tokens import TokenCounter
from .base import AppendTxn, BaseStore
from .engine import like_pattern, recent_key, regroup_spans
from .model import SESSION_DECODER, Row, Session, make_row

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.abc import Buffer
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import args_row
    from psycopg.types.string import StrBinaryDumper, StrDumperUnknown
    from psycopg_pool import ConnectionPool
    from psycopg_pool.base import AttemptWithBackoff

except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency(exc.name or "psycopg", "postgres") from exc

__all__ = ["MIGRATIONS", "PostgresStore"]

T = TypeVar("T")


def _refuse_nul(text: str) -> None:
    if "\x00" in text:
        raise InvalidMessage("PostgreSQL text cannot hold NUL (\\u0000): not in an id, "
                             "a role, a user or a key", "$")


class _Text(StrDumperUnknown):
    """psycopg's own, refusing NUL with ``InvalidMessage`` (a 422) rather than its
    ``DataError`` (a 500), before anything is sent: a lookup or a write of an id
    with NUL is bad input, whatever the route. (JSON payloads escape NUL.)"""

    def dump(self, obj: str) -> Buffer | None:
        _refuse_nul(obj)
        return super().dump(obj)


class _BinaryText(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        _refuse_nul(obj)
        return super().dump(obj)


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_dumper(str, _BinaryText)
    conn.adapters.register_dumper(str, _Text)  # last: the one %s uses, as before
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_CONNECT_TIMEOUT = 3  # seconds: an unreachable server fails the constructor promptly
_RETRIES = 20  # an append that lost a deadlock is run again, this many times at most
_OPTIMISTIC_TRIES = 1  # optimistic plans an append tries before it takes the row lock
_RACED_SECONDS = 2.0  # after a lost race, appends to that session take the row lock
_WRITTEN_SESSIONS = 4096  # sessions kept as this process last appended to them
_MISSED = object()
_ROW = "seq, id, role, data, tokens, cum_before, cut_ok, orphan, status, version"
_NO_LIMIT = 2**62
_PER_MESSAGE = ("messages", "message_ids", "calls")  # partitioned with partitions=N

# ==================================================================== schema

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
    s = _quote(schema)
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
    s = _quote(schema)
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
    s = _quote(schema)
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


MIGRATIONS: list[tuple[str, Callable[[psycopg.Connection[Any], str, int | None], None]]] = [
    ("m001_initial", _m001_initial),
    ("m002_updated_at", _m002_updated_at),
    # parallel calls stored as consecutive messages in one batch are one group
    ("m003_regroup", _m003_regroup),
]
"""Named steps, applied in order, each in one transaction with its record."""


def migrate(conn: psycopg.Connection[Any], schema: str, partitions: int | None = None
            ) -> list[str]:
    """Apply the migrations ``schema`` lacks; returns their names. Safe to run from
    several processes at once: each step takes a transaction-scoped advisory lock."""
    s = _quote(schema)
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


def _quote(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema must match {_SCHEMA_NAME.pattern} (got {schema!r})")
    return f'"{schema}"'


# ==================================================================== queries


class _Queries:
    """Every statement, rendered once for the store's (validated) schema."""

    def __init__(self, schema: str) -> None:
        s = _quote(schema)
        key = "tenant = %s AND session_id = %s"
        m = f"{s}.messages"
        self.insert_session = (
            f"INSERT INTO {s}.sessions (tenant, session_id, created_iso, user_id, parent_id, "
            "root_id, expires_at, version, updated_iso, payload) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
        self.get_session = f"SELECT payload::text FROM {s}.sessions WHERE {key}"
        self.lock_session = f"{self.get_session} FOR UPDATE"
        self.save_session = (f"UPDATE {s}.sessions SET version = %s, expires_at = %s, "
                             f"updated_iso = %s, payload = %s WHERE {key}")
        self.save_if = f"{self.save_session} AND version = %s"
        listing = f"SELECT payload::text FROM {s}.sessions WHERE tenant = %s"
        self.list_sessions: dict[tuple[bool, bool, bool], str] = {}
        for recent in (False, True):  # by (order recent, user given, cursor given)
            order = (" ORDER BY updated_iso DESC, session_id DESC LIMIT %s" if recent
                     else " ORDER BY created_iso, session_id LIMIT %s")
            after = (" AND (updated_iso, session_id) < (%s, %s)" if recent
                     else " AND (created_iso, session_id) > (%s, %s)")
            for by_user in (False, True):
                user = " AND user_id = %s" if by_user else ""
                self.list_sessions[recent, by_user, False] = listing + user + order
                self.list_sessions[recent, by_user, True] = listing + user + after + order
        # a search: for each session (one probe each, as below), its first own row whose
        # JSON contains the pattern; COLLATE "C" folds ASCII letters only, like SQLite
        self.matching = (
            "SELECT k.id FROM unnest(%s::text[]) AS k(id) CROSS JOIN LATERAL "
            f"(SELECT 1 FROM {s}.messages WHERE tenant = %s AND session_id = k.id "
            "AND convert_from(data, 'UTF8') COLLATE \"C\" ILIKE %s ESCAPE '\\' LIMIT 1) AS hit")
        self.children = f"{listing} AND parent_id = %s"
        self.tree = f"{listing} AND root_id = %s"
        self.expired = f"SELECT tenant, session_id FROM {s}.sessions WHERE expires_at <= %s"
        per_session = ("messages", "message_ids", "kept", "calls", "overrides", "asset_refs")
        self.delete_session = (
            "WITH " + ", ".join(f"d_{t} AS (DELETE FROM {s}.{t} WHERE {key})"
                                for t in per_session)
            + f" DELETE FROM {s}.sessions WHERE {key}")
        self.delete_session_keys = len(per_session) + 1
        # many keys are looked up one equality probe each (a LATERAL subquery that is
        # not flattened), never with "= ANY(...)", which the planner may answer by
        # filtering the whole session when it believes sessions are small
        self.existing = (
            "SELECT k.id, i.version FROM unnest(%s::text[]) AS k(id) CROSS JOIN LATERAL "
            f"(SELECT version FROM {s}.message_ids WHERE {key} AND id = k.id OFFSET 0) AS i")
        self.find_calls = (
            "SELECT k.id, c.seq FROM unnest(%s::text[]) AS k(id) CROSS JOIN LATERAL "
            f"(SELECT seq FROM {s}.calls WHERE {key} AND call_id = k.id "
            "AND seq < %s OFFSET 0) AS c")
        at_seq = "tenant = o.tenant AND session_id = o.session_id AND seq = o.seq OFFSET 0"
        self.row_by_id = (
            f"SELECT r.* FROM {s}.message_ids o CROSS JOIN LATERAL "
            f"(SELECT {_ROW} FROM {m} WHERE {at_seq}) AS r "
            "WHERE o.tenant = %s AND o.session_id = %s AND o.id = %s")
        self.kept_rows = (
            f"SELECT r.* FROM {s}.kept o CROSS JOIN LATERAL "
            f"(SELECT {_ROW} FROM {m} WHERE {at_seq}) AS r "
            "WHERE o.tenant = %s AND o.session_id = %s AND o.seq < %s ORDER BY o.seq")
        self.rows = f"SELECT {_ROW} FROM {m} WHERE {key} AND seq >= %s AND seq < %s ORDER BY seq"
        # own positions are contiguous and cum_before never decreases along them: a
        # binary search of primary-key probes, O(log n), in one statement
        named = "tenant = %(tenant)s AND session_id = %(session_id)s"
        self.seq_at_cum = f"""
            WITH RECURSIVE search(lo, hi, top) AS (
                SELECT b.lo, b.top, b.top FROM (SELECT
                    (SELECT seq FROM {m} WHERE {named} ORDER BY seq LIMIT 1) AS lo,
                    (SELECT seq + 1 FROM {m} WHERE {named} ORDER BY seq DESC LIMIT 1) AS top
                ) AS b
              UNION ALL
                SELECT CASE WHEN p.cum_before >= %(cum)s THEN q.lo ELSE p.seq + 1 END,
                       CASE WHEN p.cum_before >= %(cum)s THEN p.seq ELSE q.hi END, q.top
                FROM search AS q CROSS JOIN LATERAL (
                    SELECT seq, cum_before FROM {m}
                    WHERE {named} AND seq = (q.lo + q.hi) / 2 OFFSET 0) AS p
                WHERE q.lo < q.hi
            )
            SELECT lo FROM search WHERE lo = hi AND lo < top"""
        # a window read in one round trip: the session, and its own rows from the one
        # before the first whose cum_before reaches token_count - budget. That first row
        # is found walking back from the newest row, over the rows the window reads anyway
        # (cum_before never decreases along seq), so this costs O(rows in the window).
        self.window_probe = f"""
            WITH sess AS (
                SELECT payload::text AS payload,
                       COALESCE((payload->>'token_count')::bigint, 0) - %(budget)s AS cum,
                       COALESCE((payload->>'message_count')::bigint, 0) AS n
                FROM {s}.sessions WHERE {named}
            ), first AS (
                SELECT CASE WHEN t.cum <= 0 THEN 0 ELSE COALESCE(
                    (SELECT seq + 1 FROM {m} WHERE {named} AND cum_before < t.cum
                     ORDER BY seq DESC LIMIT 1), 0) END AS seq
                FROM sess AS t
            )
            SELECT t.payload, r.* FROM sess AS t CROSS JOIN first AS f LEFT JOIN LATERAL (
                SELECT {_ROW} FROM {m} WHERE {named}
                AND seq >= GREATEST(0, LEAST(f.seq - 1, t.n - 1)) AND seq < t.n
                ORDER BY seq OFFSET 0
            ) AS r ON true"""
        self.clear_cuts = (f"UPDATE {m} SET cut_ok = false WHERE {key} "
                           "AND seq >= %s AND seq < %s AND cut_ok")
        self.restore_cuts = f"UPDATE {m} SET cut_ok = true WHERE {key} AND seq = ANY(%s)"
        # a batch's rows, kept positions and calls travel as one JSON document (``_batch``)
        # that the statement unpacks: one text parameter instead of thirteen arrays, whose
        # dumping cost psycopg ~100 us per append, several times the statement's own work
        def inserts(guarded: bool) -> str:  # guarded: only where the CTE "saved" wrote
            where = " WHERE EXISTS (SELECT 1 FROM saved)" if guarded else ""
            return f"""
            added AS (
                INSERT INTO {m} (tenant, session_id, {_ROW})
                SELECT %(tenant)s, %(session_id)s, b.seq, b.id, b.role, decode(b.data, 'hex'),
                    b.tokens, b.cum_before, b.cut_ok, b.orphan, b.status, b.version
                FROM doc CROSS JOIN jsonb_to_recordset(doc.d -> 'r') AS b(
                    seq bigint, id text, role text, data text, tokens integer,
                    cum_before bigint, cut_ok boolean, orphan boolean, status smallint,
                    version bigint){where}
            ), added_ids AS (
                INSERT INTO {s}.message_ids (tenant, session_id, id, seq, version)
                SELECT %(tenant)s, %(session_id)s, b.id, b.seq, b.version
                FROM doc CROSS JOIN jsonb_to_recordset(doc.d -> 'r') AS b(
                    id text, seq bigint, version bigint){where}
            ), added_kept AS (
                INSERT INTO {s}.kept (tenant, session_id, seq)
                SELECT %(tenant)s, %(session_id)s, k::bigint
                FROM doc CROSS JOIN jsonb_array_elements_text(doc.d -> 'k') AS k{where}
            ), added_calls AS (
                INSERT INTO {s}.calls (tenant, session_id, call_id, seq)
                SELECT %(tenant)s, %(session_id)s, c.key, c.value::bigint
                FROM doc CROSS JOIN jsonb_each_text(doc.d -> 'c') AS c{where}
                ON CONFLICT (tenant, session_id, call_id) DO UPDATE SET seq = EXCLUDED.seq
            )"""

        self.insert_batch = (f"WITH doc AS (SELECT %(batch)s::jsonb AS d), {inserts(False)} "
                             "SELECT 1")
        # an optimistic append in one statement (one implicit transaction): every write
        # happens only if the session is still at the version the append was planned on
        self.append_if = f"""
            WITH doc AS (SELECT %(batch)s::jsonb AS d), saved AS (
                UPDATE {s}.sessions SET version = %(version)s, expires_at = %(expires_at)s,
                    updated_iso = %(updated)s, payload = %(payload)s
                WHERE {named} AND version = %(expected)s AND created_iso = %(created)s
                RETURNING 1
            ), cleared AS (
                UPDATE {m} SET cut_ok = false WHERE {named} AND seq >= %(clear_lo)s
                AND seq < %(clear_hi)s AND cut_ok AND EXISTS (SELECT 1 FROM saved)
            ), {inserts(True)}
            SELECT count(*) FROM saved"""
        self.set_status = (f"UPDATE {m} SET status = %s WHERE {key} "
                           "AND seq >= %s AND seq < %s")
        self.set_overrides = (
            f"INSERT INTO {s}.overrides (tenant, session_id, seq, status) "
            "SELECT %s, %s, unnest(%s::bigint[]), %s "
            "ON CONFLICT (tenant, session_id, seq) DO UPDATE SET status = EXCLUDED.status")
        self.overrides = f"SELECT seq, status FROM {s}.overrides WHERE {key}"
        self.truncate_rows = f"DELETE FROM {m} WHERE {key} AND seq >= %s RETURNING id"
        self.truncate_id = f"DELETE FROM {s}.message_ids WHERE {key} AND id = %s"
        self.truncate_kept = f"DELETE FROM {s}.kept WHERE {key} AND seq >= %s"
        # the session's calls are filtered by position: a pop costs O(calls in the session)
        self.truncate_calls = f"DELETE FROM {s}.calls WHERE {key} AND seq >= %s"
        self.clear_all = [f"DELETE FROM {s}.{t} WHERE {key}" for t in per_session]
        # assets: the upsert locks an existing asset row, so a concurrent GC waits for
        # the append (and then sees its reference) instead of deleting under it
        self.keep_asset = (
            f"INSERT INTO {s}.assets (tenant, sha256, media_type, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (tenant, sha256) DO UPDATE SET media_type = assets.media_type")
        self.add_refs = (f"INSERT INTO {s}.asset_refs (tenant, session_id, sha256) "
                         "SELECT %s, %s, unnest(%s::text[]) ON CONFLICT DO NOTHING")
        self.get_asset = f"SELECT data FROM {s}.assets WHERE tenant = %s AND sha256 = %s"
        unused = (f"NOT EXISTS (SELECT 1 FROM {s}.asset_refs r "
                  "WHERE r.tenant = a.tenant AND r.sha256 = a.sha256)")
        self.lock_unused = (f"SELECT sha256 FROM {s}.assets a WHERE tenant = %s AND {unused} "
                            "ORDER BY sha256 FOR UPDATE")
        self.delete_unused = (f"DELETE FROM {s}.assets a WHERE tenant = %s "
                              f"AND sha256 = ANY(%s) AND {unused}")


def _session_params(session: Session) -> tuple[str, int, datetime | None, str, str]:
    payload = msgspec.json.encode(session).decode()
    return session.id, session.version, session.expires_at, recent_key(session), payload


_batch_encoder = msgspec.json.Encoder()


def _batch(rows: Sequence[Row], calls: Mapping[str, int]) -> str:
    """What an append writes besides its session, as the JSON document the insert
    statements unpack: ``r`` the rows (message JSON in hex: exact bytes whatever they
    hold), ``k`` the positions of system and developer messages, ``c`` the calls."""
    for r in rows:
        _refuse_nul(r.id)
        _refuse_nul(r.role)
    for call_id in calls:
        _refuse_nul(call_id)
    return _batch_encoder.encode({
        "r": [{"seq": r.seq, "id": r.id, "role": r.role, "data": r.data.hex(),
               "tokens": r.tokens, "cum_before": r.cum_before, "cut_ok": r.cut_ok,
               "orphan": r.orphan, "status": r.status, "version": r.version} for r in rows],
        "k": [r.seq for r in rows if r.role in KEPT_ROLES],
        "c": calls,
    }).decode()


def _runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """``[lo, hi)`` runs of consecutive positions covering ``seqs``."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][1] == seq:
            runs[-1] = (runs[-1][0], seq + 1)
        else:
            runs.append((seq, seq + 1))
    return runs


def _sessions(cursor: psycopg.Cursor[Any]) -> list[Session]:
    return [SESSION_DECODER.decode(text) for (text,) in cursor]


# ==================================================================== the store


class _Txn:
    """One append's view of its session, inside the transaction holding its row lock."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], tenant: str,
                 session_id: str, session: Session | None) -> None:
        self.q, self.conn = store._q, conn
        self.key = (tenant, session_id)
        self.session = session

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(self.q.existing, (list(ids), *self.key))
        return {i: v for i, v in cursor}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(self.q.find_calls, (list(call_ids), *self.key, _NO_LIMIT))
        return {c: seq for c, seq in cursor}

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        q, conn, key = self.q, self.conn, self.key
        _, version, expires_at, updated, payload = _session_params(session)
        with conn.pipeline():  # one round trip for all of it
            if clear is not None and clear[0] < clear[1]:
                conn.execute(q.clear_cuts, (*key, *clear))
            if rows or calls:
                conn.execute(q.insert_batch, {"tenant": key[0], "session_id": key[1],
                                              "batch": _batch(rows, calls)})
            for sha in sorted(assets):  # one order everywhere: no deadlocks between appends
                data, media_type = assets[sha]
                conn.execute(q.keep_asset, (key[0], sha, media_type, data))
            if assets:
                conn.execute(q.add_refs, (*key, sorted(assets)))
            conn.execute(q.save_session, (version, expires_at, updated, payload, *key))


class _Planned(Exception):
    """What an optimistic append's function asked to write (raised past the function's
    own return, so a retry can run it again from the start)."""


class _OptimisticTxn:
    """An append planned without a lock: the session and the batch's stored ids were
    read together in one round trip; ``write`` keeps what to store, which is then
    written by one statement only if the session's version has not moved."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any], tenant: str,
                 session_id: str, session: Session | None, asked: Sequence[str],
                 existing: dict[str, int]) -> None:
        self.q, self.conn = store._q, conn
        self.key = (tenant, session_id)
        self.session = session
        self._asked, self._existing = set(asked), existing
        self.planned: dict[str, Any] | None = None
        self.updated: Session | None = None

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        if self._asked.issuperset(ids):
            return {i: self._existing[i] for i in ids if i in self._existing}
        cursor = self.conn.execute(self.q.existing, (list(ids), *self.key))
        return {i: v for i, v in cursor}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        cursor = self.conn.execute(self.q.find_calls, (list(call_ids), *self.key, _NO_LIMIT))
        return {c: seq for c, seq in cursor}

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        if assets:
            raise _Planned  # attachments take the locked path (their upserts order locks)
        assert self.session is not None
        self.updated = session
        _, version, expires_at, updated, payload = _session_params(session)
        self.planned = {
            "tenant": self.key[0], "session_id": self.key[1], "version": version,
            "expires_at": expires_at, "updated": updated, "payload": payload,
            "expected": self.session.version,
            # and the same session: one deleted and created again restarts its versions
            "created": self.session.created_at.isoformat(),
            "clear_lo": clear[0] if clear else 0, "clear_hi": clear[1] if clear else 0,
            "batch": _batch(rows, calls),
        }


class _QuickRetry(AttemptWithBackoff):
    """Reconnect attempts every 0.1 s, backing off to at most every 0.5 s (psycopg_pool's
    own back off to minutes): the store serves again within half a second of its
    server being back."""

    INITIAL_DELAY = 0.1

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, 0.5)


class _Pool(ConnectionPool[Any]):
    """psycopg_pool's pool with ``_QuickRetry`` reconnect attempts (its one private
    hook for the back-off; ``test_postgres`` pins the behaviour)."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False
                        ) -> None:
        super()._add_connection(attempt or _QuickRetry(timeout=self.reconnect_timeout),
                                growing)


class PostgresStore(BaseStore):
    """A store in a PostgreSQL schema (``postgresql://user@host/db?schema=chathistory``).

    ``schema`` is created and migrated on first use. ``partitions=N`` (at
    creation only) hash-partitions the messages table by ``(tenant, session_id)``.
    ``drop_schema_on_close`` is for tests: ``close()`` drops the whole schema.
    ``pool_timeout``: how long a call waits for a pooled connection before it raises
    ``StoreUnavailable`` (the server is down, or every connection is busy). While the
    server is down the pool tries to reconnect every half second at most.
    """

    def __init__(self, url: str, counter: str | TokenCounter | None = None, *,
                 schema: str = "chathistory", pool_size: int = 10,
                 partitions: int | None = None, drop_schema_on_close: bool = False,
                 pool_timeout: float = 1.5) -> None:
        super().__init__(counter)
        _quote(schema)
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        if partitions is not None and not 1 <= partitions <= 4096:
            raise ValueError("partitions must be between 1 and 4096")
        self.schema = schema
        self.partitions = partitions
        self._q = _Queries(schema)
        self._drop_schema_on_close = drop_schema_on_close
        self._closed = False
        options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(url):
            options["connect_timeout"] = _CONNECT_TIMEOUT
        # connect once first: an unreachable server raises its own error, promptly
        with psycopg.connect(url, **options) as conn:
            migrate(conn, schema, partitions)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = _Pool(
            url, min_size=1, max_size=pool_size, kwargs=options, open=False,
            name=f"chathistory-{schema}", configure=_configure,
            timeout=pool_timeout)
        # (tenant, id) -> the session as an append of this process last wrote it: the
        # next append plans on it and writes in one round trip, if the session has not
        # moved since (checked by the write itself; a cache that is never trusted)
        self._written: dict[tuple[str, str], Session] = {}
        self._raced: dict[tuple[str, str], float] = {}  # (tenant, id) -> lost a race then
        self._pool.open(wait=True, timeout=10)

    def recover(self) -> None:
        """After a call found the server gone: test the idle pooled connections and
        replace the broken ones now, instead of failing one call per connection."""
        self._pool.check()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        """A store for ``postgresql://...``; ``schema``, ``pool_size``, ``partitions``
        may be given in the query string (other query parameters go to libpq);
        keyword ``options`` win over the URL."""
        parts = urlsplit(url)
        ours: dict[str, Any] = {}
        rest = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name == "schema":
                ours[name] = value
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
                with self._pool.connection() as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {_quote(self.schema)} CASCADE")
        finally:
            self._pool.close()

    def _execute(self, query: str, params: Sequence[Any] | Mapping[str, Any]
                 ) -> list[tuple[Any, ...]]:
        with self._pool.connection() as conn:
            return conn.execute(query, params).fetchall()

    def _rows(self, query: str, params: Sequence[Any]) -> list[Row]:
        with self._pool.connection() as conn:
            cursor = conn.cursor(binary=True, row_factory=args_row(Row))
            return cursor.execute(query, params).fetchall()

    def _fetch_sessions(self, query: str, params: Sequence[Any]) -> list[Session]:
        with self._pool.connection() as conn:
            return _sessions(conn.execute(query, params))

    # ---------------------------------------------------------------- sessions

    def _b_insert_session(self, session: Session) -> None:
        sid, version, expires_at, updated, payload = _session_params(session)
        params = (session.tenant, sid, session.created_at.isoformat(), session.user,
                  session.parent_id, session.root_id or sid, expires_at, version, updated,
                  payload)
        try:
            with self._pool.connection() as conn:
                conn.execute(self._q.insert_session, params)
        except pg_errors.UniqueViolation:
            raise Conflict(f"session {session.id!r} exists") from None

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        found = self._fetch_sessions(self._q.get_session, (tenant, session_id))
        return found[0] if found else None

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        sid, version, expires_at, updated, payload = _session_params(session)
        with self._pool.connection() as conn:
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

    def _b_matching(self, tenant: str, session_ids: Sequence[str], needle: str) -> set[str]:
        found = self._execute(self._q.matching,
                              (list(session_ids), tenant, like_pattern(needle)))
        return {sid for (sid,) in found}

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        return self._fetch_sessions(self._q.children, (tenant, session_id))

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        return self._fetch_sessions(self._q.tree, (tenant, root_id))

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        self._execute_only(self._q.delete_session,
                           (tenant, session_id) * self._q.delete_session_keys)

    def _execute_only(self, query: str, params: Sequence[Any]) -> None:
        with self._pool.connection() as conn:
            conn.execute(query, params)

    # ---------------------------------------------------------------- messages

    def _b_append(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                  ids: Sequence[str] = ()) -> T:
        # Optimistic first: read the session and the batch's stored ids in one round
        # trip, plan, and write everything in one statement that only takes effect if
        # the session is still at the version read (two round trips, no BEGIN/COMMIT).
        # When other writers keep moving the session, or attachments are written, the
        # append queues on the session's row lock instead.
        key = (tenant, session_id)
        raced = self._raced.get(key)
        if raced is not None and time.monotonic() - raced < _RACED_SECONDS:
            return self._append_locked(tenant, session_id, fn)  # writers queue up here
        cached = self._written.pop(key, None)
        if cached is not None:
            result = self._append_as_written(tenant, session_id, fn, ids, cached)
            if result is not _MISSED:
                return result  # type: ignore[return-value]
        for _ in range(_OPTIMISTIC_TRIES):
            try:
                with self._pool.connection() as conn:
                    with conn.pipeline():
                        session_cursor = conn.execute(self._q.get_session,
                                                      (tenant, session_id))
                        ids_cursor = conn.execute(self._q.existing,
                                                  (list(ids), tenant, session_id))
                    found = _sessions(session_cursor)
                    tx = _OptimisticTxn(self, conn, tenant, session_id,
                                        found[0] if found else None, ids,
                                        {i: v for i, v in ids_cursor})
                    result = fn(tx)
                    if tx.planned is None:  # nothing to write (a retry, or an error raised)
                        return result
                    (stored,) = conn.execute(self._q.append_if, tx.planned).fetchone() or (0,)
                    if stored:
                        self._remember(key, tx.updated)
                        return result
            except _Planned:  # attachments: not a race, no mark
                return self._append_locked(tenant, session_id, fn)
        # lost the race: other writers are busy on this session, queue on its row lock
        # (for a while, where a plan would mostly be made in vain)
        self._raced[key] = time.monotonic()
        while len(self._raced) > _WRITTEN_SESSIONS:
            try:
                self._raced.pop(next(iter(self._raced)), None)
            except (RuntimeError, StopIteration):
                break
        return self._append_locked(tenant, session_id, fn)

    def _append_as_written(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                           ids: Sequence[str], cached: Session) -> T | object:
        """One round trip: plan on the session as this process last wrote it, taking
        none of the batch's ids to be stored, and write if the session is still at
        that version and creation time. ``_MISSED`` when that cannot be known here:
        another writer moved the session, the append is a retry of a stored one (its
        ids are taken), or the plan raised (it may have read the stale copy)."""
        if cached.parent_id is not None:  # a fork checks its ancestors' ids: the long way
            return _MISSED
        try:
            with self._pool.connection() as conn:
                tx = _OptimisticTxn(self, conn, tenant, session_id, cached, ids, {})
                try:
                    result = fn(tx)
                except ChatHistoryError:
                    return _MISSED
                if tx.planned is None:
                    return _MISSED
                try:
                    (stored,) = conn.execute(self._q.append_if, tx.planned).fetchone() or (0,)
                except pg_errors.UniqueViolation:
                    return _MISSED
        except _Planned:
            return _MISSED
        if not stored:
            return _MISSED
        self._remember((tenant, session_id), tx.updated)
        return result

    def _remember(self, key: tuple[str, str], session: Session | None) -> None:
        """Keep the session as this append wrote it, for the next append's plan."""
        if session is None:
            return
        self._written[key] = session
        while len(self._written) > _WRITTEN_SESSIONS:
            try:
                self._written.pop(next(iter(self._written)), None)
            except (RuntimeError, StopIteration):  # another thread changed it meanwhile
                break

    def _append_locked(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T]) -> T:
        for attempt in range(_RETRIES):
            try:
                # pipeline mode: BEGIN travels with the lock, COMMIT with the writes
                with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
                    found = _sessions(conn.execute(self._q.lock_session, (tenant, session_id)))
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
        with self._pool.connection() as conn:
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
        with self._pool.connection() as conn, conn.transaction():
            if seqs:  # whole groups: a few runs of positions, each an index range
                with conn.cursor() as cursor:
                    cursor.executemany(self._q.set_status, [(status, tenant, session_id, lo, hi)
                                                            for lo, hi in _runs(seqs)])
            if overrides:
                conn.execute(self._q.set_overrides,
                             (tenant, session_id, list(overrides), status))

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        return {seq: status for seq, status in self._execute(self._q.overrides,
                                                             (tenant, session_id))}

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        key = (tenant, session_id)
        _, version, expires_at, updated, payload = _session_params(session)
        with self._pool.connection() as conn, conn.transaction():
            found = _sessions(conn.execute(self._q.lock_session, key))
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

    # ---------------------------------------------------------------- assets, retention

    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        found = self._execute(self._q.get_asset, (tenant, sha256))
        return bytes(found[0][0]) if found else None

    def _b_gc_assets(self, tenant: str) -> int:
        # lock the unreferenced assets, then delete those still unreferenced in a
        # fresh snapshot: an append that referenced one meanwhile has committed
        with self._pool.connection() as conn, conn.transaction():
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

