"""``chathistory show``: one session rendered: roles, names, content, tool calls,
attachments as ``[File: name]`` placeholders, token counts, and the window."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Any

from ..model import (
    AudioPart,
    FilePart,
    ImagePart,
    KVStatus,
    Message,
    Part,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from ..stores.model import Session
from ..tokens import TokenCounter, cached_count, get_counter
from ._common import (
    add_command,
    add_store_option,
    add_tenant_option,
    guarded,
    open_cli_store,
    tenant_kwargs,
)
from ._output import console_for, number, print_json
from .sessions import titles_of

HELP = "show a session: its messages, token counts and the context window"
EPILOG = """\
Each message shows its position, role, name and tokens (by the store's
counter, or --counter); attachments show as [File: name] / [Image: ...]
placeholders. With --max-tokens, messages that the newest-first window of
that many tokens would send are marked with '>'. A window kept by the
server (POST /v1/sessions/ID/window) is shown with each message's KV position.

examples:
  chathistory show 2f0c9c1e-6b5e-5d7e-9a43-0c8f1b2a7d10
  chathistory show --tail 10 --max-tokens 8000 SESSION_ID
  chathistory show --json SESSION_ID | jq '.messages[].tokens'
"""

WINDOW_STATE_KEY = "chathistory.window"


def register(commands: Any) -> None:
    parser = add_command(commands, "show", HELP, EPILOG)
    parser.add_argument("session", help="the session id")
    parser.add_argument("--tail", type=int, metavar="N", help="only the newest N messages")
    parser.add_argument("--max-tokens", type=int, metavar="N",
                        help="mark the messages a window of N tokens would send")
    parser.add_argument("--counter", metavar="NAME",
                        help="count tokens with this tokenizer (o200k_base, cl100k_base, "
                             "approx, a model name; default: the store's)")
    parser.add_argument("--brief", action="store_true",
                        help="one line per message (content cut to the terminal width)")
    parser.add_argument("--json", action="store_true",
                        help='print {"session", "title", "messages" (with "position", "tokens", '
                             '"in_window"), "window"}')
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(run=run)


@guarded("show")
def run(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise ValueError("--tail must be >= 0")
    tenant = tenant_kwargs(args)
    store = open_cli_store(args)
    try:
        session = store.get_session(args.session, **tenant)
        title = titles_of(store, [session], tenant)[session.id]
        n = session.message_count
        start = 0 if args.tail is None else max(0, n - args.tail)
        messages = store.range(session.id, start, **tenant)
        counter: TokenCounter = get_counter(args.counter) if args.counter else store.counter
        window_ids: set[str] | None = None
        if args.max_tokens is not None:
            selected = store.window(session.id, args.max_tokens, counter, **tenant)
            window_ids = {m.id for m in selected}
    finally:
        store.close()
    first = n - len(messages)  # range widens to whole groups; positions count from the end
    tokens = [cached_count(m, counter) for m in messages]
    kv = _kv_layout(session)
    if args.json:
        print_json({
            "session": session.to_dict(),
            "title": title or None,
            "counter": counter.name,
            "messages": [{**m.to_dict(), "position": first + i, "tokens": t,
                          "in_window": None if window_ids is None else m.id in window_ids}
                         for i, (m, t) in enumerate(zip(messages, tokens, strict=True))],
            "window": _window_json(args.max_tokens, window_ids, messages, tokens, counter,
                                   session),
        })
        return 0
    out = sys.stdout
    console = console_for(out)
    for line in _header(session, title, counter, len(messages), first):
        _emit(console, out, line, "bold")
    for i, (m, t) in enumerate(zip(messages, tokens, strict=True)):
        mark = ">" if window_ids is not None and m.id in window_ids else " "
        head = f"{mark} #{first + i} {m.role}" + (f" ({m.name})" if m.name else "")
        head += f" · {number(t)} tokens"
        if m.kv_status != KVStatus.LOADED:
            head += f" · {KVStatus(m.kv_status).name.lower()}"
        if m.id in kv:
            head += f" · kv {kv[m.id]}"
        body = render_message(m)
        if args.brief:
            width = (console.width if console is not None else 100) - len(head) - 3
            flat = " ".join(body.split())
            _emit(console, out, f"{head}   {_cut(flat, max(20, width))}", _style(m.role))
            continue
        _emit(console, out, "", None)
        _emit(console, out, head, _style(m.role))
        for text_line in body.splitlines() or [""]:
            _emit(console, out, "    " + text_line, None)
    if window_ids is not None:
        inside = [t for m, t in zip(messages, tokens, strict=True) if m.id in window_ids]
        _emit(console, out, "", None)
        _emit(console, out,
              f"a window of {number(args.max_tokens)} tokens holds {len(inside)} of the "
              f"{len(messages)} messages shown: {number(sum(inside))} tokens "
              f"(+{counter.priming_tokens} priming, {counter.name})", "bold")
    return 0


def render_message(message: Message) -> str:
    """The message as text; media as placeholders."""
    return "\n".join(render_part(p) for p in message.parts)


def render_part(part: Part) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ToolCall):
        args = json.dumps(part.arguments, ensure_ascii=False)
        return f"-> call {part.name} [{part.id}]: {args}"
    if isinstance(part, ToolResult):
        if isinstance(part.content, str):
            content = part.content
        else:
            content = "\n".join(render_part(p) for p in part.content)
        error = " (error)" if part.is_error else ""
        name = f" {part.name}" if part.name else ""
        return f"<- result{name} [{part.call_id}]{error}:\n{content}"
    if isinstance(part, Reasoning):
        return "(reasoning) " + (part.text or "[opaque]")
    if isinstance(part, ImagePart):
        dims = part.dimensions
        size = f" {dims[0]}x{dims[1]}" if dims else ""
        name = part.attachment.name if part.attachment else (part.url or "")
        return f"[Image{size}: {name}]"
    if isinstance(part, AudioPart):
        name = part.attachment.name if part.attachment else (part.url or "")
        transcript = f" {part.transcript}" if part.transcript else ""
        return f"[Audio: {name}]{transcript}"
    if isinstance(part, FilePart):
        return f"[File: {part.filename}]"
    return f"[{type(part).__name__}]"


def _header(session: Session, title: str, counter: TokenCounter, shown: int,
            first: int) -> list[str]:
    lines = [f"session {session.id}" + (f" - {title}" if title else "")]
    facts = [f"{number(session.message_count)} messages",
             f"{number(session.token_count)} tokens ({counter.name if counter else ''})"]
    if shown != session.message_count:
        facts.append(f"showing {shown} from #{first}")
    if session.parent_id:
        facts.append(f"fork of {session.parent_id} after message #{session.fork_seq - 1}")
    source = session.metadata.get("source")
    if source:
        facts.append(f"source {source}")
    lines.append(", ".join(facts))
    kept = session.state.get(WINDOW_STATE_KEY)
    if isinstance(kept, dict):
        lines.append(f"kept window: max {kept.get('max_tokens')} tokens, low water "
                     f"{kept.get('low_water_tokens')}, {kept.get('counter')}, "
                     f"{len(kept.get('layout') or [])} messages laid out")
    return lines


def _kv_layout(session: Session) -> dict[str, int]:
    """Message id -> first KV position, from a window the server keeps for the session."""
    kept = session.state.get(WINDOW_STATE_KEY)
    if not isinstance(kept, dict):
        return {}
    out: dict[str, int] = {}
    for item in kept.get("layout") or []:
        if isinstance(item, list) and len(item) == 2:
            out[str(item[0])] = int(item[1])
    return out


def _window_json(max_tokens: int | None, ids: set[str] | None, messages: list[Message],
                 tokens: list[int], counter: TokenCounter,
                 session: Session) -> dict[str, Any] | None:
    kept = session.state.get(WINDOW_STATE_KEY)
    if max_tokens is None or ids is None:
        return {"kept": kept} if kept is not None else None
    inside = [t for m, t in zip(messages, tokens, strict=True) if m.id in ids]
    return {"max_tokens": max_tokens, "message_ids": [m.id for m in messages if m.id in ids],
            "tokens": sum(inside) + counter.priming_tokens, "kept": kept}


def _style(role: str) -> str:
    return {"user": "bold green", "assistant": "bold cyan", "system": "bold magenta",
            "developer": "bold magenta", "tool": "bold yellow"}.get(role, "bold")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _emit(console: Any, out: IO[str], line: str, style: str | None) -> None:
    if console is None:
        out.write(line + "\n")
        return
    from rich.text import Text

    console.print(Text(line, style=style or ""), soft_wrap=False)
