"""`python -m reliability [--quick] [--only NAME ...]`: run the reliability checks and
print one table; the exit status is 1 when any check failed.

Checks: crash (SIGKILL of writers and servers, then verification), concurrency
(many processes on one session), soak (bounded-time load on a server), fuzz and
isolation (when present), hostile and frontdoor (attacks while another tenant
measures the server). See docs/reliability.md."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
from collections.abc import Callable
from typing import Any

from .common import Result

CHECKS = ("crash", "concurrency", "soak", "fuzz", "isolation", "hostile", "frontdoor")
"""The registry: modules of this package, each with ``run(quick: bool) -> list[Result]``."""


def load(name: str) -> Callable[..., list[Result]] | None:
    """The module's ``run``, or None (with a note) when the module is not there."""
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{name}":
            raise
        print(f"note: reliability/{name}.py not found: {name} skipped", flush=True)
        return None
    run: Callable[..., list[Result]] = module.run
    return run


def _verdict(result: Result) -> str:
    if getattr(result, "informational", False):
        return "info"
    return "PASS" if result.passed else "FAIL"


def print_table(results: list[Result]) -> None:
    header = ("check", "backend", "tried", "passed/found", "failed", "seconds", "verdict")
    rows = [(r.check, r.target, str(r.tried), str(r.ok), str(r.failed), f"{r.seconds:.1f}",
             _verdict(r)) for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    right = {2, 3, 4, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for result, row in zip(results, rows, strict=True):
        print(line(row))
        if result.detail:
            print(" " * 4 + result.detail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="the short version CI runs (a few kills, seconds of soak)")
    parser.add_argument("--only", nargs="+", choices=CHECKS, metavar="NAME",
                        help=f"run only these checks ({', '.join(CHECKS)})")
    parser.add_argument("--soak-seconds", type=float, default=None,
                        help="soak: how long (default 600, 10 with --quick)")
    parser.add_argument("--kills", type=int, default=None,
                        help="crash: SIGKILLs per backend (default 60, 6 with --quick)")
    args = parser.parse_args(argv)
    options: dict[str, dict[str, Any]] = {"soak": {"seconds": args.soak_seconds},
                                         "crash": {"kills": args.kills}}
    results: list[Result] = []
    started = time.monotonic()
    for name in args.only or CHECKS:
        run = load(name)
        if run is None:
            continue
        accepted = inspect.signature(run).parameters
        extra = {k: v for k, v in options.get(name, {}).items()
                 if v is not None and k in accepted}
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            results.extend(run(quick=args.quick, **extra))
        except Exception as exc:  # a check that cannot run is a failure, not a crash
            results.append(Result(name, "-", 1, 0, 1, time.monotonic() - t0,
                                  f"error: {type(exc).__name__}: {exc}"))
    print()
    print_table(results)
    failed = [r for r in results if _verdict(r) == "FAIL"]
    print(f"\n{len(results)} rows, {len(failed)} failed, {time.monotonic() - started:.0f} s")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
