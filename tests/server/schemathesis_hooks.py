"""Schemathesis hooks of ``test_openapi_conformance``: the refusals of schema-valid
requests that a JSON Schema cannot foresee, each named by its operation, status and
error, so that every other refusal of a schema-valid request stays a failure. Each
rule is listed in docs/api.md ("The OpenAPI document is checked against the server")."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

MESSAGES = "/v1/sessions/{session_id}/messages"
BEYOND_SCHEMA: list[tuple[str, str, int, str]] = [
    # (method, path, status, a regular expression the error's message matches)
    # the selectors of a read: exactly one, and the options that apply to it
    ("GET", MESSAGES, 400, r"^give exactly one selector|does not apply to|applies to .* only"),
    # a cursor, or an item to start after, that the server did not hand out
    ("GET", "/v1/sessions", 400, r"cursor"),
    ("GET", "/v1/search", 400, r"cursor"),
    ("GET", "/openai/v1/conversations/{conversation_id}/items", 400, r"^no item "),
    # a search needs a word: letters or digits, as the store's word rules read them
    ("GET", "/v1/search", 400, r"^q: a search needs at least one word"),
    # what fits depends on the session's messages; a low water mark over the budget
    ("POST", "/v1/sessions/{session_id}/window", 422, r"tokens remain after evicting"),
    ("GET", "/v1/sessions/{session_id}/window", 422, r"tokens remain after evicting"),
    ("POST", "/v1/sessions/{session_id}/window", 400, r"low_water_tokens"),
    ("POST", "/v1/sessions/{session_id}/reduce", 400, r"low_water_tokens"),
]
ITEM_RULES = ("/openai/v1/conversations", "/openai/v1/conversations/{conversation_id}/items")
"""Where OpenAI Responses items are sent: their shapes are OpenAI's (the document says
object), refused with a 400 whose ``param`` is the item (``items[0]...``)."""


MESSAGE_RULES = {"POST": (MESSAGES, "/v1/sessions/{session_id}/edit")}
DECODING = re.compile(r"^(Expected `|Invalid |Object |unknown field|missing required)")
"""msgspec's refusals while decoding: the schema's business, never exempt."""


APPEND_BODIES = {"openai_chat": "OpenAIChatAppendBody",
                 "openai_responses": "OpenAIResponsesAppendBody",
                 "anthropic": "AnthropicAppendBody", "gemini": "GeminiAppendBody"}
"""An append's body by its ``?format=`` (none: ``AppendBody``)."""


def _fits(case: Any, component: str) -> bool:
    """Whether the case's body is valid by the document's ``component``."""
    raw = case.operation.schema.raw_schema
    schema = {"$ref": f"#/components/schemas/{component}", "components": raw["components"]}
    return bool(jsonschema.Draft202012Validator(schema).is_valid(case.body))


def _error(response: Any) -> dict[str, Any]:
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return {}
    return error if isinstance(error, dict) else {}


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a positive request refused by a rule in ``BEYOND_SCHEMA``."""
    if not isinstance(failure, RejectedPositiveData):
        return True
    error = _error(response)
    message = str(error.get("message", ""))
    if case.method.upper() == "POST" and case.path == MESSAGES and response.status_code == 422:
        fmt = (case.query or {}).get("format")
        if not _fits(case, APPEND_BODIES.get(fmt or "", "AppendBody")):
            return False  # a body of another ?format= than this one's: the document's anyOf
        if fmt and not DECODING.match(message):
            return False  # the provider's message rules, past decoding
    if (case.path in MESSAGE_RULES.get(case.method.upper(), ()) and response.status_code == 422
            and str(error.get("path", "")).startswith("$.message")
            and not DECODING.match(message)):
        return False  # a message's content rules (Message.validate), past decoding
    if (case.method.upper() == "POST" and case.path in ITEM_RULES
            and response.status_code == 400 and str(error.get("param")).startswith("items[")):
        return False
    for method, path, status, pattern in BEYOND_SCHEMA:
        if (case.method.upper() == method and case.path == path
                and response.status_code == status and re.search(pattern, message)):
            return False
    return True
