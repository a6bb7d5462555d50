"""Reducers that drop the oldest messages: by count, by target with threshold, by tokens."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

from ..model import Message
from ..tokens import TokenCounter, cached_count, get_counter
from .base import KEPT_ROLES, BaseReducer, Split

__all__ = ["MessageCountReducer", "TokenBudgetReducer", "TruncationReducer"]


def kept_roles(keep_system: bool) -> frozenset[str]:
    return KEPT_ROLES if keep_system else frozenset()


class TruncationReducer(BaseReducer):
    """Semantic Kernel's ``ChatHistoryTruncationReducer``, pair-safe.

    ``target_count`` counts every message that remains, the kept system and
    developer messages included (SK counts its system message the same way):
    ``TruncationReducer(2)`` over ``[system, user, assistant, user]`` keeps the
    system message and the last user message. Nothing happens until there are
    more than ``target_count + threshold_count`` messages; then the oldest other
    messages are cut so that about ``target_count`` remain.

    The cut lands on a group boundary at or after the target (so at most
    ``target_count`` remain); if a user message starts a group between there and
    the threshold, the cut moves back to it (keeping up to
    ``target_count + threshold_count``), so the kept part starts with the user
    (SK's cohesion rule). Kept messages are never cut: when they alone reach
    ``target_count``, every other message goes, unless the threshold holds a
    user message.
    """

    def __init__(self, target_count: int, threshold_count: int = 0, *,
                 keep_system: bool = True) -> None:
        if target_count < 1 or threshold_count < 0:
            raise ValueError("need target_count >= 1 and threshold_count >= 0")
        self.target_count = target_count
        self.threshold_count = threshold_count
        self.keep_roles = kept_roles(keep_system)

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        split = Split(messages, self.keep_roles)
        start = self.cut_index(split)
        return None if start is None else split.cut(start)

    def cut_index(self, split: Split) -> int | None:
        """Where to cut ``split.rest``, or None when under the threshold."""
        n = len(split.rest)
        # the kept messages take their places in the target first
        target = max(self.target_count - (len(split.messages) - n), 0)
        if n <= target + self.threshold_count:
            return None
        start = split.boundary_at_or_after(n - target)
        floor = n - target - self.threshold_count
        for i in range(min(start, n - 1), max(floor, 0) - 1, -1):
            if split.rest[i].role == "user" and split.groups.boundary_ok(i):
                return i
        return start


class MessageCountReducer(BaseReducer):
    """At most ``max_messages`` (system and developer messages not counted):
    the oldest are cut at a group boundary."""

    def __init__(self, max_messages: int, *, keep_system: bool = True) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        self.max_messages = max_messages
        self.keep_roles = kept_roles(keep_system)

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        split = Split(messages, self.keep_roles)
        n = len(split.rest)
        if n <= self.max_messages:
            return None
        return split.cut(split.boundary_at_or_after(n - self.max_messages))


class TokenBudgetReducer(BaseReducer):
    """Above ``max_tokens`` (kept messages and the reply priming included), cut the
    oldest messages until the total is at most ``low_water_tokens`` (default:
    ``max_tokens``). The gap between the two is hysteresis: cutting further than
    needed means the next turns add to an unchanged prefix instead of cutting
    again, so a provider's prompt cache keeps working."""

    def __init__(self, max_tokens: int, low_water_tokens: int | None = None, *,
                 counter: str | TokenCounter | None = None, keep_system: bool = True) -> None:
        low = max_tokens if low_water_tokens is None else low_water_tokens
        if not 0 <= low <= max_tokens:
            raise ValueError("need 0 <= low_water_tokens <= max_tokens")
        self.max_tokens = max_tokens
        self.low_water_tokens = low
        self.counter = get_counter(counter)
        self.keep_roles = kept_roles(keep_system)

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        counter = self.counter
        counts = [cached_count(m, counter) for m in messages]
        total = sum(counts) + counter.priming_tokens
        if total <= self.max_tokens:
            return None
        split = Split(messages, self.keep_roles)
        kept_tokens = sum(c for m, c in zip(messages, counts, strict=True)
                          if m.role in self.keep_roles)
        budget = self.low_water_tokens - counter.priming_tokens - kept_tokens
        rest_counts = [cached_count(m, counter) for m in split.rest]
        prefix = [0, *accumulate(rest_counts)]
        n = len(split.rest)
        # smallest start whose tail fits, then forward to a boundary (never above budget)
        start = n if budget < 0 else bisect_left(prefix, prefix[n] - budget, 0, n + 1)
        out = split.cut(split.boundary_at_or_after(start))
        return None if len(out) == len(messages) else out  # nothing could be cut
