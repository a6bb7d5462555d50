"""What a provider's observed usage cost, by the same rules the plan predicts with.

A prompt's input cost is counted in base input tokens (the rules' multipliers are
of the base input price, and no absolute price is kept): the uncached tokens at 1,
cache reads at ``read_multiplier`` and cache writes at ``write_multiplier`` of their
TTL. Divided by the prompt's tokens it is the cost relative to no caching.
"""

from __future__ import annotations

from ..model import Usage
from .rules import PROVIDERS, cache_rules

__all__ = ["input_cost"]


def input_cost(usage: Usage, provider: str | None = None) -> float | None:
    """``usage``'s input cost in base input tokens by ``provider``'s rules for its model
    (``provider`` defaults to ``usage.provider``); None for a provider without rules.
    Writes with no TTL split are priced at the provider's default TTL."""
    name = provider or usage.provider
    if name not in PROVIDERS:
        return None
    rules = cache_rules(name, usage.model)
    write = rules.write_multiplier
    default = write[rules.ttls[0]]
    one_hour = usage.cache_write_1h_tokens or 0
    five = (usage.cache_write_5m_tokens if usage.cache_write_5m_tokens is not None
            else usage.cache_write_tokens - one_hour)
    written = five * default + one_hour * write.get("1h", default)
    return (usage.uncached_input_tokens + usage.cache_read_tokens * rules.read_multiplier
            + written)
