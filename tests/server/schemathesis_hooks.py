"""Schemathesis hooks of ``test_openapi_conformance``: the refusals of schema-valid
requests that a JSON Schema cannot foresee, each named by its operation, status and
error, so that every other refusal of a schema-valid request stays a failure. Each
rule is listed in docs/api.md ("What the document cannot say")."""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

MESSAGES = "/v1/sessions/{session_id}/messages"
BEYOND_SCHEMA: list[tuple[str, str, int, str]] = [
    # (method, path, status, a regular expression the error's message matches)
    # the selectors of a read: exactly one, and the options that apply to it
    ("GET", MESSAGES, 400, r"^give exactly one selector|does not apply to|applies to .* only"),
    # a cursor, or an item to start after, that the server did not hand out
    ("GET", "/v1/sessions", 400, r"^bad cursor"),
    ("GET", "/v1/search", 400, r"^cursor: not a cursor"),
    ("GET", "/openai/v1/conversations/{conversation_id}/items", 400, r"^no item "),
    # a search needs a word: letters or digits, as the store's word rules read them
    ("GET", "/v1/search", 400, r"^q: a search needs at least one word"),
    # a message's content rules (a part with content; a tool call's id and name; ...)
    ("POST", MESSAGES, 422, r"^(a message needs|a tool|a compaction|an? \w+ part|role must|"
                            r"name must|id must|an attachment|an image|a file|an audio|media|attachment)"),
    ("POST", "/v1/sessions/{session_id}/edit", 422,
     r"^(a message needs|a tool|a compaction|an? \w+ part|role must|name must|id must|"
     r"an attachment|an image|a file|an audio|media|attachment)"),
    # what fits depends on the session's messages; a low water mark under the budget
    ("POST", "/v1/sessions/{session_id}/window", 422, r"tokens remain after evicting"),
    ("GET", "/v1/sessions/{session_id}/window", 422, r"tokens remain after evicting"),
    ("POST", "/v1/sessions/{session_id}/window", 400, r"low_water_tokens"),
    ("POST", "/v1/sessions/{session_id}/reduce", 400, r"low_water_tokens"),
    # OpenAI Responses items: their shapes are OpenAI's (the document says object)
    ("POST", "/openai/v1/conversations", 400, r"item"),
    ("POST", "/openai/v1/conversations/{conversation_id}/items", 400, r"item"),
]


def _message(response: Any) -> str:
    try:
        body = json.loads(response.content)
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a positive request refused by a rule in ``BEYOND_SCHEMA``."""
    if not isinstance(failure, RejectedPositiveData):
        return True
    if (case.method.upper() == "POST" and case.path == MESSAGES and response.status_code == 422
            and (case.query or {}).get("format")):
        return False  # the body of an append in a provider's shape depends on ?format=
    message = _message(response)
    for method, path, status, pattern in BEYOND_SCHEMA:
        if (case.method.upper() == method and case.path == path
                and response.status_code == status and re.search(pattern, message)):
            return False
    return True
