"""A page of ``GET /v1/sessions`` as people read it: each session's title and
preview, with a search its snippet (the matched words in context, with offsets to
highlight: ``search.snippet``), and the total of the listing; built in one worker
call, so the viewer draws the page from one response.

The store does the reading in one call per kind (``Engine.count_sessions``,
``first_user_messages``, ``first_text_matches``); a store that is not an engine (a
``RemoteStore``: a service in front of another) is read message by message.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from ..model import Message
from ..stores.backend import own_span
from ..stores.base import Store
from ..stores.browse import Browse
from ..stores.model import Page, Session
from ..stores.search import SNIPPET_CHARS, Query, parse_query, search_text, words
from ..stores.search import snippet as search_snippet
from ..stores.sessions import count_listed
from ..titles import PREVIEW_LIMIT, plain_preview, session_title
from .wire import encode_session, utf16_marks

__all__ = ["SEARCH_COUNT_LIMIT", "SNIPPET_WIDTH", "ListedSession", "SessionList", "Snippet",
           "listing_json", "snippet"]

SEARCH_COUNT_LIMIT = 1000
"""With ``q``, ``total`` counts this many matching sessions at most (then it is a
lower bound): counting a search runs it over every session."""
SNIPPET_WIDTH = SNIPPET_CHARS
"""About how many characters of a message a snippet shows around its match."""
_FALLBACK_ROWS = 256
"""For a store that is not an engine: how many of a session's messages are read
for its first user message or its snippet."""


class Snippet(msgspec.Struct):
    """Where a search matched: a piece of one message's searchable text, and each
    matched word in it as ``[start, end)`` in UTF-16 code units."""

    message_id: str
    role: str
    text: str
    match: list[tuple[int, int]]


class ListedSession(Session, kw_only=True):
    """A session as ``GET /v1/sessions`` lists it (the fields are always sent)."""

    title: str | None = None
    """The title rule of ``chathistory.titles.session_title``."""
    preview: str | None = None
    """The first user message as plain text, at most 160 characters."""
    snippet: Snippet | None = None
    """With ``q`` only: where the session's text matched, or null."""


class SessionList(msgspec.Struct):
    items: list[ListedSession]
    total: int
    """Sessions matching the filters over all pages (with ``q``: at most 1,000)."""
    total_is_lower_bound: bool = False
    """True when ``total`` stopped at 1,000 and more sessions match."""
    next_cursor: str | None = None


_encode = msgspec.json.Encoder().encode


def snippet(message: Message, query: Query | str) -> Snippet | None:
    """About ``SNIPPET_WIDTH`` characters of the message's searchable text
    (``search.search_text``) around its first match of ``query`` (``search.snippet``),
    with every matched word inside it; None when the message does not match."""
    parsed = parse_query(query) if isinstance(query, str) else query
    text, marks = search_snippet(search_text(message), parsed)
    if not marks:
        return None
    return Snippet(message_id=message.id, role=message.role, text=text,
                   match=utf16_marks(text, marks))


def _first_user_messages(store: Store, tenant: str, sessions: Sequence[Session]
                         ) -> dict[str, Message]:
    if isinstance(store, Browse):
        return store.first_user_messages(sessions)
    out: dict[str, Message] = {}
    for s in sessions:
        first = next((m for m in store.range(s.id, 0, min(s.message_count, _FALLBACK_ROWS),
                                             tenant=tenant) if m.role == "user"), None)
        if first is not None:
            out[s.id] = first
    return out


def _text_matches(store: Store, tenant: str, sessions: Sequence[Session], query: str
                  ) -> dict[str, Message]:
    if isinstance(store, Browse):
        return store.first_text_matches(sessions, query)
    parsed = parse_query(query)
    out: dict[str, Message] = {}
    for s in sessions:
        _sid, own, count = own_span(s)
        stop = min(count, own + _FALLBACK_ROWS)
        hit = next((m for m in store.range(s.id, own, stop, tenant=tenant)
                    if parsed.matches(words(search_text(m)))), None)
        if hit is not None:
            out[s.id] = hit
    return out


def _count(store: Store, tenant: str, user: str | None, metadata: Mapping[str, Any] | None,
           query: str | None, at_most: int | None) -> int:
    if isinstance(store, Browse):
        return store.count_sessions(tenant=tenant, user=user, metadata=metadata, query=query,
                                    at_most=at_most)
    return count_listed(functools.partial(store.list_sessions, tenant=tenant, user=user,
                                          metadata=metadata, query=query), at_most)


def listing_json(store: Store, tenant: str, *, user: str | None,
                 metadata: Mapping[str, Any] | None, limit: int, cursor: str | None,
                 order: Literal["created", "recent"], query: str | None) -> bytes:
    """The JSON of a ``GET /v1/sessions`` answer (``SessionList``): the page, its total,
    and each item's title, preview and (with ``query``) snippet. Sync: store calls."""
    page: Page[Session] = store.list_sessions(tenant=tenant, user=user, metadata=metadata,
                                              limit=limit, cursor=cursor, order=order,
                                              query=query)
    lower = False
    if cursor is None and page.next_cursor is None:
        total = len(page.items)  # the first page is the last: nothing more to count
    elif query:
        counted = _count(store, tenant, user, metadata, query, SEARCH_COUNT_LIMIT + 1)
        total, lower = min(counted, SEARCH_COUNT_LIMIT), counted > SEARCH_COUNT_LIMIT
    else:
        total = _count(store, tenant, user, metadata, None, None)
    firsts = _first_user_messages(store, tenant, page.items)
    parsed = parse_query(query) if query else None
    matches = _text_matches(store, tenant, page.items, query) if query else {}
    items = []
    for s in page.items:
        first = firsts.get(s.id)
        text = first.text if first is not None else None
        extra = (b',"title":' + _encode(session_title(s.metadata, text))
                 + b',"preview":' + _encode(plain_preview(text, PREVIEW_LIMIT)))
        if parsed is not None:
            hit = matches.get(s.id)
            extra += b',"snippet":' + _encode(None if hit is None else snippet(hit, parsed))
        items.append(encode_session(s)[:-1] + extra + b"}")
    after = _encode(page.next_cursor)
    return (b'{"items":[' + b",".join(items) + b'],"total":' + _encode(total)
            + b',"total_is_lower_bound":' + _encode(lower) + b',"next_cursor":' + after + b"}")

