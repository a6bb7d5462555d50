"""The request fields a cache plan adds beside the messages, and the check that a plan
fits the messages it is sent with.

OpenAI's ``prompt_cache_key`` (and ``prompt_cache_retention`` for the 24-hour TTL) is a
field of the request (Chat Completions and Responses alike), not of a message, so the
encoders of messages cannot carry it: ``cache_request_fields(plan)`` gives the fields
to spread into the request (the request builders of ``chathistory.formats.requests`` do
so). Anthropic's breakpoints
go on blocks (``to_anthropic(messages, cache_plan=plan)``) and Gemini's implicit
cache needs no field, so both give ``{}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidMessage

if TYPE_CHECKING:
    from ..cache import CachePlan
    from ..model import Message

__all__ = ["cache_request_fields", "check_cache_plan"]


def cache_request_fields(plan: CachePlan) -> dict[str, Any]:
    """``{"prompt_cache_key": ...}`` for an OpenAI plan made with a session id, and
    ``"prompt_cache_retention": "24h"`` for one made with ``ttl="24h"``; else ``{}``:
    ``client.chat.completions.create(model=..., messages=...,
    **cache_request_fields(plan))``, the same for ``client.responses.create``."""
    fields: dict[str, Any] = {}
    if plan.provider == "openai" and plan.prompt_cache_key is not None:
        fields["prompt_cache_key"] = plan.prompt_cache_key
    if plan.provider == "openai" and plan.ttl == "24h":  # extended retention
        fields["prompt_cache_retention"] = "24h"
    return fields


def check_cache_plan(plan: CachePlan, messages: Sequence[Message], provider: str) -> None:
    """Raise ``InvalidMessage`` at ``$.cache_plan`` unless ``plan`` is for ``provider``
    and was made for ``messages`` (they start with the planned prompt, content and ids
    alike): a plan sent with other messages would place breakpoints or promise a
    cached prefix that the request does not have."""
    if plan.provider != provider:
        raise InvalidMessage(f"a cache plan for {plan.provider}, not {provider}", "$.cache_plan")
    at = plan.diverges_at(messages)
    if at is None:
        return
    if at == len(messages):
        reason = f"the messages end before the planned prompt's message {at}"
    else:
        reason = f"the messages differ from the planned prompt at its message {at}"
    raise InvalidMessage(f"{reason} ({plan.message_ids[at]!r}): the cache plan was made for "
                         "other messages", "$.cache_plan")
