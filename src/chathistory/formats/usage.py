"""A provider's usage report as a ``Usage``: Anthropic, OpenAI Chat Completions,
OpenAI Responses and Gemini.

Each reader takes the usage object or the whole response, as a dict (the REST
JSON, or ``model_dump()``) or as the SDK's object, and reads only the fields it
names; a field the provider left out counts 0. Counts are normalised as
``Usage`` says: ``input_tokens`` is the whole prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ..errors import InvalidMessage
from ..model import Message, Usage

__all__ = [
    "record_usage",
    "usage_from_anthropic",
    "usage_from_gemini",
    "usage_from_openai_chat",
    "usage_from_openai_responses",
    "usage_from_response",
]


def _get(obj: Any, *names: str) -> Any:
    """The first of ``names`` ``obj`` holds (a key of a mapping or an attribute)."""
    if obj is None:
        return None
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _count(obj: Any, path: str, *names: str) -> int:
    value = _get(obj, *names)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidMessage(f"expected a count (an integer >= 0), got {value!r}",
                             f"{path}.{names[0]}")
    return value


def _split(obj: Any, key: str) -> tuple[Any, str | None]:
    """The usage object of ``obj`` (itself when it is one) and the response's model."""
    inner = _get(obj, key)
    if inner is None:
        return obj, None
    model = _get(obj, "model", "model_version", "modelVersion")
    return inner, model if isinstance(model, str) else None


def _model(model: str | None, found: str | None) -> str | None:
    return model if model is not None else found


def usage_from_anthropic(obj: Any, *, model: str | None = None,
                         latency_ms: float | None = None) -> Usage:
    """From an Anthropic ``Message`` or its ``usage`` (``input_tokens``,
    ``output_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``,
    ``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``)."""
    usage, found = _split(obj, "usage")
    path = "$.usage"
    read = _count(usage, path, "cache_read_input_tokens")
    write = _count(usage, path, "cache_creation_input_tokens")
    creation = _get(usage, "cache_creation")
    five = one = None
    if creation is not None:
        five = _count(creation, path + ".cache_creation", "ephemeral_5m_input_tokens")
        one = _count(creation, path + ".cache_creation", "ephemeral_1h_input_tokens")
    return Usage(
        input_tokens=_count(usage, path, "input_tokens") + read + write,
        output_tokens=_count(usage, path, "output_tokens"),
        cache_read_tokens=read, cache_write_tokens=write,
        cache_write_5m_tokens=five, cache_write_1h_tokens=one,
        model=_model(model, found), provider="anthropic", latency_ms=latency_ms)


def usage_from_openai_chat(obj: Any, *, model: str | None = None,
                           latency_ms: float | None = None) -> Usage:
    """From a Chat Completions response or its ``usage`` (``prompt_tokens``,
    ``completion_tokens``, ``prompt_tokens_details.cached_tokens`` and, where the
    SDK has it, ``.cache_write_tokens``)."""
    usage, found = _split(obj, "usage")
    details = _get(usage, "prompt_tokens_details")
    return Usage(
        input_tokens=_count(usage, "$.usage", "prompt_tokens"),
        output_tokens=_count(usage, "$.usage", "completion_tokens"),
        cache_read_tokens=_count(details, "$.usage.prompt_tokens_details", "cached_tokens"),
        cache_write_tokens=_count(details, "$.usage.prompt_tokens_details",
                                  "cache_write_tokens"),
        model=_model(model, found), provider="openai", latency_ms=latency_ms)


def usage_from_openai_responses(obj: Any, *, model: str | None = None,
                                latency_ms: float | None = None) -> Usage:
    """From a Responses API response or its ``usage`` (``input_tokens``,
    ``input_tokens_details.cached_tokens`` and ``.cache_write_tokens``,
    ``output_tokens``)."""
    usage, found = _split(obj, "usage")
    details = _get(usage, "input_tokens_details")
    return Usage(
        input_tokens=_count(usage, "$.usage", "input_tokens"),
        output_tokens=_count(usage, "$.usage", "output_tokens"),
        cache_read_tokens=_count(details, "$.usage.input_tokens_details", "cached_tokens"),
        cache_write_tokens=_count(details, "$.usage.input_tokens_details",
                                  "cache_write_tokens"),
        model=_model(model, found), provider="openai", latency_ms=latency_ms)


def usage_from_gemini(obj: Any, *, model: str | None = None,
                      latency_ms: float | None = None) -> Usage:
    """From a ``GenerateContentResponse`` or its ``usage_metadata``
    (``prompt_token_count``, ``cached_content_token_count``,
    ``candidates_token_count``; ``tool_use_prompt_token_count`` is input and
    ``thoughts_token_count`` output, as ``total_token_count`` adds them); the REST
    JSON's camelCase names are read too."""
    usage, found = _split(obj, "usage_metadata")
    if found is None and usage is obj:
        usage, found = _split(obj, "usageMetadata")
    path = "$.usage_metadata"
    return Usage(
        input_tokens=(_count(usage, path, "prompt_token_count", "promptTokenCount")
                      + _count(usage, path, "tool_use_prompt_token_count",
                               "toolUsePromptTokenCount")),
        output_tokens=(_count(usage, path, "candidates_token_count", "candidatesTokenCount")
                       + _count(usage, path, "thoughts_token_count", "thoughtsTokenCount")),
        cache_read_tokens=_count(usage, path, "cached_content_token_count",
                                 "cachedContentTokenCount"),
        model=_model(model, found), provider="gemini", latency_ms=latency_ms)


def usage_from_response(obj: Any, *, model: str | None = None,
                        latency_ms: float | None = None) -> Usage | None:
    """The usage of a response of any of the four, told apart by its field names;
    None when ``obj`` holds no usage this module knows."""
    if isinstance(obj, Usage):
        return obj
    gemini = _get(obj, "usage_metadata", "usageMetadata")
    if gemini is not None or _get(obj, "prompt_token_count", "promptTokenCount") is not None:
        return usage_from_gemini(obj, model=model, latency_ms=latency_ms)
    usage, _ = _split(obj, "usage")
    if _get(usage, "prompt_tokens", "completion_tokens") is not None:
        return usage_from_openai_chat(obj, model=model, latency_ms=latency_ms)
    if _get(usage, "input_tokens_details") is not None:
        return usage_from_openai_responses(obj, model=model, latency_ms=latency_ms)
    if _get(usage, "input_tokens", "output_tokens") is None:
        return None
    if (_get(usage, "cache_read_input_tokens", "cache_creation_input_tokens",
             "cache_creation") is not None or _get(obj, "type") == "message"):
        return usage_from_anthropic(obj, model=model, latency_ms=latency_ms)
    return usage_from_openai_responses(obj, model=model, latency_ms=latency_ms)


def record_usage(messages: Iterable[Message], usage: Any, *, model: str | None = None,
                 latency_ms: float | None = None) -> list[Message]:
    """``messages`` with ``usage`` (a ``Usage``, or a response or usage object that
    ``usage_from_response`` reads) on the last assistant message among them, when that
    message has none yet; the others as they are. A ``usage`` that holds no usage
    this module knows changes nothing."""
    out = list(messages)
    observed = usage_from_response(usage, model=model, latency_ms=latency_ms)
    if observed is None:
        return out
    observed.check("$.usage")
    for i in range(len(out) - 1, -1, -1):
        if out[i].role == "assistant":
            if out[i].usage is None:
                out[i] = msgspec.structs.replace(out[i], usage=observed)
            break
    return out
