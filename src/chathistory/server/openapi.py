"""The OpenAPI 3.1 document, generated from the route table and the msgspec
structs the routes decode and encode (``msgspec.json.schema_components``), so
the document cannot drift from the code. Its request and response examples come
from ``examples.py`` (checked against a live server by the tests)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from .. import __version__
from .app import Endpoint
from .examples import Example, for_operation
from .schema import RESPONSE_TYPES, ErrorBody

__all__ = ["document", "document_json"]

_REF = "#/components/schemas/{name}"
_PATH_PARAM = re.compile(r"\{([a-z0-9_]+)\}")
_ERRORS = {
    "400": "Bad request (a query parameter, malformed JSON)",
    "401": "No or unknown API key",
    "404": "No such session, message or asset (for this tenant)",
    "409": "Conflict with the session's state, or a message id the session holds sent with "
           "other content (error.type id_reused; error.message_id, error.field)",
    "412": "If-Match names a version the session is no longer at",
    "413": "The body is too large",
    "415": "Unsupported media type",
    "422": "Invalid input; error.path names the field",
}
_OPENAI_ERRORS = {
    "400": "Invalid input (error.param names the field) or query parameter",
    "401": "No or unknown API key",
    "404": "No such conversation or item (for this tenant)",
    "409": "Conflict with the conversation's state",
    "413": "The body is too large",
    "415": "Unsupported media type",
}
"""The errors of routes answering in OpenAI's shape (``server.conversations``)."""


_TAGS = [
    {"name": "sessions", "description": "Sessions and their messages: append, read by "
     "selectors, windows, forks and edits"},
    {"name": "search", "description": "Word search over the tenant's messages: ranked hits "
     "with their session and a snippet whose matched words are marked"},
    {"name": "assets", "description": "Attachments uploaded as files, stored once by SHA-256"},
    {"name": "data", "description": "The tenant's data as a whole: export, import, erasure; "
     "the key's tenant"},
    {"name": "system", "description": "The process: health, readiness, metrics, this document "
     "(no key needed)"},
    {"name": "OpenAI Conversations", "description": "OpenAI's Conversations API over the same "
     "sessions, for the openai SDK (base_url: this prefix) and the Agents SDK's "
     "OpenAIConversationsSession; errors in OpenAI's shape"},
]
"""In the order ``/docs`` shows them."""

_BINARY = {"application/octet-stream", "*/*"}
_EMPTY_ALLOWED = {"application/x-ndjson"}
"""Raw bodies that may be empty: an empty NDJSON stream is an empty import."""


def _types(routes: Sequence[Endpoint]) -> list[Any]:
    found: list[Any] = list(RESPONSE_TYPES)
    for route in routes:
        errors = route.errors.body if route.errors is not None else None
        for candidate in (route.body, *route.responses.values(), errors):
            if candidate is not None and not isinstance(candidate, str) \
                    and candidate not in found:
                found.append(candidate)
    return found


def _content(kind: Any, schemas: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(kind, str):
        schema: dict[str, Any] = {"type": "string"}
        if kind in _BINARY:
            schema["format"] = "binary"
        elif kind == "application/json":  # a JSON document without a struct (this one)
            schema = {"type": "object"}
        return {kind: {"schema": schema}}
    return {"application/json": {"schema": schemas[kind]}}


def _named(examples: list[Example], values: list[Any]) -> dict[str, Any]:
    """An OpenAPI ``examples`` map: each example's value under its name."""
    return {e.name: {"summary": e.summary, "value": v}
            for e, v in zip(examples, values, strict=True)}


def _with_examples(content: dict[str, Any], examples: list[Example],
                   values: list[Any]) -> dict[str, Any]:
    """``content`` (one media type) with ``examples`` beside its schema."""
    if not examples:
        return content
    ((media, entry),) = content.items()
    return {media: {**entry, "examples": _named(examples, values)}}


def _parameter_examples(params: list[dict[str, Any]], examples: list[Example]) -> None:
    """The first example's path and query parameters, as the parameters' ``example``
    (what "Try it out" fills in: one example's, so that they make one valid request)."""
    if not examples:
        return
    first = examples[0].params
    for param in params:
        if param["in"] in ("path", "query") and param["name"] in first:
            param["example"] = first[param["name"]]


def document(routes: Sequence[Endpoint]) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` as builtins."""
    types = _types(routes)
    refs, components = msgspec.json.schema_components(types, ref_template=_REF)
    schemas = dict(zip(types, refs, strict=True))
    session = components.get("Session")
    if session is not None:  # the API's sessions are Session.to_dict(): versioned
        session["properties"]["schema_version"] = {"type": "integer", "const": 1}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PATH_PARAM.findall(route.path)]
        params += [{"name": p.name, "in": "query", "required": p.required,
                    "description": p.description, "schema": {"type": p.type}}
                   for p in route.query]
        examples = for_operation(route.method, route.path)
        _parameter_examples(params, examples)
        if route.if_match:
            params.append({"name": "If-Match", "in": "header", "required": False,
                           "description": 'The session version the write expects, e.g. "3"',
                           "schema": {"type": "string"}})
        responses: dict[str, Any] = {}
        for status, kind in route.responses.items():
            entry: dict[str, Any] = {"description": "OK" if status < 300 else str(status)}
            if kind is not None:
                entry["content"] = _content(kind, schemas)
            responses[str(status)] = entry
        if not route.public:
            codes, error = ((_ERRORS, ErrorBody) if route.errors is None
                            else (_OPENAI_ERRORS, route.errors.body))
            for code, text in codes.items():
                responses.setdefault(code, {
                    "description": text,
                    "content": {"application/json": {"schema": schemas[error]}}})
        for code, entry in responses.items():
            answered = [e for e in examples if str(e.status) == code and e.response is not None]
            if "content" in entry:
                entry["content"] = _with_examples(entry["content"], answered,
                                                  [e.response for e in answered])
        operation: dict[str, Any] = {
            "operationId": route.handler.__name__,
            "summary": route.summary,
            "tags": [route.tag],
            "parameters": params,
            "responses": responses,
        }
        if route.public:
            operation["security"] = []
        if route.body is not None:
            sent = [e for e in examples if e.body is not None]
            operation["requestBody"] = {"required": route.body not in _EMPTY_ALLOWED,
                                        "content": _with_examples(_content(route.body, schemas),
                                                                  sent, [e.body for e in sent])}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "chathistory", "version": __version__,
                 "description": "Conversation history for LLM applications: sessions, "
                                "messages, token windows, attachments."},
        "tags": _TAGS,
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
    }


def document_json(routes: Sequence[Endpoint]) -> bytes:
    return msgspec.json.encode(document(routes))
