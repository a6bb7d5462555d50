"""The context window: which messages sit in the model's KV cache, and where.

``ContextWindow.plan(history)`` lays out the prompt for this turn: every
message in it gets ``kv_start`` (its first token position) and ``kv_size``;
messages that leave go to ``KVStatus.MARKED`` and, once the caller confirms
the engine freed them (``commit()``), to ``UNLOADED``.

Eviction is chunked with hysteresis: nothing leaves until the prompt would
pass ``max_tokens``; then whole groups leave, oldest first, until it is at
most ``low_water_tokens``. Between two evictions every turn only appends, so
the prompt's prefix (and the provider's prompt cache, or a local engine's KV
cache) stays valid for many turns, instead of breaking on every turn as a
sliding window does. System and developer messages stay at the head, and so
does a *pinned head* of the conversation's first groups (``pin_tokens``,
default a quarter of the window): eviction removes the oldest messages after
it, so even an eviction turn reuses the cached system prompt and opening
(where users usually state the task), the way StreamingLLM keeps its attention
sinks. ``pin_tokens=0`` gives plain chunked eviction.

A plan reads only the messages appended since the last plan, besides the window's own
(while the history only grows; any other change is read whole again): its cost follows
the window, not the conversation (8,000-token window, add + plan + commit per turn:
433 us at 1,000 messages, 447 us at 64,000; it was 0.44 ms and 2.6 ms).

The plan is a value (``msgspec`` struct) and the window's layout serializes
(``to_dict`` / ``from_dict``): with the token counts cached in the messages,
a resumed session restores its layout without re-tokenizing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .errors import ChatHistoryError
from .groups import Groups
from .model import KVStatus, Message
from .reduce.base import KEPT_ROLES
from .tokens import TokenCounter, cached_count, get_counter

__all__ = ["DEFAULT_LOW_WATER_RATIO", "ContextOverflow", "ContextWindow", "WindowPlan"]

DEFAULT_LOW_WATER_RATIO = 0.625
"""Default ``low_water_tokens`` as a share of ``max_tokens``."""
DEFAULT_PIN_RATIO = 0.25
"""Default ``pin_tokens`` as a share of ``max_tokens``.

Measured on 2,000 ShareGPT turns in an 8,000-token window (``python -m bench window``):
evicting 8,000 -> 6,000 with no pinned head reuses about 80% of each prompt; 8,000 ->
5,000 with a 2,000-token pinned head reuses about 88% with the prompt near 78% full."""


class ContextOverflow(ChatHistoryError):
    """The kept messages (system, developer, the newest group) alone exceed the window."""


class WindowPlan(msgspec.Struct, kw_only=True):
    """One turn's layout of the prompt."""

    messages: list[Message]
    """The prompt, oldest first; each has ``kv_start`` and ``kv_size`` set."""
    reused_prefix_tokens: int
    """Tokens at the head of the prompt identical to the previous turn's prompt."""
    new_tokens: int
    """Tokens to prefill this turn (the prompt after the reused prefix)."""
    evicted_ids: list[str]
    """Messages that left the window this turn (now ``MARKED``)."""
    total_tokens: int
    """Prompt tokens, the reply priming included."""
    head_count: int = 0
    """How many messages at the start of the prompt are the window's fixed head
    (system and developer messages and the pinned head) rather than its tail."""
    cache_breakpoint_id: str | None = None
    """Where to put a provider cache breakpoint (Anthropic ``cache_control``): the
    last message, since with hysteresis the whole prompt is the next turn's prefix."""

    @property
    def message_ids(self) -> list[str]:
        return [m.id for m in self.messages]


class ContextWindow:
    """Lays out prompts within ``max_tokens``, evicting in chunks down to
    ``low_water_tokens`` (default 62.5% of ``max_tokens``) while keeping system
    messages and a pinned head of ``pin_tokens`` (default 25%)."""

    def __init__(
        self,
        max_tokens: int,
        counter: str | TokenCounter | None = None,
        low_water_tokens: int | None = None,
        *,
        keep_system: bool = True,
        pin_tokens: int | None = None,
    ) -> None:
        low = int(max_tokens * DEFAULT_LOW_WATER_RATIO) if low_water_tokens is None else (
            low_water_tokens)
        if max_tokens <= 0 or not 0 <= low <= max_tokens:
            raise ValueError("need max_tokens > 0 and 0 <= low_water_tokens <= max_tokens")
        self.max_tokens = max_tokens
        self.low_water_tokens = low
        self.pin_tokens = int(max_tokens * DEFAULT_PIN_RATIO) if pin_tokens is None else pin_tokens
        self.counter = get_counter(counter)
        self.keep_roles = KEPT_ROLES if keep_system else frozenset()
        self._layout: list[tuple[str, int]] = []  # (message id, kv_start) of the last prompt
        self._evicted: set[str] = set()
        self._pending: dict[str, Message] = {}  # marked, not yet confirmed freed
        self._pinned: set[str] = set()  # ids in the pinned head
        # What the last plan looked at: its candidates not evicted, and how far into the
        # history it read (the next plan reads only what was appended since: O(window)).
        self._live: list[Message] = []
        self._seen = 0
        self._seen_last: Message | None = None
        self._seen_edits: tuple[int, int] | None = None  # (id of the History, its edits)

    # ------------------------------------------------------------------ planning

    def plan(self, history: Sequence[Message]) -> WindowPlan:
        """Lay out this turn's prompt from ``history`` (a ``History`` or a list)."""
        counter = self.counter
        evicted = self._evicted
        self._live = self._candidates(history)
        live = [m for m in self._live if m.kv_status == KVStatus.LOADED]
        sizes = {m.id: cached_count(m, counter) for m in live}
        total = counter.priming_tokens + sum(sizes.values())
        rest = [m for m in live if m.role not in self.keep_roles]
        groups = Groups.of(rest)
        # The pinned head: the first groups within pin_tokens. Once pinned, a group
        # stays pinned (a result joining a pinned call must not evict it), so the head
        # never moves and the prefix stays valid; it gives way only before an overflow:
        # first the groups kept only for being pinned before, then the whole head.
        spans = list(groups.spans())
        costs = [sum(sizes[m.id] for m in rest[s:e]) for s, e, _ in spans]

        def head_end(sticky: bool) -> int:
            used, end = 0, 0
            for (s, e, _), cost in zip(spans, costs, strict=True):
                held = sticky and any(m.id in self._pinned for m in rest[s:e])
                if not held and used + cost > self.pin_tokens:
                    break
                used, end = used + cost, e
            return end

        for head in dict.fromkeys((head_end(True), head_end(False), 0)):
            start = head
            if total > self.max_tokens:
                need = total - self.low_water_tokens
                freed = 0
                for s, e, _ in groups.spans(head):
                    if freed >= need or e == len(rest):
                        break  # the newest group always stays
                    freed += sum(sizes[m.id] for m in rest[s:e])
                    start = e
            keep = {id(rest[i]) for i in groups.sendable(0, head)}
            keep.update(id(rest[i]) for i in groups.sendable(start, len(rest)))
            prompt = [m for m in live if m.role in self.keep_roles or id(m) in keep]
            used_total = counter.priming_tokens + sum(sizes[m.id] for m in prompt)
            if used_total <= self.max_tokens:
                break
        total = used_total
        if total > self.max_tokens:
            raise ContextOverflow(
                f"{total} tokens remain after evicting everything that may leave; "
                f"the window holds {self.max_tokens}"
            )
        prompt_ids = {m.id for m in prompt}
        left = [m for m in live if m.id not in prompt_ids]
        for m in left:
            m.kv_status = KVStatus.MARKED
            m.kv_start = -1
            evicted.add(m.id)
            self._pending[m.id] = m
        if left:
            self._live = [m for m in self._live if m.id not in evicted]
        self._pinned = {rest[i].id for i in range(head)}
        head_ids = {id(rest[i]) for i in range(head)}
        head_count = 0
        for m in prompt:
            if m.role not in self.keep_roles and id(m) not in head_ids:
                break
            head_count += 1
        reused = self._place(prompt, sizes)
        used = total - counter.priming_tokens
        return WindowPlan(
            messages=prompt,
            reused_prefix_tokens=reused,
            new_tokens=used - reused,
            evicted_ids=[m.id for m in left],
            total_tokens=total,
            head_count=head_count,
            cache_breakpoint_id=prompt[-1].id if prompt else None,
        )

    def _candidates(self, history: Sequence[Message]) -> list[Message]:
        """The messages this plan considers, none evicted: the last plan's (loaded or
        not: the caller filters) and what was appended since, when the history only grew
        since then (the same ``History``, no ``edits`` since, its last-seen message the
        same object at the same place); otherwise the whole history (always for a plain
        list, whose edits cannot be seen). So a turn costs O(window + new), not
        O(history)."""
        seen, n = self._seen, len(history)
        edits = getattr(history, "edits", None)
        stamp = None if not isinstance(edits, int) else (id(history), edits)
        grew = (stamp is not None and stamp == self._seen_edits and 0 < seen <= n
                and history[seen - 1] is self._seen_last)
        self._seen_edits = stamp
        evicted = self._evicted
        fresh = (history[i] for i in range(seen, n)) if grew else history
        # the last plan's own are never evicted ones (plan drops those it evicts)
        candidates = [*self._live] if grew else []
        candidates += [m for m in fresh if m.id not in evicted]
        self._seen = n
        self._seen_last = history[n - 1] if n else None
        return candidates

    def _place(self, prompt: list[Message], sizes: dict[str, int]) -> int:
        previous = self._layout
        position = reused = 0
        intact = True
        layout: list[tuple[str, int]] = []
        for i, m in enumerate(prompt):
            size = sizes[m.id]
            if intact and i < len(previous) and previous[i] == (m.id, position):
                reused += size
            else:
                intact = False
            m.kv_start, m.kv_size, m.kv_status = position, size, KVStatus.LOADED
            layout.append((m.id, position))
            position += size
        self._layout = layout
        return reused

    def commit(self) -> list[str]:
        """Confirm the engine freed the marked messages: they become ``UNLOADED``.
        Returns their ids."""
        ids = list(self._pending)
        for m in self._pending.values():
            m.kv_status = KVStatus.UNLOADED
        self._pending.clear()
        return ids

    @property
    def pending_ids(self) -> list[str]:
        """Messages marked for cleanup that ``commit()`` has not confirmed yet."""
        return list(self._pending)

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """The layout and settings as JSON-ready builtins."""
        return {
            "max_tokens": self.max_tokens,
            "low_water_tokens": self.low_water_tokens,
            "pin_tokens": self.pin_tokens,
            "counter": self.counter.name,
            "keep_system": bool(self.keep_roles),
            "layout": [[i, s] for i, s in self._layout],
            "pending": list(self._pending),
            "pinned": sorted(self._pinned),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], history: Sequence[Message] = (),
                  counter: str | TokenCounter | None = None) -> ContextWindow:
        """Restore a window; ``history`` reconnects pending messages for ``commit``."""
        window = cls(data["max_tokens"], counter or data["counter"], data["low_water_tokens"],
                     keep_system=data.get("keep_system", True),
                     pin_tokens=data.get("pin_tokens"))
        window._layout = [(str(i), int(s)) for i, s in data.get("layout", [])]
        # Evicted messages carry MARKED/UNLOADED in their kv_status (and a store
        # hides marked ones), so the state does not grow with every eviction.
        window._pinned = set(data.get("pinned", []))
        by_id = {m.id: m for m in history}
        window._pending = {i: by_id[i] for i in data.get("pending", []) if i in by_id}
        return window
