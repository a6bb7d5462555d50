"""Writes benchmark: the issue's cells, each with its peers and its floor in one run.

Rows (issue 18), on ShareGPT messages, chathistory counting with o200k_base:

1. SQLite durable append, one call + commit per message, ``synchronous=FULL``:
   ``SQLiteStore`` (``?synchronous=FULL``) vs OpenAI Agents ``SQLiteSession``
   (file db; WAL, SQLite's default ``synchronous``, FULL, read back and printed);
   floor: raw sqlite3 INSERT + COMMIT, WAL, ``synchronous=FULL``.
2. PostgreSQL append, one call per message: ``PostgresStore`` vs langchain-postgres
   ``PostgresChatMessageHistory.add_message`` (sync psycopg connection); floor: one
   psycopg INSERT of the message's JSON per message, autocommit, one connection.
3. Redis, the newest 20 of a 100,000-message session (10,000 with ``--quick``):
   ``RedisStore.tail(sid, 20)`` vs OpenAI Agents ``RedisSession.get_items(limit=20)``
   (one event loop, made once); floor: ``LRANGE key -20 -1`` + ``json.loads``.
4. PostgreSQL, 8 writer threads on 8 sessions: one ``PostgresStore`` shared by the
   threads vs langchain-postgres, a history and a connection per thread; floor:
   psycopg INSERTs, a connection per thread.
5. Redis, 8 writer threads on 8 sessions: one ``RedisStore`` shared vs LangChain
   community ``RedisChatMessageHistory`` (LPUSH) and OpenAI Agents ``RedisSession``
   (each a client and, for Agents, an event loop per thread); floor: redis-py RPUSH.

Every write loop builds each library's own message from (role, text) inside the timed
region (chathistory's ``Message`` is counted by the store as it appends); opening,
schema creation and connecting are not timed. Each cell runs its libraries in rounds
(5; 3 with ``--quick``) and reports the median of the rounds. Within a round the
libraries take turns, the order rotated every turn, so that each library's time is spent
in the same stretch of the machine's weather (2 shared cores; the fsync of the shared
disk here moved between 0.3 and 4 ms from one minute to the next): chunks of 1/20 of the
round in the single-writer cells (50 appends, 100 reads), bursts of 1/5 in the 8-thread
cells (each thread appending 60 messages to a new session).
Ratios are ours / best peer and ours / floor in time per message (or per call): > 1 is
behind. Goal: ours / best peer <= 1, and ours / floor <= 1.5 for the single-writer cells.
In cells 1, 2 and 4 ours also runs with ``search=off`` (no search index; kind ``info``:
timed in the same turns, printed with its ratio to the best peer, never judged), so that
every run shows the index's share of the cell (the index is on by default, issue 22).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from . import data
from .foundation import _verdict, environment, print_table
from .peers import version_of
from .stores import (
    PG_URL,
    REDIS_URL,
    RESULTS,
    RawSQLite,
    _chathistory_counter,
    _chathistory_messages,
    _drop_schema,
    _flush_prefix,
    _langchain_message,
    _message,
    _pay_for_the_index,
    _us,
    _x,
)

PEER_LIMIT = 1.0  # ours / best peer, at most (at or ahead)
FLOOR_LIMIT = 1.5  # ours / floor, at most (single-writer cells)
THREADS = 8
OFF_NAME = "chathistory, search=off"
"""Ours without the search index: a contender of kind ``info``, timed in turn with the
others and printed, never judged."""
CELLS = ("sqlite_full", "pg_append", "pg_threads", "redis_tail", "redis_threads")
TAIL_N = 20
LOAD_BATCH = 1000
VERSIONED = ("chathistory", "openai-agents", "langchain-postgres", "langchain-community",
             "langchain-core", "psycopg", "redis")

Pair = tuple[str, str]
T = TypeVar("T")


@dataclass
class Settings:
    rounds: int
    sqlite_n: int  # messages per run, one call each
    pg_n: int
    tail_size: int  # messages in the Redis session read
    tail_calls: int  # calls per run
    per_thread: int  # messages per writer thread


def settings(quick: bool) -> Settings:
    if quick:
        return Settings(rounds=3, sqlite_n=600, pg_n=600, tail_size=10_000, tail_calls=1000,
                        per_thread=150)
    return Settings(rounds=5, sqlite_n=1000, pg_n=1000, tail_size=100_000, tail_calls=2000,
                    per_thread=300)


Step = Callable[[int, int], object]
"""Does units lo..hi-1 of a round (appends messages lo..hi-1, or makes hi-lo reads); it
may return the seconds it measured itself (a burst of threads: from their start)."""
Opened = tuple[Step, Callable[[], object]]
"""What opening a library for a round gives: its step, and what closes it."""


@dataclass
class Contender:
    """One library in a cell, ``open``ed for each round (untimed): its steps are timed,
    in turns with the other libraries' steps."""

    name: str
    kind: str  # "ours", "peer", "floor" or "info" (timed and printed, never judged)
    note: str
    open: Callable[[int], Opened]
    samples: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples and not self.error else None


Add = Callable[[str, str], object]
"""Appends one message given as (role, text), building the library's own message."""
Many = Callable[[Sequence[Pair]], object]
"""Appends the messages given, one call each."""


def _json(role: str, text: str) -> str:
    return json.dumps({"role": role, "content": text})


def _nothing() -> None:
    pass


def _each(add: Add) -> Many:
    def many(pairs: Sequence[Pair]) -> None:
        for role, text in pairs:
            add(role, text)
    return many


def _adds(batch: Sequence[Pair], many: Many) -> Step:
    """The step appending messages lo..hi-1 of ``batch``."""
    return lambda lo, hi: many(batch[lo:hi])


def _ours_add(store: Any, session_id: str) -> Add:
    """Appends to a new session of a chathistory store (created untimed, here)."""
    store.create_session(session_id)
    return lambda role, text: store.append(session_id, [_message(role, text)])


def _build_note(batch: Sequence[Pair]) -> str:
    """What building and o200k-counting chathistory's messages costs, measured apart."""
    from chathistory.tokens import cached_count

    counter = _chathistory_counter()
    started = time.perf_counter()
    for role, text in batch:
        cached_count(_message(role, text), counter)
    each = (time.perf_counter() - started) / len(batch)
    return (f"of ours' time per message, building + o200k-counting its Message takes "
            f"{_us(each)} (one thread, measured apart)")


def _failed(c: Contender, exc: Exception) -> None:
    """A peer missing or broken: say so, go on without it."""
    c.error = f"{type(exc).__name__}: {exc}"


def _rotated(items: list[T], shift: int) -> list[T]:
    shift %= len(items)
    return items[shift:] + items[:shift]


def _interleaved_rounds(contenders: list[Contender], rounds: int, units: int, turns: int,
                        per_unit: int) -> None:
    """Each round opens every contender, then has them take turns doing ``units`` units
    in ``turns`` chunks, the order rotated every turn (and every round); a sample is the
    round's seconds per message (a unit being ``per_unit`` messages, or one read)."""
    chunk = max(1, -(-units // turns))
    for r in range(rounds):
        opened: dict[int, Opened] = {}
        spent = [0.0] * len(contenders)
        try:
            for i, c in enumerate(contenders):
                if c.error:
                    continue
                try:
                    opened[i] = c.open(r)
                except Exception as exc:
                    _failed(c, exc)
            gc.collect()
            for turn, lo in enumerate(range(0, units, chunk)):
                if not opened:
                    break
                hi = min(lo + chunk, units)
                for i in _rotated(list(opened), r + turn):
                    try:
                        started = time.perf_counter()
                        took = opened[i][0](lo, hi)
                        elapsed = time.perf_counter() - started
                        spent[i] += took if isinstance(took, float) else elapsed
                    except Exception as exc:
                        _failed(contenders[i], exc)
                        opened.pop(i)[1]()
        finally:
            for _, close in opened.values():
                close()
        for i in opened:
            contenders[i].samples.append(spent[i] / (units * per_unit))


def _parallel(prepare: Callable[[int], tuple[Callable[[], object], Callable[[], object]]],
              threads: int = THREADS) -> float:
    """Wall seconds for ``threads`` workers, each running ``prepare(i)``'s work once.

    ``prepare(i)`` runs in worker i before the start (untimed) and returns (work, close);
    the time runs from the start to the last worker's end, ``close`` after that."""
    barrier = threading.Barrier(threads + 1)
    ends = [0.0] * threads
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        close: Callable[[], object] | None = None
        try:
            work, close = prepare(i)
            barrier.wait()
            work()
            ends[i] = time.perf_counter()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # reported, not swallowed
            errors.append(exc)
            barrier.abort()
        finally:
            if close is not None:
                try:
                    close()
                except Exception as exc:
                    errors.append(exc)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    started = time.perf_counter()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return max(ends) - started


def _threaded(work: Sequence[Sequence[Pair]],
              make: Callable[[str, int], tuple[Many, Callable[[], object]]],
              ) -> Callable[[int], Opened]:
    """A threaded contender: its step lo..hi is a burst of ``THREADS`` threads, thread i
    appending ``work[i][lo:hi]`` with what ``make(tag, i)`` gives (made in the thread
    before the start, untimed: a new session per burst, named after ``tag``; closed after
    the end). The step returns the burst's wall seconds."""

    def open_(r: int) -> Opened:
        def step(lo: int, hi: int) -> float:
            def prepare(i: int) -> tuple[Callable[[], object], Callable[[], object]]:
                many, close = make(f"{r}-{lo}", i)
                return lambda: many(work[i][lo:hi]), close
            return _parallel(prepare)
        return step, _nothing

    return open_


@dataclass
class Cell:
    key: str
    title: str
    unit: str  # "msg" (throughput) or "call" (latency)
    single_writer: bool
    contenders: list[Contender]
    units: int  # per round: messages (per thread), or reads
    notes: list[str] = field(default_factory=list)
    close: Callable[[], object] = _nothing

    def measure(self, rounds: int) -> None:
        if self.single_writer:  # turns of 1/20 of a round
            _interleaved_rounds(self.contenders, rounds, self.units, 20, 1)
        else:  # turns of 1/5: each burst of threads starts and ends, so fewer
            _interleaved_rounds(self.contenders, rounds, self.units, 5, THREADS)

    def of(self, kind: str) -> list[Contender]:
        return [c for c in self.contenders if c.kind == kind]

    def verdict(self) -> dict[str, Any]:
        ours = self.of("ours")[0].median
        peers = [c.median for c in self.of("peer") if c.median is not None]
        floor = self.of("floor")[0].median if self.of("floor") else None
        vs_peer = None if ours is None or not peers else ours / min(peers)
        vs_floor = None if ours is None or floor is None else ours / floor
        checks = [None if vs_peer is None else vs_peer <= PEER_LIMIT]
        if self.single_writer:
            checks.append(None if vs_floor is None else vs_floor <= FLOOR_LIMIT)
        passed = None if None in checks else all(checks)
        off = [c.median for c in self.of("info") if c.median is not None]
        vs_peer_off = None if not off or not peers else off[0] / min(peers)
        return {"ours_over_best_peer": vs_peer, "ours_over_floor": vs_floor,
                "floor_judged": self.single_writer, "passed": passed,
                "search_off_over_best_peer": vs_peer_off}

    def show(self, value: float | None) -> str:
        if value is None:
            return "-"
        return f"{1 / value:,.0f} msg/s" if self.unit == "msg" else _us(value)


def _cell(key: str, title: str, unit: str, single_writer: bool, units: int,
          rows: Sequence[tuple[str, str, str, Callable[[int], Opened]]],
          notes: list[str] | None = None, close: Callable[[], object] = _nothing) -> Cell:
    """A cell of the libraries in ``rows``: (name, kind, note, open); ``notes`` is kept
    as given (a library may add to it as it runs)."""
    return Cell(key, title, unit, single_writer, [Contender(*row) for row in rows], units,
                [] if notes is None else notes, close)


def _report(cell: Cell, out: Callable[[str], None]) -> dict[str, Any]:
    rows = []
    msg = cell.unit == "msg"
    for c in cell.contenders:
        name = c.name + (" (floor)" if c.kind == "floor" else "")
        if c.error:
            rows.append([name, "failed", *([""] if msg else []), "", c.error])
            continue
        if msg:
            rows.append([name, f"{1 / c.median:,.0f}", _us(c.median),
                         f"{1 / max(c.samples):,.0f}-{1 / min(c.samples):,.0f}", c.note])
        else:
            rows.append([name, _us(c.median), f"{_us(min(c.samples))}-{_us(max(c.samples))}",
                         c.note])
    headers = (["library", "msg/s", "per message", "runs, msg/s", "note"] if msg
               else ["library", "per call", "runs", "note"])
    print_table(headers, rows, out)
    v = cell.verdict()
    goal = f"ours/best peer <= {PEER_LIMIT:g}" + (
        f", ours/floor <= {FLOOR_LIMIT:g}" if cell.single_writer else " (floor not judged)")
    out(f"ours/best peer {_x(v['ours_over_best_peer'])}, ours/floor "
        f"{_x(v['ours_over_floor'])} (> 1 = behind; goal {goal}): {_verdict(v['passed'])}")
    for note in cell.notes:
        out(f"  {note}")
    return {"cell": cell.key, "title": cell.title, "unit": cell.unit,
            "contenders": [{"name": c.name, "kind": c.kind, "note": c.note,
                            "samples_s": c.samples, "median_s": c.median,
                            "error": c.error or None} for c in cell.contenders],
            "notes": cell.notes, **v}


# ---------------------------------------------------------------- 1. SQLite FULL


def sqlite_full(messages: Sequence[Pair], s: Settings, tmp: Path,
                durability: dict[str, str]) -> Cell:
    batch = messages[:s.sqlite_n]
    n = len(batch)
    notes = ["Agents SQLiteSession sets only journal_mode=WAL on its connections, so it runs "
             "at SQLite's default synchronous:", _build_note(batch)]

    def ours(r: int) -> Opened:
        from chathistory.stores import open_store

        store = open_store(f"sqlite:///{tmp / f'ours-{r}.db'}?synchronous=FULL")
        assert store.synchronous == "FULL"
        add = _adds(batch, _each(_ours_add(store, "s")))

        def step(lo: int, hi: int) -> None:
            add(lo, hi)
            _pay_for_the_index(store, everything=hi == n)
        return step, store.close

    def ours_off(r: int) -> Opened:
        from chathistory.stores import open_store

        store = open_store(f"sqlite:///{tmp / f'ours-off-{r}.db'}?synchronous=FULL&search=off")
        return _adds(batch, _each(_ours_add(store, "s"))), store.close

    def agents(r: int) -> Opened:
        from agents import SQLiteSession

        session = SQLiteSession("s", db_path=tmp / f"agents-{r}.db")
        loop = asyncio.new_event_loop()

        async def add(pairs: Sequence[Pair]) -> None:
            for role, text in pairs:
                await session.add_items([{"role": role, "content": text}])

        def close() -> None:
            session.close()
            loop.close()

        loop.run_until_complete(session.get_items(limit=1))  # schema, connection
        if "sqlite_agents" not in durability:  # its connections are all set up alike
            conn = session._get_connection()
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            found = (f"journal_mode={mode}, synchronous="
                     f"{ {0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA'}[sync]}")
            durability["sqlite_agents"] = found
            notes[0] += f" its connection reads back {found}"
        return _adds(batch, lambda pairs: loop.run_until_complete(add(pairs))), close

    def raw(r: int) -> Opened:
        db = RawSQLite(tmp / f"raw-{r}.db")
        db.conn.execute("PRAGMA synchronous=FULL")
        return _adds(batch, _each(lambda role, text: db.append("s", role, text))), db.close

    title = (f"SQLite durable append, one call + commit per message, synchronous=FULL "
             f"({n:,} messages per run)")
    return _cell("sqlite_full", title, "msg", True, n, [
        ("chathistory SQLiteStore", "ours", "sqlite:///...?synchronous=FULL (WAL)", ours),
        (OFF_NAME, "info", "?synchronous=FULL&search=off: no search index (not judged)",
         ours_off),
        ("OpenAI Agents SQLiteSession", "peer", "file db, await add_items([item])", agents),
        ("raw sqlite3", "floor", "BEGIN; INSERT; COMMIT, WAL, synchronous=FULL", raw)], notes)


# ---------------------------------------------------------------- 2/4. PostgreSQL


class PgCell:
    """A throwaway schema holding chathistory's tables, langchain-postgres' table and the
    floor's table; dropped at the end."""

    LC_TABLE = "lc_chat_history"
    RAW_TABLE = "raw_messages"

    def __init__(self) -> None:
        import psycopg

        from chathistory.stores import open_store

        self.schema = f"bench_w_{uuid.uuid4().hex[:10]}"
        self.url = f"{PG_URL}?options=-csearch_path%3D{self.schema}"
        self.store: Any = None
        self.store_off: Any = None  # ours without the search index (for information)
        self.held: list[Any] = []  # the peers' and the floor's connections
        self._lc_tables = False
        try:
            self.store = open_store(f"{PG_URL}?schema={self.schema}")
            self.store_off = open_store(f"{PG_URL}?schema={self.schema}_off&search=off")
            self.store_off.create_session("warm")
            self.store_off.append("warm", [_message("user", "hello")])
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {self.RAW_TABLE} (session text NOT NULL, "
                             "seq bigint NOT NULL, data bytea NOT NULL, "
                             "PRIMARY KEY (session, seq))")
            self.store.create_session("warm")  # the pool's first connection
            self.store.append("warm", [_message("user", "hello")])
        except BaseException:
            self.close()
            raise

    def connect(self, autocommit: bool) -> Any:
        import psycopg

        conn = psycopg.connect(self.url, autocommit=autocommit)
        self.held.append(conn)
        return conn

    def lc_tables(self) -> None:
        from langchain_postgres import PostgresChatMessageHistory

        if not self._lc_tables:
            PostgresChatMessageHistory.create_tables(self.connect(autocommit=False),
                                                     self.LC_TABLE)
            self._lc_tables = True

    def settings(self) -> str:
        conn = self.connect(autocommit=True)
        return ", ".join(f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"
                         for name in ("synchronous_commit", "fsync", "wal_sync_method"))

    def close(self) -> None:
        try:
            for conn in self.held:
                conn.close()
            for store in (self.store, self.store_off):
                if store is not None:
                    store.close()
        finally:
            _drop_schema(self.schema)
            _drop_schema(f"{self.schema}_off")

    def raw_add(self, conn: Any, session_id: str) -> Add:
        """The floor: one INSERT of the message's JSON (``conn`` in autocommit)."""
        seqs = itertools.count()
        insert = f"INSERT INTO {self.RAW_TABLE} VALUES (%s, %s, %s)"
        return lambda role, text: conn.execute(
            insert, (session_id, next(seqs), _json(role, text).encode()))

    def lc_add(self, conn: Any) -> Add:
        """langchain-postgres on a new session (a UUID, as it requires); ``lc_tables``
        first."""
        from langchain_postgres import PostgresChatMessageHistory

        history = PostgresChatMessageHistory(self.LC_TABLE, str(uuid.uuid4()),
                                             sync_connection=conn)
        return lambda role, text: history.add_message(_langchain_message(role, text))


def pg_append(messages: Sequence[Pair], s: Settings, pg: PgCell) -> Cell:
    batch = messages[:s.pg_n]
    n = len(batch)
    lc_conn = pg.connect(autocommit=False)  # the sync connection as its docs make it
    raw_conn = pg.connect(autocommit=True)

    def ours(store: Any) -> Callable[[int], Opened]:
        return lambda r: (_adds(batch, _each(_ours_add(store, f"append-{r}"))), _nothing)

    def langchain(r: int) -> Opened:
        pg.lc_tables()
        return _adds(batch, _each(pg.lc_add(lc_conn))), _nothing

    def raw(r: int) -> Opened:
        return _adds(batch, _each(pg.raw_add(raw_conn, f"append-{r}"))), _nothing

    title = f"PostgreSQL append, one call per message ({n:,} messages per run)"
    return _cell("pg_append", title, "msg", True, n, [
        ("chathistory PostgresStore", "ours", "defaults", ours(pg.store)),
        (OFF_NAME, "info", "?search=off: no search index (not judged)", ours(pg.store_off)),
        ("langchain-postgres PostgresChatMessageHistory", "peer",
         "add_message, sync psycopg connection (commits each call)", langchain),
        ("psycopg INSERT", "floor", "autocommit: each INSERT its own committed transaction",
         raw)], [_build_note(batch)])


def _split(messages: Sequence[Pair], per: int) -> list[Sequence[Pair]]:
    return [messages[i * per:(i + 1) * per] for i in range(THREADS)]


def pg_threads(messages: Sequence[Pair], s: Settings, pg: PgCell) -> Cell:
    per = s.per_thread
    work = _split(messages, per)
    total = THREADS * per
    lc_conns = [pg.connect(autocommit=False) for _ in range(THREADS)]
    raw_conns = [pg.connect(autocommit=True) for _ in range(THREADS)]

    def ours(store: Any) -> Callable[[int], Opened]:
        return _threaded(work, lambda tag, i: (
            _each(_ours_add(store, f"threads-{tag}-{i}")), _nothing))
    lc_open = _threaded(work, lambda tag, i: (_each(pg.lc_add(lc_conns[i])), _nothing))

    def langchain(r: int) -> Opened:
        pg.lc_tables()  # (here: a missing langchain-postgres fails this peer, not the cell)
        return lc_open(r)
    raw = _threaded(work, lambda tag, i: (
        _each(pg.raw_add(raw_conns[i], f"threads-{tag}-{i}")), _nothing))
    title = (f"PostgreSQL, {THREADS} writer threads on {THREADS} sessions ({per} messages "
             "each, one per call)")
    return _cell("pg_threads", title, "msg", False, per, [
        ("chathistory PostgresStore", "ours", "one store (its pool) shared by the threads",
         ours(pg.store)),
        (OFF_NAME, "info", "?search=off: no search index (not judged)", ours(pg.store_off)),
        ("langchain-postgres PostgresChatMessageHistory", "peer",
         "a history and a connection per thread", langchain),
        ("psycopg INSERT", "floor", "autocommit, a connection per thread", raw)],
        [_build_note(messages[:total])])


# ---------------------------------------------------------------- 3/5. Redis


def _redis_settings() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        found = []
        for name in ("appendonly", "appendfsync", "save"):
            value = client.config_get(name).get(name)
            found.append(f"{name}={value!r}" if name == "save" else f"{name}={value}")
        return ", ".join(found)
    except Exception as exc:
        return f"CONFIG GET refused ({type(exc).__name__})"
    finally:
        client.close()


def redis_tail(messages: Sequence[Pair], built: Sequence[Any], s: Settings, prefix: str,
               out: Callable[[str], None]) -> Cell:
    import redis
    from agents.extensions.memory import RedisSession

    from chathistory.stores import open_store

    size, calls = s.tail_size, s.tail_calls
    expected = [text for _, text in messages[size - TAIL_N:size]]
    loading = time.perf_counter()
    store = open_store(f"{REDIS_URL}?prefix={prefix}")
    store.create_session("big")
    for i in range(0, size, LOAD_BATCH):
        store.append("big", list(built[i:i + LOAD_BATCH]))
    raw_client = redis.Redis.from_url(REDIS_URL)
    raw_key = f"{prefix}:raw:big"
    for i in range(0, size, LOAD_BATCH):
        raw_client.rpush(raw_key, *[_json(r, t) for r, t in messages[i:i + LOAD_BATCH]])
    loop = asyncio.new_event_loop()  # the Agents session's loop, made once
    session = RedisSession.from_url("big", url=REDIS_URL, key_prefix=f"{prefix}:agents")

    async def load_agents() -> None:
        for i in range(0, size, LOAD_BATCH):
            await session.add_items([{"role": r, "content": t}
                                     for r, t in messages[i:i + LOAD_BATCH]])

    loop.run_until_complete(load_agents())
    out(f"   loaded {size:,} messages into each library in {time.perf_counter() - loading:.1f} s")

    def tail_ours() -> list[str]:
        return [m.text for m in store.tail("big", TAIL_N)]

    def tail_agents() -> list[str]:
        items = loop.run_until_complete(session.get_items(limit=TAIL_N))
        return [item["content"] for item in items]

    def tail_raw() -> list[str]:
        return [json.loads(x)["content"] for x in raw_client.lrange(raw_key, -TAIL_N, -1)]

    def reads(fn: Callable[[], list[str]]) -> Callable[[int], Opened]:
        def open_(r: int) -> Opened:
            if fn() != expected:  # and a first call, untimed
                raise AssertionError(f"wrong newest {TAIL_N} messages")

            def step(lo: int, hi: int) -> None:
                for _ in range(hi - lo):
                    fn()
            return step, _nothing
        return open_

    def close() -> None:
        try:
            store.close()
            raw_client.close()
            loop.run_until_complete(session.close())
        finally:
            loop.close()

    title = f"Redis, newest {TAIL_N} of a {size:,}-message session ({calls:,} calls per run)"
    return _cell("redis_tail", title, "call", True, calls, [
        ("chathistory RedisStore", "ours", f"tail(sid, {TAIL_N})", reads(tail_ours)),
        ("OpenAI Agents RedisSession", "peer",
         f"get_items(limit={TAIL_N}), one event loop made once", reads(tail_agents)),
        ("redis-py LRANGE", "floor", f"LRANGE key -{TAIL_N} -1 + json.loads of each",
         reads(tail_raw))], close=close)


def redis_threads(messages: Sequence[Pair], s: Settings, prefix: str) -> Cell:
    import redis
    from agents.extensions.memory import RedisSession
    from langchain_community.chat_message_histories import RedisChatMessageHistory

    from chathistory.stores import open_store

    per = s.per_thread
    work = _split(messages, per)
    total = THREADS * per
    store = open_store(f"{REDIS_URL}?prefix={prefix}")
    ours = _threaded(work, lambda tag, i: (
        _each(_ours_add(store, f"threads-{tag}-{i}")), _nothing))

    def langchain(tag: str, i: int) -> tuple[Many, Callable[[], object]]:
        history = RedisChatMessageHistory(f"{tag}-{i}", url=REDIS_URL,
                                          key_prefix=f"{prefix}:lc:")
        history.redis_client.ping()
        return (_each(lambda role, text: history.add_message(_langchain_message(role, text))),
                history.redis_client.close)

    def raw(tag: str, i: int) -> tuple[Many, Callable[[], object]]:
        client = redis.Redis.from_url(REDIS_URL)
        client.ping()
        key = f"{prefix}:raw:{tag}-{i}"
        return _each(lambda role, text: client.rpush(key, _json(role, text))), client.close

    def agents(tag: str, i: int) -> tuple[Many, Callable[[], object]]:
        loop = asyncio.new_event_loop()
        session = RedisSession.from_url(f"{tag}-{i}", url=REDIS_URL,
                                        key_prefix=f"{prefix}:agents")
        loop.run_until_complete(session.get_items(limit=1))  # connected

        async def add(pairs: Sequence[Pair]) -> None:
            for role, text in pairs:
                await session.add_items([{"role": role, "content": text}])

        def close() -> None:
            try:
                loop.run_until_complete(session.close())
            finally:
                loop.close()
        return lambda pairs: loop.run_until_complete(add(pairs)), close

    title = (f"Redis, {THREADS} writer threads on {THREADS} sessions ({per} messages each, "
             "one per call)")
    return _cell("redis_threads", title, "msg", False, per, [
        ("chathistory RedisStore", "ours", "one store shared by the threads", ours),
        ("LangChain RedisChatMessageHistory", "peer",
         "add_message (LPUSH), a history (its own client) per thread",
         _threaded(work, langchain)),
        ("OpenAI Agents RedisSession", "peer",
         "add_items, a session and an event loop per thread", _threaded(work, agents)),
        ("redis-py RPUSH", "floor", "a client per thread", _threaded(work, raw))],
        [_build_note(messages[:total])], close=store.close)


# ---------------------------------------------------------------- growth


def growth_row(quick: bool, out: Callable[[str], None]) -> dict[str, Any] | None:
    """``ContextWindow.plan()`` per turn from 1,000 to 64,000 messages (bench.window's
    growth check, in its quick form: 100 turns per size)."""
    from . import window

    if quick:
        out("")
        out("ContextWindow.plan() growth (64,000 vs 1,000 messages): not run with --quick; "
            "`python -m bench writes` or `python -m bench window` has it")
        return None
    return window.growth(window.conversation(window.TURNS), True, out)


# ---------------------------------------------------------------- run


def _summary(cells: list[Cell], results: list[dict[str, Any]],
             growth: dict[str, Any] | None, out: Callable[[str], None]) -> None:
    rows = []
    for cell, res in zip(cells, results, strict=True):
        floor = cell.of("floor")
        rows.append([
            cell.title.split(" (")[0], cell.show(cell.of("ours")[0].median),
            "; ".join(f"{c.name}: " + ("failed" if c.error else cell.show(c.median))
                      for c in cell.of("peer")),
            cell.show(floor[0].median) if floor else "-",
            _x(res["ours_over_best_peer"]),
            _x(res["ours_over_floor"]) + ("" if cell.single_writer else " (info)"),
            _verdict(res["passed"]),
            "-" if res["search_off_over_best_peer"] is None
            else _x(res["search_off_over_best_peer"])])
    if growth is not None:
        rows.append(["ContextWindow.plan() per turn, 64k vs 1k messages",
                     f"{growth['per_turn_seconds']['64000'] * 1e6:,.0f} us at 64k", "", "",
                     "", f"64k/1k {growth['ratio_64k_1k']:.2f}x (<= {growth['target']:g})",
                     _verdict(growth["passed"]), ""])
    out("")
    out("summary (medians; ratios in time per message or per call, > 1 = behind)")
    print_table(["cell", "chathistory", "peers", "floor", "ours/best peer", "ours/floor",
                 "result", "search=off/best peer"], rows, out)
    out(f"goal: ours/best peer <= {PEER_LIMIT:g}; ours/floor <= {FLOOR_LIMIT:g} for the "
        "single-writer cells (the 8-thread cells' floor ratio is for information); "
        "search=off/best peer: ours without the search index, for information (the "
        "index is on by default, issue 22; its cost is bench search's)")


def run(quick: bool = False, out: Callable[[str], None] = print,
        cells: Sequence[str] = ()) -> dict[str, Any]:
    """The cells named in ``cells`` (keys: sqlite_full, pg_append, pg_threads, redis_tail,
    redis_threads, growth; default all)."""
    wanted_cells = set(cells) or {*CELLS, "growth"}
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    s = settings(quick)
    env = environment()
    env["versions"] = {name: version_of(name) for name in VERSIONED}
    out("chathistory writes benchmark" + (" (quick)" if quick else ""))
    out(f"python {env['python']} on {env['platform']}, {env['cpus']} cpus")
    out("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    loading = time.perf_counter()
    wanted = max(s.tail_size, s.sqlite_n, s.pg_n, THREADS * s.per_thread)
    messages = data.messages(wanted)
    built = _chathistory_messages(messages[:s.tail_size])
    out(f"data: first {len(messages):,} ShareGPT messages, read and (for the Redis session "
        f"load) built and o200k-counted in {time.perf_counter() - loading:.1f} s")
    out(f"each cell: {s.rounds} runs, the libraries taking turns within each (chunks of "
        "1/20 of a run; 1/5 in the threaded cells), the order rotated every turn; medians")
    durability: dict[str, str] = {}
    results: dict[str, Any] = {"environment": env, "quick": quick, "settings": vars(s),
                               "durability": durability}
    done: list[Cell] = []
    reports: list[dict[str, Any]] = []

    def cell_run(build: Callable[[], Cell], key: str) -> None:
        if key not in wanted_cells:
            return
        try:
            cell = build()
        except Exception as exc:
            out(f"   skipped: {type(exc).__name__}: {exc}")
            return
        out(f"{len(done) + 1}. {cell.title}")
        try:
            cell.measure(s.rounds)
        finally:
            cell.close()
        done.append(cell)
        reports.append(_report(cell, out))
        out("")

    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="writes-", dir=RESULTS))  # on disk, not tmpfs
    out("")
    try:
        cell_run(lambda: sqlite_full(messages, s, tmp, durability), "sqlite_full")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    pg: PgCell | None = None
    try:
        pg = PgCell()
        durability["postgres_server"] = pg.settings()
        out(f"PostgreSQL server: {durability['postgres_server']} (every library commits "
            "each message)")
    except Exception as exc:
        out(f"PostgreSQL unavailable: {type(exc).__name__}: {exc}")
    if pg is not None:
        try:
            cell_run(lambda: pg_append(messages, s, pg), "pg_append")
            cell_run(lambda: pg_threads(messages, s, pg), "pg_threads")
        finally:
            pg.close()

    durability["redis_server"] = _redis_settings()
    out(f"Redis server: {durability['redis_server']} (the same server for every library: "
        "none waits for more than the server's acknowledgement)")
    prefix = f"benchw{uuid.uuid4().hex[:8]}"
    try:
        cell_run(lambda: redis_tail(messages, built, s, prefix, out), "redis_tail")
        cell_run(lambda: redis_threads(messages, s, prefix), "redis_threads")
    finally:
        _flush_prefix(prefix)

    growth = growth_row(quick, out) if "growth" in wanted_cells else None
    _summary(done, reports, growth, out)
    results["cells"] = reports
    results["growth"] = growth
    results["seconds"] = time.perf_counter() - started
    out("")
    out(f"writes benchmark took {results['seconds']:.0f} s")
    return results
