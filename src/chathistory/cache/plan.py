"""A turn's prompt-cache plan: where the cache breakpoints go and what the turn costs.

``plan_cache(messages, provider=..., previous=plan)`` reads the provider's rules
(``chathistory.cache.rules``) and the previous turn's plan, which records where the
provider holds cache entries now, and says:

- Anthropic: up to ``max_breakpoints`` messages whose last block gets
  ``cache_control``. Positions are message boundaries at or above the minimum
  length. A breakpoint reads an entry that lies at most ``lookback_blocks - 1``
  blocks before it (its own block counted among the 20, one fewer than the most
  generous reading of the documentation). The chooser puts one breakpoint on the
  last eligible message, one within reach of the deepest entry still valid when the
  last is not, one on the end of the caller's pinned head (``pinned``: the leading
  messages that stay in later prompts, a ``ContextWindow``'s fixed head), so a turn
  that evicts after the head still reads all of it, and spends the rest so that, from
  the read entry on, no run of ``lookback_blocks`` blocks lacks a breakpoint (an edit
  then still finds an entry).
- OpenAI: a ``prompt_cache_key`` derived from the session id (never the content),
  and the prefix shared with the previous prompt, rounded down to ``1,024 + k*128``.
- Gemini: the implicit prefix likewise, with the model's minimum, whether an
  explicit cache pays off (``explicit_cache_pays_off``), and how many leading
  messages the caller's explicit cache holds (``explicit_cache_messages``), which
  ``chathistory.formats.gemini_request(cached_content=...)`` leaves out.

The clock (``now=``, the time of this request): the previous plan says when its
entries were last written or read (its own ``at``) and with which TTL, so an entry
unread for longer than its TTL (``CacheRules.ttl_seconds``: Anthropic 5 minutes or 1
hour, renewed by every read; OpenAI's in-memory retention, 5 minutes predicted, or
``24h``; Gemini's implicit cache, 5 minutes assumed) is predicted gone: the request
writes that prefix again instead of reading it. Under Anthropic's rules, with ``ttl``
left to the plan and a gap to expect (``expected_gap=``, else the gaps observed so far),
each breakpoint gets the TTL whose expected cost is lower (``choose_ttls``), the 1-hour
ones before the 5-minute ones as the API requires. Without ``now`` the plan is today's
and says so: ``assumes_no_expiry``.

Token counts come from ``chathistory.tokens`` (``cached_count``): the counter's
per-message accounting, so the plan's numbers are estimates of the provider's.
Tool definitions, which precede the messages in a request, are not modelled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..errors import NotFound
from ..formats._common import reasoning_owner
from ..model import KEPT_ROLES, AudioPart, Message, Reasoning, TextPart
from ..model.codec import encode
from ..tokens import TokenCounter, cached_count, get_counter
from .rules import CacheRules, cache_rules

__all__ = ["CachePlan", "plan_cache", "prompt_cache_key"]

KEPT_GAPS = 32
"""Gaps between requests a plan remembers (the newest), for the TTL choice."""
HEAD_READS = 8
"""Reads expected of an entry in the pinned head (it stays in later prompts), in the TTL
choice; an entry after the head is expected to be read once (the next request)."""


@dataclass(frozen=True, slots=True)
class CachePlan:
    """One turn's cache layout and expected cost; pass it to the next turn's
    ``plan_cache(previous=...)`` and to the encoders (``to_anthropic(cache_plan=...)``)
    or the request builders (``chathistory.formats.openai_chat_request`` and the
    like), which refuse it for messages it was not made for."""

    rules: CacheRules
    ttl: str
    message_ids: tuple[str, ...]
    """The prompt's messages in request order (Anthropic and Gemini: system first)."""
    fingerprints: tuple[str, ...]
    """A digest of each message's content: a prefix matches only if these do."""
    prefix_tokens: tuple[int, ...]
    """Tokens up to and including each message."""
    breakpoint_ids: tuple[str, ...]
    """Anthropic: the messages whose last block carries ``cache_control``, in order."""
    prompt_cache_key: str | None
    """OpenAI: the request's ``prompt_cache_key``."""
    entries: tuple[int, ...]
    """Indexes of the messages a cache entry ends at once this turn is sent."""
    tokens_read: int
    tokens_written: int
    tokens_uncached: int
    explicit_cache_pays_off: bool | None = None
    """Gemini: whether an explicit cache beats none (None: storage price unknown)."""
    explicit_cache_messages: int = 0
    """Gemini: how many leading messages of the prompt (in ``message_ids`` order,
    system first) the caller's explicit cache (``client.caches.create``) holds;
    ``gemini_request(cached_content=...)`` sends only the messages after them. Set by
    ``plan_cache(explicit_cache_messages=n)`` when the cache is made, carried over
    from ``previous`` while those messages are unchanged, else 0 (a cache of an
    edited prefix no longer matches the prompt). The costs do not count it."""
    pinned: int = 0
    """How many leading messages of the prompt (in ``message_ids`` order) are the
    caller's pinned head (``plan_cache(pinned=...)``); Anthropic: the last of them that
    may hold a breakpoint holds one."""
    at: float | None = None
    """The time of this request (``plan_cache(now=...)``, epoch seconds): every entry
    of the plan was written or read then. None: the plan knows no time."""
    breakpoint_ttls: tuple[str, ...] = ()
    """Anthropic: each breakpoint's TTL, in ``breakpoint_ids`` order (longest first)."""
    entry_ttls: tuple[str, ...] = ()
    """Each entry's TTL, in ``entries`` order (empty: ``ttl`` for all)."""
    entry_at: tuple[float, ...] = ()
    """When each entry was last written or read, in ``entries`` order (empty: ``at`` for
    all). With a clock, an earlier turn's entry this turn neither marks nor reads stays
    an entry, with its time, until it expires."""
    written_by_ttl: tuple[tuple[str, int], ...] = ()
    """Tokens written per TTL (empty: all of ``tokens_written`` at ``ttl``)."""
    gaps: tuple[float, ...] = ()
    """Seconds between the latest requests (at most ``KEPT_GAPS``, oldest first)."""
    assumes_no_expiry: bool = True
    """Whether the prediction assumes that no entry expired: no ``now``, or a previous
    plan without one. False when the plan applied the TTLs."""
    explicit_cache_expires_at: float | None = None
    """Gemini: when the explicit cache expires (its creation plus its TTL), if known."""

    @property
    def provider(self) -> str:
        return self.rules.provider

    @property
    def total_tokens(self) -> int:
        return self.prefix_tokens[-1] if self.prefix_tokens else 0

    @property
    def read_multiplier(self) -> float:
        return self.rules.read_multiplier

    @property
    def write_multiplier(self) -> float:
        return self.rules.write_multiplier[self.ttl]

    @property
    def cost(self) -> float:
        """The turn's input cost in uncached-token equivalents:
        ``read * read_multiplier + written * write_multiplier + uncached``, each TTL's
        writes at its own multiplier."""
        if self.written_by_ttl:
            written = sum(n * self.rules.write_multiplier[t] for t, n in self.written_by_ttl)
        else:
            written = self.tokens_written * self.write_multiplier
        return self.tokens_read * self.read_multiplier + written + self.tokens_uncached

    def entry_ttl(self, position: int) -> str:
        """The TTL of the entry ``entries[position]``."""
        return self.entry_ttls[position] if self.entry_ttls else self.ttl

    def alive(self, position: int, at: float | datetime | None) -> bool:
        """Whether the entry ``entries[position]`` is still held at time ``at`` (always,
        when either time is unknown): unread for at most its TTL's lifetime."""
        when = _seconds(at, "at")
        if when is None or self.at is None:
            return True
        return when - self.entry_time(position) <= self.rules.lifetime(self.entry_ttl(position))

    def entry_time(self, position: int) -> float:
        """When the entry ``entries[position]`` was last written or read (the plan's
        ``at`` unless an earlier turn's)."""
        if self.entry_at:
            return self.entry_at[position]
        assert self.at is not None, "a plan without a time has no entry times"
        return self.at

    def cached_tokens(self, at: float | datetime | None = None) -> int:
        """Tokens the provider holds for this prompt once the turn is sent, or at time
        ``at`` (entries unread past their TTL gone; needs the plan's ``now``)."""
        held = [i for k, i in enumerate(self.entries) if self.alive(k, at)]
        return self._entry_tokens(max(held)) if held else 0

    def invalidated_by(self, message_id: str, at: float | datetime | None = None) -> int:
        """Cached tokens that editing (or removing) ``message_id`` would lose: what the
        provider holds after this turn (or at time ``at``), less the longest entry
        ending before it. Raises ``NotFound`` for a message not in the prompt."""
        try:
            index = self.message_ids.index(message_id)
        except ValueError:
            raise NotFound(f"message {message_id!r} is not in the planned prompt") from None
        if self.rules.max_breakpoints:  # entries only where breakpoints were
            kept = max((self._entry_tokens(i) for k, i in enumerate(self.entries)
                        if i < index and self.alive(k, at)), default=0)
        else:  # automatic caching matches any prefix, in increments
            held = bool(self.entries) and self.alive(0, at)
            kept = self.rules.cacheable(self.prefix_tokens[index - 1]) if index and held else 0
        return self.cached_tokens(at) - kept

    def _entry_tokens(self, index: int) -> int:
        return self.rules.cacheable(self.prefix_tokens[index])

    def diverges_at(self, messages: Sequence[Message]) -> int | None:
        """Where ``messages``, put in the plan's request order, first differ from the
        planned prompt (an index into ``message_ids``; the length of ``messages`` when
        they are shorter), or None when they start with it. Messages after the planned
        prompt are allowed: the turn's new input may be appended once planned."""
        ordered = _request_order(messages, self.provider)
        for index, expected in enumerate(self.fingerprints):
            if index == len(ordered) or _fingerprint(ordered[index]) != expected:
                return index
        return None


def prompt_cache_key(session_id: str) -> str:
    """A stable OpenAI ``prompt_cache_key`` for a session: a digest of its id, so the
    key names no user data and is the same on every turn whatever the content."""
    return "chathistory-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def plan_cache(
    messages: Sequence[Message],
    *,
    provider: str,
    model: str | None = None,
    previous: CachePlan | None = None,
    session_id: str | None = None,
    counter: TokenCounter | str | None = None,
    ttl: str | None = None,
    expected_reuses: int = 0,
    cache_hours: float = 1.0,
    storage_per_hour: float | None = None,
    rules: CacheRules | None = None,
    explicit_cache_messages: int | None = None,
    pinned: int = 0,
    now: float | datetime | None = None,
    expected_gap: float | None = None,
    explicit_cache_ttl: float | None = None,
) -> CachePlan:
    """The cache plan for sending ``messages`` to ``model`` of ``provider``
    (``anthropic``, ``openai``, ``gemini``), given the ``previous`` turn's plan.

    ``ttl`` is one of the rules' ``ttls`` (Anthropic ``5m``, the default, or ``1h``).
    ``session_id`` gives OpenAI's ``prompt_cache_key``. For Gemini, an explicit cache
    of the prompt held ``cache_hours`` and read by ``expected_reuses`` later requests
    pays off when ``expected_reuses * (1 - read_multiplier) > storage_per_hour *
    cache_hours`` (per token; ``storage_per_hour`` is the storage price per token-hour
    divided by the input price per token, from the rules unless given).
    ``rules`` replaces the provider's rules from ``rules.json`` (its ``provider`` must
    be ``provider``): a what-if, or a price the data file does not hold yet.
    ``explicit_cache_messages`` (Gemini) is how many leading messages, in request order,
    an explicit cache the caller made holds; None carries the ``previous`` plan's over
    while its prefix is unchanged.
    ``pinned`` is how many of the first ``messages`` stay at the head of later prompts
    (``WindowPlan.head_count`` of a ``ContextWindow``): under Anthropic's rules a
    breakpoint goes on the last of them that can hold one, once they reach the
    minimum, so a later turn that drops messages after them still reads them all.
    ``now`` is the time of this request (epoch seconds or a ``datetime``; not before the
    ``previous`` plan's): entries of ``previous`` unread for longer than their TTL are
    predicted expired, and the plan records ``now`` for the next. ``expected_gap``
    (seconds to the next request) is the caller's hint for the TTL choice; without it the
    gaps observed so far are used. Anthropic: with ``ttl`` None and a gap to expect, each
    breakpoint gets the cheaper TTL by expected cost (``choose_ttls``); a ``ttl`` given
    applies to all. ``explicit_cache_ttl`` (Gemini) is the lifetime of the explicit cache
    made now (the rules' default, 60 minutes, unless given).
    """
    if rules is None:
        rules = cache_rules(provider, model)
    elif rules.provider != provider:
        raise ValueError(f"rules for {rules.provider!r} given for provider {provider!r}")
    choose = ttl is None
    ttl = ttl or rules.ttls[0]
    if ttl not in rules.ttls:
        raise ValueError(f"{provider} caches for {rules.ttls}, not {ttl!r}")
    at = _seconds(now, "now")
    clock = _clock(at, previous, provider, expected_gap)
    token_counter = get_counter(counter)
    ordered = _request_order(messages, provider)
    prefix: list[int] = []
    total = 0
    for msg in ordered:
        total += cached_count(msg, token_counter)
        prefix.append(total)
    ids = tuple(m.id for m in ordered)
    prints = tuple(_fingerprint(m) for m in ordered)
    shared = _shared_prefix(prints, previous, provider)
    explicit = _explicit_cache(explicit_cache_messages, previous, shared, provider, len(ordered),
                               at)
    expires = _explicit_expiry(explicit, explicit_cache_messages, previous, at, rules,
                               explicit_cache_ttl)
    base = {"rules": rules, "ttl": ttl, "message_ids": ids, "fingerprints": prints,
            "prefix_tokens": tuple(prefix), "pinned": _pinned_prefix(messages, ordered, pinned),
            "at": at, "gaps": clock[0], "assumes_no_expiry": clock[1]}
    if provider == "anthropic":
        expect = clock[2] if choose and len(rules.ttls) > 1 else ()
        return _plan_anthropic(ordered, base, rules, previous, shared, expect)
    if previous is not None and previous.entries and not previous.alive(0, at):
        shared = 0  # the previous prompt's prefix expired unread
    read = rules.cacheable(prefix[shared - 1]) if shared else 0
    pays_off: bool | None = None
    if provider == "gemini":
        storage = (storage_per_hour if storage_per_hour is not None
                   else rules.explicit_storage_per_hour)
        if storage is not None:
            pays_off = (total >= rules.min_tokens and expected_reuses * (1 - rules.read_multiplier)
                        > storage * cache_hours)
    entries = (len(ordered) - 1,) if total >= rules.min_tokens else ()
    return CachePlan(**base, breakpoint_ids=(), entries=entries,  # type: ignore[arg-type]
                     entry_ttls=(ttl,) * len(entries),
                     prompt_cache_key=(prompt_cache_key(session_id)
                                       if provider == "openai" and session_id else None),
                     tokens_read=read, tokens_written=0, tokens_uncached=total - read,
                     explicit_cache_pays_off=pays_off, explicit_cache_messages=explicit,
                     explicit_cache_expires_at=expires)


def _seconds(when: float | datetime | None, name: str) -> float | None:
    """A time as epoch seconds (None stays None)."""
    if when is None:
        return None
    if isinstance(when, datetime):
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"{name} must be epoch seconds or a datetime, not {type(when).__name__}")
    return float(when)


def _clock(at: float | None, previous: CachePlan | None, provider: str,
           expected_gap: float | None) -> tuple[tuple[float, ...], bool, tuple[float, ...]]:
    """``(gaps kept, assumes_no_expiry, gaps to expect)`` for a plan at time ``at``."""
    if expected_gap is not None and not expected_gap >= 0:
        raise ValueError(f"expected_gap must be seconds >= 0, not {expected_gap!r}")
    before = previous if previous is not None and previous.provider == provider else None
    gaps = before.gaps if before is not None else ()
    if at is not None and before is not None and before.at is not None:
        if at < before.at:
            raise ValueError(f"now ({at}) is before the previous plan's time ({before.at})")
        gaps = (*gaps, at - before.at)[-KEPT_GAPS:]
    no_expiry = at is None or (before is not None and before.at is None)
    expect = (expected_gap,) if expected_gap is not None else gaps if at is not None else ()
    return gaps, no_expiry, expect


def _request_order(messages: Sequence[Message], provider: str) -> list[Message]:
    """``messages`` in the order the provider's request holds them: as given for
    OpenAI; system and developer messages first for Anthropic and Gemini, which take
    them out to a field that precedes the turns."""
    if provider == "openai":
        return list(messages)
    return ([m for m in messages if m.role in KEPT_ROLES]
            + [m for m in messages if m.role not in KEPT_ROLES])


def _pinned_prefix(messages: Sequence[Message], ordered: list[Message], pinned: int) -> int:
    """How many leading messages of the request (``ordered``) are among the first
    ``pinned`` of ``messages``: the pinned head in request order (a system message
    given after the head, which the request moves before it, ends it there)."""
    if not 0 <= pinned <= len(messages):
        raise ValueError(f"a pinned head of {pinned} messages, but the prompt has "
                         f"{len(messages)}")
    head = {id(m) for m in messages[:pinned]}
    count = 0
    for msg in ordered:
        if id(msg) not in head:
            break
        count += 1
    return count


def _explicit_cache(given: int | None, previous: CachePlan | None, shared: int, provider: str,
                    count: int, at: float | None) -> int:
    """The plan's ``explicit_cache_messages``: the caller's count, else the previous
    plan's while the prompt still starts with the messages it holds and the cache has
    not expired."""
    if given is None:
        held = previous.explicit_cache_messages if previous is not None else 0
        expires = previous.explicit_cache_expires_at if previous is not None else None
        if at is not None and expires is not None and at > expires:
            return 0
        return held if held <= shared else 0
    if given and provider != "gemini":
        raise ValueError(f"explicit caches are Gemini's, not {provider}'s")
    if not 0 <= given <= count:
        raise ValueError(f"an explicit cache of {given} messages, but the prompt has {count}")
    return given


def _explicit_expiry(explicit: int, given: int | None, previous: CachePlan | None,
                     at: float | None, rules: CacheRules, ttl: float | None) -> float | None:
    """When the plan's explicit cache expires: made now (``given``) at ``now`` plus its
    TTL; carried over from ``previous``; None without a cache or a time."""
    if not explicit:
        return None
    if given is None:
        return previous.explicit_cache_expires_at if previous is not None else None
    lifetime = ttl if ttl is not None else rules.explicit_ttl_seconds
    if ttl is not None and not ttl > 0:
        raise ValueError(f"explicit_cache_ttl must be seconds > 0, not {ttl!r}")
    return None if at is None or lifetime is None else at + lifetime


def _fingerprint(msg: Message) -> str:
    payload = encode([msg.id, msg.role, msg.name, msg.parts, msg.provider_metadata])
    return hashlib.sha256(payload).hexdigest()[:24]


def _shared_prefix(prints: tuple[str, ...], previous: CachePlan | None, provider: str) -> int:
    """How many leading messages the previous plan's prompt shares with this one."""
    if previous is None or previous.provider != provider:
        return 0
    shared = 0
    for now, before in zip(prints, previous.fingerprints, strict=False):
        if now != before:
            break
        shared += 1
    return shared


def anthropic_blocks(msg: Message) -> tuple[int, bool]:
    """How many content blocks ``to_anthropic`` makes of ``msg``, and whether one of
    them can carry ``cache_control`` (thinking blocks cannot)."""
    blocks = 0
    cacheable = False
    for part in msg.parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks += 1
                cacheable = True
        elif isinstance(part, Reasoning):
            if msg.role not in KEPT_ROLES and reasoning_owner(part) == "anthropic":
                blocks += 1
        elif msg.role not in KEPT_ROLES and not isinstance(part, AudioPart):
            blocks += 1  # media, tool calls and tool results: one block each
            cacheable = True  # (a system message's media is never sent)
    return blocks, cacheable


def _plan_anthropic(ordered: list[Message], base: dict[str, object], rules: CacheRules,
                    previous: CachePlan | None, shared: int,
                    expect: tuple[float, ...]) -> CachePlan:
    prefix_tokens: tuple[int, ...] = base["prefix_tokens"]  # type: ignore[assignment]
    last_block: list[int] = []  # each message's last block, counted from 0
    eligible: list[int] = []
    blocks = 0
    for i, msg in enumerate(ordered):
        count, cacheable = anthropic_blocks(msg)
        blocks += count
        last_block.append(blocks - 1)
        if cacheable and prefix_tokens[i] >= rules.min_tokens:
            eligible.append(i)
    pinned: int = base["pinned"]  # type: ignore[assignment]
    valid = _valid_entries(previous, shared, eligible, base["at"])  # type: ignore[arg-type]
    chosen = choose_breakpoints(last_block, eligible, valid,
                                rules.max_breakpoints, rules.lookback_blocks, pinned)
    read_entry = max(valid, default=None)
    read = prefix_tokens[read_entry] if read_entry is not None else 0
    written = prefix_tokens[chosen[-1]] - read if chosen else 0
    total = prefix_tokens[-1] if prefix_tokens else 0
    ttl: str = base["ttl"]  # type: ignore[assignment]
    ttls = (choose_ttls([prefix_tokens[i] for i in chosen], read, [i < pinned for i in chosen],
                        rules, expect) if expect else [ttl] * len(chosen))
    by_ttl: dict[str, int] = {}
    done = read
    for end, chosen_ttl in zip((prefix_tokens[i] for i in chosen), ttls, strict=True):
        if end > done:
            by_ttl[chosen_ttl] = by_ttl.get(chosen_ttl, 0) + end - done
            done = end
    entries = _entries(chosen, ttls, valid, read_entry, previous, base["at"])  # type: ignore[arg-type]
    ids: tuple[str, ...] = base["message_ids"]  # type: ignore[assignment]
    return CachePlan(**base, breakpoint_ids=tuple(ids[i] for i in chosen),  # type: ignore[arg-type]
                     prompt_cache_key=None, entries=tuple(i for i, _, _ in entries),
                     tokens_read=read, tokens_written=written,
                     tokens_uncached=total - read - written, breakpoint_ttls=tuple(ttls),
                     entry_ttls=tuple(t for _, t, _ in entries),
                     entry_at=tuple(w for _, _, w in entries) if base["at"] is not None else (),
                     written_by_ttl=tuple(sorted(by_ttl.items())))


def _entries(chosen: list[int], ttls: list[str], valid: list[int], read_entry: int | None,
             previous: CachePlan | None, at: float | None) -> list[tuple[int, str, float]]:
    """``(index, ttl, last written or read)`` of each entry once this turn is sent: the
    breakpoints (written or renewed now) and, with a clock on both plans, the earlier
    entries still valid (the one read renewed now, the others as they were). Without a
    clock only the breakpoints (the entries not marked again are not counted on)."""
    now = at if at is not None else 0.0
    held = {i: (t, now) for i, t in zip(chosen, ttls, strict=True)}
    if at is not None and previous is not None and previous.at is not None:
        for k, i in enumerate(previous.entries):
            if i in valid and i not in held:
                held[i] = (previous.entry_ttl(k),
                           now if i == read_entry else previous.entry_time(k))
    return [(i, *held[i]) for i in sorted(held)]


def _valid_entries(previous: CachePlan | None, shared: int, eligible: list[int],
                   at: float | None) -> list[int]:
    """The previous turn's entries whose prefix this prompt still has, unexpired at
    ``at``."""
    if previous is None:
        return []
    allowed = set(eligible)
    return [i for k, i in enumerate(previous.entries)
            if i < shared and i in allowed and previous.alive(k, at)]


def choose_ttls(ends: Sequence[int], read: int, in_head: Sequence[bool], rules: CacheRules,
                gaps: Sequence[float]) -> list[str]:
    """Each breakpoint's TTL (Anthropic), by expected cost, the longer ones first.

    ``ends[i]`` is the prefix (tokens) breakpoint i caches, ascending; ``read`` the
    tokens this request reads; ``in_head[i]`` whether it ends in the pinned head. A
    breakpoint's segment (its tokens after the one before) is written now, those after
    ``read`` at the TTL's write multiplier, then read ``HEAD_READS`` times (in the head)
    or once; each later request comes after a gap drawn from ``gaps`` and, if the gap
    outlives the TTL, writes the segment again instead of reading it. Anthropic requires
    the longer TTL before the shorter, so the choice is how many leading breakpoints
    take the longest TTL; a tie keeps the shorter (the default)."""
    short, long = rules.ttls[0], rules.ttls[-1]

    def price(ttl: str, segment: int, written: int, reads: int) -> float:
        write = rules.write_multiplier[ttl]
        missed = sum(g > rules.lifetime(ttl) for g in gaps) / len(gaps)
        later = (1 - missed) * rules.read_multiplier + missed * write
        return written * write + segment * reads * later

    segments = []
    start = 0
    for end, head in zip(ends, in_head, strict=True):
        segments.append((end - start, max(0, end - max(start, read)), HEAD_READS if head else 1))
        start = max(start, end)
    best, best_cost = 0, float("inf")
    for count in range(len(ends) + 1):
        cost = sum(price(long if i < count else short, *segment)
                   for i, segment in enumerate(segments))
        if cost < best_cost - 1e-9:
            best, best_cost = count, cost
    return [long if i < best else short for i in range(len(ends))]


def choose_breakpoints(last_block: Sequence[int], eligible: Sequence[int],
                       entries: Sequence[int], max_breakpoints: int,
                       lookback: int, pinned: int = 0) -> list[int]:
    """Message indexes for the breakpoints, ascending.

    ``last_block[i]`` is message i's last block; ``eligible`` the messages that may
    hold one; ``entries`` the eligible messages the provider holds an entry at;
    ``pinned`` how many leading messages are the caller's pinned head. A breakpoint
    at b reads an entry at e when ``0 <= last_block[b] - last_block[e] < lookback``.
    In order of need: the last eligible message (the next turn's prefix); one within
    reach of the deepest entry (always read); the last eligible message of the pinned
    head (an eviction after it still reads the head: its entry is then the deepest
    valid one, within its own reach); then the rest spread so that no run of
    ``lookback`` blocks lacks one; a spare goes on the first eligible message.
    """
    if not eligible or max_breakpoints < 1:
        return []

    def reach(frm: int, to: int) -> bool:
        return 0 <= last_block[to] - last_block[frm] < lookback

    end = eligible[-1]
    chosen = {end}
    read = max(entries, default=None)
    cur = eligible[0]
    if read is not None:
        cur = max(i for i in eligible if i >= read and reach(read, i))
        if max_breakpoints == 1:
            return [cur]  # reading the entry saves more than writing past it
        chosen.add(cur)
    head = max((i for i in eligible if i < pinned), default=None)
    if head is not None and len(chosen) < max_breakpoints:
        chosen.add(head)
    if read is None and len(chosen) < max_breakpoints:
        chosen.add(cur)
    while len(chosen) < max_breakpoints and not reach(cur, end):
        ahead = [i for i in eligible if i > cur]
        free = [i for i in chosen if i > cur and reach(cur, i)]
        if free:  # a breakpoint already chosen is within reach: step to it
            cur = max(free)
            continue
        within = [i for i in ahead if reach(cur, i)]
        cur = max(within) if within else ahead[0]
        chosen.add(cur)
    if len(chosen) < max_breakpoints:
        chosen.add(eligible[0])  # the opening (the system prompt): survives later edits
    return sorted(chosen)
