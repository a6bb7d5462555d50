"""Search on Redis (issue 22): a bounded scan of the tenant's newest messages, with a
cheap test on the stored bytes before any message is decoded.

Redis without modules has no full-text index, and one kept in sets by the append
script costs more than the issue allows (``python -m bench search``; docs/stores.md,
"Redis: a bounded scan, not an index": a SADD per distinct word of a ShareGPT message
made an append 2.3-2.8x as long and a message 4x as large). So a search
reads rows: the tenant's sessions newest first (its ``recent`` order), each
session's rows newest first, many sessions' rows in one pipelined round trip, until
``search_scan_limit`` rows were read (``SearchPage.scanned`` says how many).

Each row is tested before it is decoded (``search.row_test``, the engine's test of the
stored JSON's bytes: every ASCII word of the query in them, lowercased, or in their
folded form for non-ASCII text; never false for a row that matches), and only a row
that passes is decoded and matched with ``Query.matches``. Decoding and matching a row
costs about as much as reading ``CANDIDATE_COST`` rows, and is counted so against the
bound, so a common word reads fewer rows than a rare one in about the same time.

Everything read is under the tenant's own keys: a search names no other tenant's key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..backend import Span
from ..model import MESSAGE_DECODER, Row, Session
from ..search import Cursor, Query, Searching, ranked_after, row_test, search_text, words
from .keys import KeyLayout, unpack_data, unpack_row

__all__ = ["CANDIDATE_COST", "SCAN_LIMIT", "RedisSearch"]

SCAN_LIMIT = 20_000
"""The default ``search_scan_limit``: rows a search reads at most (measured: 81-92 ms
p50 for a word that matches nothing, on ShareGPT messages; docs/stores.md)."""
CANDIDATE_COST = 16
"""A row that passes the byte test and is decoded and matched counts as this many
rows read against ``search_scan_limit`` (the measured ratio of the two costs)."""
_FIRST_TRIP = 256
_LARGEST_TRIP = 2048
_CHUNK = 256


def newest_first(spans: Iterable[Span]) -> Iterator[Span]:
    """Each span cut into pieces of at most ``_CHUNK`` positions, newest piece first."""
    for session_id, lo, hi in spans:
        for top in range(hi, lo, -_CHUNK):
            yield session_id, max(lo, top - _CHUNK), top


class RedisSearch(KeyLayout, Searching):
    """The scan behind ``search`` and the session list's ``q=`` (a mixin of
    ``RedisStore``)."""

    _r: Any
    search_scan_limit: int | None = SCAN_LIMIT

    if TYPE_CHECKING:  # RedisStore's
        def _load(self, tenant: str, session_ids: Sequence[str]
                  ) -> list[tuple[str, str, Session] | None]: ...

    def _rows_newest_first(self, tenant: str, spans: Iterable[Span]
                           ) -> Iterator[tuple[str, int, bytes]]:
        """``(session_id, seq, packed row)`` of the spans' rows, each span newest row
        first, read lazily in pipelined round trips of growing size (a consumer that
        stops early leaves at most one trip unread)."""
        pieces = newest_first(spans)
        size = _FIRST_TRIP
        while True:
            trip: list[Span] = []
            positions = 0
            for piece in pieces:
                trip.append(piece)
                positions += piece[2] - piece[1]
                if positions >= size:
                    break
            if not trip:
                return
            pipe = self._r.pipeline(transaction=False)
            for session_id, lo, hi in trip:
                pipe.hmget(self._keys(tenant, session_id).rows,
                           [str(seq) for seq in range(hi - 1, lo - 1, -1)])
            for (session_id, lo, hi), values in zip(trip, pipe.execute(), strict=True):
                for seq, value in zip(range(hi - 1, lo - 1, -1), values, strict=True):
                    if value is not None:
                        yield session_id, seq, value
            size = min(size * 2, _LARGEST_TRIP)

    def _scan_search(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                     user: str | None, after: Cursor | None, limit: int
                     ) -> tuple[list[tuple[float, str, int, Row]], int]:
        """The engine's scan (``Searching._scan_search``), newest rows first, many
        sessions' rows a round trip; stops when ``search_scan_limit`` is spent, a decoded
        row counting as ``CANDIDATE_COST``. Measured at 100,000 ShareGPT messages
        (bench/README.md, "Fast paths kept"): ``the`` 74 ms (1,520 rows read) against
        the engine's 1,094 ms (its 20,000); a word in no message, unbounded, 411 against
        507 ms."""
        budget = self.search_scan_limit
        test = row_test(query)
        walk = spans if spans is not None else self._search_spans(tenant, user)
        found: list[tuple[float, str, int, Row]] = []
        spent = read = 0
        for session_id, seq, packed in self._rows_newest_first(tenant, walk):
            if budget is not None and spent >= budget:
                break
            read += 1
            spent += 1
            if test is not None and not test(unpack_data(packed)):
                continue
            spent += CANDIDATE_COST
            row = unpack_row(seq, packed)
            got = words(search_text(MESSAGE_DECODER.decode(row.data)))
            if query.matches(got):
                found.append((query.score(got), session_id, seq, row))
        return ranked_after(found, after, limit), read

    def _b_search_sessions(self, tenant: str, query: Query, spans: Sequence[Span] | None,
                           limit: int) -> set[str] | None:
        """Of the sessions of ``spans`` (a listing's page; None, the whole tenant, is
        left to the engine), those with an own row that matches: their rows newest
        first, many sessions in one round trip, tested on their bytes before decoding."""
        if spans is None:
            return None
        test = row_test(query)
        found: set[str] = set()
        for session_id, _seq, packed in self._rows_newest_first(tenant, spans):
            if session_id in found:
                continue
            data = unpack_data(packed)
            if test is not None and not test(data):
                continue
            if query.matches(words(search_text(MESSAGE_DECODER.decode(data)))):
                found.add(session_id)
                if len(found) >= limit:
                    break
        return found
