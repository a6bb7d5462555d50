"""PostgreSQL statements: every query the store runs, rendered once per schema
(``Queries``), and the values they take and give (a session's columns, an
append's batch as one JSON document, sessions read from a cursor)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec
import psycopg

from ...model import KEPT_ROLES
from ..backend import recent_key
from ..model import SESSION_DECODER, Row, Session
from .pool import refuse_nul
from .schema import quote_schema
from .wire import Prepared

_ROW = "seq, id, role, data, tokens, cum_before, cut_ok, orphan, status, version"
NO_LIMIT = 2**62
LISTED = "updated_iso >= ''"  # true of every session; the listing indexes' condition


class Queries:
    """Every statement, rendered once for the store's (validated) schema."""

    def __init__(self, schema: str) -> None:
        s = quote_schema(schema)
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
        # LISTED: the condition of the listing indexes (schema m004), which no lookup by
        # key states, so that such a lookup can only use the primary key
        listing = f"SELECT payload::text FROM {s}.sessions WHERE {LISTED} AND tenant = %s"
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
        # a page's reads, one statement each, a probe per span (session_id, lo, hi)
        spans = ("SELECT k.n, r.* FROM unnest(%(ids)s::text[], %(los)s::bigint[], "
                 "%(his)s::bigint[]) WITH ORDINALITY AS k(id, lo, hi, n) CROSS JOIN LATERAL "
                 f"(SELECT {_ROW} FROM {m} WHERE tenant = %(tenant)s AND session_id = k.id "
                 "AND seq >= k.lo AND seq < k.hi AND ")
        self.first_user = spans + "role = 'user' ORDER BY seq LIMIT 1) AS r"
        # the tenant's sessions (a listing index), less the expired ones (the expiry index)
        self.count_sessions: dict[bool, str] = {}
        for by_user in (False, True):
            user = " AND user_id = %(user)s" if by_user else ""
            self.count_sessions[by_user] = (
                f"SELECT (SELECT count(*) FROM {s}.sessions WHERE {LISTED} AND "
                f"tenant = %(tenant)s{user}) - (SELECT count(*) FROM {s}.sessions WHERE "
                f"expires_at <= %(now)s AND tenant = %(tenant)s{user})")
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
        # An append's rows travel as one JSON document (``batch_json``) that the statement
        # unpacks: one text parameter instead of thirteen arrays, whose dumping cost psycopg
        # ~100 us per append, several times the statement's own work; a one-row append's
        # row as plain parameters (``one_row_params``: no JSON, the message bytes in binary).
        # A statement holds only the parts its append needs (``append_statement``): each
        # part costs the server even with nothing to do (a one-message append took ~250 us
        # of backend CPU with the clear, kept and calls parts, ~190 us without them).
        self._append: dict[tuple[bool, bool, bool, bool], Prepared] = {}
        self._insert_batch: dict[tuple[bool, bool], str] = {}
        for kept in (False, True):
            for calls in (False, True):
                self._insert_batch[kept, calls] = (
                    f"WITH doc AS (SELECT %(batch)s::jsonb AS d), "
                    f"{_inserts(s, False, kept, calls, False)} SELECT 1")
                for one in (False, True):
                    for clear in (False, True):
                        self._append[one, clear, kept, calls] = Prepared(_append_if(
                            s, one, clear, kept, calls))
        self.insert_batch = self._insert_batch[True, True]
        # an optimistic append in one statement (one implicit transaction): every write
        # happens only if the session is still at the version the append was planned on
        self.append_if = self._append[False, True, True, True].statement
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


    def append_statement(self, one: bool, clear: bool, kept: bool, calls: bool) -> Prepared:
        """``append_if`` with only the parts an append needs: ``one`` row given as
        plain parameters (``one_row_params``) rather than a batch, ``clear`` group starts
        to clear, ``kept`` system or developer rows, ``calls`` tool calls."""
        return self._append[one, clear, kept, calls]

    def insert_batch_for(self, kept: bool, calls: bool) -> str:
        """``insert_batch`` (under the row lock) with only the parts a batch needs."""
        return self._insert_batch[kept, calls]

_KEPT = ", ".join(f"'{role}'" for role in sorted(KEPT_ROLES))  # (constants of ours)


def _inserts(s: str, one: bool, kept: bool, calls: bool, guarded: bool) -> str:
    """The CTEs inserting an append's rows and ids, and its kept positions and its
    calls when it has any. ``one``: one row from plain parameters (else the rows of
    the JSON document ``doc``); ``guarded``: only where the CTE ``saved`` wrote."""
    where = " WHERE EXISTS (SELECT 1 FROM saved)" if guarded else ""
    if one:
        source = """(VALUES (%(seq)s::bigint, %(id)s::text, %(role)s::text, %(data)s::bytea,
                %(tokens)s::integer, %(cum_before)s::bigint, %(cut_ok)s::boolean,
                %(orphan)s::boolean, %(status)s::smallint, %(row_version)s::bigint,
                %(words)s::text)) AS b(
                seq, id, role, data, tokens, cum_before, cut_ok, orphan, status, version,
                words)"""
        data, calls_doc = "b.data", "%(calls)s::jsonb"
    else:
        source = """doc CROSS JOIN jsonb_to_recordset(doc.d -> 'r') AS b(
                seq bigint, id text, role text, data text, tokens integer,
                cum_before bigint, cut_ok boolean, orphan boolean, status smallint,
                version bigint, words text)"""
        data, calls_doc = "decode(b.data, 'hex')", "(SELECT d -> 'c' FROM doc)"
    parts = [f"""
        added AS (
            INSERT INTO {s}.messages (tenant, session_id, {_ROW}, words)
            SELECT %(tenant)s, %(session_id)s, b.seq, b.id, b.role, {data},
                b.tokens, b.cum_before, b.cut_ok, b.orphan, b.status, b.version, b.words
            FROM {source}{where}
            RETURNING id, seq, version, role
        ), added_ids AS (
            INSERT INTO {s}.message_ids (tenant, session_id, id, seq, version)
            SELECT %(tenant)s, %(session_id)s, id, seq, version FROM added
        )"""]
    if kept:
        parts.append(f"""added_kept AS (
            INSERT INTO {s}.kept (tenant, session_id, seq)
            SELECT %(tenant)s, %(session_id)s, seq FROM added WHERE role IN ({_KEPT})
        )""")
    if calls:
        parts.append(f"""added_calls AS (
            INSERT INTO {s}.calls (tenant, session_id, call_id, seq)
            SELECT %(tenant)s, %(session_id)s, c.key, c.value::bigint
            FROM jsonb_each_text({calls_doc}) AS c{where}
            ON CONFLICT (tenant, session_id, call_id) DO UPDATE SET seq = EXCLUDED.seq
        )""")
    return ", ".join(parts)


def _append_if(s: str, one: bool, clear: bool, kept: bool, calls: bool) -> str:
    """An optimistic append in one statement: the session saved only if it is still at
    the version (and creation) the append was planned on, everything else only where
    it was saved; answers 1 when it wrote, 0 when the session had moved."""
    named = "tenant = %(tenant)s AND session_id = %(session_id)s"
    doc = "" if one else "doc AS (SELECT %(batch)s::jsonb AS d), "
    cleared = f"""cleared AS (
            UPDATE {s}.messages SET cut_ok = false WHERE {named} AND seq >= %(clear_lo)s
            AND seq < %(clear_hi)s AND cut_ok AND EXISTS (SELECT 1 FROM saved)
        ), """ if clear else ""
    return f"""
        WITH {doc}saved AS (
            UPDATE {s}.sessions SET version = %(version)s, expires_at = %(expires_at)s,
                updated_iso = %(updated)s, payload = %(payload)s
            WHERE {named} AND version = %(expected)s AND created_iso = %(created)s
            RETURNING 1
        ), {cleared}{_inserts(s, one, kept, calls, True)}
        SELECT count(*) FROM saved"""


def session_params(session: Session) -> tuple[str, int, datetime | None, str, str]:
    payload = msgspec.json.encode(session).decode()
    return session.id, session.version, session.expires_at, recent_key(session), payload


_batch_encoder = msgspec.json.Encoder()


def batch_json(rows: Sequence[Row], calls: Mapping[str, int],
               words: Sequence[str | None]) -> str:
    """What an append writes besides its session, as the JSON document the insert
    statements unpack: ``r`` the rows (message JSON in hex: exact bytes whatever they
    hold) with their ``words`` (``search.row_words``; None when the store keeps no
    search index), ``c`` the calls."""
    for r in rows:
        refuse_nul(r.id)
        refuse_nul(r.role)
    for call_id in calls:
        refuse_nul(call_id)
    return _batch_encoder.encode({
        "r": [{"seq": r.seq, "id": r.id, "role": r.role, "data": r.data.hex(),
               "tokens": r.tokens, "cum_before": r.cum_before, "cut_ok": r.cut_ok,
               "orphan": r.orphan, "status": r.status, "version": r.version,
               "words": w} for r, w in zip(rows, words, strict=True)],
        "c": calls,
    }).decode()


def rows_params(rows: Sequence[Row], calls: Mapping[str, int], words: Sequence[str | None]
                ) -> tuple[dict[str, Any], bool]:
    """The parameters that carry an append's rows and calls to ``append_statement``,
    and whether they are ``one`` row's: a single row as plain parameters (its message
    bytes sent as they are), more as ``batch_json``; ``words`` as there."""
    if len(rows) != 1:
        return {"batch": batch_json(rows, calls, words)}, False
    (r,) = rows
    refuse_nul(r.id)
    refuse_nul(r.role)
    for call_id in calls:
        refuse_nul(call_id)
    return {"seq": r.seq, "id": r.id, "role": r.role, "data": r.data, "tokens": r.tokens,
            "cum_before": r.cum_before, "cut_ok": r.cut_ok, "orphan": r.orphan,
            "status": r.status, "row_version": r.version,
            "words": words[0],
            "calls": _batch_encoder.encode(calls).decode() if calls else None}, True


def position_runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """``[lo, hi)`` runs of consecutive positions covering ``seqs``."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][1] == seq:
            runs[-1] = (runs[-1][0], seq + 1)
        else:
            runs.append((seq, seq + 1))
    return runs


def sessions_of(cursor: psycopg.Cursor[Any]) -> list[Session]:
    return [SESSION_DECODER.decode(text) for (text,) in cursor]

