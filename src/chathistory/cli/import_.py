"""``chathistory import``: conversations from ShareGPT, ChatGPT exports, OpenAI JSONL
or a chathistory export, into a store (idempotent: a second import adds nothing)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ..importers import MAX_RECORD, ImportReport
from ..stores.protocol import Store
from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    store_url,
    tenant_kwargs,
)
from ._output import Progress, number, print_json
from ._tenants import DEFAULT_TENANT, command, key_tenants, note

HELP = "import conversations (ShareGPT, ChatGPT export, OpenAI JSONL, chathistory export)"
EPILOG = """\
The format is detected from the first record (--format forces one):
  sharegpt     [{"id", "conversations": [{"from", "value"}]}]   (a file cut short is
               imported up to its last whole record, and the cut is reported)
  chatgpt      a ChatGPT export's conversations.json, or the export's zip: the
               branch you were on becomes the session, other branches forks
  openai       JSON lines {"messages": [...]} (the fine-tuning format, tool calls)
  chathistory  the output of `chathistory export`

Ids derive from the source, so importing the same file again adds nothing, and
an import stopped anywhere is finished by running it again. An invalid record
stops the import naming it and its field (nothing of it stored); --skip-invalid
skips each one, says where it is and why, and imports the rest. A record may
hold at most --max-record-mb MiB (64 by default).
Sessions go to tenant 'default' (--tenant picks another; an http(s) store
writes to its key's tenant), and the summary says which. A server shows a
tenant's sessions to a key of that tenant; without keys, only tenant 'default'.

examples:
  chathistory import conversations.json
  chathistory import --limit 200 ShareGPT_V3_unfiltered_cleaned_split.json
  chathistory import --format openai --store sqlite:///train.db train.jsonl
  chathistory import --tenant acme conversations.json
  chathistory import --skip-invalid --max-record-mb 256 export.zip
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "import", HELP, EPILOG)
    parser.add_argument("file", help="the file to import (- for standard input)")
    parser.add_argument("--format", choices=("sharegpt", "chatgpt", "openai", "chathistory"),
                        help="skip detection and read the file as this format")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="import only the first N conversations")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="skip invalid records (not JSON, too large, a bad field), each "
                        "reported with where it is and why, and import the rest")
    parser.add_argument("--max-record-mb", type=_positive_mb, default=MAX_RECORD >> 20,
                        metavar="MB", help="the most one record (one conversation) may hold, "
                        f"in MiB (default {MAX_RECORD >> 20}); a larger one is refused")
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
        label = f"{number(records)} conversations"
        if limit:
            progress.update(records, limit, label)
        else:
            progress.update(offset, size, label)

    store = open_cli_store(args)
    try:
        started = time.perf_counter()
        with progress.shown():
            report = import_file(store, args.file, format=args.format, limit=limit,
                                 tenant=tenant, skip_invalid=args.skip_invalid,
                                 max_record=args.max_record_mb << 20, progress=on_progress)
            progress.finish()
        elapsed = time.perf_counter() - started
        remote = store_url(args).lower().startswith(("http://", "https://"))
        written_to = tenant or (_key_tenant(store) if remote else DEFAULT_TENANT)
        seen_by = "its keys" if remote else _who_sees(store, written_to)
    finally:
        store.close()
    if args.json:
        print_json({**report.to_dict(), "tenant": written_to, "seconds": round(elapsed, 3)})
    else:
        _print_report(args, report, written_to, elapsed)
    if seen_by == "nobody":
        keys = command(args, f"keys create {shlex.quote(written_to)}")
        note(f"servers on this store require API keys, and no key of tenant {written_to!r} "
             f"exists: to see these sessions in the viewer, make one: {keys}")
    elif seen_by == "a key":
        keys = command(args, f"keys create {shlex.quote(written_to)}")
        note(f"a server without keys shows tenant {DEFAULT_TENANT!r} only: to see tenant "
             f"{written_to!r} in the viewer, make a key of it: {keys}")
    return 0


def _positive_mb(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of MiB >= 1, not {text!r}")
    return value


def _key_tenant(store: Store) -> str:
    """The tenant of an http(s) store's API key (what it writes to)."""
    from ..stores.remote import RemoteStore

    assert isinstance(store, RemoteStore)
    return store.tenant


def _who_sees(store: Store, tenant: str) -> str:
    """Who can see ``tenant``'s sessions in a server on ``store``: "anyone local"
    (open mode, tenant 'default'), "a key" (open mode, another tenant: only once a
    key of it exists), "its keys", or "nobody" (keys are required, none of that
    tenant exists)."""
    from ..server import auth

    if not auth.has_keys(store):
        return "anyone local" if tenant == DEFAULT_TENANT else "a key"
    return "its keys" if tenant in key_tenants(store) else "nobody"


def _print_report(args: argparse.Namespace, report: ImportReport, tenant: str,
                  elapsed: float) -> None:
    limit: int | None = args.limit
    invalid = (f" ({number(len(report.invalid))} invalid, skipped)" if report.invalid
               else "")
    print(f"{args.file} ({report.format}) into tenant {tenant!r}: "
          f"{number(report.conversations)} conversations read{invalid}; "
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
