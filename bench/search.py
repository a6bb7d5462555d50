"""Search benchmark (issue 22): ``python -m bench search [--quick]``.

One tenant of real ShareGPT messages (sessions of 100 messages, five users) at 10,000,
100,000 and 1,000,000 messages (``--quick``: 10,000 and 100,000), on SQLite, PostgreSQL
and Redis. The dump holds 128,935 messages: a larger tenant repeats it, each copy new
messages (new ids, the same text), so a word in one message of the dump is in eight at
1,000,000. Per backend and size:

- ``store.search(word, tenant=...)`` p50 and p99 for a rare word (picked from the data:
  a word in two messages of the dump, both among its first 10,000, printed) and for a
  word that matches nothing, through the index and through the scan: the same data in a
  store opened with ``?search=off`` (loaded so: an index store opened with ``search=off``
  would stop keeping its index). Redis has no index: its bounded scan, and for reference
  the same scan without bound and (up to 100,000) the engine's scan it stands beside.
  Hits are printed beside the expected count, and a scan's rows read.
- Append per message, one message per call to a fresh session of another tenant,
  counted with o200k_base by the store: the index store vs the ``search=off`` store,
  in alternating rounds (the median of the rounds; SQLite's rounds end by indexing the
  rows they left pending, so that each round pays for indexing all of its rows, whether
  or not the indexer thread woke during it); and the median call when the calls
  are 5 ms apart, as a chat's are (what the index adds to an append's latency, where
  back to back is what it adds to a writer's throughput; the goal is judged on the
  latter).
- Storage per message: SQLite pages in use (page_count - freelist_count), PostgreSQL
  ``pg_total_relation_size`` of the schema's tables, Redis ``MEMORY USAGE`` of the
  prefix's keys; divided by the tenant's messages.

Goals (at 1,000,000, SQLite and PostgreSQL): rare and nothing p50 <= 20 ms and p99 <=
100 ms; append with the index <= 1.2x without; storage <= 1.5x.

Loads append a whole session per call (counts computed once per message of the dump and
given to each copy; SQLite at its default ``synchronous=NORMAL``). The SQLite and
PostgreSQL databases are kept in ``bench/results/search-data/`` and schemas
``bench_search_*`` for the next run, keyed by size and by a hash of the backend's source
(a change of it loads again); Redis is loaded each run and its keys deleted after.
Also measured once, at 10,000 messages: what an inverted index in Redis sets would cost
(a SADD per distinct word of a message, written beside each append; not kept).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import statistics
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import data
from .foundation import _verdict, environment, print_table
from .stores import PG_URL, REDIS_URL, RESULTS, _pay_for_the_index, _us

SRC = Path(__file__).resolve().parent.parent / "src" / "chathistory" / "stores"
CACHE = RESULTS / "search-data"
TENANT = "bench"
APPEND_TENANT = "bench-append"
SESSION = 100
USERS = 5
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
NOTHING = "qzxjvkwpf"
GOAL_P50, GOAL_P99 = 0.020, 0.100
GOAL_APPEND, GOAL_STORAGE = 1.20, 1.50
PLAIN_SCAN_UP_TO = 100_000
"""Redis: the engine's own scan (``Searching._scan_search``: a session's rows 256 at a
time, a round trip each) is timed up to this size, beside the store's."""
LOAD_VERSION = 1
"""Raise when the loaded data changes: cached databases of another version load again."""


@dataclass
class Settings:
    samples: int  # searches per word and store, at most
    scan_seconds: float  # a slow (scan) word's samples stop after this long, 2 at least
    append_rounds: int
    append_messages: int  # per round, one call each, to one fresh session (more than
    # SQLite's FLUSH_AT: the indexer thread works during a round as it would steadily)


def settings(quick: bool) -> Settings:
    if quick:
        return Settings(samples=50, scan_seconds=5.0, append_rounds=4, append_messages=600)
    return Settings(samples=200, scan_seconds=20.0, append_rounds=8, append_messages=1200)


# ---------------------------------------------------------------- the data


@dataclass
class Corpus:
    pairs: Sequence[tuple[str, str]]
    counts: list[int]
    counter: str
    rare: str
    rare_at: list[int]  # positions in the dump of the messages holding the rare word

    def message(self, i: int) -> Any:
        from chathistory import Message

        role, text = self.pairs[i % len(self.pairs)]
        m = Message.user(text) if role == "user" else Message.assistant(text)
        m.token_counts = {self.counter: self.counts[i % len(self.pairs)]}
        return m

    def expected(self, word: str, size: int) -> int:
        """Messages of a tenant of ``size`` that hold ``word``."""
        if word != self.rare:
            return 0
        n = len(self.pairs)
        return sum(len(range(at, size, n)) for at in self.rare_at)


def corpus(out: Callable[[str], None]) -> Corpus:
    """The dump's messages, their counts and the rare word (computed once, then read
    from ``CACHE``)."""
    from chathistory import Message
    from chathistory.stores import open_store

    started = time.perf_counter()
    pairs = list(data.iter_messages())
    counter = open_store("memory://").counter
    cached = CACHE / f"corpus-{counter.name}-{len(pairs)}-v{LOAD_VERSION}.json"
    if cached.exists():
        kept = json.loads(cached.read_text())
    else:
        kept = {"counts": [counter.count_message(Message.user(t)) for _, t in pairs],
                **_rare_word(pairs)}
        CACHE.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(kept))
    out(f"data: {len(pairs):,} ShareGPT messages, counted with {counter.name}, in "
        f"{time.perf_counter() - started:.1f} s; rare word {kept['rare']!r} (messages "
        f"{kept['rare_at']} of the dump), a word in no message {NOTHING!r}")
    return Corpus(pairs, kept["counts"], counter.name, kept["rare"], kept["rare_at"])


def _rare_word(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """A word in exactly two messages of the dump, both among its first 10,000 (so in
    every tenant here), ASCII letters, 7 to 12 of them: the middle one of those in
    alphabetical order."""
    from chathistory.stores.search import words

    seen: dict[str, list[int]] = {}
    for i, (_, text) in enumerate(pairs[:10_000]):
        for w in set(words(text)):
            if w.isascii() and w.isalpha() and 7 <= len(w) <= 12:
                seen.setdefault(w, []).append(i)
    candidates = {w for w, at in seen.items() if len(at) == 2}
    for _, text in pairs[10_000:]:
        candidates.difference_update(words(text))
    for _, text in pairs:
        assert NOTHING not in words(text)
    word = sorted(candidates)[len(candidates) // 2]
    return {"rare": word, "rare_at": seen[word]}


def load(store: Any, source: Corpus, size: int, label: str,
         out: Callable[[str], None]) -> float:
    """The tenant's ``size`` messages, a session per call; seconds."""
    started = time.perf_counter()
    step = max(SESSION, size // 10 // SESSION * SESSION)
    for first in range(0, size, SESSION):
        number = first // SESSION
        session_id = f"s{number:06d}"
        store.create_session(session_id, tenant=TENANT, user=f"u{number % USERS}")
        store.append(session_id, [source.message(i) for i in range(first, min(size, first +
                                                                            SESSION))],
                     tenant=TENANT)
        if size >= 100_000 and (first + SESSION) % step == 0:
            seconds = time.perf_counter() - started
            out(f"     {label}: {first + SESSION:,} / {size:,} ({(first + SESSION) / seconds:,.0f}"
                " msg/s)")
    return time.perf_counter() - started


# ---------------------------------------------------------------- the backends


def _fingerprint(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256(str(LOAD_VERSION).encode())
    for path in sorted(paths):
        if path.exists():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


class Backend:
    """Where one backend's tenants live, how to open, measure and drop them."""

    name = ""
    cached = True

    def sources(self) -> list[Path]:
        return [SRC / "search.py", SRC / "append.py"]

    def url(self, size: int, index: bool) -> str:
        raise NotImplementedError

    def storage(self, store: Any, size: int, index: bool) -> int:
        raise NotImplementedError

    def drop(self, size: int, index: bool) -> None:
        raise NotImplementedError

    def _marker(self, size: int, index: bool) -> Path:
        return CACHE / f"{self.name}-{size}-{'on' if index else 'off'}.json"

    def open(self, source: Corpus, size: int, index: bool, out: Callable[[str], None]
             ) -> tuple[Any, float | None]:
        """The store with the tenant loaded (from the cache when it holds it), and the
        load's seconds (None: from the cache)."""
        from chathistory.stores import open_store

        fingerprint = _fingerprint(self.sources())
        marker = self._marker(size, index)
        if self.cached and marker.exists():
            kept = json.loads(marker.read_text())
            if kept == {"fingerprint": fingerprint, "messages": size}:
                store = open_store(self.url(size, index))
                last = store.get_session(f"s{(size - 1) // SESSION:06d}", tenant=TENANT)
                if last.message_count == size - (size - 1) // SESSION * SESSION:
                    return store, None
                store.close()
        marker.unlink(missing_ok=True)
        self.drop(size, index)
        store = open_store(self.url(size, index))
        label = f"{self.name} {'index' if index else 'search=off'} {size:,}"
        seconds = load(store, source, size, label, out)
        build = getattr(store, "build_search_index", None)
        if index and build is not None:
            build()
        if self.cached:
            CACHE.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"fingerprint": fingerprint, "messages": size}))
        return store, seconds


class SQLite(Backend):
    name = "sqlite"

    def sources(self) -> list[Path]:
        return [*super().sources(), SRC / "sqlite.py", SRC / "sqlite_schema.py",
                SRC / "sqlite_search.py"]

    def path(self, size: int, index: bool) -> Path:
        return CACHE / f"sqlite-{size}-{'on' if index else 'off'}.db"

    def url(self, size: int, index: bool) -> str:
        return f"sqlite:///{self.path(size, index)}" + ("" if index else "?search=off")

    def storage(self, store: Any, size: int, index: bool) -> int:
        import sqlite3

        conn = sqlite3.connect(self.path(size, index))
        try:
            pages, free, page = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                                 for p in ("page_count", "freelist_count", "page_size"))
        finally:
            conn.close()
        return int((pages - free) * page)

    def drop(self, size: int, index: bool) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.path(size, index)}{suffix}").unlink(missing_ok=True)


class Postgres(Backend):
    name = "postgres"

    def sources(self) -> list[Path]:
        return [*super().sources(), *(SRC / "postgres").glob("*.py")]

    def schema(self, size: int, index: bool) -> str:
        return f"bench_search_{size}_{'on' if index else 'off'}"

    def url(self, size: int, index: bool) -> str:
        return f"{PG_URL}?schema={self.schema(size, index)}" + ("" if index else "&search=off")

    def _sql(self, statement: str, *args: Any) -> Any:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            cursor = conn.execute(statement, args)
            return cursor.fetchone() if cursor.description else None

    def storage(self, store: Any, size: int, index: bool) -> int:
        found = self._sql(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN "
            "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
            "c.relkind IN ('r', 'm')", self.schema(size, index))
        return int(found[0])

    def drop(self, size: int, index: bool) -> None:
        self._sql(f'DROP SCHEMA IF EXISTS "{self.schema(size, index)}" CASCADE')


class Redis(Backend):
    name = "redis"
    cached = False  # a load takes about a minute at 1,000,000; memory is given back after

    def url(self, size: int, index: bool) -> str:
        return f"{REDIS_URL}?prefix=benchsearch{size}"

    def storage(self, store: Any, size: int, index: bool) -> int:
        total = 0
        batch: list[bytes] = []

        def usage() -> int:
            pipe = store._r.pipeline(transaction=False)
            for key in batch:
                pipe.memory_usage(key, samples=0)
            found = sum(n or 0 for n in pipe.execute())
            batch.clear()
            return found

        for key in store._r.scan_iter(match=f"{store.prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                total += usage()
        return total + (usage() if batch else 0)

    def drop(self, size: int, index: bool) -> None:
        from chathistory.stores.redis import RedisStore

        RedisStore(self.url(size, index).split("?")[0], prefix=f"benchsearch{size}",
                   flush_prefix_on_close=True).close()


BACKENDS: tuple[Backend, ...] = (SQLite(), Postgres(), Redis())


# ---------------------------------------------------------------- measuring


def indexed(store: Any) -> bool:
    """Whether the store answers a search through an index (a scan reports ``scanned``)."""
    return bool(store.search(NOTHING, tenant=TENANT).scanned is None)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def latencies(store: Any, word: str, s: Settings, slow: bool) -> dict[str, Any]:
    """p50 and p99 of a search for ``word`` (``slow``: a scan, stopped after
    ``scan_seconds`` with 2 samples at least), its hits and rows scanned."""
    page = store.search(word, tenant=TENANT, limit=100)  # warm, and the hits
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < s.samples:
        t = time.perf_counter()
        store.search(word, tenant=TENANT)
        times.append(time.perf_counter() - t)
        if slow and len(times) >= 2 and time.perf_counter() - started > s.scan_seconds:
            break
    return {"p50_s": statistics.median(times), "p99_s": percentile(times, 0.99),
            "samples": len(times), "hits": len(page.items), "scanned": page.scanned}


def _median_by_store(stores: dict[str, Any], rounds: int, prefix: str,
                     run: Callable[[Any, str], list[float]]) -> dict[str, float]:
    """Each store's median of the samples ``run(store, session_id)`` returns, over
    ``rounds`` rounds, each to a fresh session of ``APPEND_TENANT`` (the searched tenant
    is left as loaded), deleted after; the stores take turns, the order swapped every
    round."""
    samples: dict[str, list[float]] = {name: [] for name in stores}
    order = list(stores)
    for _ in range(rounds):
        for name in order:
            store = stores[name]
            session_id = f"{prefix}{uuid.uuid4().hex[:12]}"
            store.create_session(session_id, tenant=APPEND_TENANT)
            samples[name].extend(run(store, session_id))
            store.delete_session(session_id, tenant=APPEND_TENANT)
        order.reverse()
    return {name: statistics.median(v) for name, v in samples.items()}


def _message(role: str, text: str) -> Any:
    from chathistory import Message

    return Message.user(text) if role == "user" else Message.assistant(text)


def append_costs(stores: dict[str, Any], source: Corpus, s: Settings) -> dict[str, float]:
    """Seconds per message, one append call per message: each store's median round."""
    texts = [source.pairs[(100_000 + k) % len(source.pairs)] for k in range(s.append_messages)]

    def run(store: Any, session_id: str) -> list[float]:
        started = time.perf_counter()
        for role, text in texts:  # built in the loop: the store counts each, as it does
            store.append(session_id, [_message(role, text)], tenant=APPEND_TENANT)
        _pay_for_the_index(store, everything=True)  # SQLite: what the round left, timed
        return [(time.perf_counter() - started) / len(texts)]

    return _median_by_store(stores, s.append_rounds, "a", run)


SPACED_PAUSE_S = 0.005
SPACED_CALLS = 100


def spaced_append_costs(stores: dict[str, Any], source: Corpus, s: Settings
                        ) -> dict[str, float]:
    """Seconds per append call when the calls are ``SPACED_PAUSE_S`` apart (as a chat's
    appends are, a model call apart), so that the indexer works between them: the
    median call of each store. What the index adds to an append's latency, where
    ``append_costs`` (calls back to back) is what it adds to a writer's throughput."""
    texts = [source.pairs[(110_000 + k) % len(source.pairs)] for k in range(SPACED_CALLS)]

    def run(store: Any, session_id: str) -> list[float]:
        calls = []
        for role, text in texts:
            m = _message(role, text)
            started = time.perf_counter()
            store.append(session_id, [m], tenant=APPEND_TENANT)
            calls.append(time.perf_counter() - started)
            time.sleep(SPACED_PAUSE_S)
        return calls

    return _median_by_store(stores, s.append_rounds, "p", run)


def run_size(backend: Backend, source: Corpus, size: int, s: Settings,
             out: Callable[[str], None]) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": backend.name, "messages": size}
    opened: list[Any] = []
    try:
        on, row["load_index_s"] = backend.open(source, size, True, out)
        opened.append(on)
        row["index"] = indexed(on)
        if row["index"]:
            try:
                off, row["load_off_s"] = backend.open(source, size, False, out)
                opened.append(off)
            except Exception as exc:  # an index that search=off cannot turn off yet
                row["off_error"] = f"{type(exc).__name__}: {exc}"
                off = None
        else:
            off = on  # no index: the store scans, and is its own baseline
        row["storage_index_b"] = backend.storage(on, size, True) if row["index"] else None
        row["storage_off_b"] = (backend.storage(off, size, off is on)  # its own file
                                if off is not None else None)
        words = {"rare": source.rare, "nothing": NOTHING}
        row["expected"] = {k: source.expected(w, size) for k, w in words.items()}
        if row["index"]:
            row["search_index"] = {k: latencies(on, w, s, False) for k, w in words.items()}
        if off is not None:
            row["search_scan"] = {k: latencies(off, w, s, True) for k, w in words.items()}
        if backend.name == "redis":  # for reference: the scan without its bound
            bound, on.search_scan_limit = on.search_scan_limit, None
            row["scan_bound"] = bound
            row["search_full_scan"] = {k: latencies(on, w, s, True) for k, w in words.items()}
            if size <= PLAIN_SCAN_UP_TO:  # and the engine's scan it stands beside
                from chathistory.stores.search import Searching

                on._scan_search = functools.partial(Searching._scan_search, on)
                row["search_plain_scan"] = {k: latencies(on, w, s, True)
                                            for k, w in words.items()}
                del on._scan_search
            on.search_scan_limit = bound
        stores = {"index": on, "off": off} if row["index"] and off is not None else {
            "off": off}
        row["append_s"] = append_costs(stores, source, s)
        row["append_spaced_s"] = spaced_append_costs(stores, source, s)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        out(f"   {backend.name} {size:,}: failed ({row['error']})")
    finally:
        for store in opened:
            store.close()
        if not backend.cached:
            backend.drop(size, True)
    return row


def redis_word_sets(source: Corpus, s: Settings, out: Callable[[str], None]
                    ) -> dict[str, Any]:
    """What an inverted index in Redis sets costs, measured on a tenant of 10,000
    messages: a Lua script SADDs the message's position to a set per distinct word,
    after each append (not atomic with it: a measure of the cost, not a design)."""
    from chathistory import Message
    from chathistory.stores import open_store
    from chathistory.stores.search import search_text, words

    script = """for k = 2, #ARGV do redis.call('SADD', KEYS[1] .. ARGV[k], ARGV[1]) end"""
    size = 10_000
    prefix = f"benchsets{uuid.uuid4().hex[:8]}"
    store: Any = open_store(f"{REDIS_URL}?prefix={prefix}")
    try:
        add_words = store._r.register_script(script)
        sets = store._tenant_key(TENANT, "w:")

        def index(session_id: str, first: int, messages: Sequence[Any]) -> None:
            pipe = store._r.pipeline(transaction=False)
            for k, m in enumerate(messages):
                add_words(keys=[sets], args=[f"{session_id}|{first + k}",
                                             *sorted(set(words(search_text(m))))], client=pipe)
            pipe.execute()

        load(store, source, size, "redis sets", out)
        rows = Redis().storage(store, size, True)
        for first in range(0, size, SESSION):
            session_id = f"s{first // SESSION:06d}"
            index(session_id, first, [source.message(i) for i in range(first, first + SESSION)])
        with_sets = Redis().storage(store, size, True)
        texts = [source.pairs[(100_000 + k) % len(source.pairs)] for k in range(s.append_messages)]
        rounds: dict[str, list[float]] = {"plain": [], "sets": []}
        for r in range(s.append_rounds):
            for kind in ("plain", "sets") if r % 2 == 0 else ("sets", "plain"):
                session_id = f"a{uuid.uuid4().hex[:12]}"
                store.create_session(session_id, tenant=TENANT)
                started = time.perf_counter()
                for k, (role, text) in enumerate(texts):
                    m = Message.user(text) if role == "user" else Message.assistant(text)
                    store.append(session_id, [m], tenant=TENANT)
                    if kind == "sets":
                        add_words(keys=[sets], args=[f"{session_id}|{k}",
                                                     *sorted(set(words(search_text(m))))])
                rounds[kind].append((time.perf_counter() - started) / len(texts))
    finally:
        store.flush_prefix_on_close = True
        store.close()
    plain, indexed_ = (statistics.median(rounds[k]) for k in ("plain", "sets"))
    result = {"messages": size, "storage_b": rows / size, "storage_sets_b": with_sets / size,
              "append_s": plain, "append_sets_s": indexed_}
    out("")
    out(f"Redis, an inverted index in sets (a SADD per distinct word; measured, not kept), "
        f"{size:,} messages:")
    out(f"   append {_us(plain)} -> {_us(indexed_)} per message ({indexed_ / plain:.2f}x, "
        f"goal <= {GOAL_APPEND:g}x); storage {rows / size:,.0f} -> {with_sets / size:,.0f} "
        f"B per message ({with_sets / rows:.2f}x, goal <= {GOAL_STORAGE:g}x)")
    return result


# ---------------------------------------------------------------- the report


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.2f}" if ms < 1 else f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}"


EXTRA_SCANS = (("search_full_scan", "scan, no bound"),
               ("search_plain_scan", "engine's scan, no bound"))
"""Redis's reference rows: its scan without the bound, and the engine's scan it replaces."""


def _cell(found: dict[str, Any] | None, expected: int) -> str:
    """``p50 / p99 ms (hits of expected)``."""
    if found is None:
        return "-"
    hits = f"{found['hits']}" if found["hits"] == expected else f"{found['hits']} of {expected}"
    read = "" if found["scanned"] is None else f", {found['scanned']:,} read"
    n = "" if found["samples"] >= 100 else f", n={found['samples']}"
    return f"{_ms(found['p50_s'])} / {_ms(found['p99_s'])} ({hits}{read}{n})"


def _goal(name: str, value: float | None, goal: float) -> str:
    if value is None:
        return "-"
    if name.endswith(("p50", "p99")):
        return f"{_ms(value)} ms (<= {_ms(goal)}) {_verdict(value <= goal)}"
    return f"{value:.2f}x (<= {goal:g}x) {_verdict(value <= goal)}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def report(rows: list[dict[str, Any]], big: int, out: Callable[[str], None]) -> dict[str, Any]:
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["backend"], f"{r['messages']:,}", "failed (below)", "", "", "", ""])
            continue
        exp = r["expected"]
        index = r.get("search_index") or {}
        scan = r.get("search_scan") or {}
        label = "index" if r["index"] else "no index yet" if r["backend"] != "redis" else (
            f"scan, bound {r['scan_bound']:,}")
        table.append([r["backend"], f"{r['messages']:,}", label,
                      _cell(index.get("rare"), exp["rare"]),
                      _cell(index.get("nothing"), 0),
                      _cell(scan.get("rare"), exp["rare"]),
                      _cell(scan.get("nothing"), 0)])
        for key, label in EXTRA_SCANS:
            if key in r:
                table.append(["", "", label, "", "", _cell(r[key]["rare"], exp["rare"]),
                              _cell(r[key]["nothing"], 0)])
    out("")
    out("search p50 / p99 ms (hits found; rows a scan read; n = searches when under 100); "
        "rare word, a word in no message")
    print_table(["backend", "messages", "search by", "index: rare", "index: nothing",
                 "scan / search=off: rare", "scan: nothing"], table, out)
    for r in rows:
        if "error" in r or "off_error" in r:
            out(f"   {r['backend']} {r['messages']:,}: {r.get('error') or r['off_error']}")

    table = []
    for r in rows:
        if "error" in r:
            continue
        append = r["append_s"]
        a = _ratio(append.get("index"), append.get("off"))
        st = _ratio(r["storage_index_b"], r["storage_off_b"])
        n = r["messages"]
        spaced = r.get("append_spaced_s") or {}
        sa = _ratio(spaced.get("index"), spaced.get("off"))
        table.append([r["backend"], f"{n:,}", _us(append.get("index")), _us(append.get("off")),
                      "-" if a is None else f"{a:.2f}x",
                      f"{_us(spaced.get('index'))} / {_us(spaced.get('off'))}"
                      + ("" if sa is None else f" ({sa:.2f}x)"),
                      "-" if r["storage_index_b"] is None else f"{r['storage_index_b'] / n:,.0f}",
                      "-" if r["storage_off_b"] is None else f"{r['storage_off_b'] / n:,.0f}",
                      "-" if st is None else f"{st:.2f}x"])
    out("")
    out("append per message (one call each, o200k counted by the store; back to back, "
        f"and the median call {SPACED_PAUSE_S * 1000:.0f} ms apart) and storage per message")
    print_table(["backend", "messages", "append index", "append search=off", "ratio",
                 "spaced: index / off", "B/msg index", "B/msg search=off", "ratio"],
                table, out)

    goals: dict[str, Any] = {}
    table = []
    for r in rows:
        if r["messages"] != big or r["backend"] == "redis" or "error" in r:
            continue
        if not r["index"]:
            table.append([r["backend"], "no index yet", "", "", "", "", ""])
            continue
        index = r["search_index"]
        checks = {
            "rare p50": (index["rare"]["p50_s"], GOAL_P50),
            "rare p99": (index["rare"]["p99_s"], GOAL_P99),
            "nothing p50": (index["nothing"]["p50_s"], GOAL_P50),
            "nothing p99": (index["nothing"]["p99_s"], GOAL_P99),
            "append": (_ratio(r["append_s"].get("index"), r["append_s"].get("off")),
                       GOAL_APPEND),
            "storage": (_ratio(r["storage_index_b"], r["storage_off_b"]), GOAL_STORAGE)}
        goals[r["backend"]] = {k: {"value": v, "goal": g, "passed": v is not None and v <= g}
                               for k, (v, g) in checks.items()}
        table.append([r["backend"], *(_goal(k, v, g) for k, (v, g) in checks.items())])
    if table:
        out("")
        out(f"goals at {big:,} messages")
        print_table(["backend", "rare p50", "rare p99", "nothing p50", "nothing p99",
                     "append", "storage"], table, out)
    return goals


def markdown(results: dict[str, Any]) -> str:
    """The results as the table in docs/stores.md ("Measured: python -m bench search"):
    ``python -c 'import json, bench.search as s;
    print(s.markdown(json.load(open("bench/results/search.json"))))'``."""
    lines = ["| backend | messages | search by | rare word, p50 / p99 ms (hits) | no match |"
             " scan: rare word | scan: no match | append per message (index / off) |"
             " bytes per message (index / off) |",
             "| --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['messages']:,} | failed: {r['error']} |"
                         " | | | | | |")
            continue
        exp = r["expected"]
        index, scan = r.get("search_index") or {}, r.get("search_scan") or {}
        append = r["append_s"]
        a = _ratio(append.get("index"), append.get("off"))
        st = _ratio(r["storage_index_b"], r["storage_off_b"])
        n = r["messages"]
        by = "index" if r["index"] else (f"scan (bound {r['scan_bound']:,})"
                                         if "scan_bound" in r else "scan (no index yet)")
        cells = [r["backend"], f"{n:,}", by, _cell(index.get("rare"), exp["rare"]),
                 _cell(index.get("nothing"), 0), _cell(scan.get("rare"), exp["rare"]),
                 _cell(scan.get("nothing"), 0),
                 "-" if a is None else f"{_us(append['index'])} / {_us(append['off'])}"
                 f" ({a:.2f}x)",
                 "-" if st is None else f"{r['storage_index_b'] / n:,.0f} / "
                 f"{r['storage_off_b'] / n:,.0f} ({st:.2f}x)"]
        if a is None and "off" in append:
            cells[7] = f"{_us(append['off'])} (no index)"
        if st is None and r["storage_off_b"] is not None:
            cells[8] = f"{r['storage_off_b'] / n:,.0f} (no index)"
        lines.append("| " + " | ".join(cells) + " |")
        for key, label in EXTRA_SCANS:
            if key in r:
                lines.append(f"| | | {label} | | | {_cell(r[key]['rare'], exp['rare'])} | "
                             f"{_cell(r[key]['nothing'], 0)} | | |")
    return "\n".join(lines)


def run(quick: bool = False, out: Callable[[str], None] = print,
        sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """The suite (``sizes``: other tenant sizes than the default, to try it out)."""
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    s = settings(quick)
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    env = environment()
    out("chathistory search benchmark" + (" (quick)" if quick else ""))
    out(f"python {env['python']} on {env['platform']}, {env['cpus']} cpus")
    source = corpus(out)
    results: dict[str, Any] = {"environment": env, "quick": quick, "settings": vars(s),
                               "rare_word": source.rare, "nothing": NOTHING, "rows": []}
    for backend in BACKENDS:
        for size in sizes:
            out(f"   {backend.name} {size:,} ...")
            row = run_size(backend, source, size, s, out)
            results["rows"].append(row)
    try:
        results["redis_word_sets"] = redis_word_sets(source, s, out)
    except Exception as exc:
        results["redis_word_sets"] = {"error": f"{type(exc).__name__}: {exc}"}
        out(f"   redis word sets: failed ({results['redis_word_sets']['error']})")
    results["goals"] = report(results["rows"], sizes[-1], out)
    results["seconds"] = time.perf_counter() - started
    out("")
    out(f"search benchmark took {results['seconds']:.0f} s; databases kept in {CACHE} "
        f"(remove it, and the bench_search_* schemas, to reclaim the space)")
    return results


def discard() -> None:
    """Remove the kept databases (files and schemas)."""
    for backend in BACKENDS:
        for size in SIZES:
            for index in (True, False):
                backend.drop(size, index)
    shutil.rmtree(CACHE, ignore_errors=True)
