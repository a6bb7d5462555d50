"""Tool-call arguments the model emitted as a string are kept byte for byte: truncated
JSON (``finish_reason="length"``), a trailing comma, an array, a string, a number, an
empty string, or an object spelled otherwise than compact JSON. OpenAI formats send the
very string back (checked against the SDK request types), through a real store and the
JSONL importer too; Anthropic and Gemini, which need an object, get
``{"INVALID_JSON": "<string>"}`` and decoding reads it back as the string."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from format_helpers import check_anthropic, check_gemini, check_openai_chat, check_openai_responses

from chathistory import Message, ToolCall, get_counter
from chathistory.formats import (
    from_anthropic,
    from_gemini,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)
from chathistory.importers import derived_id, import_file
from chathistory.model.codec import decode_document, encode_document
from chathistory.stores import Store

NOT_OBJECTS = {
    "truncated": '{"city": "Par',
    "trailing_comma": '{"city":"Paris",}',
    "array": '["Paris","Rome"]',
    "string": '"Paris"',
    "number": "42",
    "nan": '{"x":NaN}',
    "lone_surrogate": '{"a":"\\ud800"}',
}
OBJECTS = {
    "empty": "",
    "blank": "  ",
    "spaced": '{"city": "Paris", "days": 3}',
    "escaped": '{"city":"Z\\u00fcrich"}',
    "exponent": '{"n":1e16}',
    "compact": '{"city":"Paris"}',
}
ALL = {**NOT_OBJECTS, **OBJECTS}
ids = list(ALL)


def chat_payload(raw: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": raw}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "error: bad arguments"},
        {"role": "assistant", "content": "Sorry, let me retry."},
    ]


def the_call(messages: list[Message]) -> ToolCall:
    return messages[1].tool_calls[0]


def sent_arguments(out: list[dict[str, Any]]) -> str:
    arguments: str = out[1]["tool_calls"][0]["function"]["arguments"]
    return arguments


# ---------------------------------------------------------------- the model


@pytest.mark.parametrize("raw", NOT_OBJECTS.values(), ids=list(NOT_OBJECTS))
def test_a_string_that_is_no_object_is_kept_unparsed(raw: str) -> None:
    call = ToolCall.from_json_arguments(raw, id="c", name="f")
    assert (call.arguments, call.raw_arguments, call.unparsed_arguments) == ({}, raw, raw)
    assert call.arguments_json == raw


@pytest.mark.parametrize("raw", OBJECTS.values(), ids=list(OBJECTS))
def test_an_object_is_parsed_and_its_spelling_kept(raw: str) -> None:
    call = ToolCall.from_json_arguments(raw, id="c", name="f")
    assert call.arguments == (json.loads(raw) if raw.strip() else {})
    assert call.unparsed_arguments is None
    assert call.arguments_json == raw
    # compact JSON is what re-encoding gives anyway: nothing to keep
    assert call.raw_arguments == (None if raw == '{"city":"Paris"}' else raw)


def test_replaced_arguments_win_over_a_stale_raw_string() -> None:
    call = ToolCall.from_json_arguments('{"city": "Paris"}', id="c", name="f")
    moved = msgspec.structs.replace(call, arguments={"city": "Rome"})
    assert moved.arguments_json == '{"city":"Rome"}'
    cut = ToolCall.from_json_arguments('{"city": "Par', id="c", name="f")
    fixed = msgspec.structs.replace(cut, arguments={"city": "Paris"})
    assert fixed.arguments_json == '{"city":"Paris"}' and fixed.unparsed_arguments is None


@pytest.mark.parametrize("raw", ALL.values(), ids=ids)
def test_validation_and_the_codec_keep_them(raw: str) -> None:
    msgs = from_openai_chat(chat_payload(raw))
    for msg in msgs:
        assert msg.validate() is msg
        assert Message.from_json(msg.to_json()) == msg
        assert Message.from_dict(msg.to_dict()) == msg
    back, _ = decode_document(encode_document(msgs))
    assert back == msgs
    assert sent_arguments(to_openai_chat(back)) == raw


def test_token_counting_counts_the_string_sent() -> None:
    counter = get_counter("o200k_base")
    cut = Message(role="assistant", parts=[ToolCall.from_json_arguments(
        '{"query": "the complete works of Shakespeare, every sonnet', id="c", name="search")])
    empty = Message(role="assistant", parts=[ToolCall(id="c", name="search")])
    text = counter.count_text(cut.parts[0].arguments_json)  # type: ignore[union-attr]
    assert counter.count_message(cut) - counter.count_message(empty) == (
        text - counter.count_text("{}"))
    assert text > 10


# ---------------------------------------------------------------- OpenAI formats


@pytest.mark.parametrize("raw", ALL.values(), ids=ids)
def test_openai_chat_sends_the_models_string_back(raw: str) -> None:
    payload = chat_payload(raw)
    check_openai_chat(payload)
    msgs = from_openai_chat(payload)
    out = to_openai_chat(msgs)
    check_openai_chat(out)
    assert out == payload
    assert sent_arguments(out) == raw


@pytest.mark.parametrize("raw", ALL.values(), ids=ids)
def test_openai_responses_sends_the_models_string_back(raw: str) -> None:
    items = [
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": raw,
         "id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "error: bad arguments"},
    ]
    check_openai_responses(items)
    msgs = from_openai_responses(items)
    assert the_call(msgs).arguments_json == raw
    out = to_openai_responses(msgs)
    check_openai_responses(out)
    assert out == items
    # and across the two OpenAI formats
    chat = to_openai_chat(msgs)
    check_openai_chat(chat)
    assert sent_arguments(chat) == raw
    assert to_openai_responses(from_openai_chat(chat))[1]["arguments"] == raw


def test_legacy_metadata_string_is_still_sent() -> None:
    """chathistory 0.1 kept the model's string in provider metadata."""
    call = ToolCall(id="c", name="f", arguments={"a": 1},
                    provider_metadata={"openai_chat": {"arguments": '{"a": 1}'}})
    out = to_openai_chat([Message(role="assistant", parts=[call])])
    assert out[0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


# ---------------------------------------------------------------- Anthropic and Gemini


@pytest.mark.parametrize("raw", ALL.values(), ids=ids)
def test_anthropic_gets_an_object_and_gives_the_string_back(raw: str) -> None:
    msgs = from_openai_chat(chat_payload(raw))
    request = to_anthropic(msgs)
    check_anthropic(request)
    tool_use = request["messages"][1]["content"][0]
    if raw in NOT_OBJECTS.values():
        assert tool_use["input"] == {"INVALID_JSON": raw}
        back = from_anthropic(**request)
        assert the_call(back).unparsed_arguments == raw
        assert to_anthropic(back) == request
        assert sent_arguments(to_openai_chat(back)) == raw
    else:
        assert tool_use["input"] == the_call(msgs).arguments
        assert "INVALID_JSON" not in tool_use["input"]


@pytest.mark.parametrize("raw", ALL.values(), ids=ids)
def test_gemini_gets_an_object_and_gives_the_string_back(raw: str) -> None:
    msgs = from_openai_chat(chat_payload(raw))
    request = to_gemini(msgs)
    check_gemini(request)
    args = request["contents"][1]["parts"][0]["functionCall"]["args"]
    if raw in NOT_OBJECTS.values():
        assert args == {"INVALID_JSON": raw}
        back = from_gemini(request)
        assert the_call(back).unparsed_arguments == raw
        assert to_gemini(back) == request
        assert sent_arguments(to_openai_chat(back)) == raw
    else:
        assert args == the_call(msgs).arguments


def test_an_object_that_only_looks_wrapped_stays_an_object() -> None:
    """The key is read back as a string only when that string is no JSON object."""
    turn = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {"INVALID_JSON": '{"a":1}'}}]}
    call = from_anthropic(None, [turn])[0].tool_calls[0]
    assert call.arguments == {"INVALID_JSON": '{"a":1}'} and call.raw_arguments is None


# ---------------------------------------------------------------- through a store


def test_store_round_trip_is_byte_identical(store: Store) -> None:
    payloads = {name: chat_payload(raw) for name, raw in ALL.items()}
    for name, payload in payloads.items():
        store.create_session(name)
        store.append(name, from_openai_chat(payload))
    for name, payload in payloads.items():
        out = to_openai_chat(store.range(name))
        check_openai_chat(out)
        assert sent_arguments(out) == ALL[name]
        assert out == payload


def test_jsonl_import_keeps_the_string(store: Store, tmp_path: Path) -> None:
    lines = [{"id": f"line-{name}", "messages": chat_payload(raw)} for name, raw in ALL.items()]
    # the legacy function_call form goes the same way
    lines.append({"id": "legacy", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "function_call": {"name": "f", "arguments": '{"a": [1,'}},
        {"role": "function", "name": "f", "content": "cut short"}]})
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    report = import_file(store, path, format="openai")
    assert (report.invalid, report.sessions_created) == ([], len(lines))
    for name, raw in ALL.items():
        out = to_openai_chat(store.range(derived_id("openai", f"line-{name}")))
        check_openai_chat(out)
        assert out == chat_payload(raw)
    legacy = to_openai_chat(store.range(derived_id("openai", "legacy")))
    check_openai_chat(legacy)
    assert legacy[1]["tool_calls"][0]["function"]["arguments"] == '{"a": [1,'


def test_the_formats_doc_examples_run() -> None:
    doc = Path(__file__).parents[2] / "docs" / "formats.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(doc), "exec"), {})
