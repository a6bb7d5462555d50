"""``chathistory import``: conversations from ShareGPT, ChatGPT exports, OpenAI JSONL
or a chathistory export, into a store (idempotent: a second import adds nothing)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    tenant_kwargs,
)
from ._output import Progress, number, print_json

HELP = "import conversations (ShareGPT, ChatGPT export, OpenAI JSONL, chathistory export)"
EPILOG = """\
The format is detected from the first record (--format forces one):
  sharegpt     [{"id", "conversations": [{"from", "value"}]}]   (a file cut short is
               imported up to its last whole record, and the cut is reported)
  chatgpt      a ChatGPT export's conversations.json, or the export's zip: the
               branch you were on becomes the session, other branches forks
  openai       JSON lines {"messages": [...]} (the fine-tuning format, tool calls)
  chathistory  the output of `chathistory export`

Ids derive from the source, so importing the same file again adds nothing.

examples:
  chathistory import conversations.json
  chathistory import --limit 200 ShareGPT_V3_unfiltered_cleaned_split.json
  chathistory import --format openai --store sqlite:///train.db train.jsonl
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "import", HELP, EPILOG)
    parser.add_argument("file", help="the file to import (- for standard input)")
    parser.add_argument("--format", choices=("sharegpt", "chatgpt", "openai", "chathistory"),
                        help="skip detection and read the file as this format")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="import only the first N conversations")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="count and report records that do not decode instead of stopping")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(run=run)


@guarded("import")
def run(args: argparse.Namespace) -> int:
    from ..importers import import_file

    tenant = tenant_kwargs(args).get("tenant")
    progress = Progress(f"importing {Path(args.file).name}")
    limit: int | None = args.limit

    def on_progress(records: int, offset: int, size: int | None) -> None:
        note = f"{number(records)} conversations"
        if limit:
            progress.update(records, limit, note)
        else:
            progress.update(offset, size, note)

    store = open_cli_store(args)
    try:
        started = time.perf_counter()
        with progress.shown():
            report = import_file(store, args.file, format=args.format, limit=limit,
                                 tenant=tenant, skip_invalid=args.skip_invalid,
                                 progress=on_progress)
            progress.finish()
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    if args.json:
        print_json({**report.to_dict(), "seconds": round(elapsed, 3)})
        return 0
    print(f"{args.file} ({report.format}): {number(report.conversations)} conversations read; "
          f"{number(report.sessions_created)} sessions and {number(report.forks_created)} "
          f"forks created, {number(report.messages_added)} messages added "
          f"in {elapsed:.2f} s")
    if report.skipped:
        left_out = ", ".join(f"{number(n)} {reason}" for reason, n in
                             sorted(report.skipped.items()))
        print(f"left out: {left_out}")
    if limit is not None and report.conversations >= limit and report.truncated is None:
        print(f"stopped after --limit {limit}")
    if report.truncated is not None:
        print(f"warning: {report.truncated.describe()}", file=sys.stderr)
    if report.invalid:
        print(f"warning: {len(report.invalid)} invalid records skipped:", file=sys.stderr)
        for line in report.invalid[:10]:
            print(f"  {line}", file=sys.stderr)
    return 0
