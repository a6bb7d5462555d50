"""``chathistory export``: sessions and their messages as JSON lines."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import msgspec

from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    tenant_kwargs,
)
from ._output import number

HELP = "export sessions and their messages as JSON lines (attachments inline)"
EPILOG = """\
The output is what `chathistory import` (and Store.import_) reads back: a
session line, then its own messages; forks follow their parent. With --output,
a line on standard output says how many sessions and messages it wrote.

examples:
  chathistory export > backup.jsonl
  chathistory export --session 2f0c9c1e-... --output one.jsonl
  chathistory export --store sqlite:///a.db | chathistory import --store sqlite:///b.db -
"""


class _Kind(msgspec.Struct):
    kind: str


_kind_decoder = msgspec.json.Decoder(_Kind)


def register(commands: Any) -> None:
    parser = add_command(commands, "export", HELP, EPILOG)
    parser.add_argument("--session", action="append", metavar="ID", dest="sessions",
                        help="export this session only (repeat for several; default: all)")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write to FILE instead of standard output")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(run=run)


@guarded("export")
def run(args: argparse.Namespace) -> int:
    store = open_cli_store(args)
    try:
        lines = store.export(session_ids=args.sessions, **tenant_kwargs(args))
        if args.output:
            written: Counter[str] = Counter()
            with open(args.output, "wb") as out:
                for line in lines:
                    out.write(line)
                    written[_kind_decoder.decode(line).kind] += 1
            print(f"wrote {number(written['session'])} sessions and "
                  f"{number(written['message'])} messages to {args.output}")
        else:
            try:
                write = sys.stdout.buffer.write
                for line in lines:
                    write(line)
                sys.stdout.buffer.flush()
            except BrokenPipeError:  # the reader went away (`| head`): not an error
                import os

                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        store.close()
    return 0
