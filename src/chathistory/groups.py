"""Pair safety: the one place that knows which messages must stay together.

An *atomic group* is a run of consecutive messages that a selection, reducer
or store read takes whole or not at all:

- a message with tool calls, every later message carrying a result for one
  of those calls, and everything between them (so parallel calls and their
  results stay together);
- a message made only of reasoning joins the message after it (the call the
  reasoning belongs to).

A message carrying a tool result whose call is not earlier in the sequence is
an *orphan*: providers reject it, so selections leave out the whole group it
is in. A call whose results do not exist yet is fine at the end.

``Groups`` is incremental (``append`` is O(1) amortized) so that a history
can keep it up to date on every add; ``Groups.of(messages)`` builds one for
any sequence, which is what reducers use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from .model import Message, Reasoning, TextPart, ToolCall, ToolResult

__all__ = ["Groups", "group_spans", "is_reasoning_only"]


def is_reasoning_only(message: Message) -> bool:
    """True when every part is reasoning (it belongs to the message after it)."""
    parts = message.parts
    return bool(parts) and all(type(p) is Reasoning for p in parts)


class Groups:
    """Boundaries between atomic groups of a growing message sequence.

    ``boundary_ok(k)`` tells whether a cut between message ``k - 1`` and message
    ``k`` keeps every group whole (``k = 0`` and ``k = len`` always do).
    """

    __slots__ = ("_call_at", "_cut", "_earlier_calls", "_n", "_orphans", "_prev_reasoning_only",
                 "clear_from")

    def __init__(self, *, earlier_calls: Mapping[str, int] | None = None,
                 prev_reasoning_only: bool = False) -> None:
        self._cut = bytearray()  # _cut[k] == 1: a boundary before message k is allowed
        self._call_at: dict[str, int] = {}
        self._orphans: set[int] = set()
        self._n = 0
        self._prev_reasoning_only = prev_reasoning_only
        # Continuing a stored sequence: calls stored before message 0, by position.
        self._earlier_calls = earlier_calls or {}
        self.clear_from: int | None = None
        """Smallest earlier position whose boundary a result here joined (stores
        clear the boundaries from there up to message 0)."""

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Groups:
        groups = cls()
        for message in messages:
            groups.append(message)
        return groups

    def __len__(self) -> int:
        return self._n

    def append(self, message: Message) -> None:
        i = self._n
        cut = self._cut
        cut.append(0 if self._prev_reasoning_only else 1)
        self._n = i + 1
        parts = message.parts
        if len(parts) == 1 and type(parts[0]) is TextPart:  # the common case, fast
            self._prev_reasoning_only = False
            return
        if not any(type(p) is ToolCall or type(p) is ToolResult for p in parts):
            self._prev_reasoning_only = is_reasoning_only(message)
            return
        call_at = self._call_at
        for part in parts:
            if type(part) is ToolCall:
                call_at[part.id] = i
            elif type(part) is ToolResult:
                j = call_at.get(part.call_id)
                if j is None:
                    earlier = self._earlier_calls.get(part.call_id)
                    if earlier is None:
                        self._orphans.add(i)
                        continue
                    j = -1
                    if self.clear_from is None or earlier + 1 < self.clear_from:
                        self.clear_from = earlier + 1
                for k in range(i, j, -1):
                    cut[k] = 0
        self._prev_reasoning_only = False

    def boundary_ok(self, k: int) -> bool:
        return k <= 0 or k >= self._n or self._cut[k] == 1

    def starts_group(self, k: int) -> bool:
        """Whether message ``k`` starts a group (unlike ``boundary_ok``, message 0
        does not when it continues a group stored before it)."""
        return self._cut[k] == 1

    def is_orphan(self, k: int) -> bool:
        return k in self._orphans

    def calls(self) -> dict[str, int]:
        """Call id -> index of the message making the call."""
        return dict(self._call_at)

    @property
    def ends_reasoning_only(self) -> bool:
        """Whether the last message is reasoning only (it joins the next one)."""
        return self._prev_reasoning_only

    def start_of(self, i: int) -> int:
        """Index of the first message of the group that holds message ``i``."""
        cut = self._cut
        while i > 0 and not cut[i]:
            i -= 1
        return i

    def end_of(self, i: int) -> int:
        """One past the last message of the group that holds message ``i``."""
        cut, n = self._cut, self._n
        i += 1
        while i < n and not cut[i]:
            i += 1
        return i

    def widen(self, start: int, end: int) -> tuple[int, int]:
        """The smallest group-aligned range holding ``[start, end)``."""
        if start < end:
            start = self.start_of(start)
            end = self.end_of(end - 1)
        return start, end

    def narrow(self, start: int, end: int) -> tuple[int, int]:
        """The largest group-aligned range inside ``[start, end)``."""
        cut, n = self._cut, self._n
        while start < end and start < n and not cut[start]:
            start += 1
        while end > start and end < n and not cut[end]:
            end -= 1
        return start, end

    @property
    def has_orphans(self) -> bool:
        return bool(self._orphans)

    def orphans_in(self, start: int, end: int) -> bool:
        orphans = self._orphans
        if not orphans:
            return False
        if end - start < len(orphans):
            return any(k in orphans for k in range(start, end))
        return any(start <= k < end for k in orphans)

    def spans(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, bool]]:
        """``(group_start, group_end, sendable)`` for the groups in a group-aligned range;
        ``sendable`` is False for a group holding an orphan result."""
        end = self._n if end is None else end
        cut = self._cut
        i = start
        while i < end:
            j = i + 1
            while j < end and not cut[j]:
                j += 1
            yield i, j, not self.orphans_in(i, j)
            i = j

    def sendable(self, start: int, end: int) -> list[int]:
        """Indices of the messages in a group-aligned range, orphan groups left out."""
        if not self.orphans_in(start, end):
            return list(range(start, end))
        out: list[int] = []
        for s, e, ok in self.spans(start, end):
            if ok:
                out.extend(range(s, e))
        return out


def group_spans(messages: Sequence[Message]) -> list[tuple[int, int, bool]]:
    """Every atomic group of ``messages`` as ``(start, end, sendable)``."""
    return list(Groups.of(messages).spans())
