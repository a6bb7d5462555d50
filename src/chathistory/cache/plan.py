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

Token counts come from ``chathistory.tokens`` (``cached_count``): the counter's
per-message accounting, so the plan's numbers are estimates of the provider's.
Tool definitions, which precede the messages in a request, are not modelled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import NotFound
from ..formats._common import reasoning_owner
from ..model import KEPT_ROLES, AudioPart, Message, Reasoning, TextPart
from ..model.codec import encode
from ..tokens import TokenCounter, cached_count, get_counter
from .rules import CacheRules, cache_rules

__all__ = ["CachePlan", "plan_cache", "prompt_cache_key"]


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
        ``read * read_multiplier + written * write_multiplier + uncached``."""
        return (self.tokens_read * self.read_multiplier
                + self.tokens_written * self.write_multiplier + self.tokens_uncached)

    def cached_tokens(self) -> int:
        """Tokens the provider holds for this prompt once the turn is sent."""
        if not self.entries:
            return 0
        return self._entry_tokens(max(self.entries))

    def invalidated_by(self, message_id: str) -> int:
        """Cached tokens that editing (or removing) ``message_id`` would lose: what the
        provider holds after this turn, less the longest entry ending before it.
        Raises ``NotFound`` for a message not in the prompt."""
        try:
            index = self.message_ids.index(message_id)
        except ValueError:
            raise NotFound(f"message {message_id!r} is not in the planned prompt") from None
        if self.rules.max_breakpoints:  # entries only where breakpoints were
            kept = max((self._entry_tokens(i) for i in self.entries if i < index), default=0)
        else:  # automatic caching matches any prefix, in increments
            kept = self.rules.cacheable(self.prefix_tokens[index - 1]) if index else 0
        return self.cached_tokens() - kept

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
    """
    if rules is None:
        rules = cache_rules(provider, model)
    elif rules.provider != provider:
        raise ValueError(f"rules for {rules.provider!r} given for provider {provider!r}")
    ttl = ttl or rules.ttls[0]
    if ttl not in rules.ttls:
        raise ValueError(f"{provider} caches for {rules.ttls}, not {ttl!r}")
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
    explicit = _explicit_cache(explicit_cache_messages, previous, shared, provider, len(ordered))
    base = {"rules": rules, "ttl": ttl, "message_ids": ids, "fingerprints": prints,
            "prefix_tokens": tuple(prefix), "pinned": _pinned_prefix(messages, ordered, pinned)}
    if provider == "anthropic":
        return _plan_anthropic(ordered, base, rules, previous, shared)
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
                     prompt_cache_key=(prompt_cache_key(session_id)
                                       if provider == "openai" and session_id else None),
                     tokens_read=read, tokens_written=0, tokens_uncached=total - read,
                     explicit_cache_pays_off=pays_off, explicit_cache_messages=explicit)


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
                    count: int) -> int:
    """The plan's ``explicit_cache_messages``: the caller's count, else the previous
    plan's while the prompt still starts with the messages it holds."""
    if given is None:
        held = previous.explicit_cache_messages if previous is not None else 0
        return held if held <= shared else 0
    if given and provider != "gemini":
        raise ValueError(f"explicit caches are Gemini's, not {provider}'s")
    if not 0 <= given <= count:
        raise ValueError(f"an explicit cache of {given} messages, but the prompt has {count}")
    return given


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
                    previous: CachePlan | None, shared: int) -> CachePlan:
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
    chosen = choose_breakpoints(last_block, eligible, _valid_entries(previous, shared, eligible),
                                rules.max_breakpoints, rules.lookback_blocks, pinned)
    read_entry = max(_valid_entries(previous, shared, eligible), default=None)
    read = prefix_tokens[read_entry] if read_entry is not None else 0
    written = prefix_tokens[chosen[-1]] - read if chosen else 0
    total = prefix_tokens[-1] if prefix_tokens else 0
    ids: tuple[str, ...] = base["message_ids"]  # type: ignore[assignment]
    return CachePlan(**base, breakpoint_ids=tuple(ids[i] for i in chosen),  # type: ignore[arg-type]
                     prompt_cache_key=None, entries=tuple(chosen), tokens_read=read,
                     tokens_written=written, tokens_uncached=total - read - written)


def _valid_entries(previous: CachePlan | None, shared: int, eligible: list[int]) -> list[int]:
    """The previous turn's entries whose prefix this prompt still has."""
    if previous is None:
        return []
    allowed = set(eligible)
    return [i for i in previous.entries if i < shared and i in allowed]


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
