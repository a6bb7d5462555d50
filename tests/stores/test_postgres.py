"""PostgreSQL-specific tests: migrations, a partitioned schema, writers in several
processes, and query plans that stay on indexes.

The whole conformance suite runs a second time here, on a schema whose messages
table is hash-partitioned (the ``store`` fixture below overrides conftest's for
this module only).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pair_shapes
import pytest
import test_conformance as conformance
from written_script import (
    assert_same_runs,
    checked_sessions,
    concurrent_work,
    concurrent_writers,
    count_as_written,
    random_script,
    run_script,
    session_reads,
)

from chathistory import Conflict, Message
from chathistory.stores import open_store
from chathistory.tokens import cached_count

psycopg = pytest.importorskip("psycopg")
from chathistory.stores.postgres import MIGRATIONS, PostgresStore, migrate  # noqa: E402
from chathistory.stores.postgres import store as postgres_store  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

for _name in dir(conformance):  # the conformance suite again, on a partitioned schema
    if _name.startswith("test_"):
        globals()[f"{_name}_partitioned"] = getattr(conformance, _name)


def _schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def _store(store_class: type[PostgresStore] = PostgresStore, **options: Any) -> PostgresStore:
    try:
        return store_class(PG_URL, counter="approx", **options)
    except psycopg.OperationalError as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL unreachable: {exc} (CI=true: server backends must be tested)")
        pytest.skip(f"PostgreSQL unreachable: {exc}")


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    s = _store(schema=_schema(), partitions=4, drop_schema_on_close=True)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def conn() -> Iterator[Any]:
    _store(schema=_schema(), drop_schema_on_close=True).close()  # skips when unreachable
    with psycopg.connect(PG_URL, autocommit=True) as c:
        yield c


# ---------------------------------------------------------------- schema


def _primary_keys(conn: Any, schema: str) -> dict[str, list[str]]:
    rows = conn.execute(
        "SELECT c.relname, a.attname FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE n.nspname = %s AND i.indisprimary AND c.relkind IN ('r', 'p') "
        "AND NOT c.relispartition ORDER BY c.relname, k.pos", (schema,)).fetchall()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


def test_migrate_an_empty_schema(conn: Any) -> None:
    schema = _schema()
    try:
        assert migrate(conn, schema) == [name for name, _ in MIGRATIONS]
        assert migrate(conn, schema) == []  # applied once, recorded
        recorded = [r[0] for r in conn.execute(f"SELECT name FROM {schema}.migrations")]
        assert recorded == [name for name, _ in MIGRATIONS]
        keys = _primary_keys(conn, schema)
        assert keys == {
            "asset_refs": ["tenant", "session_id", "sha256"],
            "assets": ["tenant", "sha256"],
            "calls": ["tenant", "session_id", "call_id"],
            "kept": ["tenant", "session_id", "seq"],
            "message_ids": ["tenant", "session_id", "id"],
            "messages": ["tenant", "session_id", "seq"],
            "migrations": ["name"],
            "overrides": ["tenant", "session_id", "seq"],
            "search_index": ["one"],
            "sessions": ["tenant", "session_id"],
        }
        indexes: dict[str, list[str]] = {}
        for table, index in conn.execute(
                "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = %s", (schema,)):
            indexes.setdefault(table, []).append(index)
        # one index per per-message table (plans never depend on statistics); the
        # search's are partial on conditions only its statements state (schema m005)
        for table in ("message_ids", "calls", "kept", "overrides"):
            assert indexes[table] == [f"{table}_pkey"]
        assert sorted(indexes["messages"]) == [
            "messages_pkey", "messages_search_simple", "messages_unindexed"]
        partial = dict(conn.execute(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN "
            "pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname LIKE 'messages\\_%%'", (schema,)).fetchall())
        assert partial == {"messages_pkey": None,
                           "messages_search_simple": "(words IS NOT NULL)",
                           "messages_unindexed": "(words IS NULL)"}
        assert sorted(indexes["sessions"]) == [
            "sessions_by_created", "sessions_by_expiry", "sessions_by_parent", "sessions_by_root",
            "sessions_by_updated", "sessions_by_user", "sessions_pkey"]
        assert sorted(indexes["asset_refs"]) == ["asset_refs_by_sha", "asset_refs_pkey"]
        types = dict(conn.execute(
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s", (schema,)).fetchall())
        assert types["messages.data"] == "bytea" and types["sessions.payload"] == "json"
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_m002_fills_updated_iso_from_the_payload(conn: Any) -> None:
    """A schema of the first release: ``updated_iso`` is filled with exactly the text
    ``recent_key`` gives, whatever the payload's UTC offset and precision."""
    import msgspec

    from chathistory.stores import Session
    from chathistory.stores.engine import recent_key

    schema = _schema()
    base = datetime(2025, 1, 1, tzinfo=UTC)
    updated = {"a": base + timedelta(hours=3),
               "b": (base + timedelta(hours=1, microseconds=5)).astimezone(
                   timezone(timedelta(hours=-5))),
               "c": base + timedelta(hours=2, seconds=1)}
    try:
        name, first = MIGRATIONS[0]
        assert name == "m001_initial"
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.migrations (name text PRIMARY KEY, "
                     "applied_at timestamptz NOT NULL DEFAULT now())")
        first(conn, schema, None)
        conn.execute(f"INSERT INTO {schema}.migrations (name) VALUES ('m001_initial')")
        for sid, when in updated.items():
            session = Session(id=sid, created_at=base, updated_at=when, root_id=sid)
            conn.execute(f"INSERT INTO {schema}.sessions (tenant, session_id, created_iso, "
                         "root_id, version, payload) VALUES ('default', %s, %s, %s, 0, %s)",
                         (sid, base.isoformat(), sid, msgspec.json.encode(session).decode()))
        assert migrate(conn, schema) == [name for name, _ in MIGRATIONS[1:]]
        stored = dict(conn.execute(f"SELECT session_id, updated_iso FROM {schema}.sessions"))
        assert stored == {sid: recent_key(Session(id=sid, updated_at=when))
                          for sid, when in updated.items()}
        store = PostgresStore(PG_URL, counter="approx", schema=schema)
        try:
            assert [s.id for s in store.list_sessions(order="recent").items] == ["a", "c", "b"]
            store.append("b", [Message.user("news")])
            assert [s.id for s in store.list_sessions(order="recent").items] == ["b", "a", "c"]
        finally:
            store.close()
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _migrate_in_child(schema: str) -> list[str]:
    with psycopg.connect(PG_URL, autocommit=True) as c:
        return migrate(c, schema)


def test_concurrent_first_migration(conn: Any) -> None:
    schema = _schema()
    try:
        with multiprocessing.get_context("spawn").Pool(6) as pool:
            results = pool.map(_migrate_in_child, [schema] * 6)
        # each step once, by whichever process took its lock first (one process may
        # apply the first step and another the rest), each process's steps in order
        names = [name for name, _ in MIGRATIONS]
        assert sorted(n for r in results for n in r) == sorted(names)
        assert all(r == sorted(r, key=names.index) for r in results)
        count = conn.execute(f"SELECT count(*) FROM {schema}.migrations").fetchone()[0]
        assert count == len(MIGRATIONS)
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_partitioned_messages(store: PostgresStore) -> None:
    with psycopg.connect(PG_URL) as c:
        strategy = c.execute(
            "SELECT p.partstrat, p.partnatts FROM pg_partitioned_table p "
            "JOIN pg_class c ON c.oid = p.partrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'messages'", (store.schema,)).fetchone()
        assert strategy == ("h", 2)
        parts = c.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass",
                          (f"{store.schema}.messages",)).fetchone()[0]
        assert parts == 4
    for i in range(8):  # sessions land in different partitions and read back alone
        store.create_session(f"s{i}", tenant=f"t{i % 3}")
        store.append(f"s{i}", [Message.user(f"hello {i}")], tenant=f"t{i % 3}")
    assert [m.text for m in store.tail("s5", 5, tenant="t2")] == ["hello 5"]


# ---------------------------------------------------------------- connecting


def test_from_url_and_open_store() -> None:
    schema = _schema()
    _store(schema=schema, drop_schema_on_close=True).close()  # skips when unreachable
    sep = "&" if "?" in PG_URL else "?"
    s = PostgresStore.from_url(f"{PG_URL}{sep}schema={schema}&pool_size=2",
                               drop_schema_on_close=True)
    try:
        assert s.schema == schema and s._pool.max_size == 2
        s.create_session("x")
        other = open_store(f"{PG_URL}{sep}schema={schema}", counter="approx")
        assert isinstance(other, PostgresStore) and other.get_session("x").id == "x"
        other.close()
    finally:
        s.close()


@pytest.mark.parametrize("bad", ["", "Upper", "a-b", 'x"; DROP TABLE y; --', "1abc", "a" * 64])
def test_schema_names_are_validated(bad: str) -> None:
    with pytest.raises(ValueError, match="schema must match"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", schema=bad)


def test_unreachable_server_fails_promptly() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/test")
        assert time.monotonic() - started < 10


# ---------------------------------------------------------------- many processes

WRITERS, APPENDS = 8, 15


def _writer(schema: str, w: int) -> list[int]:
    s = PostgresStore(PG_URL, counter="approx", schema=schema, pool_size=1)
    versions = []
    try:
        for k in range(APPENDS):
            batch = [Message.user(f"w{w} k{k}"), Message.assistant(f"w{w} k{k} reply")]
            versions.append(s.append("shared", batch))
            assert s.append("shared", batch) == versions[-1]  # a retry: nothing twice
    finally:
        s.close()
    return versions


def test_writers_in_many_processes() -> None:
    s = _store(schema=_schema(), drop_schema_on_close=True)
    try:
        s.create_session("shared")
        with multiprocessing.get_context("spawn").Pool(WRITERS) as pool:
            results = pool.starmap(_writer, [(s.schema, w) for w in range(WRITERS)])
        total = WRITERS * APPENDS
        assert sorted(v for r in results for v in r) == list(range(1, total + 1))
        for versions in results:
            assert versions == sorted(versions)
        stored = s.range("shared")
        assert len(stored) == 2 * total == len({m.id for m in stored})
        for w in range(WRITERS):  # each writer's order kept, each batch adjacent
            mine = [m.text for m in stored if m.text.startswith(f"w{w} ")]
            assert mine == [t for k in range(APPENDS) for t in (f"w{w} k{k}", f"w{w} k{k} reply")]
        session = s.get_session("shared")
        assert session.version == total and session.message_count == 2 * total
        with psycopg.connect(PG_URL) as c:
            rows = c.execute(f"SELECT seq, version, tokens, cum_before FROM {s.schema}.messages "
                             "ORDER BY seq").fetchall()
        assert [r[0] for r in rows] == list(range(2 * total))
        assert [r[1] for r in rows] == [v for v in range(1, total + 1) for _ in range(2)]
        cum = 0
        for _, _, tokens, cum_before in rows:
            assert cum_before == cum
            cum += tokens
        assert session.token_count == cum
    finally:
        s.close()


# ---------------------------------------------------------------- query plans


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def _positional(sql: str, params: Any) -> tuple[str, list[Any]]:
    """``sql`` with ``$n`` placeholders (for PREPARE) and its parameters in order."""
    if isinstance(params, dict):
        names = list(params)
        for i, name in enumerate(names, 1):
            sql = sql.replace(f"%({name})s", f"${i}")
        return sql, [params[name] for name in names]
    for i in range(1, len(params) + 1):
        sql = sql.replace("%s", f"${i}", 1)
    return sql, list(params)


def _plans(queries: dict[str, tuple[str, Any]], *settings: str, analyze: bool = False
           ) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(mode, name, plan)`` of each statement, custom and generic, explained in one
    transaction rolled back (DML is explained too), after ``SET`` of each setting."""
    with psycopg.connect(PG_URL) as c:
        cursor = psycopg.ClientCursor(c)
        for setting in settings:
            cursor.execute(f"SET {setting}")
        for mode in ("force_custom_plan", "force_generic_plan"):
            cursor.execute(f"SET plan_cache_mode = {mode}")
            for name, (sql, params) in queries.items():
                positional, values = _positional(sql, params)
                cursor.execute(f"PREPARE {name} AS {positional}")
                marks = ", ".join(["%s"] * len(values))
                options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
                cursor.execute(f"EXPLAIN ({options}) EXECUTE {name}({marks})", values)
                yield mode, name, cursor.fetchone()[0][0]["Plan"]
                cursor.execute(f"DEALLOCATE {name}")
        c.rollback()


def _check_plans(store: PostgresStore, queries: dict[str, tuple[str, Any]]) -> None:
    for mode, name, plan in _plans(queries, analyze=True):
        # the per-session tables (a window probe also reads its session's row in
        # ``sessions``, a one-row lookup: test_a_session_is_found_by_its_primary_key)
        scans = [nd for nd in _plan_nodes(plan)
                 if "Relation Name" in nd and nd["Node Type"] != "ModifyTable"
                 and nd["Relation Name"] != "sessions"]
        assert scans, (mode, name, plan)
        for node in scans:  # an index range or probe, never the whole session
            assert node["Node Type"] in ("Index Scan", "Index Only Scan"), (mode, name, node)
            touched = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
                       + node.get("Rows Removed by Index Recheck", 0))
            assert touched <= 100, (mode, name, node)


@pytest.mark.parametrize("partitions", [None, 4])
def test_reads_use_indexes_on_a_large_session(partitions: int | None) -> None:
    """Every per-session query is an index range or probe, with table statistics
    and without them (a new table, a bulk load, autovacuum off)."""
    s = _store(schema=_schema(), partitions=partitions, drop_schema_on_close=True)
    try:
        for i in range(100):  # small sessions beside one large one
            s.create_session(f"small{i}")
            s.append(f"small{i}", [*conformance.chat(4, f"s{i}"), *conformance.tool_turn(i)])
        s.create_session("big")
        msgs: list[Message] = [Message.system("be brief")]
        for i in range(2000):
            msgs += conformance.chat(4, f"t{i}") + conformance.tool_turn(i)
        for start in range(0, 20_000, 2000):
            s.append("big", msgs[start:start + 2000])
        session = s.get_session("big")
        n, tokens = session.message_count, session.token_count
        assert n == 20_000
        q, key = s._q, ("default", "big")
        queries: dict[str, tuple[str, Any]] = {
            "rows": (q.rows, (*key, n - 64, n)),
            "seq_at_cum": (q.seq_at_cum, {"tenant": key[0], "session_id": key[1],
                                          "cum": tokens - 8000}),
            "window_probe": (q.window_probe, {"tenant": key[0], "session_id": key[1],
                                              "budget": 300}),
            "kept_rows": (q.kept_rows, (*key, n)),
            "row_by_id": (q.row_by_id, (*key, msgs[12_345].id)),
            "find_calls": (q.find_calls, (["c1999a", "c5b", "nope"], *key, n)),
            "existing": (q.existing, ([msgs[7].id, "nope"], *key)),
            "clear_cuts": (q.clear_cuts, (*key, n - 5, n)),
            "set_status": (q.set_status, (1, *key, n - 6, n - 2)),
            "truncate_rows": (q.truncate_rows, (*key, n - 3)),
            "truncate_id": (q.truncate_id, (*key, msgs[-1].id)),
            "truncate_kept": (q.truncate_kept, (*key, n - 3)),
        }
        _check_plans(s, queries)  # no statistics yet: autovacuum is not assumed
        with psycopg.connect(PG_URL, autocommit=True) as c:
            c.execute(f"ANALYZE {s.schema}.messages, {s.schema}.message_ids, {s.schema}.calls")
        _check_plans(s, queries)
        for cum in (0, 1, 2, 777, tokens // 3, tokens - 8000, tokens - 1, tokens, tokens + 1):
            assert s._b_seq_at_cum(*key, cum) == _first_past(s, "big", cum), cum
        for budget in (0, 1, 300, 8000, tokens - 1, tokens, tokens + 5):
            found, rows = s._b_window_probe(*key, budget)  # one round trip: session and rows
            assert found == session
            first = 0 if tokens - budget <= 0 else _first_past(s, "big", tokens - budget)
            start = max(0, min((n if first is None else first) - 1, n - 1))
            assert [r.seq for r in rows] == list(range(start, n)), budget
            assert rows == s._b_rows(*key, start, n)
        assert s._b_window_probe("default", "nobody", 10) == (None, [])
        fork = s.fork("big", msgs[9_999].id)  # own rows from 10_000 on, after the shared ones
        s.append(fork.id, conformance.chat(30, "fork"))
        fork = s.get_session(fork.id)
        assert fork.message_count == 10_030
        base = fork.token_count - 200
        for cum in (0, base, base + 1, base + 100, fork.token_count, 10**9):
            assert s._b_seq_at_cum("default", fork.id, cum) == _first_past(s, fork.id, cum)
        assert s._b_seq_at_cum("default", "small0", 0) == 0
        assert s._b_seq_at_cum("default", "nobody", 0) is None
    finally:
        s.close()


def _first_past(store: PostgresStore, session_id: str, cum: int) -> int | None:
    """The answer of ``_b_seq_at_cum`` by brute force."""
    with psycopg.connect(PG_URL) as c:
        found = c.execute(f"SELECT min(seq) FROM {store.schema}.messages WHERE session_id = %s "
                          "AND cum_before >= %s", (session_id, cum)).fetchone()
    return found[0]


def test_a_session_is_found_by_its_primary_key() -> None:
    """Every statement that finds a session by its key goes through the primary key,
    never through a listing index (which fits the tenant alone, and would walk all of
    its sessions and dead entries), with and without statistics, in custom and generic
    plans (m004); the listing statements can still use their indexes."""
    s = _store(schema=_schema(), drop_schema_on_close=True)
    try:
        for i in range(300):
            s.create_session(f"s{i}", user=f"u{i % 3}")
        for k in range(5):  # dead session rows and index entries, as appends leave them
            s.append("s7", [Message.user(f"m{k}")])
        session = s.get_session("s7")
        q, key = s._q, ("default", "s7")
        _, version, expires_at, updated, payload = postgres_store.session_params(session)
        planned: dict[str, Any] = {
            "tenant": key[0], "session_id": key[1], "version": version + 1,
            "expires_at": expires_at, "updated": updated, "payload": payload,
            "expected": version, "created": session.created_at.isoformat(),
            "clear_lo": 0, "clear_hi": 0}
        row = postgres_store.Row(session.message_count, "x", "user", b"{}", 1,
                                 session.token_count, True, False, 0, version + 1)
        lookups: dict[str, tuple[str, Any]] = {
            "get_session": (q.get_session, key),
            "lock_session": (q.lock_session, key),
            "save_if": (q.save_if, (version + 1, None, updated, payload, *key, version)),
            "delete_session": (q.delete_session, key * q.delete_session_keys),
            "window_probe": (q.window_probe, {"tenant": key[0], "session_id": key[1],
                                              "budget": 300}),
        }
        for one in (False, True):
            params = {**planned, **postgres_store.rows_params([row], {}, [""])[0]}
            if not one:
                params = {**planned, "batch": postgres_store.batch_json([row], {}, [""])}
            lookups[f"append_{one}"] = (q.append_statement(one, True, True, True).statement,
                                        params)
        listings: dict[str, tuple[str, Any]] = {
            "list_created": (q.list_sessions[False, False, False], ("default", 50)),
            "list_recent": (q.list_sessions[True, False, True], ("default", "9", "s", 50)),
            "list_user": (q.list_sessions[False, True, True], ("default", "u1", "", "", 50)),
            "tree": (q.tree, key),
        }
        for analyzed in (False, True):
            if analyzed:
                with psycopg.connect(PG_URL, autocommit=True) as c:
                    c.execute(f"ANALYZE {s.schema}.sessions")
            for name, scans in _session_scans(lookups).items():
                assert [(nd["Node Type"], nd.get("Index Name")) for nd in scans] == [
                    ("Index Scan", "sessions_pkey")] * len(scans), (analyzed, name, scans)
                assert scans, name
            for name, scans in _session_scans(listings, "enable_seqscan = off").items():
                assert {nd["Node Type"] for nd in scans} <= {"Index Scan", "Bitmap Heap Scan"
                                                             }, (analyzed, name, scans)
    finally:
        s.close()


def _session_scans(queries: dict[str, tuple[str, Any]], *settings: str
                   ) -> dict[str, list[dict[str, Any]]]:
    """The scans of ``sessions`` in each statement's plans (``_plans``)."""
    return {f"{name} {mode}": [nd for nd in _plan_nodes(plan)
                               if nd.get("Relation Name") == "sessions"
                               and nd["Node Type"] != "ModifyTable"]
            for mode, name, plan in _plans(queries, *settings)}


def test_the_connection_stack_never_keeps_a_connection_from_a_waiting_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections given back wait on the store's stack, idle ones only; a caller
    waiting in the pool gets one given back meanwhile, also when it began to wait
    while the connection was being given, long before the pool's timeout; the stack
    goes back to the pool now and then, and on close."""
    from chathistory.stores.postgres import pool as pg_pool

    class Flipping(list[None]):
        """Empty for the first test of ``give``, then a waiting caller."""

        tests = 0

        def __bool__(self) -> bool:
            self.tests += 1
            return self.tests > 1 or len(self) > 1

    s = _store(schema=_schema(), drop_schema_on_close=True, pool_size=2, pool_timeout=5)
    try:
        connections = s._connections
        first, second = connections.take(), connections.take()
        assert connections.pool.get_stats()["pool_available"] == 0
        got: list[tuple[Any, float]] = []

        def waiter() -> None:
            started = time.perf_counter()
            conn = connections.take()
            got.append((conn, time.perf_counter() - started))

        for conn, race in ((first, False), (second, True)):
            thread = threading.Thread(target=waiter)
            thread.start()
            time.sleep(0.3)
            assert not got and connections._waiting
            if race:  # the caller seems not to wait yet when the connection is given
                connections._waiting = Flipping(connections._waiting)
            connections.give(conn)
            thread.join(30)
            assert connections._stack == []
            taken, waited = got.pop()
            # handed over (not taken from the pool after pool_timeout, 5 s): a bound that
            # holds at load 12
            assert taken is conn and waited < 4.0
        connections._waiting = []
        connections.give(first)
        assert connections._stack == [first]  # idle, nobody waits
        first.execute("BEGIN")
        connections.give(connections.take())  # in a transaction: to the pool (rolled back)
        assert connections._stack == []
        assert first.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        monkeypatch.setattr(pg_pool, "_RETURN_EVERY", 0.0)
        connections.give(second)
        assert connections._stack == []  # went back to the pool with the rest
        assert connections.pool.get_stats()["pool_available"] == 2
        s.append(s.create_session("x").id, [Message.user("hi")])  # the store still works
    finally:
        s.close()
    assert connections._stack == [] and connections.pool.closed

# ---------------------------------------------------------------- optimistic appends


def test_an_append_raced_between_plan_and_write_is_planned_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimistic append writes only if the session's version has not moved since
    it was read: a writer that gets in between makes it plan again on the new state."""
    from chathistory.stores.postgres import store as postgres

    s = _store(schema=_schema(), drop_schema_on_close=True)
    other = _store(schema=s.schema)
    try:
        s.create_session("race")
        first, mine, late = Message.user("first"), Message.user("mine"), Message.user("late")
        s.append("race", [first])
        planned = postgres._OptimisticTxn.write
        raced: list[int] = []

        def write_after_a_race(self: Any, *args: Any) -> None:
            if self.key == ("default", "race") and not raced and self.session.version == 1:
                raced.append(0)  # another writer appends after this plan read version 1
                raced[0] = other.append("race", [late])
            planned(self, *args)

        monkeypatch.setattr(postgres._OptimisticTxn, "write", write_after_a_race)
        assert s.append("race", [mine]) == 3  # planned twice: at version 1, then at 2
        assert raced == [2]
        assert [m.id for m in s.range("race")] == [first.id, late.id, mine.id]
        with psycopg.connect(PG_URL) as c:
            rows = c.execute(f"SELECT seq, version, tokens, cum_before FROM {s.schema}.messages "
                             "ORDER BY seq").fetchall()
        assert [(seq, version) for seq, version, _, _ in rows] == [(0, 1), (1, 2), (2, 3)]
        assert [cum for _, _, _, cum in rows] == [0, rows[0][2], rows[0][2] + rows[1][2]]
        assert s.append("race", [mine]) == 3  # a retry of an acknowledged append
    finally:
        other.close()
        s.close()


def test_appends_that_keep_losing_the_race_take_the_row_lock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chathistory.stores.postgres import store as postgres

    s = _store(schema=_schema(), drop_schema_on_close=True)
    other = _store(schema=s.schema)
    try:
        s.create_session("busy")
        planned = postgres._OptimisticTxn.write

        racing: list[bool] = []

        def always_raced(self: Any, *args: Any) -> None:
            if not racing:  # the other writer's own append is not raced
                racing.append(True)
                other.append("busy", [Message.assistant("in between")])
                racing.clear()
            planned(self, *args)

        locked: list[str] = []
        original = PostgresStore._append_locked

        def spy(self: PostgresStore, tenant: str, session_id: str, fn: Any) -> Any:
            locked.append(session_id)
            return original(self, tenant, session_id, fn)

        monkeypatch.setattr(postgres._OptimisticTxn, "write", always_raced)
        monkeypatch.setattr(PostgresStore, "_append_locked", spy)
        mine = Message.user("mine")
        version = s.append("busy", [mine])
        assert locked == ["busy"]
        assert version == postgres._OPTIMISTIC_TRIES + 1
        stored = s.range("busy")
        assert stored[-1].id == mine.id and len(stored) == version
    finally:
        other.close()
        s.close()


def test_a_session_deleted_and_created_again_is_not_written_from_an_old_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The recreated session reaches the version the plan read; its creation time
    tells it apart, so the plan is made again on the new session."""
    from chathistory.stores.postgres import store as postgres

    s = _store(schema=_schema(), drop_schema_on_close=True)
    other = _store(schema=s.schema)
    try:
        s.create_session("again")
        s.append("again", [Message.user("old incarnation, a longer text " * 5)])
        planned = postgres._OptimisticTxn.write
        newer = Message.user("new")

        def recreated_meanwhile(self: Any, *args: Any) -> None:
            if self.key == ("default", "again") and self.session.message_count == 1 and \
                    self.session.token_count > 20:
                other.delete_session("again")
                other.create_session("again", metadata={"incarnation": 2})
                assert other.append("again", [newer]) == 1  # the version the plan read
            planned(self, *args)

        monkeypatch.setattr(postgres._OptimisticTxn, "write", recreated_meanwhile)
        mine = Message.user("mine")
        assert s.append("again", [mine]) == 2
        session = s.get_session("again")
        assert session.metadata == {"incarnation": 2}
        assert [m.id for m in s.range("again")] == [newer.id, mine.id]
        counts = [cached_count(m, s.counter) for m in (newer, mine)]
        assert session.token_count == sum(counts)
    finally:
        other.close()
        s.close()


def test_appends_planned_on_the_session_as_this_process_wrote_it() -> None:
    """After its own append a store plans the next on the session it wrote (one round
    trip). When another process moved the session meanwhile, that plan is not written:
    nothing lost, no spurious conflict, and a retry stores nothing twice."""
    s = _store(schema=_schema(), drop_schema_on_close=True)
    other = _store(schema=s.schema)
    try:
        s.create_session("kept")
        a, b, c, d = (Message.user(f"{x} " * (i + 1)) for i, x in enumerate("abcd"))
        assert s.append("kept", [a]) == 1
        assert s._written[("default", "kept")].version == 1
        assert other.append("kept", [b]) == 2  # this store's copy is now stale
        assert s.append("kept", [c], expected_version=2) == 3  # not a Conflict
        assert s.append("kept", [c]) == 3  # a retry, planned on the copy it wrote
        assert other.append("kept", [d], expected_version=3) == 4
        with pytest.raises(Conflict):
            s.append("kept", [Message.user("e")], expected_version=3)
        session = s.get_session("kept")
        assert [m.id for m in s.range("kept")] == [a.id, b.id, c.id, d.id]
        assert session.version == 4
        assert session.token_count == sum(cached_count(m, s.counter) for m in (a, b, c, d))
        with psycopg.connect(PG_URL) as conn:
            rows = conn.execute(f"SELECT seq, version, tokens, cum_before FROM {s.schema}."
                                "messages ORDER BY seq").fetchall()
        assert [(seq, v) for seq, v, _, _ in rows] == [(0, 1), (1, 2), (2, 3), (3, 4)]
        cum = 0
        for _, _, tokens, cum_before in rows:
            assert cum_before == cum
            cum += tokens
    finally:
        other.close()
        s.close()


def test_m003_mends_group_flags_written_by_0_1_0(conn: Any) -> None:
    """A schema holding the group flags that 0.1.0's batch append stored (a group start
    between parallel calls answered in the same batch) is mended by m003."""
    schema = _schema()
    store = _store(schema=schema, drop_schema_on_close=True)
    try:
        pair_shapes.write_old_release_scenario(store)
        with psycopg.connect(PG_URL, autocommit=True) as c:
            for sid, seqs in pair_shapes.OLD_RELEASE_WRONG_FLAGS.items():
                c.execute(f'UPDATE "{schema}".messages SET cut_ok = true WHERE '
                          "session_id = %s AND seq = ANY(%s)", (sid, seqs))
            c.execute(f'DELETE FROM "{schema}".migrations WHERE name = %s', ("m003_regroup",))
            with pytest.raises(AssertionError):  # the old flags split the call group
                pair_shapes.check_old_release_scenario(store)
            assert migrate(c, schema) == ["m003_regroup"]
        pair_shapes.check_old_release_scenario(store)
    finally:
        store.close()


# ---------------------------------------------------------------- the one-round-trip path


class _OptimisticOnly(PostgresStore):
    """A store that never plans on its own copy of a session (``_append_as_written``):
    every append reads the session first, the optimistic way."""

    def _remember(self, key: Any, session: Any) -> None:
        return None


def _stored(store: PostgresStore, session_ids: list[str]) -> dict[str, Any]:
    """Every row of the schema (sessions without their timestamps), and what the reads
    of each session answer."""
    import msgspec

    from chathistory.stores import Session

    stamp = datetime(2000, 1, 1, tzinfo=UTC)
    out: dict[str, Any] = {}
    with psycopg.connect(PG_URL) as c:
        sessions = c.execute(f"SELECT session_id, user_id, parent_id, root_id, expires_at, "
                             f"version, payload::text FROM {store.schema}.sessions "
                             "ORDER BY session_id").fetchall()
        out["sessions"] = [(*row[:-1], msgspec.structs.replace(
            msgspec.json.decode(row[-1], type=Session), created_at=stamp, updated_at=stamp))
            for row in sessions]
        for table in ("messages", "message_ids", "calls", "kept", "overrides", "assets",
                      "asset_refs"):
            out[table] = c.execute(f"SELECT * FROM {store.schema}.{table} "
                                   "ORDER BY 1, 2, 3").fetchall()
    out.update(session_reads(store, session_ids))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_appends_planned_on_the_written_copy_store_what_the_optimistic_path_stores(
        seed: int, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same random operations (retries of stored ids, If-Match, two store objects
    writing one session in turn, forks, pops, marks, attachments, a session deleted and
    made again) through stores that plan on their own copy of a session when they can,
    and through stores that always read it first: the same answers, the same rows."""
    ops = random_script(seed, 300, png_bytes)
    names = sorted({op[2] for op in ops} | {op[4] for op in ops if op[0] == "fork"})
    outcomes = count_as_written(monkeypatch, PostgresStore, postgres_store._MISSED)
    stores: list[PostgresStore] = []
    try:
        for make in (PostgresStore, _OptimisticOnly):  # two store objects on one schema
            first = _store(make, schema=_schema(), drop_schema_on_close=True)
            stores += [first, _store(make, schema=first.schema)]
        fast, plain = stores[:2], stores[2:]
        fast_run = run_script(fast, ops), _stored(fast[0], names)
        plain_run = run_script(plain, ops), _stored(plain[0], names)
        assert plain[0]._written == {} and plain[1]._written == {}
        assert_same_runs(fast_run, plain_run, outcomes)
    finally:
        for s in reversed(stores):
            s.close()


@pytest.mark.parametrize("seed", [4, 5])
def test_one_row_statements_store_what_the_whole_batch_statement_stores(
        seed: int, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append of one row sends it as plain parameters, and every append's statement
    holds only the parts it needs (``append_statement``); the same random operations
    written with the whole statement and every batch as JSON (``append_if``, as
    before) give the same answers, rows and reads."""
    ops = random_script(seed, 300, png_bytes)
    ones: list[bool] = []
    rows_params = postgres_store.rows_params
    statement = postgres_store.Queries.append_statement

    def counted(rows: Any, calls: Any, words: Any) -> Any:
        params, one = rows_params(rows, calls, words)
        ones.append(one)
        return params, one

    def fast(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(postgres_store, "rows_params", counted)

    def plain(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(postgres_store, "rows_params", lambda rows, calls, words: (
            {"batch": postgres_store.batch_json(rows, calls, words)}, False))
        patch.setattr(postgres_store.Queries, "append_statement",
                      lambda q, *parts: statement(q, False, True, True, True))

    answers = _the_same_either_way(monkeypatch, ops, fast, plain)
    assert ones.count(True) > 50 and ones.count(False) > 50, ones
    assert sum(type(a) is int for a in answers) > 150


def _the_same_either_way(monkeypatch: pytest.MonkeyPatch, ops: list[tuple[Any, ...]],
                         fast: Callable[[pytest.MonkeyPatch], None],
                         plain: Callable[[pytest.MonkeyPatch], None]) -> list[Any]:
    """Runs the script (``_random_script``) on two store objects of a new schema, set
    up by ``fast``, then by ``plain``: the same answers, rows and reads."""
    names = sorted({op[2] for op in ops} | {op[4] for op in ops if op[0] == "fork"})
    results = []
    for setup in (fast, plain):
        with monkeypatch.context() as patch:
            setup(patch)
            first = _store(schema=_schema(), drop_schema_on_close=True)
            second = _store(schema=first.schema)
            try:
                results.append((run_script([first, second], ops), _stored(first, names)))
            finally:
                second.close()
                first.close()
    (fast_answers, fast_rows), (plain_answers, plain_rows) = results
    assert fast_answers == plain_answers
    assert fast_rows.keys() == plain_rows.keys()
    for key in fast_rows:
        assert fast_rows[key] == plain_rows[key], key
    return fast_answers


@pytest.mark.parametrize("seed", [6])
def test_appends_sent_through_libpq_store_what_psycopg_execute_stores(
        seed: int, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append's statement goes through ``wire.run_prepared`` (libpq's prepared
    calls); the same random operations through psycopg's ``conn.execute`` give the
    same answers, rows and reads."""
    ops = random_script(seed, 300, png_bytes)
    sent: list[str] = []
    run_prepared = postgres_store.run_prepared

    def counted(conn: Any, statement: Any, params: Any) -> int:
        sent.append(statement.statement)
        return run_prepared(conn, statement, params)

    def executed(conn: Any, statement: Any, params: Any) -> int:
        (value,) = conn.execute(statement.statement, params).fetchone()
        return int(value)

    _the_same_either_way(
        monkeypatch, ops,
        lambda patch: patch.setattr(postgres_store, "run_prepared", counted),
        lambda patch: patch.setattr(postgres_store, "run_prepared", executed))
    assert len(sent) > 150 and len(set(sent)) > 4, len(sent)


def test_run_prepared_answers_and_fails_as_psycopg_does(conn: Any) -> None:
    """``run_prepared``: the values it sends come back as psycopg's would, NUL in text
    is refused before anything is sent, a statement someone deallocated is prepared
    again, errors are psycopg's classes (a lost connection an ``OperationalError``),
    and a connection with ``prepare_threshold`` None goes through ``execute``."""
    from chathistory.errors import InvalidMessage
    from chathistory.stores.postgres.wire import Prepared, run_prepared

    conn.execute("CREATE TEMP TABLE wire_t (k text PRIMARY KEY, n bigint, b boolean, "
                 "d bytea, t timestamptz, j json)")
    insert = Prepared("WITH i AS (INSERT INTO wire_t VALUES (%(k)s, %(n)s, %(b)s, %(d)s, "
                      "%(t)s, %(j)s) RETURNING n) SELECT n + %(n)s FROM i")
    stamp = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    row = {"k": "é\u2028x", "n": 2**40, "b": True, "d": bytes(range(256)), "t": stamp,
           "j": '{"a": "\\u0000"}'}
    assert run_prepared(conn, insert, row) == 2**41
    assert conn.execute("SELECT k, n, b, d, t, j::text FROM wire_t").fetchone() == (
        row["k"], 2**40, True, row["d"], stamp, row["j"])
    with pytest.raises(InvalidMessage):
        run_prepared(conn, insert, {**row, "k": "a\x00b"})
    with pytest.raises(psycopg.errors.UniqueViolation):
        run_prepared(conn, insert, row)
    conn.execute("DEALLOCATE ALL")
    assert run_prepared(conn, insert, {**row, "k": "again", "n": 1, "b": False,
                                       "t": None}) == 2
    conn.prepare_threshold = None
    assert run_prepared(conn, insert, {**row, "k": "unprepared", "n": 3}) == 6
    conn.prepare_threshold = 5
    with psycopg.connect(PG_URL, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        run_prepared(conn, insert, {**row, "k": "lost"})


def test_concurrent_appends_planned_on_the_written_copy_store_what_the_optimistic_path_stores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two store objects, four threads, two sessions, with and without the one-round-trip
    path: every message once, in each writer's order, versions gapless, the same
    messages and totals either way (only the interleaving differs)."""
    work = concurrent_work()
    outcomes = count_as_written(monkeypatch, PostgresStore, postgres_store._MISSED)
    # plans after a lost race too (not the row lock for 2 s): races in the middle of the
    # one-round-trip path, not only around it
    monkeypatch.setattr(postgres_store, "_RACED_SECONDS", 0.0)
    results = []
    for make in (PostgresStore, _OptimisticOnly):
        writers = [_store(make, schema=_schema(), drop_schema_on_close=True)]
        try:
            writers.append(_store(make, schema=writers[0].schema))
            for sid in ("c0", "c1"):
                writers[0].create_session(sid)
            versions = concurrent_writers(writers, work)
            schema = writers[0].schema

            def rows_in_order(sid: str, session: Any, schema: str = schema) -> None:
                with psycopg.connect(PG_URL) as c:
                    rows = c.execute(f"SELECT seq, tokens, cum_before FROM {schema}"
                                     ".messages WHERE session_id = %s ORDER BY seq",
                                     (sid,)).fetchall()
                assert [r[0] for r in rows] == list(range(session.message_count))
                assert [r[2] for r in rows] == [sum(r[1] for r in rows[:k])
                                                for k in range(len(rows))]

            results.append(checked_sessions(writers, work, versions, rows_in_order))
        finally:
            for s in reversed(writers):
                s.close()
    assert "written" in outcomes and "missed" in outcomes, outcomes
    assert results[0] == results[1]
