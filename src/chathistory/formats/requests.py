"""Whole requests, with their cache plan: the keyword arguments of each SDK's create call.

A cache plan touches the request, not only its messages: OpenAI's
``prompt_cache_key`` and Gemini's ``cached_content`` are fields of the request, so
the list encoders (``to_openai_chat``, ``to_openai_responses``) cannot carry them.
Each builder here encodes the messages with its provider's ``to_*`` (which checks the
plan is that provider's and was made for these messages) and adds the fields:

- ``openai_chat_request``: ``client.chat.completions.create(**request)``;
- ``openai_responses_request``: ``client.responses.create(**request)``;
- ``anthropic_request``: ``client.messages.create(**request)``, breakpoints on blocks;
- ``gemini_request``: ``client.models.generate_content(**request)``, with
  ``config.cached_content`` for an explicit cache and without the messages it holds.

The caller adds the rest (tools, temperature, ...) to the dict. No HTTP inside.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, TypedDict, Unpack

from ..errors import InvalidMessage
from ._common import JSON, Options, Resolver, RoleMap
from .anthropic import to_anthropic
from .cache_fields import cache_request_fields, check_cache_plan
from .gemini import encode_request
from .openai_chat import to_openai_chat
from .openai_responses import to_openai_responses

if TYPE_CHECKING:
    from ..cache import CachePlan
    from ..model import Message

__all__ = ["anthropic_request", "gemini_request", "openai_chat_request",
           "openai_responses_request"]


class EncoderOptions(TypedDict, total=False):
    """The options every encoder takes (see ``chathistory.formats``)."""

    resolver: Resolver | None
    role_map: RoleMap | None
    drop_unsupported: bool


class AnthropicOptions(EncoderOptions, total=False):
    """``to_anthropic``'s options besides the cache plan."""

    cache_breakpoint_id: str | Collection[str] | None
    keep_cache_control: bool


def openai_chat_request(messages: Sequence[Message], *, model: str,
                        cache_plan: CachePlan | None = None,
                        **options: Unpack[EncoderOptions]) -> JSON:
    """``{"model", "messages", "prompt_cache_key"}`` for Chat Completions; the key only
    when ``cache_plan`` has one (a plan made with a session id). The options are
    ``to_openai_chat``'s."""
    encoded = to_openai_chat(messages, cache_plan=cache_plan, **options)
    return _with_key({"model": model, "messages": encoded}, cache_plan)


def openai_responses_request(messages: Sequence[Message], *, model: str,
                             cache_plan: CachePlan | None = None,
                             **options: Unpack[EncoderOptions]) -> JSON:
    """``{"model", "input", "prompt_cache_key"}`` for the Responses API; the key only
    when ``cache_plan`` has one. The options are ``to_openai_responses``'s."""
    encoded = to_openai_responses(messages, cache_plan=cache_plan, **options)
    return _with_key({"model": model, "input": encoded}, cache_plan)


def _with_key(request: JSON, plan: CachePlan | None) -> JSON:
    return request if plan is None else {**request, **cache_request_fields(plan)}


def anthropic_request(messages: Sequence[Message], *, model: str, max_tokens: int,
                      cache_plan: CachePlan | None = None,
                      **options: Unpack[AnthropicOptions]) -> JSON:
    """``{"model", "max_tokens", "system", "messages"}`` for the Messages API
    (``system`` only when there is one), the plan's breakpoints on their blocks. The
    options are ``to_anthropic``'s (``cache_breakpoint_id``, ``keep_cache_control``
    too)."""
    encoded = to_anthropic(messages, cache_plan=cache_plan, **options)
    request: JSON = {"model": model, "max_tokens": max_tokens}
    if "system" in encoded:
        request["system"] = encoded["system"]
    return {**request, "messages": encoded["messages"]}


def gemini_request(messages: Sequence[Message], *, model: str,
                   cache_plan: CachePlan | None = None, cached_content: str | None = None,
                   send_call_ids: bool = False, **options: Unpack[EncoderOptions]) -> JSON:
    """``{"model", "contents", "config"}``, the keyword arguments of google-genai's
    ``client.models.generate_content``; ``config`` holds the ``system_instruction``.

    ``cached_content`` names an explicit cache the caller made (``"cachedContents/..."``,
    from ``client.caches.create``) of the first ``cache_plan.explicit_cache_messages``
    messages in request order (system first): ``config`` gets ``cached_content`` and
    ``contents`` leaves those messages out. Gemini refuses a ``system_instruction``
    beside a cache, so the cache must hold every system message. Raises
    ``InvalidMessage`` at ``$.cache_plan`` when the plan is not Gemini's or not made
    for ``messages``, when ``cached_content`` comes without a plan holding an explicit
    cache, or when a system message or nothing at all is left after the cached
    messages. The other options are ``to_gemini``'s.
    """
    opts = Options(**options)
    cached_ids: Sequence[str] = ()
    if cache_plan is not None:
        check_cache_plan(cache_plan, messages, "gemini")
    if cached_content is not None:
        if cache_plan is None or not cache_plan.explicit_cache_messages:
            raise InvalidMessage(
                "cached_content needs a cache plan saying which messages the cache holds "
                "(plan_cache(..., explicit_cache_messages=n))", "$.cache_plan")
        cached_ids = cache_plan.message_ids[:cache_plan.explicit_cache_messages]
    encoded = encode_request(messages, opts, send_call_ids, cached_ids)
    config: JSON = {}
    if cached_content is not None:
        if "system_instruction" in encoded:
            raise InvalidMessage("a system message is not in the explicit cache, and a request "
                                 "with cached_content takes no system_instruction",
                                 "$.cache_plan")
        if not encoded["contents"]:
            raise InvalidMessage("the explicit cache holds every message: nothing is left "
                                 "to send", "$.cache_plan")
        config["cached_content"] = cached_content
    elif "system_instruction" in encoded:
        config["system_instruction"] = encoded["system_instruction"]
    return {"model": model, "contents": encoded["contents"], "config": config}
