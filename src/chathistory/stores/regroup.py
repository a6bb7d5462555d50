"""What the backends' schema steps use to mend group-start flags.

Releases before the batch grouping fix stored a tool result in a batch without
joining the batch's earlier messages to its call; a store's schema step finds the
flags to clear with ``regroup_spans`` (through a fork's ancestors) and clears them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from ..model import ToolResult
from .model import MESSAGE_DECODER, Session

__all__ = ["closed_spans", "regroup_spans"]

_RESULT_MARK = b'"tool_result"'


def closed_spans(own_from: int, rows: Iterable[tuple[int, bytes]],
                 chain: Sequence[tuple[Mapping[str, int], int]]) -> list[tuple[int, int]]:
    """Where the group-start flag of a session's own rows must be clear: ``[lo, hi]``
    position ranges, one per tool result, from just after its call (or the session's
    first own position ``own_from``) to the result. ``rows`` are the session's own
    ``(seq, stored JSON)``; ``chain`` holds the calls of the session and then of each
    ancestor (call id -> position), each with the end of the positions this session
    sees of it. What the stores' schema steps use to mend flags that releases before
    the batch grouping fix stored (a result in a batch did not join the batch's
    earlier messages to its call)."""
    spans: list[tuple[int, int]] = []
    for seq, data in rows:
        if _RESULT_MARK not in data:
            continue
        for part in MESSAGE_DECODER.decode(data).parts:
            if type(part) is not ToolResult:
                continue
            for calls, end in chain:
                call = calls.get(part.call_id)
                if call is not None and call < min(end, seq):
                    lo = max(call + 1, own_from)
                    if lo <= seq:
                        spans.append((lo, seq))
                    break
    return spans


def regroup_spans(sessions: Mapping[tuple[str, str], Session],
                  rows_of: Callable[[tuple[str, str]], list[tuple[int, bytes]]],
                  calls_of: Callable[[tuple[str, str]], dict[str, int]]
                  ) -> Iterator[tuple[tuple[str, str], int, int]]:
    """``(session key, lo, hi)``: every own position range ``[lo, hi]`` whose group-start
    flag must be clear, over all ``sessions`` (``(tenant, id)`` -> session). A store's
    schema step supplies the reads: ``rows_of`` a session's own rows that carry a tool
    result, ``calls_of`` its calls. Forks look their calls up through their ancestors."""
    cache: dict[tuple[str, str], dict[str, int]] = {}

    def calls(key: tuple[str, str]) -> dict[str, int]:
        if key not in cache:
            cache[key] = calls_of(key)
        return cache[key]

    for key, session in sessions.items():
        rows = rows_of(key)
        if not rows:
            continue
        chain = [(calls(key), session.message_count)]
        current, end = session, session.fork_seq
        seen = {key}
        while current.parent_id is not None and (key[0], current.parent_id) in sessions:
            parent_key = (key[0], current.parent_id)
            if parent_key in seen:  # parent links that loop (an import of 0.1): stop
                break
            seen.add(parent_key)
            chain.append((calls(parent_key), end))
            current = sessions[parent_key]
            if current.parent_id is not None:
                end = min(end, current.fork_seq)
        own_from = session.fork_seq if session.parent_id is not None else 0
        for lo, hi in closed_spans(own_from, rows, chain):
            yield key, lo, hi
