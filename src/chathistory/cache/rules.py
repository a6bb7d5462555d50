"""Each provider's prompt-cache rules, read from ``rules.json`` beside this module.

The data file holds, per provider, a conservative ``default`` and per-model entries
matched by the longest prefix of the model name (``claude-sonnet-4-5-20250929``
matches ``claude-sonnet-4-5``); each entry names its ``source`` and the day it was
read (``read_on``). A model that matches no entry gets the provider's default.
Each entry also says how long a cache entry lives (``ttl_seconds`` per TTL, renewed by
a read when ``refresh_on_hit``), with the source of those figures (``ttl_source``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["PROVIDERS", "CacheRules", "cache_rules"]

PROVIDERS = ("anthropic", "openai", "gemini")
"""Providers with rules: ``plan_cache`` takes one of these names."""


@dataclass(frozen=True, slots=True)
class CacheRules:
    """What one provider caches for one model.

    Multipliers are of the base input-token price: ``read_multiplier`` for a token
    read from the cache, ``write_multiplier[ttl]`` for a token written to it.
    """

    provider: str
    model: str | None
    """The entry's model prefix, or None for the provider's default."""
    min_tokens: int
    """The shortest prefix the provider caches."""
    increment: int
    """Cached prefixes are ``min_tokens + k * increment`` long (1: any length)."""
    read_multiplier: float
    write_multiplier: dict[str, float]
    ttls: tuple[str, ...]
    """The cache lifetimes one can ask for (``5m``, ``1h``); the first is the default."""
    source: str
    read_on: str
    max_breakpoints: int = 0
    """Anthropic: ``cache_control`` blocks one request takes (0: no breakpoints)."""
    lookback_blocks: int = 0
    """Anthropic: blocks a breakpoint looks back over for an earlier cache entry."""
    explicit_storage_per_hour: float | None = None
    """Gemini: an explicit cache's storage price per token-hour, in input tokens."""
    ttl_seconds: dict[str, float] = field(default_factory=dict)
    """How long an entry of each TTL lives after it was last written (or read, when
    ``refresh_on_hit``); a TTL missing here never expires."""
    refresh_on_hit: bool = True
    """Whether a read renews an entry's life (Anthropic: at no cost)."""
    explicit_ttl_seconds: float | None = None
    """Gemini: an explicit cache's default lifetime from its creation."""
    note: str = field(default="", compare=False)

    def lifetime(self, ttl: str) -> float:
        """Seconds an entry of ``ttl`` lives unread (infinite when the rules give none)."""
        return self.ttl_seconds.get(ttl, float("inf"))

    def cacheable(self, tokens: int) -> int:
        """The longest cacheable prefix of a ``tokens``-long shared prefix (0 below the
        minimum): ``min_tokens + k * increment``, rounded down."""
        if tokens < self.min_tokens:
            return 0
        return self.min_tokens + (tokens - self.min_tokens) // self.increment * self.increment


@cache
def _data() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("rules.json").read_text(encoding="utf-8")
    providers: dict[str, Any] = json.loads(text)["providers"]
    return providers


def cache_rules(provider: str, model: str | None = None) -> CacheRules:
    """The rules for ``model`` of ``provider``: the entry whose name is the longest
    prefix of ``model``, over the provider's default; the default when none matches.
    An unknown provider raises ``ValueError``."""
    data = _data().get(provider)
    if data is None:
        raise ValueError(f"no cache rules for provider {provider!r}: use one of {PROVIDERS}")
    entry = dict(data["default"])
    matched: str | None = None
    if model:
        names = [name for name in data["models"] if model.startswith(name)]
        if names:
            matched = max(names, key=len)
            entry.update(data["models"][matched])
    return CacheRules(
        provider=provider, model=matched, min_tokens=entry["min_tokens"],
        increment=entry["increment"], read_multiplier=entry["read_multiplier"],
        write_multiplier=dict(entry["write_multiplier"]), ttls=tuple(entry["ttls"]),
        source=entry["source"], read_on=entry["read_on"],
        max_breakpoints=entry.get("max_breakpoints", 0),
        lookback_blocks=entry.get("lookback_blocks", 0),
        explicit_storage_per_hour=entry.get("explicit_storage_per_hour"),
        ttl_seconds={k: float(v) for k, v in entry.get("ttl_seconds", {}).items()},
        refresh_on_hit=entry.get("refresh_on_hit", True),
        explicit_ttl_seconds=entry.get("explicit_ttl_seconds"),
        note=entry.get("note", ""))
