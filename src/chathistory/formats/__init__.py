"""Provider adapters: pure functions between chathistory messages and the request
payloads of OpenAI (Chat Completions, Responses), Anthropic and Gemini.

Each ``to_*`` takes ``Sequence[Message]`` and returns JSON-ready dicts for the
provider's SDK or REST API; each ``from_*`` reads such payloads (or response
items as dicts) back. No HTTP inside: stored attachments are loaded by the
caller's ``resolver``.

Rules every adapter follows:

- Roles: ``system``, ``developer``, ``user``, ``assistant`` and ``tool`` are
  canonical. Any other role (``agent``, ``mcp_response``) must be mapped with
  ``role_map={"agent": "assistant"}``, else ``InvalidMessage`` at ``$[i].role``.
  ``role_map`` may also rename a canonical role (``{"developer": "system"}``).
- Nothing is dropped silently: a part the provider cannot carry raises
  ``InvalidMessage`` naming its path (``$[3].parts[1]``) unless the caller
  passes ``drop_unsupported=True``. The documented exceptions are fields with no
  place in the provider's request (``Message.name`` outside Chat Completions,
  ``is_error`` for OpenAI, file names for Gemini) and reasoning, which is replayed
  only to the provider that produced it (its signature or encryption is valid
  nowhere else; Chat Completions takes none).
- Stored attachments (``attachment.data is None``) go through
  ``resolver(attachment) -> bytes | str | dict``: bytes are sent inline, a str is a
  URL (or data URL), a dict names a file the provider holds (``{"file_id": ...}``
  for OpenAI and Anthropic, ``{"file_uri": ..., "mime_type": ...}`` for Gemini).
  Without a resolver: ``InvalidMessage`` at ``$[i].parts[j].attachment.data``.
- A media part's ``url`` may be ``openai-file:<id>`` / ``anthropic-file:<id>`` for a
  file uploaded to that provider; decoding gives the same form.
- What must be echoed back to a provider (item ids, signatures, annotations,
  Anthropic ``cache_control``) is kept in ``provider_metadata[<format>]`` with
  format ``openai_chat``, ``openai_responses``, ``anthropic`` or ``gemini``.
- Tool-call arguments are kept as the model emitted them (``ToolCall.raw_arguments``)
  whatever they hold, and OpenAI formats send that very string back. Anthropic and
  Gemini take an object: arguments that are not a JSON object go to them as
  ``{"INVALID_JSON": "<string>"}`` (read back as the string).
- A cache plan (``chathistory.cache.plan_cache``) goes to the encoders as
  ``cache_plan=``, which refuse a plan for another provider or for other messages
  (``InvalidMessage`` at ``$.cache_plan``). OpenAI's ``prompt_cache_key`` and Gemini's
  ``cached_content`` are request fields, not message fields: the request builders
  (``openai_chat_request``, ``openai_responses_request``, ``anthropic_request``,
  ``gemini_request``) return the whole create call's keyword arguments.
- A response's usage report is read by ``usage_from_*`` (or ``usage_from_response``,
  which tells the four apart) into a ``Usage`` for ``Message.usage``; no encoder
  sends it.
"""

from ._common import Resolver, RoleMap
from .anthropic import from_anthropic, to_anthropic
from .cache_fields import cache_request_fields
from .gemini import from_gemini, to_gemini
from .openai_chat import from_openai_chat, to_openai_chat
from .openai_responses import from_openai_responses, to_openai_responses
from .requests import (
    anthropic_request,
    gemini_request,
    openai_chat_request,
    openai_responses_request,
)
from .usage import (
    record_usage,
    usage_from_anthropic,
    usage_from_gemini,
    usage_from_openai_chat,
    usage_from_openai_responses,
    usage_from_response,
)

__all__ = [
    "Resolver",
    "RoleMap",
    "anthropic_request",
    "cache_request_fields",
    "from_anthropic",
    "from_gemini",
    "from_openai_chat",
    "from_openai_responses",
    "gemini_request",
    "openai_chat_request",
    "openai_responses_request",
    "record_usage",
    "to_anthropic",
    "to_gemini",
    "to_openai_chat",
    "to_openai_responses",
    "usage_from_anthropic",
    "usage_from_gemini",
    "usage_from_openai_chat",
    "usage_from_openai_responses",
    "usage_from_response",
]
