"""Helpers for the format tests: validation against the providers' official SDK
request types, fixture loading, and a normal form of messages for round trips."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
from anthropic.types import MessageParam, TextBlockParam
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam

from chathistory import (
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def without_nulls(value: Any) -> Any:
    """``value`` with null fields removed (providers' examples spell out ``null``s)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


# ---------------------------------------------------------------- SDK validation


def _materialize(value: Any) -> Any:
    """Consume pydantic's lazy ``Iterable`` validators, so nested items are checked."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        return [_materialize(v) for v in value]
    return value


_ADAPTERS: dict[Any, pydantic.TypeAdapter[Any]] = {}


def assert_sdk_valid(type_: Any, payload: Any) -> None:
    """Strict validation against an SDK TypedDict type. TypedDicts ignore unknown keys,
    so the validated value must also equal the payload: a key the type does not know
    would be missing from it."""
    adapter = _ADAPTERS.get(type_)
    if adapter is None:
        adapter = _ADAPTERS[type_] = pydantic.TypeAdapter(type_)
    validated = _materialize(adapter.validate_python(payload, strict=True))
    assert validated == payload


def check_openai_chat(out: list[dict[str, Any]]) -> None:
    assert_sdk_valid(list[ChatCompletionMessageParam], out)


def check_openai_responses(out: list[dict[str, Any]]) -> None:
    assert_sdk_valid(ResponseInputParam, out)


def check_anthropic(request: dict[str, Any]) -> None:
    assert set(request) <= {"system", "messages"}
    assert_sdk_valid(list[MessageParam], request["messages"])
    if "system" in request:
        assert_sdk_valid(str | list[TextBlockParam], request["system"])  # type: ignore[arg-type]
    roles = [turn["role"] for turn in request["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles


def check_gemini(request: dict[str, Any]) -> None:
    """Through JSON, as on the wire: bytes fields (data, thoughtSignature) must be
    base64, and the SDK models forbid unknown fields."""
    assert set(request) <= {"contents", "system_instruction"}
    for content in request["contents"]:
        assert content["role"] in ("user", "model")
        genai_types.Content.model_validate_json(json.dumps(content))
    if "system_instruction" in request:
        genai_types.Content.model_validate_json(json.dumps(request["system_instruction"]))


# ---------------------------------------------------------------- normal form


def _media(part: ImagePart | AudioPart | FilePart, names: bool) -> tuple[Any, ...]:
    att = part.attachment
    what = (att.sha256, att.mime_type) if att is not None else (part.url, part.mime_type)
    extra: tuple[Any, ...] = ()
    if isinstance(part, ImagePart):
        extra = (part.detail,)
    elif isinstance(part, FilePart) and names:
        extra = (part.name,)
    return (type(part).__name__, *what, *extra)


def part_essence(part: Part, *, names: bool = True) -> tuple[Any, ...]:
    """What a provider round trip must keep of a part (no ids of its own, no metadata)."""
    match part:
        case TextPart():
            return ("text", part.text)
        case ImagePart() | AudioPart() | FilePart():
            return _media(part, names)
        case ToolCall():
            return ("call", part.id, part.name, part.arguments)
        case ToolResult():
            content = (part.content if isinstance(part.content, str)
                       else tuple(part_essence(c, names=names) for c in part.content))
            return ("result", part.call_id, content, part.is_error, part.name)
        case Reasoning():
            return ("reasoning", part.text, part.signature, part.data)
    raise AssertionError(part)


def essence(messages: Sequence[Message], *, names: bool = True) -> list[tuple[Any, ...]]:
    """Roles, names, texts, tool calls and results, media: what round trips compare."""
    return [(m.role, m.name if names else None,
             [part_essence(p, names=names) for p in m.parts]) for m in messages]
