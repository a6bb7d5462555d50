"""``chathistory sessions``: list the sessions of a store."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from ..importers import TenantArg
from ..stores.browse import Browse
from ..stores.model import Session
from ..stores.protocol import Store
from ..titles import metadata_title, session_title
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
    parser.add_argument("--search", metavar="QUERY",
                        help="only sessions with a message matching QUERY (words, \"a "
                             "phrase\", prefix*: as chathistory search), or whose id or "
                             "metadata contains its text")
    parser.add_argument("--json", action="store_true",
                        help='print {"items": [session... with "title"], "next_cursor": ...}')
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


_FIRST_USER_ROWS = 32
"""For a store that is not an engine (an http(s) store): how many of a session's
first messages are read to find its first user message."""


def _branch(session: Session) -> str:
    """An imported branch's label, as the viewer's list shows it ("2 of 2 at #3"): two
    alternatives of one conversation share its title."""
    branch = session.metadata.get("branch")
    if not isinstance(branch, str) or not branch.strip():
        return ""
    if session.parent_id and session.fork_seq:
        return f"{branch.strip()} at #{session.fork_seq}"
    return f"{branch.strip()} at the first message" if isinstance(
        session.metadata.get("branch_of"), str) else branch.strip()


def titles_of(store: Store, sessions: Sequence[Session], tenant: TenantArg
              ) -> dict[str, str]:
    """Session id -> what to call it, by the viewer's rule (``chathistory.titles``):
    its metadata title, else its first user message as plain text; "" for neither.
    A store engine finds the first user messages of the whole page in one read."""
    untitled = [s for s in sessions if metadata_title(s.metadata) is None]
    if isinstance(store, Browse):
        firsts = store.first_user_messages(untitled)
    else:
        firsts = {}
        for s in untitled:
            head = store.range(s.id, 0, min(s.message_count, _FIRST_USER_ROWS), **tenant)
            first = next((m for m in head if m.role == "user"), None)
            if first is not None:
                firsts[s.id] = first
    return {s.id: session_title(s.metadata, firsts[s.id].text if s.id in firsts else None)
            or "" for s in sessions}


def _when(value: datetime) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M")


@guarded("sessions")
def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 1000:
        raise ValueError("--limit must be between 1 and 1000")
    metadata = parse_metadata(args.metadata)
    store = open_cli_store(args)
    items: list[Session] = []
    titles: dict[str, str] = {}
    cursor: str | None = args.cursor
    tenant = tenant_kwargs(args)
    try:
        while True:
            page = store.list_sessions(user=args.user, metadata=metadata or None,
                                       limit=args.limit, cursor=cursor,
                                       order="recent" if args.recent else "created",
                                       query=args.search or None, **tenant)
            items.extend(page.items)
            titles.update(titles_of(store, page.items, tenant))
            cursor = page.next_cursor
            if not args.all or cursor is None:
                break
    finally:
        store.close()
    if args.json:
        print_json({"items": [{**s.to_dict(), "title": titles[s.id] or None} for s in items],
                    "next_cursor": cursor})
        return 0
    rows = [[s.id, titles[s.id], _branch(s), number(s.message_count), number(s.token_count),
             _when(s.updated_at), s.parent_id or ""] for s in items]
    caption = f"{number(len(items))} sessions"
    if cursor is not None:
        caption += f"; more with --cursor '{cursor}' (or --all)"
    print_table([Column("id"), Column("title", wrap=True), Column("branch", optional=True),
                 Column("messages", numeric=True),
                 Column("tokens", numeric=True), Column("updated", optional=True),
                 Column("fork of", optional=True)],
                rows, caption=caption)
    return 0
