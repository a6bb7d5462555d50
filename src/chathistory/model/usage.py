"""What a provider reported for one response: tokens in and out, what its prompt
cache served and wrote, the model and the time taken.

``Usage`` is observation, not content: it rides on the turn's assistant message
(``Message.usage``) so it is stored, exported and read back with it, but it is
never sent to a provider, never counted as tokens of the message and never part
of what an id-reuse check compares (a retry need not repeat it).

The counts are normalised across providers: ``input_tokens`` is the whole prompt
(what was read from cache, what was written to it and the rest), as OpenAI and
Gemini report it; Anthropic's ``input_tokens`` is only the uncached rest, so its
parser adds the cache fields. The parsers live in ``chathistory.formats.usage``.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

from ..errors import InvalidMessage

__all__ = ["Usage"]

_Count = Annotated[int, msgspec.Meta(ge=0)]


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The usage a provider reported for one response (all counts in its tokens)."""

    input_tokens: _Count = 0
    """The whole prompt: cache reads and writes included."""
    output_tokens: _Count = 0
    """Tokens generated (reasoning included where the provider counts it there)."""
    cache_read_tokens: _Count = 0
    """Prompt tokens served from the provider's cache."""
    cache_write_tokens: _Count = 0
    """Prompt tokens written to the provider's cache (Anthropic's cache creation)."""
    cache_write_5m_tokens: _Count | None = None
    """Of ``cache_write_tokens``, those written with a 5-minute TTL, where the
    provider says."""
    cache_write_1h_tokens: _Count | None = None
    """Of ``cache_write_tokens``, those written with a 1-hour TTL, where the
    provider says."""
    model: str | None = None
    """The model that answered, as the provider named it."""
    provider: str | None = None
    """``anthropic``, ``openai``, ``gemini``, or what the caller says."""
    latency_ms: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """Milliseconds from request to complete response, as the caller measured it."""

    def check(self, path: str = "$") -> Usage:
        """Return ``self`` or raise ``InvalidMessage`` naming the bad field: a decode
        checks the counts, a constructor does not."""
        for name in _COUNTS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidMessage(f"expected an integer >= 0, got {value!r}",
                                     f"{path}.{name}")
        for name in ("model", "provider"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise InvalidMessage("expected a string or null", f"{path}.{name}")
        latency = self.latency_ms
        if latency is not None and (isinstance(latency, bool)
                                    or not isinstance(latency, int | float)
                                    or not math.isfinite(latency) or latency < 0):
            raise InvalidMessage(f"expected a number >= 0, got {latency!r}",
                                 f"{path}.latency_ms")
        return self

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens neither read from nor written to the cache."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of the prompt read from cache; None for an empty prompt."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None

    def __add__(self, other: Usage) -> Usage:
        """The sum of two usages' counts (model, provider and latency dropped):
        what a session's total is made of."""
        def both(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_5m_tokens=both(self.cache_write_5m_tokens, other.cache_write_5m_tokens),
            cache_write_1h_tokens=both(self.cache_write_1h_tokens, other.cache_write_1h_tokens),
        )


_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "cache_write_5m_tokens", "cache_write_1h_tokens")
_OPTIONAL = frozenset({"cache_write_5m_tokens", "cache_write_1h_tokens"})
