"""A provider prompt-cache simulator, written from the providers' published documents.

It is the judge of ``python -m bench context``: it does not import ``chathistory.cache``
(the plan it judges), only the rules below, each a small function citing its source.
A request is what the provider sees: its time (seconds) and its blocks in request order,
each with a token count, a content key (equal keys: identical content) and, for
Anthropic, the ``cache_control`` TTL of a breakpoint on it. The simulator keeps the
provider's cache entries between requests and says per request: input tokens not
cached, tokens read from the cache, tokens written to it per TTL, and the cost in the
provider's price units (uncached input tokens = 1).

Sources (read 2026-11-29 through the stored copies of the pages):

- Anthropic, prompt caching: https://platform.claude.com/docs/en/build-with-claude/prompt-caching
  (as quoted by https://portkey.ai/docs/aigw/integrations/llms/anthropic/prompt-caching:
  "By default, the cache has a 5-minute lifetime that refreshes each time cached content
  is used", "1-hour entries must appear before 5-minute entries", "Up to 4 cache
  breakpoints per request", reads 0.1x; writes 1.25x (5m) and 2x (1h), "automatic prefix
  matching up to ~20 content blocks" before a breakpoint; the per-model minimums of
  https://docs.orq.ai/docs/proxy/prompt-caching).
- OpenAI, prompt caching: https://developers.openai.com/api/docs/guides/prompt-caching.md
  ("enabled automatically for prompts that are 1024 tokens or longer", exact prefix
  matches, no fee for writes; hits in 128-token increments) and
  https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching (in-memory
  retention: "typically clears caches within 5 to 10 minutes of inactivity and always
  removes them within one hour"; extended retention ``prompt_cache_retention="24h"``).
  The simulator takes 5 minutes of inactivity (the documented low end) and, for the
  extended policy, 24 hours. Cached input of gpt-5 is billed at 10% of input.
- Gemini, context caching: https://ai.google.dev/gemini-api/docs/caching (implicit
  caching on by default above a per-model minimum: 2,048 for Gemini 2.5 Flash and Pro in
  the latest version of the page) and
  https://docs.cloud.google.com/gemini-enterprise-agent-platform/models/context-cache/context-cache-overview
  (implicit hits 90% off, no storage cost; explicit caches billed for storage per hour,
  created with a TTL, 1 hour when none is given). No lifetime of implicit entries is
  documented ("send requests with a similar prefix in a short amount of time"): the
  simulator assumes OpenAI's 5 minutes and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "AnthropicCache",
    "AutomaticCache",
    "Block",
    "GeminiExplicitCache",
    "Request",
    "Usage",
    "simulator",
]

ANTHROPIC_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
ANTHROPIC_WRITE_MULTIPLIER = {"5m": 1.25, "1h": 2.0}
ANTHROPIC_READ_MULTIPLIER = 0.1
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_LOOKBACK_BLOCKS = 20
ANTHROPIC_MIN_TOKENS = {  # model prefix -> minimum cacheable prefix (orq's table)
    "claude-opus-4-6": 4096, "claude-opus-4-5": 4096, "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 2048, "claude-sonnet-4-5": 1024, "claude-opus-4-1": 1024,
    "claude-sonnet-4": 1024, "claude-3-7-sonnet": 1024, "claude-3-5-haiku": 2048,
}
OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128
OPENAI_RETENTION_SECONDS = {"in_memory": 300.0, "24h": 86_400.0}
OPENAI_READ_MULTIPLIER = {"gpt-5": 0.1, "gpt-4.1": 0.25, "gpt-4o": 0.5}
GEMINI_MIN_TOKENS = {"gemini-2.5-flash": 2048, "gemini-2.5-pro": 2048,
                     "gemini-3": 4096}
GEMINI_READ_MULTIPLIER = 0.1
GEMINI_IMPLICIT_SECONDS = 300.0
GEMINI_EXPLICIT_DEFAULT_TTL = 3600.0


@dataclass(frozen=True, slots=True)
class Block:
    """One content block of a request (Anthropic) or one message / item (OpenAI, Gemini)."""

    tokens: int
    key: str
    """The block's content identity: two blocks with the same key are the same bytes."""
    ttl: str | None = None
    """Anthropic: ``"5m"`` or ``"1h"`` when the block carries ``cache_control``."""


@dataclass(frozen=True, slots=True)
class Request:
    time: float
    blocks: tuple[Block, ...]


@dataclass(slots=True)
class Usage:
    """What the provider bills for one request's input."""

    input_tokens: int  # not read from nor written to the cache
    cache_read: int
    cache_write: dict[str, int] = field(default_factory=dict)  # per TTL
    cost: float = 0.0  # in uncached-input-token units

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_read + sum(self.cache_write.values())


def prefix_keys(blocks: Sequence[Block]) -> tuple[list[int], list[int]]:
    """Each block's prefix (a chained hash of the keys up to and including it) and the
    tokens up to it: a cache hit needs the whole prefix identical (all three providers:
    exact prefix match)."""
    keys: list[int] = []
    tokens: list[int] = []
    running = 0
    total = 0
    for block in blocks:
        running = hash((running, block.key))
        total += block.tokens
        keys.append(running)
        tokens.append(total)
    return keys, tokens


def longest_prefix(model: str, table: dict[str, int], default: int) -> int:
    """The value of the longest key of ``table`` that prefixes ``model``."""
    names = [name for name in table if model.startswith(name)]
    return table[max(names, key=len)] if names else default


# --- Anthropic ------------------------------------------------------------------------


def anthropic_min_tokens(model: str) -> int:
    """The minimum cacheable prompt length: a breakpoint whose prefix is shorter writes
    nothing ("Minimum Token Thresholds", docs.orq.ai quoting Anthropic's table: 4,096
    for Opus 4.5/4.6 and Haiku 4.5, 2,048 for Sonnet 4.6 and Haiku 3.x, 1,024 for the
    others). Unknown models get the highest, 4,096."""
    return longest_prefix(model, ANTHROPIC_MIN_TOKENS, 4096)


def anthropic_check_breakpoints(blocks: Sequence[Block]) -> None:
    """At most 4 breakpoints per request, and 1-hour entries before 5-minute ones
    (Anthropic: "You can mix both TTLs in the same request, but 1-hour entries must
    appear before 5-minute entries"); the API answers a 400 otherwise."""
    ttls = [b.ttl for b in blocks if b.ttl is not None]
    if len(ttls) > ANTHROPIC_MAX_BREAKPOINTS:
        raise ValueError(f"{len(ttls)} cache_control blocks; Anthropic takes at most 4")
    for ttl in ttls:
        if ttl not in ANTHROPIC_TTL_SECONDS:
            raise ValueError(f"unknown ttl {ttl!r}")
    if "5m" in ttls and "1h" in ttls[ttls.index("5m"):]:
        raise ValueError("a 1h breakpoint after a 5m one")


def anthropic_lookup_positions(breakpoint: int) -> range:
    """Where a breakpoint looks for an entry: its own block and the blocks before it, 20
    in all ("the system automatically checks for cache hits at all previous content
    block boundaries (up to approximately 20 blocks before your explicit breakpoint)"),
    longest first."""
    return range(breakpoint, max(-1, breakpoint - ANTHROPIC_LOOKBACK_BLOCKS), -1)


def anthropic_expires(now: float, ttl: str) -> float:
    """An entry lives 5 minutes or 1 hour from its last use: "the cache has a 5-minute
    lifetime that refreshes each time cached content is used" (the 1-hour TTL likewise)."""
    return now + ANTHROPIC_TTL_SECONDS[ttl]


def anthropic_cost(input_tokens: int, read: int, written: dict[str, int]) -> float:
    """Input at 1x, reads at 0.1x, writes at 1.25x (5m) or 2x (1h) of the base input
    price ("Cache reads cost 0.1x the base input token price regardless of TTL")."""
    return (input_tokens + read * ANTHROPIC_READ_MULTIPLIER
            + sum(n * ANTHROPIC_WRITE_MULTIPLIER[t] for t, n in written.items()))


class AnthropicCache:
    """Anthropic's explicit breakpoints: an entry is written at a breakpoint's prefix,
    read by a later breakpoint whose lookback reaches it, while unexpired."""

    provider = "anthropic"

    def __init__(self, model: str = "claude-sonnet-4-6") -> None:
        self.model = model
        self.min_tokens = anthropic_min_tokens(model)
        self.entries: dict[int, tuple[float, str]] = {}  # prefix -> (expiry, ttl)

    def send(self, request: Request) -> Usage:
        blocks, now = request.blocks, request.time
        anthropic_check_breakpoints(blocks)
        keys, tokens = prefix_keys(blocks)
        live = {k: v for k, v in self.entries.items() if v[0] > now}
        self.entries = live
        breakpoints = [i for i, b in enumerate(blocks) if b.ttl is not None]
        read_at = -1
        for b in breakpoints:
            for i in anthropic_lookup_positions(b):
                if keys[i] in live:
                    read_at = max(read_at, i)
                    break
        read = tokens[read_at] if read_at >= 0 else 0
        if read_at >= 0:  # a hit refreshes the entry
            _, ttl = live[keys[read_at]]
            live[keys[read_at]] = (anthropic_expires(now, ttl), ttl)
        written: dict[str, int] = {}
        done = read
        for b in breakpoints:
            ttl = blocks[b].ttl
            assert ttl is not None
            if b <= read_at or tokens[b] < self.min_tokens:
                continue
            if keys[b] not in live:
                written[ttl] = written.get(ttl, 0) + tokens[b] - done
            done = tokens[b]
            live[keys[b]] = (anthropic_expires(now, ttl), ttl)
        total = tokens[-1] if tokens else 0
        input_tokens = total - read - sum(written.values())
        return Usage(input_tokens, read, written, anthropic_cost(input_tokens, read, written))


# --- OpenAI and Gemini implicit: automatic prefix caching -----------------------------


def openai_cached_tokens(shared: int) -> int:
    """Cached tokens of a prompt that shares ``shared`` leading tokens with a live entry:
    none under 1,024, then "in increments of 128 tokens" (1,024, 1,152, 1,280, ...)."""
    if shared < OPENAI_MIN_TOKENS:
        return 0
    return OPENAI_MIN_TOKENS + (shared - OPENAI_MIN_TOKENS) // OPENAI_INCREMENT * OPENAI_INCREMENT


def openai_read_multiplier(model: str) -> float:
    """Cached input's price over input's (OpenAI's pricing: gpt-5 $0.125 / $1.25 per
    million, gpt-4.1 25%, gpt-4o 50%); unknown models get the least discount, 50%."""
    return longest_prefix(model, OPENAI_READ_MULTIPLIER, 0.5)


def openai_retention(policy: str) -> float:
    """How long an unused prefix stays: in-memory retention "clears caches within 5 to
    10 minutes of inactivity" (taken as 5 minutes, the low end); ``"24h"`` is the
    extended retention (``prompt_cache_retention``)."""
    return OPENAI_RETENTION_SECONDS[policy]


def gemini_min_tokens(model: str) -> int:
    """Implicit caching's minimum input ("Min token limit": 2,048 for Gemini 2.5 Flash
    and Pro, 4,096 for the 3.x models, in the latest version of the page)."""
    return longest_prefix(model, GEMINI_MIN_TOKENS, 4096)


class AutomaticCache:
    """Automatic prefix caching (OpenAI; Gemini's implicit caching): every prompt is
    held once sent; a later prompt reads its longest prefix shared with a live one; an
    entry lives ``lifetime`` seconds after its last use; writes cost nothing extra."""

    def __init__(self, provider: str, model: str, *, lifetime: float, min_tokens: int,
                 increment: int, read_multiplier: float) -> None:
        self.provider, self.model = provider, model
        self.lifetime, self.min_tokens, self.increment = lifetime, min_tokens, increment
        self.read_multiplier = read_multiplier
        self.last_used: dict[int, float] = {}

    def cacheable(self, shared: int) -> int:
        if shared < self.min_tokens:
            return 0
        return self.min_tokens + (shared - self.min_tokens) // self.increment * self.increment

    def send(self, request: Request) -> Usage:
        now = request.time
        self.last_used = {k: t for k, t in self.last_used.items() if now - t < self.lifetime}
        keys, tokens = prefix_keys(request.blocks)
        shared = next((tokens[i] for i in range(len(keys) - 1, -1, -1)
                       if keys[i] in self.last_used), 0)
        read = self.cacheable(shared)
        total = tokens[-1] if tokens else 0
        if total >= self.min_tokens:
            for k in keys:  # the prompt is held, and its prefixes were used now
                self.last_used[k] = now
        input_tokens = total - read
        return Usage(input_tokens, read, {}, input_tokens + read * self.read_multiplier)


def openai_cache(model: str = "gpt-5", retention: str = "in_memory") -> AutomaticCache:
    return AutomaticCache("openai", model, lifetime=openai_retention(retention),
                          min_tokens=OPENAI_MIN_TOKENS, increment=OPENAI_INCREMENT,
                          read_multiplier=openai_read_multiplier(model))


def gemini_implicit_cache(model: str = "gemini-2.5-flash") -> AutomaticCache:
    """Implicit caching: 90% off cached tokens, no storage cost, any prefix length above
    the minimum (no increment documented); the lifetime is assumed (module docstring)."""
    return AutomaticCache("gemini", model, lifetime=GEMINI_IMPLICIT_SECONDS,
                          min_tokens=gemini_min_tokens(model), increment=1,
                          read_multiplier=GEMINI_READ_MULTIPLIER)


class GeminiExplicitCache:
    """An explicit Gemini cache (``client.caches.create``): its tokens are billed once as
    input when made, then for storage per hour until it expires (``ttl``, 1 hour by
    default), and read at the discount by each request naming it while it lives; a
    request naming an expired cache is refused."""

    def __init__(self, created: float, tokens: int, ttl: float = GEMINI_EXPLICIT_DEFAULT_TTL,
                 storage_per_token_hour: float = 0.0) -> None:
        self.created, self.tokens, self.expires = created, tokens, created + ttl
        self.storage_per_token_hour = storage_per_token_hour

    def creation_cost(self) -> float:
        """Creation bills the input at the standard price, plus storage for the TTL."""
        hours = (self.expires - self.created) / 3600
        return self.tokens * (1 + self.storage_per_token_hour * hours)

    def read(self, now: float, other_tokens: int) -> Usage:
        if now >= self.expires:
            raise ValueError("the explicit cache expired")
        return Usage(other_tokens, self.tokens, {},
                     other_tokens + self.tokens * GEMINI_READ_MULTIPLIER)


def simulator(provider: str, model: str) -> AnthropicCache | AutomaticCache:
    """A fresh cache for ``provider`` (``anthropic``, ``openai``, ``gemini`` implicit)."""
    if provider == "anthropic":
        return AnthropicCache(model)
    if provider == "openai":
        return openai_cache(model)
    if provider == "gemini":
        return gemini_implicit_cache(model)
    raise ValueError(f"no simulator for {provider!r}")
