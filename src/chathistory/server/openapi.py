"""The OpenAPI 3.1 document, generated from the route table and the msgspec
structs the routes decode and encode (``msgspec.json.schema_components``), so
the document cannot drift from the code. Its request and response examples come
from ``examples.py`` (checked against a live server by the tests)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
import msgspec.inspect as inspect

from .. import __version__
from ..tokens import COUNTER_NAME_PATTERN
from .app import Endpoint
from .conversations_items import (
    MAX_ITEMS,
    MAX_METADATA_KEY,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE,
)
from .examples import Example, for_operation
from .schema import RESPONSE_TYPES, ErrorBody
from .wire import IF_MATCH_PATTERN

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


_COUNTER = {"anyOf": [{"type": "string", "pattern": COUNTER_NAME_PATTERN}, {"type": "null"}]}
_NO_NUL = "^[^\u0000]*$"
_OPENAI_METADATA = {"anyOf": [{
    "type": "object", "maxProperties": MAX_METADATA_PAIRS,
    "propertyNames": {"maxLength": MAX_METADATA_KEY, "pattern": _NO_NUL},
    "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE,
                             "pattern": _NO_NUL}}, {"type": "null"}]}
_OPENAI_ITEMS = {"type": "array", "items": {"type": "object"}, "maxItems": MAX_ITEMS}
_COMPONENT_RULES: dict[str, dict[str, Any]] = {
    "EraseBody": {"anyOf": [
        {"properties": {"user": {"type": "string"}}, "required": ["user"]},
        {"properties": {"all": {"const": True}}, "required": ["all"]}]},
    "ReduceBody": {"properties": {"counter": _COUNTER}, "oneOf": [
        {"properties": {"type": {"const": kind}, needs: {"type": "integer"}},
         "required": ["type", needs]}
        for kind, needs in (("truncation", "target_count"), ("count", "max_messages"),
                            ("token_budget", "max_tokens"))]},
    "WindowBody": {"properties": {"counter": _COUNTER}},
    "ConversationCreateBody": {"properties": {
        "items": {"anyOf": [_OPENAI_ITEMS, {"type": "null"}]}, "metadata": _OPENAI_METADATA}},
    "ConversationUpdateBody": {"properties": {"metadata": _OPENAI_METADATA}},
    "ItemsCreateBody": {"properties": {"items": {**_OPENAI_ITEMS, "minItems": 1}}},
}
"""What a body's struct cannot say and its route checks, by component (``properties``
replace the struct's): erasure names a user or says ``"all": true``; a reducer has the
field its type needs; a counter is a name ``get_counter`` knows; OpenAI's limits on
items and metadata."""


def _closed(components: dict[str, Any], structs: dict[str, Any]) -> None:
    """``additionalProperties: false`` on every struct: the API refuses a field it does
    not know at any depth (``wire.decode_json``), and answers none."""
    for name in structs:
        if name in components:
            components[name]["additionalProperties"] = False


BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""The base64 msgspec decodes into bytes: the standard alphabet, padded."""


def _base64(node: Any) -> None:
    """A ``pattern`` beside msgspec's ``contentEncoding: base64`` (an annotation only):
    a string that is not base64 is refused."""
    if isinstance(node, dict):
        if node.get("contentEncoding") == "base64":
            node["pattern"] = BASE64_PATTERN
        for value in node.values():
            _base64(value)
    elif isinstance(node, list):
        for value in node:
            _base64(value)


def _tuples(node: Any) -> None:
    """A tuple (msgspec's ``prefixItems``) as an array whose items are any of its
    members' types: schemathesis turns ``prefixItems`` into the older drafts' list of
    ``items`` and then refuses that as invalid in OpenAPI 3.1."""
    if isinstance(node, dict):
        if isinstance(node.get("prefixItems"), list):
            node["items"] = {"anyOf": node.pop("prefixItems")}
        for value in node.values():
            _tuples(value)
    elif isinstance(node, list):
        for value in node:
            _tuples(value)


def _structs(types: Sequence[Any]) -> dict[str, inspect.StructType]:
    """Every struct reachable from ``types``, by its component name."""
    found: dict[str, inspect.StructType] = {}
    stack: list[inspect.Type] = list(inspect.multi_type_info(types))
    while stack:
        info = stack.pop()
        if isinstance(info, inspect.StructType):
            name = info.cls.__name__
            if name not in found:
                found[name] = info
                stack.extend(f.type for f in info.fields)
        elif isinstance(info, inspect.UnionType):
            stack.extend(info.types)
        elif isinstance(info, inspect.ListType | inspect.DictType):
            stack.extend([info.item_type] if isinstance(info, inspect.ListType)
                         else [info.value_type])
        elif isinstance(info, inspect.Metadata):
            stack.append(info.type)
    return found


def _date_times(components: dict[str, Any], structs: dict[str, inspect.StructType]) -> None:
    """``format: date-time`` on every datetime field (msgspec's schema says only
    ``string``; the API reads and writes them as RFC 3339)."""
    for name, info in structs.items():
        schema = components.get(name)
        if schema is None:
            continue
        for f in info.fields:
            kind = f.type.type if isinstance(f.type, inspect.Metadata) else f.type
            options = kind.types if isinstance(kind, inspect.UnionType) else (kind,)
            if any(isinstance(o, inspect.DateTimeType) for o in options):
                prop = schema["properties"][f.encode_name]
                for entry in prop.get("anyOf", [prop]):
                    if entry.get("type") == "string":
                        entry["format"] = "date-time"


def _types(routes: Sequence[Endpoint]) -> list[Any]:
    found: list[Any] = list(RESPONSE_TYPES)
    for route in routes:
        errors = route.errors.body if route.errors is not None else None
        kinds = [route.body, *route.responses.values(), errors]
        for candidate in (k for kind in kinds
                          for k in (kind if isinstance(kind, tuple) else (kind,))):
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
    if isinstance(kind, tuple):  # any of them (JSON_TYPE: any object)
        return {"application/json": {"schema": {"anyOf": [
            {"type": "object"} if k == "application/json" else schemas[k] for k in kind]}}}
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
    structs = _structs(types)
    _date_times(components, structs)
    _closed(components, structs)
    _tuples(components)
    _base64(components)
    for name, rules in _COMPONENT_RULES.items():
        if name in components:
            schema = components[name]
            for key, value in rules.items():
                if key == "properties":
                    schema[key].update(value)
                else:
                    schema[key] = value
    for name in ("Session", "ListedSession"):  # the API's sessions are versioned
        if name in components:
            components[name]["properties"]["schema_version"] = {"type": "integer", "const": 1}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PATH_PARAM.findall(route.path)]
        params += [{"name": p.name, "in": "query", "required": p.required,
                    "description": p.description, "schema": {"type": p.type, **(p.schema or {})}}
                   for p in route.query]
        examples = for_operation(route.method, route.path)
        _parameter_examples(params, examples)
        if route.if_match:
            params.append({"name": "If-Match", "in": "header", "required": False,
                           "description": 'The session version the write expects, e.g. "3"',
                           "schema": {"type": "string", "pattern": IF_MATCH_PATTERN}})
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
            required = route.body not in _EMPTY_ALLOWED and not route.body_optional
            content = _content(route.body, schemas)
            if route.body in _BINARY:  # an upload of no bytes is refused
                content[route.body]["schema"]["minLength"] = 1
            operation["requestBody"] = {"required": required,
                                        "content": _with_examples(content, sent,
                                                                  [e.body for e in sent])}
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
