"""The engine's reads for a page of sessions that people browse: each session's
first user message (what to call it), and the first of its messages whose text
holds a search text (what to show of a match), for the whole page at once.

A backend answers each for many sessions in one read when it implements
``_b_first_user_rows`` and ``_b_rows_containing`` (``backend.py``); otherwise the
engine reads each session's rows a batch at a time, which the in-memory reference
store does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import NotFound
from ..model import Message
from .backend import Span
from .model import MESSAGE_DECODER, Row, Session
from .reads import Reads
from .sessions import _Needle

__all__ = ["Browse", "ascii_casefold", "find_all"]

_BATCH = 32
"""Rows read at a time where a backend has no one-read answer."""
CANDIDATES = 16
"""Of a session's rows whose JSON holds the search text, how many are read to find
one whose text holds it (a match in an id or a tool call's arguments is no snippet)."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_casefold(text: str) -> str:
    """``text`` with ASCII letters lowercased and nothing else changed (the search's
    rule, SQL ``LIKE``'s; the length and every offset stay as they are)."""
    return text.translate(_ASCII_LOWER)


def find_all(text: str, query: str) -> list[tuple[int, int]]:
    """Every ``[start, end)`` where ``query`` occurs in ``text`` (ASCII letters
    case-insensitive), left to right, not overlapping."""
    if not query:
        return []
    haystack, needle = ascii_casefold(text), ascii_casefold(query)
    out: list[tuple[int, int]] = []
    at = haystack.find(needle)
    while at >= 0:
        out.append((at, at + len(needle)))
        at = haystack.find(needle, at + len(needle))
    return out


class Browse(Reads):
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

    def first_text_matches(self, sessions: Iterable[Session], query: str
                           ) -> dict[str, Message]:
        """Session id -> the first of its own messages (the rows a search matches,
        ``list_sessions(query=)``) whose text contains ``query``, ASCII letters
        case-insensitive, among the first ``CANDIDATES`` whose stored JSON does. A
        session without one is left out (it matched by its id or metadata, or in a part
        that is not text)."""
        if not query:
            return {}
        needle = _Needle(query).json
        by_tenant: dict[str, list[Session]] = {}
        for session in sessions:
            by_tenant.setdefault(session.tenant, []).append(session)
        out: dict[str, Message] = {}
        for tenant, group in by_tenant.items():
            spans = [(s.id, s.fork_seq if s.parent_id is not None else 0, s.message_count)
                     for s in group]
            found = self._b_rows_containing(tenant, spans, needle, CANDIDATES)
            if found is None:
                found = [self._scan(tenant, span, needle, CANDIDATES) for span in spans]
            for session, rows in zip(group, found, strict=True):
                for row in rows:
                    message = MESSAGE_DECODER.decode(row.data)
                    if find_all(message.text, query):
                        out[session.id] = message
                        break
        return out

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

    def _scan(self, tenant: str, span: Span, needle: str, limit: int) -> list[Row]:
        """``_b_rows_containing`` for one span, a batch of rows at a time."""
        session_id, lo, hi = span
        wanted = needle.encode().lower()  # bytes.lower(): ASCII only, like SQL LIKE
        out: list[Row] = []
        for start in range(lo, hi, _BATCH):
            rows = self._b_rows(tenant, session_id, start, min(start + _BATCH, hi))
            out.extend(r for r in rows if wanted in r.data.lower())
            if len(out) >= limit:
                return out[:limit]
        return out
