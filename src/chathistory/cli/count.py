"""``chathistory count``: token counts of a saved history."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HELP = "count the tokens of a saved history (JSON from History.to_json)"
EPILOG = """\
example:
  chathistory count --encoding o200k_base history.json
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "count", help=HELP, description=HELP, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", type=Path, help="a history document (History.to_json output)")
    parser.add_argument("--encoding", default="o200k_base",
                        help="o200k_base (default), cl100k_base, approx or an OpenAI model name")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import ChatHistoryError
    from ..history import History

    try:
        history = History.from_json(args.file.read_bytes(), counter=args.encoding)
    except (OSError, ChatHistoryError, ValueError) as exc:
        print(f"chathistory count: {exc}", file=sys.stderr)
        return 2
    total = history.token_count()
    print(f"{len(history)} messages, {total} tokens ({history.counter.name})")
    return 0
