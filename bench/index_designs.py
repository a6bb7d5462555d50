"""SQLite search index designs: what keeps an append within 1.2x of ``search=off``?

`python -m bench.index_designs [--rounds N] [--appends N] [--synchronous FULL]`

Issue 22 asks that the index add at most 20% to an append. The store's index (an FTS5
table in the store's file, fed each word with its tenant's prefix by the store's
indexer thread) costs more than that with appends back to back, and this bench measures
the designs that could do better, side by side in one run: each variant appends
``--appends`` ShareGPT messages (one call each, o200k counted by the store) to a fresh
session of a ``search=off`` store, hands each appended row to a thread that indexes it
in batches of 512 (``sqlite_search.FLUSH_AT``), and ends its round by indexing what is
left, inside the timed section. The variants take turns, the order rotated every round;
medians over the rounds, and the ratio of each to ``off``. Beside the wall time, each
thread's CPU (``time.thread_time``): the main thread's but its indexing, and the indexing
(the flushes, in whichever thread), which a machine whose CPUs are shared with other
guests (steal time) moves far less than the wall time.

Variants (the rows' data handed to the thread as the store hands it off):

- ``off``: no index.
- ``store``: the store as shipped, ``search`` on (its own indexer and bookkeeping).
- ``store, thread beside``: the store as shipped, but its indexer thread indexes beside
  appends back to back (an append never indexes itself, and the thread does not wait
  for the appends to pause).
- ``handed only``: the rows handed to the thread, which does nothing with them: what
  the handoff itself costs the append (encoding the row again, here).
- ``cut only``: the thread makes each row's text as the store gives it to FTS5
  (``sqlite_search.indexed_text``: ASCII search text as it is, other text as its
  words) and writes nothing: what the Python side costs.
- ``store's text, store's file``: that text and the tenant's token, written to an FTS5
  table of the store's shape (``words, tenant``) in the store's file under the store's
  lock: the store's index without its bookkeeping (watermarks, state reads, handoff
  checks).
- ``store's text, own file``: the same, to a table in another file through a connection
  of its own (its own write lock).
- ``log, own file``: the second-file design with its bookkeeping in the store's file:
  each append's transaction adds a row to a log table (its key the log's order), and
  the indexer, per batch, reads the log's unapplied tail (where removals would be),
  writes the text to FTS5 in another file with the log position it reached, then
  deletes the applied log rows in a transaction of the store.

- ``text handed, store's file`` and ``text handed, own file``: the appending thread
  makes each message's text (``fts_text(search_text(message))``, what the store gives
  FTS5) and hands it over; the thread only writes it, to the store's file under its
  lock or to a file of its own.

(Until 2026-11-26 the variants gave each word the tenant's prefix, as the store then
did, and measured a table of one tenant given raw text beside it: docs/stores.md has
those runs.)

Not a design of the store: a prototype's measure (removals, rowid reuse and crash
recovery are not modelled), kept so that the numbers in docs/stores.md can be rerun.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import data
from .stores import _message

BATCH = 512
TOKEN = "t0000000000a"
"""The tenant's token every variant writes beside the text (one tenant, as the store's
``sqlite_search.tenant_token`` gives one)."""
_INDEX_CPU: dict[int, float] = {}
"""Thread CPU seconds spent indexing, by thread (``_indexing``)."""
_INDEX_CPU_LOCK = threading.Lock()


def _indexing(work: Callable[..., Any]) -> Callable[..., Any]:
    """``work``, its thread CPU time added to ``_INDEX_CPU``."""
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return work(*args, **kwargs)
        finally:
            spent = time.thread_time() - started
            with _INDEX_CPU_LOCK:
                me = threading.get_ident()
                _INDEX_CPU[me] = _INDEX_CPU.get(me, 0.0) + spent
    return timed
VARIANTS = ("off", "store", "store, thread beside", "handed only", "cut only",
            "store's text, store's file", "store's text, own file", "log, own file",
            "text handed, store's file", "text handed, own file")
_FTS = ("CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(words, tenant, content='', "
        "tokenize='ascii', detail=full)")


class _Indexer:
    """A thread indexing handed-off rows in batches: ``make`` gives a row's text (empty:
    write nothing), ``write`` stores a batch of (rowid, text, tenant's token)."""

    def __init__(self, make: Callable[[Any], str],
                 write: Callable[[list[tuple[int, str, str]]], None] | None) -> None:
        self.make, self.write = make, write
        self.rows: collections.deque[Any] = collections.deque()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop = False
        self.rowid = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def hand(self, row: Any) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH:
            self.wake.set()

    def flush(self, everything: bool) -> None:
        _indexing(self._flush)(everything)

    def _flush(self, everything: bool) -> None:
        with self.lock:
            while self.rows and (everything or len(self.rows) >= BATCH):
                batch = [self.rows.popleft() for _ in range(min(BATCH, len(self.rows)))]
                docs = []
                for row in batch:
                    self.rowid += 1
                    text = self.make(row)
                    if text:
                        docs.append((self.rowid, text, TOKEN))
                if self.write is not None:
                    self.write(docs)

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stop:
                return
            self.flush(everything=False)

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join()


def _fts_file(path: Path) -> sqlite3.Connection:
    """A file of its own holding the FTS5 table ``w``, through a connection of its own
    (WAL, ``synchronous=NORMAL``: an index is rebuilt from the store's file)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(_FTS.format(name="w"))
    conn.execute("INSERT INTO w (w, rank) VALUES ('automerge', 16)")
    return conn


def _own_file(path: Path) -> Callable[[list[tuple[int, str, str]]], None]:
    conn = _fts_file(path)

    def write(docs: list[tuple[int, str, str]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO w (rowid, words, tenant) VALUES (?, ?, ?)", docs)
        conn.execute("COMMIT")
    return write


def _logged_own_file(store: Any, path: Path) -> Callable[[list[tuple[int, str, str]]], None]:
    """The second-file design's writes: FTS5 and the log position reached in a file of
    its own, then the applied log rows deleted from the store's file."""
    conn = _fts_file(path)
    conn.execute("CREATE TABLE applied (seq INTEGER NOT NULL)")
    conn.execute("INSERT INTO applied VALUES (0)")

    def write(docs: list[tuple[int, str, str]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        done = conn.execute("SELECT seq FROM applied").fetchone()[0]
        # the unapplied tail of the log, as the store's readers see it (removals)
        tail = store._fetch("SELECT max(seq), count(data) FROM bench_log WHERE seq > ?",
                            (done,))
        upto = tail[0][0] or done
        conn.executemany("INSERT INTO w (rowid, words, tenant) VALUES (?, ?, ?)", docs)
        conn.execute("UPDATE applied SET seq = ?", (upto,))
        conn.execute("COMMIT")
        with store.atomic() as main:
            main.execute("DELETE FROM bench_log WHERE seq <= ?", (upto,))
    return write


def _store_file(store: Any) -> Callable[[list[tuple[int, str, str]]], None]:
    with store.atomic() as conn:
        conn.execute(_FTS.format(name="bench_index"))
        conn.execute("INSERT INTO bench_index (bench_index, rank) VALUES ('automerge', 16)")

    def write(docs: list[tuple[int, str, str]]) -> None:
        with store.atomic() as conn:
            conn.executemany("INSERT INTO bench_index (rowid, words, tenant) "
                             "VALUES (?, ?, ?)", docs)
    return write


def _thread_beside(store: Any) -> Any:
    """``store`` with its indexer thread indexing beside appends back to back: an append
    that leaves ``FLUSH_AT`` rows wakes it and never indexes them itself, and the thread
    does not wait for the appends to pause (``QUIET_S``)."""
    from chathistory.stores import sqlite_search

    def after_append(pending: int) -> None:
        store._last_append = time.monotonic()
        if pending >= sqlite_search.FLUSH_AT:
            with store._indexer_lock:
                if store._indexer is None:
                    store._indexer = threading.Thread(target=store._index_pending,
                                                      daemon=True)
                    store._indexer.start()
            store._indexer_wake.set()

    store._after_append = after_append
    store._quiet = lambda: not store._indexer_stop
    store._appending = lambda: store._indexer_stop
    return store


def run(rounds: int, appends: int, out: Callable[[str], None] = print,
        synchronous: str = "NORMAL") -> dict[str, Any]:
    from chathistory.model.codec import encode
    from chathistory.stores.sqlite import SQLiteStore
    from chathistory.stores.sqlite_search import indexed_text

    pairs = list(itertools.islice(data.iter_messages(), appends))
    tmp = Path(tempfile.mkdtemp(prefix="chathistory-index-designs-"))
    off = SQLiteStore(tmp / "off.db", search=False, synchronous=synchronous)
    on = SQLiteStore(tmp / "on.db", synchronous=synchronous)
    beside = _thread_beside(SQLiteStore(tmp / "beside.db", synchronous=synchronous))
    logged = SQLiteStore(tmp / "logged.db", search=False, synchronous=synchronous)
    with logged.atomic() as conn:
        conn.execute("CREATE TABLE bench_log (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL, "
                     "data BLOB)")
    log_ids = itertools.count(1)
    plain_append = logged._b_append

    def logged_append(tenant: str, session_id: str, fn: Any, ids: Any = ()) -> Any:
        """The append with a log row in its transaction (the design's pending entry)."""
        def with_log(txn: Any) -> Any:
            result = fn(txn)
            txn.conn.execute("INSERT INTO bench_log (id) VALUES (?)", (next(log_ids),))
            return result
        return plain_append(tenant, session_id, with_log, ids)

    logged._b_append = logged_append  # type: ignore[method-assign]
    indexers = {
        "handed only": _Indexer(lambda row: "", None),
        "cut only": _Indexer(indexed_text, None),
        "store's text, store's file": _Indexer(indexed_text, _store_file(off)),
        "store's text, own file": _Indexer(indexed_text, _own_file(tmp / "own.db")),
        "log, own file": _Indexer(indexed_text, _logged_own_file(logged,
                                                                  tmp / "logged-search.db")),
        "text handed, store's file": _Indexer(str, _store_file(off)),
        "text handed, own file": _Indexer(str, _own_file(tmp / "handed.db")),
    }
    from chathistory.stores.search import INDEX_CHARS, search_text
    from chathistory.stores.sqlite_search import fts_text

    def handed_text(m: Any) -> str:
        """The text the appending thread hands: its message's, cut as the store cuts."""
        return fts_text(search_text(m)[:INDEX_CHARS])

    on._flush_pending = _indexing(on._flush_pending)  # type: ignore[method-assign]
    beside._flush_pending = _indexing(beside._flush_pending)

    def one_round(name: str) -> tuple[float, float, float]:
        """Seconds per append: wall, the main thread's CPU but its indexing, indexing."""
        store = {"store": on, "store, thread beside": beside}.get(
            name, logged if name.startswith("log") else off)
        indexer = indexers.get(name)
        session_id = f"d{uuid.uuid4().hex[:12]}"
        store.create_session(session_id)
        time.sleep(0.05)  # the last round's indexer thread done
        _INDEX_CPU.clear()
        started, cpu = time.perf_counter(), time.thread_time()
        for role, text in pairs:  # built in the loop: the store counts each
            m = _message(role, text)
            store.append(session_id, [m])
            if indexer is not None and name.startswith("text handed"):
                indexer.hand(handed_text(m))
            elif indexer is not None:
                indexer.hand(encode(m))  # the stored bytes, near enough (ids as given)
        if indexer is not None:
            indexer.flush(everything=True)
        elif name.startswith("store"):
            store._flush_pending()
        wall, main = time.perf_counter() - started, time.thread_time() - cpu
        with _INDEX_CPU_LOCK:
            index = sum(_INDEX_CPU.values())
            main -= _INDEX_CPU.get(threading.get_ident(), 0.0)  # the round's end, indexed here
        store.delete_session(session_id)
        n = len(pairs)
        return wall / n, max(0.0, main) / n, index / n

    out(f"SQLite index designs: {appends} ShareGPT appends a round, {rounds} rounds, "
        f"the stores at synchronous={synchronous}, "
        f"the variants taking turns (python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus)")
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    order = list(VARIANTS)
    one_round("off")  # warm-up: the counter's tables, the files
    for r in range(rounds):
        for name in order:
            times[name].append(one_round(name))
        order = order[1:] + order[:1] if r % 2 == 0 else list(reversed(order))
    for indexer in indexers.values():
        indexer.close()
    off.close()
    on.close()
    beside.close()
    logged.close()
    base = statistics.median(w for w, _m, _i in times["off"])
    rows = {name: {"us": statistics.median(w for w, _m, _i in v) * 1e6,
                   "ratio": statistics.median(w for w, _m, _i in v) / base,
                   "main_cpu_us": statistics.median(m for _w, m, _i in v) * 1e6,
                   "index_cpu_us": statistics.median(i for _w, _m, i in v) * 1e6}
            for name, v in times.items()}
    width = max(map(len, VARIANTS))
    out(f"  {'variant':<{width}}  wall per append   vs off   main thread CPU   indexing CPU")
    for name in VARIANTS:
        row = rows[name]
        out(f"  {name:<{width}}  {row['us']:12.1f} us  {row['ratio']:6.2f}x  "
            f"{row['main_cpu_us']:12.1f} us  {row['index_cpu_us']:9.1f} us")
    return {"rounds": rounds, "appends": appends, "synchronous": synchronous, "variants": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.index_designs",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--appends", type=int, default=1200)
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL",
                        help="the stores' synchronous (the second files stay at NORMAL: "
                        "an index is rebuilt from the store's file)")
    args = parser.parse_args(argv)
    run(args.rounds, args.appends, synchronous=args.synchronous)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
