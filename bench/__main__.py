"""`python -m bench [suite ...] [--quick]`: run benchmark suites, print tables, write JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import foundation, window

SUITES: dict[str, Callable[..., dict[str, Any]]] = {
    "foundation": foundation.run,
    "window": window.run,
}
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suites", nargs="*", choices=[*SUITES, []], help="default: all suites")
    parser.add_argument(
        "--quick", action="store_true", help="fewer turns, repeats and messages (a smoke run)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="directory for SUITE.json (default bench/results)",
    )
    args = parser.parse_args(argv)
    for name in args.suites or list(SUITES):
        results = SUITES[name](quick=args.quick)
        args.results.mkdir(parents=True, exist_ok=True)
        path = args.results / (f"{name}-quick.json" if args.quick else f"{name}.json")
        path.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
