"""``GET /v1/sessions/{id}/window``: what the model would see if the window were
built now at a budget, for the viewer's budget control; it writes nothing (``POST
.../window`` plans and marks).

The selection is the library's own, ``History.by_tokens``, over every message a
read returns (marked ones included: a preview at another budget may bring them
back), so the preview and a client that builds its window with ``History`` agree.
"""

from __future__ import annotations

import msgspec
from starlette.responses import Response

from ..history import History
from ..model import Message
from ..stores.base import Store
from ..tokens import TokenCounter
from .app import Context, Endpoint, Param, call_store
from .errors import BadRequest
from .ops import QUERY_COUNTER, counter_for
from .routes_sessions import SESSION
from .wire import QUERY_COUNT, json_response, query_bool, query_int, query_str

__all__ = ["ROUTES", "WindowPreview", "preview_window"]


class WindowPreview(msgspec.Struct):
    """The window a budget gives: what is in it, what it costs, what is left out."""

    max_tokens: int
    tokens: int
    """The window's messages plus the reply priming, by the counter (<= max_tokens)."""
    messages: int
    """How many messages are in the window."""
    left_out: int
    """How many of the session's messages are not."""
    message_ids: list[str]
    """The window's messages, in session order."""
    gaps: list[tuple[str | None, str | None, int]]
    """Each run of messages left out: the window's message before it (null at the
    start), the one after it (null at the end), and how many it hides."""


def gaps_of(messages: list[Message], shown: set[str]) -> list[tuple[str | None, str | None, int]]:
    """The runs of ``messages`` whose ids are not in ``shown``, as ``(after, before,
    hidden)``: the shown message before the run, the one after it, the run's length."""
    out: list[tuple[str | None, str | None, int]] = []
    after: str | None = None
    hidden = 0
    for message in messages:
        if message.id in shown:
            if hidden:
                out.append((after, message.id, hidden))
                hidden = 0
            after = message.id
        else:
            hidden += 1
    if hidden:
        out.append((after, None, hidden))
    return out


def preview_window(store: Store, tenant: str, session_id: str, max_tokens: int,
                   counter: TokenCounter, keep_system: bool) -> WindowPreview:
    """The window ``History.by_tokens`` selects from the session's messages now (one
    read of them all; nothing is written)."""
    messages = store.range(session_id, tenant=tenant, include_marked=True)
    window = History(messages, counter=counter).by_tokens(max_tokens, keep_system=keep_system)
    tokens = History(window, counter=counter).token_count() + counter.priming_tokens
    shown = {m.id for m in window}
    return WindowPreview(max_tokens=max_tokens, tokens=tokens if window else 0,
                         messages=len(window), left_out=len(messages) - len(window),
                         message_ids=[m.id for m in window], gaps=gaps_of(messages, shown))


async def window_preview(ctx: Context) -> Response:
    request = ctx.request
    max_tokens = query_int(request, "max_tokens")
    if max_tokens is None:
        raise BadRequest("query parameter max_tokens is required (the budget to preview)")
    counter = counter_for(ctx.store, query_str(request, "counter") or None, "counter")
    keep_system = query_bool(request, "keep_system", True)
    preview = await call_store(preview_window, ctx.store, ctx.tenant, ctx.param("session_id"),
                               max_tokens, counter, keep_system)
    return json_response(preview)


ROUTES = [
    Endpoint("GET", SESSION + "/window", window_preview,
             "Preview the context window at a budget: what the model would see now, and "
             "what is left out (writes nothing)",
             responses={200: WindowPreview},
             query=(Param("max_tokens", "integer", "the budget, in tokens", required=True,
                          schema=QUERY_COUNT),
                    Param("keep_system", "boolean", "keep every system and developer "
                          "message, paid for first (default true)"),
                    Param("counter", description="the counter (default: the store's)",
                          schema=QUERY_COUNTER))),
]
