"""``chathistory stats``: how much a store holds, by source."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import msgspec

from ..cache import input_cost
from ..importers import TenantArg
from ..model import Usage
from ..stores.protocol import Store
from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    redact,
    store_url,
    tenant_kwargs,
)
from ._output import Column, number, print_json, print_table

HELP = ("count sessions, forks, messages and tokens (by source; by role with --roles; "
        "observed provider usage with --usage)")
EPILOG = """\
Counts come from the sessions' running totals, so they cost one read per
session. A fork shares its parent's first messages: "messages" counts what
each session shows, "stored" what is stored once. --roles reads every stored
message once (Store.export) to count roles, tool calls and media exactly.
--usage reads every stored message once too and sums, per session, the usage
the provider reported for its responses (Message.usage): prompt tokens, those
read from and written to the provider's cache, output tokens, the cache hit
rate (read / prompt) and the prompt's cost relative to no caching, priced by
the cache rules of the provider and model each response names (a fork counts
only its own messages).

examples:
  chathistory stats
  chathistory stats --roles --json
  chathistory stats --usage
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "stats", HELP, EPILOG)
    parser.add_argument("--roles", action="store_true",
                        help="also read every message: counts by role, tool calls, media")
    parser.add_argument("--usage", action="store_true",
                        help="also read every message: observed provider usage per session")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(run=run)


class _Line(msgspec.Struct):
    kind: str
    message: dict[str, Any] | None = None
    session_id: str | None = None


_line_decoder = msgspec.json.Decoder(_Line)


def collect(store: Store, tenant: TenantArg, roles: bool, usage: bool = False
            ) -> dict[str, Any]:
    """The counts, as a JSON-ready dict."""
    by_source: dict[str, Counter[str]] = {}
    total: Counter[str] = Counter()
    largest: tuple[int, str] = (0, "")
    cursor: str | None = None
    while True:
        page = store.list_sessions(limit=1000, cursor=cursor, **tenant)
        for s in page.items:
            source = str(s.metadata.get("source") or "-")
            own = s.message_count - (s.fork_seq if s.parent_id else 0)
            for counts in (total, by_source.setdefault(source, Counter())):
                counts["sessions"] += 1
                counts["forks"] += 1 if s.parent_id else 0
                counts["messages"] += s.message_count
                counts["stored"] += own
                counts["tokens"] += s.token_count
            largest = max(largest, (s.message_count, s.id))
        cursor = page.next_cursor
        if cursor is None:
            break
    out: dict[str, Any] = {
        **{k: total[k] for k in ("sessions", "forks", "messages", "stored", "tokens")},
        "largest_session": {"id": largest[1], "messages": largest[0]} if largest[1] else None,
        "by_source": {k: dict(v) for k, v in sorted(by_source.items())},
        "counter": store.counter.name,
    }
    if roles:
        out.update(_scan(store, tenant))
    if usage:
        out["usage"] = usage_by_session(store, tenant)
    return out


_usage_decoder = msgspec.json.Decoder(Usage)
_USAGE_KEYS = ("responses", "input_tokens", "cache_read_tokens", "cache_write_tokens",
               "output_tokens", "hit_rate", "relative_input_cost")


class _Sum:
    """Observed usage added up: the counts, and the input cost of the responses whose
    provider has cache rules (with the prompt tokens it prices)."""

    def __init__(self) -> None:
        self.usage, self.responses = Usage(), 0
        self.cost, self.priced_tokens = 0.0, 0

    def add(self, usage: Usage) -> None:
        self.usage, self.responses = self.usage + usage, self.responses + 1
        cost = input_cost(usage)
        if cost is not None:
            self.cost += cost
            self.priced_tokens += usage.input_tokens

    def as_dict(self) -> dict[str, Any]:
        u = self.usage
        return {"responses": self.responses, "input_tokens": u.input_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens, "output_tokens": u.output_tokens,
                "hit_rate": u.cache_hit_rate,
                "relative_input_cost": (self.cost / self.priced_tokens
                                        if self.priced_tokens else None)}


def usage_by_session(store: Store, tenant: TenantArg) -> dict[str, Any]:
    """Observed usage summed per session that has any, and over them all."""
    sessions: dict[str, _Sum] = {}
    total = _Sum()
    for line in store.export(**tenant):
        record = _line_decoder.decode(line)
        if record.kind != "message" or record.message is None:
            continue
        raw = record.message.get("usage")
        if raw is None:
            continue
        usage = _usage_decoder.decode(msgspec.json.encode(raw))
        sessions.setdefault(str(record.session_id), _Sum()).add(usage)
        total.add(usage)
    return {"sessions": {k: v.as_dict() for k, v in sessions.items()},
            "total": total.as_dict()}


def _scan(store: Store, tenant: TenantArg) -> dict[str, Any]:
    roles: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    tokens = 0
    name = store.counter.name
    for line in store.export(**tenant):
        record = _line_decoder.decode(line)
        if record.kind != "message" or record.message is None:
            continue
        message = record.message
        roles[str(message.get("role"))] += 1
        for part in message.get("parts") or []:
            parts[str(part.get("type"))] += 1
        tokens += int((message.get("token_counts") or {}).get(name, 0))
    return {"by_role": dict(roles.most_common()), "parts": dict(parts.most_common()),
            "stored_tokens": tokens}


@guarded("stats")
def run(args: argparse.Namespace) -> int:
    tenant = tenant_kwargs(args)
    store = open_cli_store(args)
    try:
        stats = collect(store, tenant, args.roles, args.usage)
    finally:
        store.close()
    if args.json:
        print_json(stats)
        return 0
    columns = [Column("source"), Column("sessions", numeric=True), Column("forks", numeric=True),
               Column("messages", numeric=True), Column("stored", numeric=True),
               Column("tokens", numeric=True)]
    keys = ("sessions", "forks", "messages", "stored", "tokens")
    rows = [[source, *(number(counts.get(k, 0)) for k in keys)]
            for source, counts in stats["by_source"].items()]
    rows.append(["total", *(number(stats[k]) for k in keys)])
    caption = f"tokens by {stats['counter']}"
    if stats["largest_session"]:
        big = stats["largest_session"]
        caption += f"; largest session {big['id']} ({number(big['messages'])} messages)"
    print_table(columns, rows, title=f"{redact(store_url(args))}", caption=caption)
    if args.roles:
        print()
        print_table([Column("role"), Column("messages", numeric=True)],
                    [[r, number(n)] for r, n in stats["by_role"].items()])
        print()
        print_table([Column("part"), Column("count", numeric=True)],
                    [[p, number(n)] for p, n in stats["parts"].items()],
                    caption=f"{number(stats['stored_tokens'])} tokens stored "
                            f"(each message once)")
    if args.usage:
        print()
        _print_usage(stats["usage"])
    return 0


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_usage(usage: dict[str, Any]) -> None:
    columns = [Column("session"), Column("responses", numeric=True),
               Column("input", numeric=True), Column("cached", numeric=True),
               Column("written", numeric=True), Column("output", numeric=True),
               Column("hit rate", numeric=True), Column("input cost", numeric=True)]

    def row(name: str, s: dict[str, Any]) -> list[str]:
        return [name, *(number(s[k]) for k in _USAGE_KEYS[:5]), _share(s["hit_rate"]),
                _share(s["relative_input_cost"])]

    rows = [row(sid, s) for sid, s in usage["sessions"].items()]
    rows.append(row("total", usage["total"]))
    print_table(columns, rows, title="observed usage",
                caption="input cost: of the prompt at the base input price (no caching: "
                        "100%), by the cache rules of each response's provider")
