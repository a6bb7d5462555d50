"""The ``chathistory`` command line: one module per command group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
chathistory keeps the conversation history of LLM applications and builds,
for every turn, the part of it that goes to the model.

examples:
  chathistory --version
  chathistory count --encoding o200k_base conversation.json
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chathistory",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"chathistory {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import count

    count.register(commands)
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
