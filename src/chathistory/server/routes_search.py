"""``GET /v1/search``: word search over the messages of the key's tenant
(``Store.search``): hits with their session, ranked, each with a snippet whose
matched words are marked, a page at a time.

The tenant is the API key's and nothing else: no parameter names one, so a client
(or a model calling a tool through one) can narrow a search to a user, a session or
metadata values, never widen it past its tenant.
"""

from __future__ import annotations

import msgspec
from starlette.responses import Response

from ..model import Message
from ..stores.search import MAX_LIMIT, SearchPage
from .app import Context, Endpoint, Param, call_store
from .errors import BadRequest
from .wire import JSON_TYPE, metadata_filters, query_int, query_str, utf16_marks

__all__ = ["ROUTES", "SearchResult", "SearchResults", "search_json"]


class SearchResult(msgspec.Struct, kw_only=True):
    """One message that matched."""

    session_id: str
    """The session that stores the message (a fork's shared prefix is its parent's)."""
    seq: int
    """The message's position in that session, from 0."""
    message: Message
    score: float
    """Higher is better; comparable within one search only."""
    snippet: str
    """About 160 characters of the message's searchable text around its first match,
    ``…`` where cut."""
    marks: list[tuple[int, int]]
    """Each matched word in ``snippet`` as ``[start, end)`` in UTF-16 code units
    (JavaScript's string indices)."""


class SearchResults(msgspec.Struct, kw_only=True, omit_defaults=True):
    items: list[SearchResult]
    next_cursor: str | None
    """Pass it as ``cursor`` (with the same other parameters) for the next page; null
    on the last."""
    scanned: int | None = None
    """Only when the store has no search index: how many of the tenant's newest
    messages the search read (a bounded scan)."""


_encode = msgspec.json.Encoder().encode


def search_json(page: SearchPage) -> bytes:
    """The JSON of a ``GET /v1/search`` answer: ``page`` with its marks in UTF-16."""
    items = []
    for hit in page.items:
        items.append(SearchResult(session_id=hit.session_id, seq=hit.seq, message=hit.message,
                                  score=hit.score, snippet=hit.snippet,
                                  marks=utf16_marks(hit.snippet, hit.marks)))
    return _encode(SearchResults(items=items, next_cursor=page.next_cursor,
                                 scanned=page.scanned))


async def search(ctx: Context) -> Response:
    request = ctx.request
    text = query_str(request, "q")
    if not text or not text.strip():
        raise BadRequest("query parameter q is required: the words to search for")
    limit = query_int(request, "limit", 20, low=1, high=MAX_LIMIT)
    assert limit is not None
    page = await call_store(ctx.store.search, text, tenant=ctx.tenant,
                            user=query_str(request, "user"),
                            session_id=query_str(request, "session_id"),
                            metadata=metadata_filters(request),
                            limit=limit, cursor=query_str(request, "cursor") or None)
    return Response(search_json(page), media_type=JSON_TYPE)


ROUTES = [
    Endpoint("GET", "/v1/search", search,
             "Search the tenant's messages: words, \"phrases\", prefix*; best match first, "
             "each hit with its session, a snippet and the matched words marked",
             responses={200: SearchResults}, tag="search",
             query=(Param("q", description="the words to find, all in one message (any "
                          "order, any case, accents ignored); \"quoted words\" in a row; "
                          "word* every word it begins. Letters and digits make words; the "
                          "rest separates them", required=True, schema={"pattern": r"\S"}),
                    Param("limit", "integer", f"1 to {MAX_LIMIT} (default 20)",
                          schema={"minimum": 1, "maximum": MAX_LIMIT}),
                    Param("cursor", description="next_cursor of the previous page (with "
                          "the same q and filters)"),
                    Param("user", description="only this user's sessions"),
                    Param("session_id", description="only this session (with the messages "
                          "a fork shares with its parent); 404 when the tenant has none"),
                    Param("metadata.{key}", description="only sessions whose metadata has "
                          "this value (JSON, or a plain string)"))),
]
