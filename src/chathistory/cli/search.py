"""``chathistory search``: find messages by their words across a tenant's sessions
(``Store.search``), best match first, each with a snippet whose matched words are
highlighted."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

from ..stores.search import SearchHit
from . import _common as common
from ._output import console_for, number, print_json
from .sessions import parse_metadata

HELP = "search the messages of a tenant's sessions by their words, best match first"
EPILOG = """\
QUERY: every word must occur in one message, in any order (letters and
digits make words; case and accents are ignored); "quoted words" one after
the other; word* every word it begins. Each hit shows its session, position
and role, and a snippet with the matched words highlighted (on a terminal;
[in brackets] elsewhere). --json prints the page as Store.search returns it
(marks as [start, end) offsets in code points of the snippet).

examples:
  chathistory search invoice
  chathistory search '"capital of" fran*' --limit 5
  chathistory search refund --user ana --session 7236cb51-aff8-5edf-9d66-dad6a1b98f42
  chathistory search timeout --json | jq -r '.items[].session_id'
"""


def register(commands: Any) -> None:
    parser = common.add_command(commands, "search", HELP, EPILOG)
    parser.add_argument("query", metavar="QUERY", help="the words to find")
    parser.add_argument("--limit", type=int, default=20, metavar="N",
                        help="hits per page (1-100, default 20)")
    parser.add_argument("--cursor", help="the next_cursor of the previous page")
    parser.add_argument("--user", help="only this user's sessions")
    parser.add_argument("--session", metavar="ID",
                        help="only this session (with the messages a fork shares)")
    parser.add_argument("--metadata", action="append", metavar="KEY=VALUE", default=[],
                        help="only sessions whose metadata has KEY equal to VALUE (a JSON "
                             "value, else a string); repeat for several")
    parser.add_argument("--json", action="store_true",
                        help='print {"items": [{"session_id", "seq", "message", "score", '
                             '"snippet", "marks"}...], "next_cursor", "scanned"}')
    common.add_store_option(parser)
    common.add_tenant_option(parser)
    parser.set_defaults(run=run)


def plain_marked(text: str, marks: list[tuple[int, int]]) -> str:
    """``text`` with each marked range in brackets (ranges clipped, overlaps skipped)."""
    out: list[str] = []
    at = 0
    for start, end in sorted(marks):
        start, end = max(start, at), min(end, len(text))
        if end <= start:
            continue
        out += [text[at:start], "[", text[start:end], "]"]
        at = end
    out.append(text[at:])
    return "".join(out)


def _print_hits(hits: list[SearchHit], caption: str, stream: IO[str]) -> None:
    console = console_for(stream)
    if console is None:
        for hit in hits:
            stream.write(f"{hit.session_id}  #{hit.seq}  {hit.message.role}\n")
            stream.write(f"  {plain_marked(hit.snippet, hit.marks)}\n")
        stream.write(caption + "\n")
        return
    from rich.text import Text

    for hit in hits:
        head = Text(hit.session_id, style="bold")  # Text: no markup in user data
        head.append(f"  #{hit.seq}  {hit.message.role}", style="dim")
        body = Text("  " + hit.snippet)
        for start, end in hit.marks:
            body.stylize("bold black on yellow", start + 2, end + 2)
        console.print(head)
        console.print(body)
    console.print(Text(caption, style="dim"))


@common.guarded("search")
def run(args: argparse.Namespace) -> int:
    metadata = parse_metadata(args.metadata)
    store = common.open_cli_store(args)
    try:
        page = store.search(args.query, user=args.user, session_id=args.session,
                            metadata=metadata or None, limit=args.limit, cursor=args.cursor,
                            **common.tenant_kwargs(args))
    finally:
        store.close()
    if args.json:
        print_json(page)
        return 0
    count = len(page.items)
    caption = f"{number(count)} hit{'' if count == 1 else 's'}"
    if page.scanned is not None:
        caption += (f" among the newest {number(page.scanned)} messages (this store has no "
                    "search index)")
    if page.next_cursor is not None:
        caption += f"; more with --cursor '{page.next_cursor}'"
    _print_hits(page.items, caption, sys.stdout)
    return 0
