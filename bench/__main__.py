"""`python -m bench [suite ...] [--quick]`: run benchmark suites, print tables, write JSON.

`service` also takes `--duration SECONDS` (per cell), `--soak SECONDS` and `--workers N`."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import cache, cache_clock, context, foundation, search, service, stores, window, writes

SUITES: dict[str, Callable[..., dict[str, Any]]] = {
    "foundation": foundation.run,
    "window": window.run,
    "service": service.run,
    "stores": stores.run,
    "writes": writes.run,
    "cache": cache.run,
    "cache_clock": cache_clock.run,
    "context": context.run,
    "search": search.run,
}
ON_REQUEST = {"search", "context"}
"""Suites that run only when named: ``search`` loads tenants of up to 1,000,000 messages
(tens of minutes, some GB of disk the first time)."""
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suites", nargs="*", choices=[*SUITES, []],
                        help="default: all suites but " + ", ".join(sorted(ON_REQUEST)))
    parser.add_argument(
        "--quick", action="store_true", help="fewer turns, repeats and messages (a smoke run)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="directory for SUITE.json (default bench/results)",
    )
    parser.add_argument("--duration", type=float, default=None,
                        help="service: seconds per cell (default 10, 3 with --quick)")
    parser.add_argument("--soak", type=float, default=None, metavar="SECONDS",
                        help="service: only a memory soak of appends for this long (e.g. 600)")
    parser.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1),
                        help="service: uvicorn worker processes (default: one per CPU)")
    parser.add_argument("--cells", default="",
                        help="writes: the cells to run, comma-separated (" +
                        ", ".join([*writes.CELLS, "growth"]) + "; default all)")
    args = parser.parse_args(argv)
    cells = [c for c in args.cells.split(",") if c]
    unknown = set(cells) - {*writes.CELLS, "growth"}
    if unknown:
        parser.error(f"unknown cell(s): {', '.join(sorted(unknown))}")
    for name in args.suites or [s for s in SUITES if s not in ON_REQUEST]:
        options: dict[str, Any] = (
            {"duration": args.duration, "soak": args.soak, "workers": args.workers}
            if name == "service" else {"cells": cells} if name == "writes" else {})
        results = SUITES[name](quick=args.quick, **options)
        args.results.mkdir(parents=True, exist_ok=True)
        stem = f"{name}-soak" if name == "service" and args.soak else name
        path = args.results / (f"{stem}-quick.json" if args.quick else f"{stem}.json")
        path.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
