"""PostgreSQL append paths, each forced: is a fast path worth its code?

`python -m bench.pg_paths [--rounds N] [--appends N] [--threads-appends N]`

Single writer: one ``append`` call per message (ShareGPT messages, counts cached
up front so only the store is timed) to a fresh session, per path; then 8
writer threads, each on a session of its own. The paths run interleaved, in a
rotated order every round, so load from elsewhere on the machine falls on all of
them alike: medians over the rounds, and against ``optimistic`` the median of each
round's ratio (paths run back to back).

Paths: ``as_written`` (the store as shipped: after its own append a store plans
the next on the session as it wrote it, one round trip), ``optimistic`` (that
cache never filled: read, plan, conditional write, two round trips) and
``locked`` (every append on the session's row lock).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from . import data
from .stores import PG_URL, THREADS, _concurrent, _drop_schema, _message


def _stores(schema: str) -> dict[str, Any]:
    from chathistory.stores.postgres import PostgresStore

    class Optimistic(PostgresStore):
        def _remember(self, key: Any, session: Any) -> None:  # the cache never filled
            return None

    class Locked(PostgresStore):
        def _b_append(self, tenant: str, session_id: str, fn: Any, ids: Any = ()) -> Any:
            return self._append_locked(tenant, session_id, fn)

    return {name: cls(PG_URL, counter="approx", schema=schema, pool_size=THREADS + 2)
            for name, cls in (("as_written", PostgresStore), ("optimistic", Optimistic),
                              ("locked", Locked))}


def _built(store: Any, pairs: Sequence[tuple[str, str]]) -> list[Any]:
    from chathistory.tokens import cached_count

    built = [_message(role, text) for role, text in pairs]
    for m in built:
        cached_count(m, store.counter)
    return built


def _single(store: Any, built: Sequence[Any]) -> float:
    """Seconds per append, one message per call, to a new session."""
    sid = f"one-{uuid.uuid4().hex[:10]}"
    store.create_session(sid)
    started = time.perf_counter()
    for m in built:
        store.append(sid, [m])
    return (time.perf_counter() - started) / len(built)


def _interleaved(names: Sequence[str], rounds: int, cell: Callable[[str, int], float]
                 ) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for k in range(len(names)):  # rotated: each path runs first, middle and last
            name = names[(r + k) % len(names)]
            out[name].append(cell(name, r))
    return out


def run(rounds: int, appends: int, per_thread: int, out: Callable[[str], None] = print
        ) -> dict[str, Any]:
    load = os.getloadavg()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    stores = _stores(schema)
    try:
        any_store = next(iter(stores.values()))
        pairs = data.messages(max(appends, THREADS * per_thread) * 2)
        single_msgs = [_built(any_store, pairs[r % 2 * appends:][:appends])
                       for r in range(2)]
        names = list(stores)
        for name in names:  # warm up: pool connections, prepared statements
            _single(stores[name], single_msgs[0][:20])
        single = _interleaved(names, rounds,
                              lambda name, r: _single(stores[name], single_msgs[r % 2]))
        threads = _interleaved(names, rounds, lambda name, r: _concurrent(
            stores[name], pairs, per_thread, shared=False, tag=uuid.uuid4().hex[:10]))
    finally:
        for s in stores.values():
            s.close()
        _drop_schema(schema)
    out(f"PostgreSQL append paths: {rounds} interleaved rounds; single writer {appends} "
        f"appends of one ShareGPT message; {THREADS} threads x {per_thread} appends, "
        f"each thread on its own session; load average {load[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f}")
    out("(vs optimistic: the median of each round's ratio, paths run back to back)")
    out(f"{'path':<12} {'us/append':>10} {'vs optimistic':>14} "
        f"{f'{THREADS} threads msg/s':>18} {'vs optimistic':>14}")
    results: dict[str, Any] = {}
    for name in names:
        s_ratio = statistics.median(a / b for a, b in zip(single[name], single["optimistic"],
                                                          strict=True))
        t_ratio = statistics.median(a / b for a, b in zip(threads[name], threads["optimistic"],
                                                          strict=True))
        results[name] = {"single_us": [x * 1e6 for x in single[name]],
                         "threads_msg_per_s": threads[name],
                         "single_vs_optimistic": s_ratio, "threads_vs_optimistic": t_ratio}
        out(f"{name:<12} {statistics.median(single[name]) * 1e6:>10.0f} {s_ratio - 1:>+14.1%} "
            f"{statistics.median(threads[name]):>18,.0f} {t_ratio - 1:>+14.1%}")
    for name in names:
        out(f"  {name}: us/append " + " ".join(f"{x * 1e6:.0f}" for x in single[name])
            + "; threads msg/s " + " ".join(f"{x:,.0f}" for x in threads[name]))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_paths", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--threads-appends", type=int, default=150,
                        help=f"appends per thread ({THREADS} threads)")
    args = parser.parse_args(argv)
    run(args.rounds, args.appends, args.threads_appends)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
