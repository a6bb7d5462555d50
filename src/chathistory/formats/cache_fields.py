"""The request fields a cache plan adds beside the messages.

OpenAI's ``prompt_cache_key`` is a field of the request (Chat Completions and
Responses alike), not of a message, so the encoders of messages cannot carry it:
``cache_request_fields(plan)`` gives the fields to spread into the request.
Anthropic's breakpoints go on blocks (``to_anthropic(messages, cache_plan=plan)``)
and Gemini's implicit cache needs no field, so both give ``{}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cache import CachePlan

__all__ = ["cache_request_fields"]


def cache_request_fields(plan: CachePlan) -> dict[str, Any]:
    """``{"prompt_cache_key": ...}`` for an OpenAI plan made with a session id, else
    ``{}``: ``client.chat.completions.create(model=..., messages=...,
    **cache_request_fields(plan))``, the same for ``client.responses.create``."""
    if plan.provider == "openai" and plan.prompt_cache_key is not None:
        return {"prompt_cache_key": plan.prompt_cache_key}
    return {}
