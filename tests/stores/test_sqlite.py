"""What is particular to SQLiteStore: migrations, files shared between
processes, durability across a crash, and query plans that stay on an index."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest
from written_script import assert_same_runs, random_script, run_script, session_reads

from chathistory import Attachment, History, KVStatus, Message
from chathistory.stores import Session, open_store
from chathistory.stores import sqlite as sqlite_module
from chathistory.stores.backend import recent_key
from chathistory.stores.sqlite import SQLiteStore

TABLES = {"migrations", "sessions", "messages", "calls", "status_overrides", "assets",
          "asset_refs", "search_sessions", "search_dirty", "search_state",
          # the FTS5 table (m004_search) and its shadow tables
          "search_words", "search_words_data", "search_words_idx", "search_words_docsize",
          "search_words_config"}
INDEXES = {"sessions_by_created", "sessions_by_user", "sessions_by_parent", "sessions_by_root",
           "sessions_by_expiry", "sessions_by_updated", "messages_by_id", "messages_kept",
           "calls_by_seq", "asset_refs_by_session"}


def schema(path: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return {name: (kind, sql) for kind, name, sql in conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}


def migrations(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT name, applied_at FROM migrations ORDER BY name").fetchall()


# ---------------------------------------------------------------- migrations


def test_migrating_an_empty_database_builds_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    found = schema(path)
    assert {n for n, (kind, _) in found.items() if kind == "table"} == TABLES
    assert {n for n, (kind, _) in found.items() if kind == "index"} == INDEXES
    assert "WHERE role IN ('system', 'developer')" in found["messages_kept"][1]
    assert [name for name, _ in migrations(path)] == [n for n, _ in sqlite_module.MIGRATIONS]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    applied = migrations(path)
    SQLiteStore(path).close()  # opening again changes nothing
    assert migrations(path) == applied and schema(path) == found


def test_a_failing_migration_leaves_no_trace(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.db"
    SQLiteStore(path).close()
    before = schema(path)
    bad = ("m999_broken", ("CREATE TABLE half_done (a INTEGER)", "THIS IS NOT SQL"))
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", [*sqlite_module.MIGRATIONS, bad])
    with pytest.raises(sqlite3.OperationalError):
        SQLiteStore(path)
    assert schema(path) == before  # the table of the failed step was rolled back with it
    assert "m999_broken" not in [name for name, _ in migrations(path)]


def test_a_database_from_before_m002_lists_in_recent_order(tmp_path: Path) -> None:
    """A file written by the first schema (no updated_at column) migrates: the column
    is filled from each payload (any UTC offset, with or without microseconds)."""
    path = tmp_path / "old.db"
    name, statements = sqlite_module.MIGRATIONS[0]
    assert name == "m001_initial"
    base = datetime(2025, 1, 1, tzinfo=UTC)
    updated = {"a": base + timedelta(hours=3),
               "b": (base + timedelta(hours=1, microseconds=5)).astimezone(
                   timezone(timedelta(hours=-5))),
               "c": base + timedelta(hours=2, seconds=1)}
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for statement in statements:
            assert isinstance(statement, str)
            conn.execute(statement)
        conn.execute("INSERT INTO migrations VALUES ('m001_initial', "
                     "'2025-01-01T00:00:00.000000+00:00')")
        for sid, when in updated.items():  # as the first release wrote them
            session = Session(id=sid, created_at=base, updated_at=when, root_id=sid)
            conn.execute("INSERT INTO sessions (version, created_at, user, parent_id, root_id, "
                         "expires_at, payload, tenant, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (0, base.isoformat(), None, None, sid, None,
                          msgspec.json.encode(session).decode(), "default", sid))
    conn.close()
    store = SQLiteStore(path, counter="approx")
    assert [n for n, _ in migrations(path)] == [n for n, _ in sqlite_module.MIGRATIONS]
    assert [s.id for s in store.list_sessions(order="recent").items] == ["a", "c", "b"]
    stored = dict(store._conn.execute("SELECT id, updated_at FROM sessions").fetchall())
    assert stored == {sid: recent_key(store.get_session(sid)) for sid in updated}
    store.append("b", [Message.user("news")])  # kept in step from now on
    assert [s.id for s in store.list_sessions(order="recent").items] == ["b", "a", "c"]
    page = store.list_sessions(order="recent", limit=2)
    rest = store.list_sessions(order="recent", limit=2, cursor=page.next_cursor)
    assert [s.id for s in page.items + rest.items] == ["b", "a", "c"]
    assert [s.id for s in store.list_sessions(query="NEWS").items] == ["b"]
    store.close()


def test_listing_plans_use_an_index(tmp_path: Path) -> None:
    store = _filled(tmp_path)
    listing = ("SELECT payload FROM sessions WHERE tenant = ? AND (updated_at, id) < (?, ?) "
               "ORDER BY updated_at DESC, id DESC LIMIT ?")
    for analyzed in (False, True):
        if analyzed:
            store._conn.execute("ANALYZE")
        plan = [row[3] for row in store._conn.execute(
            "EXPLAIN QUERY PLAN " + listing, ("default", "9", "z", 10))]
        assert plan == ["SEARCH sessions USING INDEX sessions_by_updated "
                        "(tenant=? AND (updated_at,id)<(?,?))"], plan
    store.close()


def test_connection_settings(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", synchronous="full", timeout=2)
    conn = store._conn
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2000
    store.close()
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "s.db", synchronous="OFF")  # would risk the file on power loss


def test_from_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///relative.db", counter="approx")
    assert isinstance(relative, SQLiteStore) and relative.path == "relative.db"
    relative.close()
    assert (tmp_path / "relative.db").exists()
    absolute = SQLiteStore.from_url(f"sqlite:///{tmp_path}/abs.db?synchronous=FULL&timeout=3")
    assert absolute.path == f"{tmp_path}/abs.db"
    assert (absolute.synchronous, absolute.timeout) == ("FULL", 3.0)
    absolute.close()
    memory = SQLiteStore.from_url("sqlite:///:memory:")
    assert memory.path == ":memory:"
    memory.close()
    for bad in ("sqlite://", "sqlite:///", "postgres:///x.db", "sqlite:///x.db?cache=big"):
        with pytest.raises(ValueError):
            SQLiteStore.from_url(bad)


# ---------------------------------------------------------------- durability


def test_a_reopened_store_sees_everything(tmp_path: Path, png_bytes: bytes) -> None:
    path = tmp_path / "r.db"
    store = SQLiteStore(path, counter="approx")
    s = store.create_session("s", user="u", metadata={"m": 1}, ttl=3600)
    msgs = [Message.system("sys"), Message.user("pic", Attachment.from_bytes(png_bytes)),
            Message.assistant("", [{"id": "c1", "name": "f", "arguments": {"x": 1}}]),
            Message.tool_result("c1", "done"), Message.assistant("ok")]
    store.append(s.id, msgs)
    store.mark(s.id, [msgs[4].id], KVStatus.MARKED)
    fork = store.fork(s.id, msgs[2].id)
    store.append(fork.id, [Message.tool_result("c1", "other")])
    store.update_session(s.id, state={"k": [1, 2]})
    before = {sid: (store.get_session(sid), store.range(sid), store.window(sid, 500),
                    store.tail(sid, 10, include_marked=True)) for sid in (s.id, fork.id)}
    store.close()

    again = SQLiteStore(path, counter="approx")
    for sid, expected in before.items():
        assert (again.get_session(sid), again.range(sid), again.window(sid, 500),
                again.tail(sid, 10, include_marked=True)) == expected
    assert again.get_asset(msgs[1].attachments[0].sha256) == png_bytes
    assert [t.id for t in again.lineage(fork.id)] == [s.id, fork.id]
    assert again.get_session(s.id).expires_at == before[s.id][0].expires_at
    again.close()


def _append_and_report(path: str, conn: object) -> None:
    store = SQLiteStore(path, counter="approx")
    for i in range(100_000):
        m = Message.user(f"acked {i}")
        store.append("crash", [m])
        conn.send(m.id)  # type: ignore[attr-defined]


def test_acknowledged_appends_survive_a_killed_process(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    with SQLiteStore(path) as store:
        store.create_session("crash")
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_append_and_report, args=(path, sender))
    child.start()
    acked = [receiver.recv() for _ in range(200)]
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join()
    while receiver.poll():
        acked.append(receiver.recv())
    with SQLiteStore(path) as store:
        stored = [m.id for m in store.range("crash")]
        assert stored[:len(acked)] == acked  # every acknowledged append, in order
        assert store.count("crash") == len(stored) == store.get_session("crash").version


def _writer(path: str, worker: int, n: int, start: object) -> None:
    store = SQLiteStore(path, counter="approx", timeout=60)
    start.wait()  # type: ignore[attr-defined]  # both processes write at the same time
    for k in range(n):
        batch = [Message.user(f"p{worker} k{k}"), Message.assistant(f"p{worker} k{k} reply")]
        store.append("shared", batch)
        store.append("shared", batch)  # a retry: stores nothing
    store.close()


def test_two_processes_append_to_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with SQLiteStore(path) as store:
        store.create_session("shared")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    workers = [ctx.Process(target=_writer, args=(path, w, 150, start)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    with SQLiteStore(path) as store:
        stored = store.range("shared")
        assert len(stored) == 2 * 150 * 2 == len({m.id for m in stored})
        for w in range(2):  # each process's messages in its order, pairs adjacent
            mine = [m.text for m in stored if m.text.startswith(f"p{w} ")]
            assert mine == [t for k in range(150) for t in (f"p{w} k{k}", f"p{w} k{k} reply")]
        texts = [m.text for m in stored]
        assert all(texts[i + 1] == texts[i] + " reply" for i in range(0, len(texts), 2))
        assert store.get_session("shared").version == 2 * 150


@pytest.mark.parametrize("change", ["clear", "pop"])
def test_pop_reads_again_a_session_another_store_changed_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """Another store empties or pops the session between pop's read of the session and
    its read of the rows: pop reads both again (it raised IndexError on the empty
    rows, and a pop of the row popped meanwhile would find a stale one)."""
    path = tmp_path / "two.db"
    mine, other = SQLiteStore(path, counter="approx"), SQLiteStore(path, counter="approx")
    mine.create_session("s")
    mine.append("s", [Message.user("first"), Message.user("second")])
    real = mine.get_session
    reads: list[int] = []

    def stale(*args: object, **kwargs: object) -> Session:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        if not reads:
            getattr(other, change)("s")
        reads.append(found.message_count)
        return found

    monkeypatch.setattr(mine, "get_session", stale)
    popped = mine.pop("s")
    if change == "clear":
        assert popped is None and reads == [2, 0]
    else:
        assert popped is not None and popped.text == "first" and reads == [2, 1]
    assert mine.range("s") == [] and other.get_session("s").message_count == 0
    mine.close()
    other.close()


def test_a_writer_waits_for_another_process_then_proceeds(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    store = SQLiteStore(path, counter="approx", timeout=5)
    store.create_session("s")
    # stands for another process
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    started = time.monotonic()
    assert store.append("s", [Message.user("after the other writer")]) == 1
    assert time.monotonic() - started >= 0.25
    impatient = SQLiteStore(path, counter="approx", timeout=0.1)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        impatient.append("s", [Message.user("gives up")])
    other.execute("ROLLBACK")
    assert store.count("s") == 1
    for s in (store, impatient):
        s.close()
    other.close()


def test_memory_database_across_threads() -> None:
    store = SQLiteStore(":memory:", counter="approx")
    sids = [store.create_session().id for _ in range(8)]

    def write(sid: str) -> None:
        for i in range(25):
            store.append(sid, [Message.user(f"{i}")])

    threads = [threading.Thread(target=write, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [store.count(sid) for sid in sids] == [25] * 8
    store.close()


# ---------------------------------------------------------------- reads stay on an index


def _filled(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "big.db", counter="approx")
    for sid in ("a", "b", "c"):
        store.create_session(sid)
        msgs: list[Message] = [Message.system("sys")]
        for i in range(300):
            msgs += [Message.user(f"q {i} " + "w " * (i % 13)),
                     Message.assistant("", [{"id": f"{sid}{i}", "name": "f", "arguments": {}}]),
                     Message.tool_result(f"{sid}{i}", "r " * (i % 5)),
                     Message.assistant(f"a {i}")]
        for start in range(0, len(msgs), 200):
            store.append(sid, msgs[start:start + 200])
    return store


READS = {
    "rows": (sqlite_module.ROWS, ("default", "b", 100, 140)),
    "kept": (sqlite_module.KEPT, ("default", "b", 900)),
    "by id": (sqlite_module.BY_ID, ("default", "b", "x")),
    "seq at cum": (sqlite_module.SEQ_AT_CUM, ("default", "b", 5000, 256)),
    "bisect cum": (sqlite_module.BISECT_CUM, ("default", "b", 0, 900, 5000)),
    "find calls": (sqlite_module.FIND_CALLS, ('["b1", "b2"]', "default", "b", 900)),
    "existing": (sqlite_module.EXISTING, ('["x", "y"]', "default", "b")),
}


@pytest.mark.parametrize("analyzed", [False, True], ids=["no stats", "analyzed"])
def test_read_plans_use_an_index(tmp_path: Path, analyzed: bool) -> None:
    store = _filled(tmp_path)
    if analyzed:  # the plans must not change once the planner has statistics
        store._conn.execute("ANALYZE")
    for name, (sql, params) in READS.items():
        plan = [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        steps = [p.split() for p in plan if p.startswith(("SEARCH", "SCAN", "BLOOM"))]
        on_tables = [p for p in steps if p[1] in ("messages", "calls", "m", "c")]
        assert on_tables, (name, plan)
        for step in on_tables:  # never "SCAN messages", never a Bloom filter built over it
            assert step[0] == "SEARCH" and step[2] == "USING", (name, plan)
            assert step[3] in ("PRIMARY", "INDEX", "COVERING"), (name, plan)
        assert not any("TEMP B-TREE" in p or p.startswith("BLOOM") for p in plan), (name, plan)
    store.close()


def test_seq_at_cum_matches_a_scan(tmp_path: Path) -> None:
    store = _filled(tmp_path)
    rows = store._b_rows("default", "b", 0, 10**9)
    total = rows[-1].cum_before + rows[-1].tokens

    def expected(cum: int) -> int | None:
        return next((r.seq for r in rows if r.cum_before >= cum), None)

    # near the end (the short scan), far back (the bisection), and both edges
    probes = {-5, 0, 1, total - 1, total, total + 1, *range(0, total + 50, 97)}
    probes |= {r.cum_before + d for r in rows[::37] for d in (-1, 0, 1)}
    for cum in sorted(probes):
        assert store._b_seq_at_cum("default", "b", cum) == expected(cum), cum
    assert store._b_seq_at_cum("default", "nobody", 10) is None
    fork = store.fork("b", rows[500].id)  # a fork without rows of its own
    assert store._b_seq_at_cum("default", fork.id, 1) is None
    store.append(fork.id, [Message.user("own")])
    own = store._b_rows("default", fork.id, 0, 10**9)
    assert [r.seq for r in own] == [501]
    assert store._b_seq_at_cum("default", fork.id, own[0].cum_before) == 501
    assert store._b_seq_at_cum("default", fork.id, own[0].cum_before + 1) is None
    store.close()


def test_atomic_groups_writes_and_nests(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db", counter="approx")
    store.create_session("s")
    with pytest.raises(RuntimeError), store.atomic():
        store.append("s", [Message.user("one")])
        store.append("s", [Message.user("two")])
        raise RuntimeError("changed my mind")
    assert store.count("s") == 0 and store.get_session("s").version == 0
    with store.atomic():
        store.append("s", [Message.user("kept")])
        with pytest.raises(RuntimeError), store.atomic():
            store.append("s", [Message.user("inner, rolled back")])
            raise RuntimeError
    assert [m.text for m in store.range("s")] == ["kept"]
    store.close()


def test_m003_mends_group_flags_of_a_database_written_by_0_1_0(tmp_path: Path) -> None:
    """``tests/golden/sqlite_0_1_0.db`` was written by the release before the batch
    grouping fix: parallel calls stored one per message and answered in the same
    batch (and a fork answering inherited calls in one batch) have a group-start flag
    set between the calls, so its reads returned a result without its call. After
    m003 every read equals History's selector over the same messages."""
    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent.parent / "golden" / "sqlite_0_1_0.db", path)
    with sqlite3.connect(path) as conn:
        assert "m003_regroup" not in {n for (n,) in conn.execute("SELECT name FROM migrations")}
        wrong = conn.execute("SELECT cut_ok FROM messages WHERE session_id = 'batch' "
                             "AND seq = 3").fetchone()[0]
    assert wrong == 1  # the file holds the old flags: a group starts at the second call
    store = SQLiteStore(path, counter="approx")
    try:
        for sid in ("batch", "one-by-one", "fork", "parent"):
            msgs = store.range(sid)
            history = History(msgs)
            for k in range(len(msgs) + 1):
                assert ids(store.tail(sid, k)) == ids(history.recent(k)), (sid, k)
        assert len(store.tail("fork", 2)) == 8  # back to the reasoning before the calls
    finally:
        store.close()
    assert "m003_regroup" in [name for name, _ in migrations(path)]


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def _sqlite_stored(store: SQLiteStore, session_ids: list[str]) -> dict[str, Any]:
    """Every table's rows (sessions without their timestamps), and what the reads of
    each session answer."""
    stamp = "2000-01-01T00:00:00Z"
    conn = store._conn
    out: dict[str, Any] = {}
    sessions = []
    for tenant, sid, version, payload in conn.execute(
            "SELECT tenant, id, version, payload FROM sessions ORDER BY tenant, id"):
        session = msgspec.json.decode(payload, type=Session)
        sessions.append((tenant, sid, version, msgspec.structs.replace(
            session, created_at=stamp, updated_at=stamp)))
    out["sessions"] = sessions
    for table in ("messages", "calls", "status_overrides", "assets", "asset_refs"):
        out[table] = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
    out.update(session_reads(store, session_ids))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_appends_planned_on_the_written_session_store_what_reading_it_stores(
        seed: int, png_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append takes the session as the store's last append of it wrote it (``Known.
    written``) while nothing else wrote since; the same random operations (retries of
    stored ids, If-Match, two store objects on one file writing one session in turn,
    forks, pops, marks, attachments, a session deleted and made again) through stores
    that do, and through stores that always read the session: the same answers, the
    same rows."""
    ops = random_script(seed, 300, png_bytes)
    names = sorted({op[2] for op in ops} | {op[4] for op in ops if op[0] == "fork"})
    outcomes: list[str] = []
    real_init = sqlite_module._Txn.__init__

    def counted(self: Any, conn: Any, tenant: str, session_id: str, *args: Any) -> None:
        real_init(self, conn, tenant, session_id, *args)
        known = self.known
        taken = known is not None and self.session is not None and \
            known.written.get((tenant, session_id)) is self.session
        outcomes.append("written" if taken else "missed")

    monkeypatch.setattr(sqlite_module._Txn, "__init__", counted)
    runs = []
    for keep in (64, 0):
        monkeypatch.setattr(sqlite_module, "WRITTEN_SESSIONS", keep)
        path = tmp_path / f"w{keep}.db"
        writers = [SQLiteStore(path, counter="approx"), SQLiteStore(path, counter="approx")]
        try:
            runs.append((run_script(writers, ops),
                         _sqlite_stored(writers[0], names)))
        finally:
            for w in writers:
                w.close()
        if keep:
            fast_outcomes = list(outcomes)
        else:
            assert "written" not in outcomes[len(fast_outcomes):]
    assert_same_runs(runs[0], runs[1], fast_outcomes)
