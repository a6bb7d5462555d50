"""The ``chathistory`` command line: one module per command group."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .. import __version__

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
chathistory keeps the conversation history of LLM applications and builds,
for every turn, the part of it that goes to the model.

Every store command takes --store URL (default: $CHATHISTORY_STORE, else
sqlite:///chathistory.db); listings take --json.

examples:
  chathistory --version
  chathistory import conversations.json
  chathistory sessions
  chathistory show SESSION_ID --max-tokens 8000
  chathistory search '"capital of" fran*'
  chathistory serve
"""

COMMANDS = ("import_", "export", "sessions", "show", "search", "stats", "keys", "migrate",
            "serve", "count")
"""Command modules, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chathistory",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"chathistory {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
