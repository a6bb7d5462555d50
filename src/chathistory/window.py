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

With ``cache=`` (a provider, ``provider/model`` or ``CacheRules``) the window plans the
provider's prompt cache every turn (``WindowPlan.cache_plan``) and, when it must evict,
takes the cut with the lowest expected price per prompt token of the cycle it starts (up
to the next eviction, at most ``cache_horizon`` turns) among today's, a deeper one and
cuts that keep the tail's oldest groups up to a cache entry. Its pinned head defaults
to 37.5% of the window (``DEFAULT_CACHE_PIN_RATIO``), reaches the provider's minimum
when it can, and is passed to ``plan_cache(pinned=...)``, which under breakpoint rules
(Anthropic) puts a breakpoint on its end: an eviction turn reads the whole head from the
cache (``docs/reduce.md``, Prompt caching). Without it, nothing changes.

The plan is a value (``msgspec`` struct) and the window's layout serializes
(``to_dict`` / ``from_dict``): with the token counts cached in the messages,
a resumed session restores its layout without re-tokenizing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from .cache import CachePlan, CacheRules, cache_rules, plan_cache
from .errors import ChatHistoryError, NotFound
from .groups import Groups
from .model import KVStatus, Message
from .reduce.base import KEPT_ROLES
from .tokens import TokenCounter, cached_count, get_counter

__all__ = ["DEFAULT_LOW_WATER_RATIO", "ContextOverflow", "ContextWindow", "WindowPlan"]

DEFAULT_LOW_WATER_RATIO = 0.625
"""Default ``low_water_tokens`` as a share of ``max_tokens``."""
DEFAULT_CACHE_HORIZON = 8
"""Turns ahead, at most, that cost-aware eviction (``cache=``) weighs a cut over."""
DEFAULT_PIN_RATIO = 0.25
"""Default ``pin_tokens`` as a share of ``max_tokens``.

Measured on 2,000 ShareGPT turns in an 8,000-token window (``python -m bench window``):
evicting 8,000 -> 6,000 with no pinned head reuses about 80% of each prompt; 8,000 ->
5,000 with a 2,000-token pinned head reuses about 88% with the prompt near 78% full."""
DEFAULT_CACHE_PIN_RATIO = 0.375
"""Default ``pin_tokens`` as a share of ``max_tokens`` with ``cache=``: an eviction turn
reads the pinned head from the provider's cache (Anthropic: at the breakpoint
``plan_cache(pinned=...)`` puts on its end) and re-writes only the tail it keeps.

Measured with ``python -m bench cache`` (cost of all requests over sending them uncached,
heads of 25 / 37.5 / 50% of the window): 2,000 ShareGPT turns at 8,000 tokens, Anthropic
0.184 / 0.176 / 0.175, OpenAI 0.541 / 0.537 / 0.534; the 200-turn agent session at
32,000 tokens, Anthropic 0.456 / 0.440 / 0.451, OpenAI 0.653 / 0.646 / 0.654. Over that
session and three more (seeds 22-24) 37.5% has the lowest mean cost of 25-50% (40% was
cheaper on one of them). Past 40% the tail left after an eviction is too short for the
agent's tool outputs, and the head gives way to fit them."""


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
    cache_plan: CachePlan | None = None
    """With ``ContextWindow(cache=...)``: the provider's cache plan for this prompt
    (``chathistory.plan_cache`` given the previous turn's), which eviction reads."""

    @property
    def message_ids(self) -> list[str]:
        return [m.id for m in self.messages]


class ContextWindow:
    """Lays out prompts within ``max_tokens``, evicting in chunks down to
    ``low_water_tokens`` (default 62.5% of ``max_tokens``) while keeping system
    messages and a pinned head of ``pin_tokens`` (default 25%, 37.5% with ``cache=``);
    with ``cache=``, where the provider's prompt cache makes the next ``cache_horizon``
    turns cheapest."""

    def __init__(
        self,
        max_tokens: int,
        counter: str | TokenCounter | None = None,
        low_water_tokens: int | None = None,
        *,
        keep_system: bool = True,
        pin_tokens: int | None = None,
        cache: CacheRules | str | None = None,
        cache_horizon: int = DEFAULT_CACHE_HORIZON,
    ) -> None:
        low = int(max_tokens * DEFAULT_LOW_WATER_RATIO) if low_water_tokens is None else (
            low_water_tokens)
        if max_tokens <= 0 or not 0 <= low <= max_tokens:
            raise ValueError("need max_tokens > 0 and 0 <= low_water_tokens <= max_tokens")
        self.max_tokens = max_tokens
        self.low_water_tokens = low
        self.cache_rules = _rules(cache)
        pin_ratio = DEFAULT_PIN_RATIO if self.cache_rules is None else DEFAULT_CACHE_PIN_RATIO
        self.pin_tokens = int(max_tokens * pin_ratio) if pin_tokens is None else pin_tokens
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
        # Cost-aware eviction (cache=): the provider's rules, the last turn's cache plan,
        # the last prompt's size and the tokens a turn appends (a running mean).
        if cache_horizon < 1:
            raise ValueError("need cache_horizon >= 1")
        self.cache_horizon = cache_horizon
        self._cache_plan: CachePlan | None = None
        self._last_total = 0
        self._growth = 0.0

    # ------------------------------------------------------------------ planning

    def plan(self, history: Sequence[Message], now: float | datetime | None = None) -> WindowPlan:
        """Lay out this turn's prompt from ``history`` (a ``History`` or a list). ``now``
        (epoch seconds or a ``datetime``), with ``cache=``: the time of this request, so
        the cache plan and the cost-aware cut count entries expired since the last turn
        (``plan_cache(now=...)``); without it they assume none did."""
        counter = self.counter
        evicted = self._evicted
        self._live = self._candidates(history)
        live = [m for m in self._live if m.kv_status == KVStatus.LOADED]
        sizes = {m.id: cached_count(m, counter) for m in live}
        total = counter.priming_tokens + sum(sizes.values())
        rest = [m for m in live if m.role not in self.keep_roles]
        groups = Groups.of(rest)
        # The pinned head: the first groups within pin_tokens (with breakpoint cache
        # rules, at least until it is cacheable: _head_cache_minimum). Once pinned, a group
        # stays pinned (a result joining a pinned call must not evict it), so the head
        # never moves and the prefix stays valid; it gives way only before an overflow:
        # first the groups kept only for being pinned before, then the whole head.
        spans = list(groups.spans())
        costs = [sum(sizes[m.id] for m in rest[s:e]) for s, e, _ in spans]
        kept_tokens = total - counter.priming_tokens - sum(costs)  # the kept roles
        cacheable_at = self._head_cache_minimum(kept_tokens)

        def head_end(sticky: bool) -> int:
            used, end = 0, 0
            for (s, e, _), cost in zip(spans, costs, strict=True):
                held = sticky and any(m.id in self._pinned for m in rest[s:e])
                if not held and used + cost > self.pin_tokens and (
                        cacheable_at is None or kept_tokens + used >= cacheable_at
                        or cost > self.pin_tokens):
                    break  # past pin_tokens, unless the head is under the cache minimum
                used, end = used + cost, e
            return end

        def evict_from(mid: int, target: int) -> int:
            """Where the kept tail starts when whole groups leave from ``mid`` on
            until the prompt is at most ``target`` (the newest group always stays)."""
            freed, start = 0, mid
            for s, e, _ in groups.spans(mid):
                if total - freed <= target or e == len(rest):
                    break
                freed += sum(sizes[m.id] for m in rest[s:e])
                start = e
            return start

        if self.cache_rules is not None:
            self._growth = _mean(self._growth, total - self._last_total, self._last_total)
        for head in dict.fromkeys((head_end(True), head_end(False), 0)):
            mid = start = head
            if total > self.max_tokens:
                if self.cache_rules is None:
                    start = evict_from(head, self.low_water_tokens)
                else:
                    mid, start = self._cheapest_cut(live, rest, sizes, total, head,
                                                    [e for _, e, _ in spans], evict_from, now)
            keep = {id(rest[i]) for i in groups.sendable(0, mid)}
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
        cache_plan = None
        if self.cache_rules is not None:
            rules = self.cache_rules
            cache_plan = self._cache_plan = plan_cache(
                prompt, provider=rules.provider, model=rules.model, counter=counter,
                previous=self._cache_plan, rules=rules, pinned=head_count, now=now)
            self._last_total = total
        return WindowPlan(
            messages=prompt,
            reused_prefix_tokens=reused,
            new_tokens=used - reused,
            evicted_ids=[m.id for m in left],
            total_tokens=total,
            head_count=head_count,
            cache_breakpoint_id=prompt[-1].id if prompt else None,
            cache_plan=cache_plan,
        )

    def _cheapest_cut(self, live: list[Message], rest: list[Message], sizes: dict[str, int],
                      total: int, head: int, span_ends: list[int],
                      evict_from: Callable[[int, int], int],
                      now: float | datetime | None = None) -> tuple[int, int]:
        """``(mid, start)``: keep the tail's groups before ``mid`` and from ``start`` on,
        the cut among a few candidates whose expected price per prompt token of the
        cycle it starts (``_expected_price``) is lowest under the provider's rules (a
        cut rewrites everything after the cached prefix it keeps). Candidates: today's
        (oldest after the pinned head, down to low water); a deeper one (half the
        hysteresis band further), so fewer rewrites follow; and cuts that keep the
        tail's oldest groups up to a cache entry of the last turn and evict after them,
        the kept prefix at most halfway from the pinned head to low water. Ties go to
        today's cut."""
        rules = self.cache_rules
        assert rules is not None
        previous = self._cache_plan
        low, top = self.low_water_tokens, self.max_tokens
        before = [0]  # tokens of rest[:i]
        for m in rest:
            before.append(before[-1] + sizes[m.id])
        fixed = total - before[-1]  # the priming and the kept roles

        def cached_after(mid: int) -> int:
            """Cached tokens the prompt keeps when ``rest[mid]`` is the first to leave."""
            if previous is None:
                return 0
            try:
                return (previous.cached_tokens(now)
                        - previous.invalidated_by(rest[mid].id, now))
            except NotFound:  # not in the last prompt: all before it is as it was
                return previous.cached_tokens(now)

        candidates = [(head, evict_from(head, low))]
        deeper = low - (top - low) // 2
        if deeper > fixed + before[head]:
            candidates.append((head, evict_from(head, deeper)))
        if previous is not None:
            cap = fixed + before[head] + (low - fixed - before[head]) // 2
            mids = [e for e in span_ends if e > head and fixed + before[e] <= cap
                    and e < len(rest)]
            if rules.max_breakpoints:  # entries only where breakpoints were
                entry_ids = {previous.message_ids[i] for i in previous.entries}
                mids = [e for e in mids if rest[e - 1].id in entry_ids]
            else:  # automatic: any prefix; the deepest keeps the most
                mids = mids[-1:]
            candidates += [(mid, evict_from(mid, low)) for mid in mids]
        best, best_price = candidates[0], float("inf")
        for mid, start in candidates:
            kept = total - (before[start] - before[mid])
            if start == mid or kept > top:
                continue
            price = self._expected_price(kept, min(cached_after(mid), kept))
            if price < best_price:
                best, best_price = (mid, start), price
        return best

    def _head_cache_minimum(self, kept_tokens: int) -> int | None:
        """Where the pinned head may pass ``pin_tokens`` under ``cache=`` rules that
        cache only at breakpoints (Anthropic), when the kept roles (``kept_tokens``) are
        under the minimum: groups of up to ``pin_tokens`` each join until the head
        reaches ``min_tokens``, so that it is cacheable and ``plan_cache(pinned=...)``
        can put a breakpoint on its end. None otherwise (the head is the first groups
        within ``pin_tokens``)."""
        rules = self.cache_rules
        if rules is None or not rules.max_breakpoints or kept_tokens >= rules.min_tokens:
            return None
        return rules.min_tokens

    def _expected_price(self, size: float, cached: int) -> float:
        """Expected input cost per prompt token of the cycle a cut starts, leaving
        ``size`` tokens with ``cached`` of them read from the cache: then each turn
        appends the running mean and reads the last prompt, until the next turn would
        overflow the window (at most ``cache_horizon`` turns in all). Evictions
        recur, so a cut is priced by the cycle it starts: a deeper cut re-writes less
        than it first seems to when it leaves room for more turns before the next."""
        rules = self.cache_rules
        assert rules is not None
        read, write = rules.read_multiplier, rules.write_multiplier[rules.ttls[0]]
        cost, tokens = cached * read + (size - cached) * write, size
        for _ in range(self.cache_horizon - 1):
            if size + self._growth > self.max_tokens:
                break
            cached = rules.cacheable(int(size))
            size += self._growth
            cost += cached * read + (size - cached) * write
            tokens += size
        return cost / tokens if tokens else 0.0

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
            **({} if self.cache_rules is None else {
                "cache": "/".join(filter(None, (self.cache_rules.provider,
                                                self.cache_rules.model))),
                "cache_horizon": self.cache_horizon}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], history: Sequence[Message] = (),
                  counter: str | TokenCounter | None = None) -> ContextWindow:
        """Restore a window; ``history`` reconnects pending messages for ``commit``."""
        window = cls(data["max_tokens"], counter or data["counter"], data["low_water_tokens"],
                     keep_system=data.get("keep_system", True),
                     pin_tokens=data.get("pin_tokens"), cache=data.get("cache"),
                     cache_horizon=data.get("cache_horizon", DEFAULT_CACHE_HORIZON))
        window._layout = [(str(i), int(s)) for i, s in data.get("layout", [])]
        # Evicted messages carry MARKED/UNLOADED in their kv_status (and a store
        # hides marked ones), so the state does not grow with every eviction.
        window._pinned = set(data.get("pinned", []))
        by_id = {m.id: m for m in history}
        window._pending = {i: by_id[i] for i in data.get("pending", []) if i in by_id}
        return window


def _rules(cache: CacheRules | str | None) -> CacheRules | None:
    """``cache=`` as rules: ``"anthropic"`` or ``"anthropic/claude-sonnet-4-5"``."""
    if cache is None or isinstance(cache, CacheRules):
        return cache
    provider, _, model = cache.partition("/")
    return cache_rules(provider, model or None)


def _mean(growth: float, appended: int, last_total: int) -> float:
    """The running mean of tokens a turn appends (the first turn and a shrunk
    history tell nothing)."""
    if not last_total or appended < 0:
        return growth
    return float(appended) if not growth else (growth + appended) / 2
