"""Redis fast paths, each against its plain path: is each worth its code?

`python -m bench.redis_paths [--rounds N]`

- tail: ``RedisStore.tail(sid, 20)`` on a 10,000-message session, the length known
  (one HMGET: ``_tail_at``) against a store that never keeps a length (the TAIL_PROBE
  script every call);
- append, one writer: one ShareGPT message per call, planned on the process's own
  copy of the session (``_append_as_written``, one round trip) against a store that
  never keeps it (session and ids read first, two round trips);
- append, 8 writer threads on 8 sessions through one store: APPEND through the write
  combiner (``stores/redis/combine.py``) against direct script calls.

The paths take turns within each round; medians over the rounds. A throwaway key
prefix on ``CHATHISTORY_TEST_REDIS`` (default redis://127.0.0.1:6379/0), removed after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import data

URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")
THREADS = 8


def _classes() -> dict[str, Any]:
    from chathistory.stores.redis import RedisStore

    class NoLength(RedisStore):
        def _keep_length(self, key: Any, length: int) -> None:
            return None

    class NoCopy(RedisStore):
        def _remember(self, key: Any, written: Any) -> None:
            return None

    class NoCombiner(RedisStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            script = self._append_script
            self._append_combined = lambda keys, args: script(keys=keys, args=args)

    return {"store": RedisStore, "no_length": NoLength, "no_copy": NoCopy,
            "no_combiner": NoCombiner}


def run(rounds: int = 5, out: Callable[[str], None] = print) -> dict[str, list[float]]:
    from chathistory import Message

    texts = data.messages(THREADS * 200 + 10_000)
    cls = _classes()
    prefix = f"benchrp{uuid.uuid4().hex[:8]}"

    def built(lo: int, hi: int) -> list[Message]:
        return [(Message.user if role == "user" else Message.assistant)(text)
                for role, text in texts[lo:hi]]

    results: dict[str, list[float]] = {}
    owner = cls["store"](URL, prefix=prefix, flush_prefix_on_close=True)
    try:
        owner.create_session("big")
        for lo in range(0, 10_000, 1000):
            owner.append("big", built(lo, lo + 1000))
        readers = {"tail, length known (one HMGET)": owner,
                   "tail, script every call": cls["no_length"](URL, prefix=prefix)}
        writers = {"append, own copy (one round trip)": cls["store"](URL, prefix=prefix),
                   "append, read first (two round trips)": cls["no_copy"](URL, prefix=prefix)}
        at = 0
        for r in range(rounds):
            for name, store in readers.items():
                store.tail("big", 20)
                started = time.perf_counter()
                for _ in range(500):
                    store.tail("big", 20)
                results.setdefault(name, []).append((time.perf_counter() - started) / 500 * 1e6)
            for name, store in writers.items():
                sid = f"one-{r}-{len(results.get(name, []))}-{name[:10]}"
                store.create_session(sid)
                batch = built(at, at + 200)
                at = (at + 200) % 10_000
                started = time.perf_counter()
                for m in batch:
                    store.append(sid, [m])
                results.setdefault(name, []).append(
                    (time.perf_counter() - started) / len(batch) * 1e6)
            for name, kind in (("8 threads, combined", "store"),
                               ("8 threads, a call each", "no_combiner")):
                store = cls[kind](URL, prefix=prefix)
                try:
                    results.setdefault(name, []).append(_threads(store, built, f"t{r}{kind}"))
                finally:
                    store.close()
        for store in [*readers.values(), *writers.values()]:
            if store is not owner:
                store.close()
    finally:
        owner.close()
    out("Redis fast paths (medians of the rounds; per call in us, threads in msg/s)")
    for name, values in results.items():
        out(f"  {name:40s} {statistics.median(values):9.1f}   rounds "
            + ", ".join(f"{v:.1f}" for v in values))
    return results


def _threads(store: Any, built: Callable[[int, int], list[Any]], tag: str) -> float:
    per = 120
    work = [built(200 * i, 200 * i + per) for i in range(THREADS)]
    for i in range(THREADS):
        store.create_session(f"{tag}-{i}")
    barrier = threading.Barrier(THREADS)

    def writer(i: int) -> None:
        barrier.wait()
        for m in work[i]:
            store.append(f"{tag}-{i}", [m])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(THREADS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return THREADS * per / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_paths", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    run(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
