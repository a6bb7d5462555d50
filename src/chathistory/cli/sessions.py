"""``chathistory sessions``: list the sessions of a store."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

import msgspec

from ..stores.model import Session
from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    tenant_kwargs,
)
from ._output import Column, number, print_json, print_table

HELP = "list sessions, oldest first or --recent first (a page at a time, or --all)"
EPILOG = """\
examples:
  chathistory sessions
  chathistory sessions --recent --search "invoice"
  chathistory sessions --limit 20 --metadata source=chatgpt
  chathistory sessions --all --json | jq -r '.items[].id'
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "sessions", HELP, EPILOG)
    parser.add_argument("--limit", type=int, default=50, metavar="N",
                        help="sessions per page (1-1000, default 50)")
    parser.add_argument("--cursor", help="the next_cursor of the previous page")
    parser.add_argument("--all", action="store_true", help="every session, all pages")
    parser.add_argument("--user", help="only this user's sessions")
    parser.add_argument("--metadata", action="append", metavar="KEY=VALUE", default=[],
                        help="only sessions whose metadata has KEY equal to VALUE (a JSON "
                             "value, else a string); repeat for several")
    parser.add_argument("--recent", action="store_true",
                        help="last changed first (default: oldest created first)")
    parser.add_argument("--search", metavar="TEXT",
                        help="only sessions whose id, metadata or messages contain TEXT "
                             "(ASCII letters case-insensitive)")
    parser.add_argument("--json", action="store_true",
                        help='print {"items": [session...], "next_cursor": ...}')
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(run=run)


def parse_metadata(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that is JSON (``3``, ``true``) is decoded."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--metadata needs KEY=VALUE, got {pair!r}")
        try:
            out[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            out[key] = value
    return out


def title_of(session: Session) -> str:
    """What to call a session: its title, else its source id."""
    meta = session.metadata
    for key in ("title", "name", "source_id"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _when(value: datetime) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M")


@guarded("sessions")
def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 1000:
        raise ValueError("--limit must be between 1 and 1000")
    metadata = parse_metadata(args.metadata)
    store = open_cli_store(args)
    items: list[Session] = []
    cursor: str | None = args.cursor
    try:
        while True:
            page = store.list_sessions(user=args.user, metadata=metadata or None,
                                       limit=args.limit, cursor=cursor,
                                       order="recent" if args.recent else "created",
                                       query=args.search or None, **tenant_kwargs(args))
            items.extend(page.items)
            cursor = page.next_cursor
            if not args.all or cursor is None:
                break
    finally:
        store.close()
    if args.json:
        print_json({"items": [s.to_dict() for s in items], "next_cursor": cursor})
        return 0
    rows = [[s.id, title_of(s), number(s.message_count), number(s.token_count),
             _when(s.updated_at), s.parent_id or ""] for s in items]
    caption = f"{number(len(items))} sessions"
    if cursor is not None:
        caption += f"; more with --cursor '{cursor}' (or --all)"
    print_table([Column("id"), Column("title", wrap=True), Column("messages", numeric=True),
                 Column("tokens", numeric=True), Column("updated", optional=True),
                 Column("fork of", optional=True)],
                rows, caption=caption)
    return 0
