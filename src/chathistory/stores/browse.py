"""The engine's reads for a page of sessions that people browse: each session's
first user message (what to call it), the listing's search (``list_sessions(query=)``)
and, for each session it lists, one of its own messages that match (what to show of
the match), for the whole page at once.

The listing's search is the word search of ``search.py`` (one tokenizer, one query
language), over a session's own messages, through the store's index where it has one
(``_b_search_sessions``, ``_b_search``); a session's id and metadata values are matched
by the query's text as written, ASCII letters case-insensitively, in Python.

A backend answers the first user messages of many sessions in one read when it
implements ``_b_first_user_rows`` (``backend.py``); otherwise the engine reads each
session's rows a batch at a time, which the in-memory reference store does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from ..errors import InvalidArgument, NotFound
from ..model import Message
from .backend import Span, own_span
from .model import MESSAGE_DECODER, Row, Session
from .search import Query, Searching, parse_query

__all__ = ["INDEXED_SESSIONS", "Browse", "MetadataNeedle"]

_BATCH = 32
"""Rows read at a time where a backend has no one-read answer."""
INDEXED_SESSIONS = 1000
"""From the listing's second batch of sessions on, the index is asked once for every
session of the tenant with a matching message; when fewer than this many match, the
rest of the walk reads no message (a rare word), else it asks batch by batch."""
_PAGE_HITS = 4
"""Of the index, how many hits per listed session the first read for the snippets of
a page asks for (sessions it leaves without one are asked one by one)."""


class MetadataNeedle:
    """A search's text as written, matched against a session's id (its characters) and
    metadata values (their JSON text, a string's quotes left out), ASCII letters
    case-insensitively, like SQL ``LIKE``."""

    __slots__ = ("raw", "raw_json")

    def __init__(self, query: str) -> None:
        self.raw = query.encode().lower()  # bytes.lower(): ASCII letters only
        self.raw_json = msgspec.json.encode(query)[1:-1].lower()

    def in_session(self, session: Session) -> bool:
        if self.raw in session.id.encode().lower():
            return True
        metadata = session.metadata
        # a value's JSON is part of the whole dict's: one encoding rules most sessions out
        if not metadata or self.raw_json not in _encode(metadata).lower():
            return False
        return any(self.raw_json in _encode(v).lower() for v in metadata.values())


_encode = msgspec.json.Encoder().encode


class Browse(Searching):
    """Page-wide reads for listings; ``Engine`` (``engine.py``) includes them."""

    def first_user_messages(self, sessions: Iterable[Session]) -> dict[str, Message]:
        """Session id -> its first message with role ``user`` (a fork's may be in the
        prefix it shares with its parent), for sessions as this store returned them
        (``list_sessions``, ``get_session``). A session without one is left out, and so
        is one whose chain of parents is broken."""
        chains: dict[str, list[tuple[Session, int, int]]] = {}
        for session in sessions:
            try:  # (owner, lo, hi) newest first: walk them oldest first
                chains[session.id] = self._segments(session)[::-1]
            except NotFound:
                continue
        spans_by_tenant: dict[str, dict[Span, Row | None]] = {}
        for segments in chains.values():
            for owner, lo, hi in segments:
                spans_by_tenant.setdefault(owner.tenant, {})[(owner.id, lo, hi)] = None
        for tenant, found in spans_by_tenant.items():
            spans = list(found)
            found.update(zip(spans, self._first_user_rows(tenant, spans), strict=True))
        out: dict[str, Message] = {}
        for session_id, segments in chains.items():
            for owner, lo, hi in segments:
                row = spans_by_tenant[owner.tenant][(owner.id, lo, hi)]
                if row is not None:
                    out[session_id] = MESSAGE_DECODER.decode(row.data)
                    break
        return out

    # ------------------------------------------------------------ the listing's search

    def _listing_search(self, tenant: str, query: str
                        ) -> Callable[[Sequence[Session]], set[str]]:
        """``list_sessions``' search over its batches (``Sessions._listing_search``): a
        session matches by its id or metadata (``MetadataNeedle``), else by an own
        message (``sessions_matching``: the index, else its rows). Common words fill a
        page within the first batch, asked of the index batch by batch; past it, the
        index is asked once for all the tenant's matching sessions (``INDEXED_SESSIONS``
        at most), so a rare word's walk reads sessions only, never their messages. A
        session without rows of its own is never asked about."""
        parsed = parse_query(query)
        needle = MetadataNeedle(query)
        batches = 0
        indexed: set[str] | None = None

        def matching(batch: Sequence[Session]) -> set[str]:
            nonlocal batches, indexed
            batches += 1
            if batches == 2:
                everywhere = self._b_search_sessions(tenant, parsed, None, INDEXED_SESSIONS)
                if everywhere is not None and len(everywhere) < INDEXED_SESSIONS:
                    indexed = everywhere
            found = {s.id for s in batch if needle.in_session(s)}
            # a session without rows of its own has no message to match
            rest = [span for span in map(own_span, batch)
                    if span[0] not in found and span[1] < span[2]]
            if indexed is not None:
                found.update(indexed.intersection(span[0] for span in rest))
            elif rest:
                found |= self.sessions_matching(tenant, parsed, rest)
            return found

        return matching

    def first_text_matches(self, sessions: Iterable[Session], query: str
                           ) -> dict[str, Message]:
        """Session id -> one of its own messages (the rows the listing's search matches)
        that match ``query`` (``search.parse_query``): the best by the store's ranking
        where it has a search index, else the first. A session without one is left
        out (it was listed for its id or metadata)."""
        if not query:
            return {}
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        parsed = parse_query(query)
        by_tenant: dict[str, list[Span]] = {}
        for session in sessions:
            span = own_span(session)
            if span[1] < span[2]:
                by_tenant.setdefault(session.tenant, []).append(span)
        out: dict[str, Message] = {}
        for tenant, spans in by_tenant.items():
            rows = self._best_rows(tenant, parsed, spans)
            if rows is None:
                rows = {}
                for span in spans:
                    row = self.first_match(tenant, parsed, span, _BATCH)
                    if row is not None:
                        rows[span[0]] = row
            out.update((sid, MESSAGE_DECODER.decode(row.data)) for sid, row in rows.items())
        return out

    def _best_rows(self, tenant: str, query: Query, spans: Sequence[Span]
                   ) -> dict[str, Row] | None:
        """Through the index: session id -> its best matching own row, for the sessions
        of ``spans`` that have one; one read for the page, then one per session it left
        without a hit. None: no index."""
        found = self._b_search(tenant, query, spans, None, None, _PAGE_HITS * len(spans))
        if found is None:
            return None
        best: dict[str, Row] = {}
        for _score, sid, _seq, row in found:  # best first: keep each session's first
            best.setdefault(sid, row)
        if len(found) == _PAGE_HITS * len(spans):
            for span in spans:
                if span[0] not in best:
                    one = self._b_search(tenant, query, [span], None, None, 1)
                    if one:
                        best[span[0]] = one[0][3]
        return best

    def _first_user_rows(self, tenant: str, spans: Sequence[Span]) -> list[Row | None]:
        found = self._b_first_user_rows(tenant, spans)
        if found is not None:
            return found
        out: list[Row | None] = []
        for session_id, lo, hi in spans:
            hit = None
            for start in range(lo, hi, _BATCH):
                rows = self._b_rows(tenant, session_id, start, min(start + _BATCH, hi))
                hit = next((r for r in rows if r.role == "user"), None)
                if hit is not None:
                    break
            out.append(hit)
        return out
