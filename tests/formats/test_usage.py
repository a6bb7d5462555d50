"""Usage readers against the providers' own SDK types: each reads the SDK's object
and its ``model_dump()`` alike, whole responses and bare usage objects."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from chathistory import InvalidMessage, Message, Usage
from chathistory.formats import (
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
    usage_from_anthropic,
    usage_from_gemini,
    usage_from_openai_chat,
    usage_from_openai_responses,
    usage_from_response,
)

anthropic_types = pytest.importorskip("anthropic.types")
openai_types = pytest.importorskip("openai.types")
openai_chat = pytest.importorskip("openai.types.chat")
openai_responses = pytest.importorskip("openai.types.responses")
genai_types = pytest.importorskip("google.genai.types")


def anthropic_message() -> Any:
    return anthropic_types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 30, "cache_read_input_tokens": 1000,
                  "cache_creation_input_tokens": 300,
                  "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                     "ephemeral_1h_input_tokens": 200}}})


def chat_completion() -> Any:
    return openai_chat.ChatCompletion.model_validate({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 40, "total_tokens": 2040,
                  "prompt_tokens_details": {"cached_tokens": 1536}}})


def responses_response() -> Any:
    return openai_responses.Response.model_validate({
        "id": "r1", "object": "response", "created_at": 1, "model": "gpt-5",
        "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 3000, "output_tokens": 50, "total_tokens": 3050,
                  "input_tokens_details": {"cached_tokens": 2048,
                                                   "cache_write_tokens": 256},
                  "output_tokens_details": {"reasoning_tokens": 10}}})


def gemini_response() -> Any:
    return genai_types.GenerateContentResponse.model_validate({
        "model_version": "gemini-2.5-flash",
        "candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}}],
        "usage_metadata": {"prompt_token_count": 5000, "cached_content_token_count": 4096,
                           "candidates_token_count": 60, "thoughts_token_count": 7,
                           "total_token_count": 5067}})


ANTHROPIC = Usage(input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                  cache_write_tokens=300, cache_write_5m_tokens=100,
                  cache_write_1h_tokens=200, model="claude-sonnet-4-5", provider="anthropic")
CHAT = Usage(input_tokens=2000, output_tokens=40, cache_read_tokens=1536, model="gpt-4.1",
             provider="openai")
RESPONSES = Usage(input_tokens=3000, output_tokens=50, cache_read_tokens=2048,
                  cache_write_tokens=256,
                  model="gpt-5", provider="openai")
GEMINI = Usage(input_tokens=5000, output_tokens=67, cache_read_tokens=4096,
               model="gemini-2.5-flash", provider="gemini")

CASES = [
    (anthropic_message, usage_from_anthropic, ANTHROPIC),
    (chat_completion, usage_from_openai_chat, CHAT),
    (responses_response, usage_from_openai_responses, RESPONSES),
    (gemini_response, usage_from_gemini, GEMINI),
]
IDS = ["anthropic", "openai_chat", "openai_responses", "gemini"]


@pytest.mark.parametrize(("make", "reader", "expected"), CASES, ids=IDS)
def test_reads_sdk_objects_and_their_dicts(make: Any, reader: Any, expected: Usage) -> None:
    response = make()
    usage_key = "usage_metadata" if reader is usage_from_gemini else "usage"
    bare = msgspec.structs.replace(expected, model=None)
    assert reader(response) == expected
    assert reader(response.model_dump()) == expected
    assert reader(response.model_dump(by_alias=True, exclude_none=True)) == expected
    assert reader(getattr(response, usage_key)) == bare
    assert reader(getattr(response, usage_key).model_dump()) == bare
    # the sniffing reader tells the four apart
    assert usage_from_response(response) == expected
    assert usage_from_response(response.model_dump()) == expected
    assert usage_from_response(getattr(response, usage_key)) == bare


def test_gemini_rest_json_in_camel_case() -> None:
    rest = {"modelVersion": "gemini-2.5-flash",
            "usageMetadata": {"promptTokenCount": 5000, "cachedContentTokenCount": 4096,
                              "candidatesTokenCount": 60, "thoughtsTokenCount": 7}}
    assert usage_from_gemini(rest) == GEMINI
    assert usage_from_response(rest) == GEMINI


def test_anthropic_without_cache_fields_counts_zero() -> None:
    usage = anthropic_types.Usage(input_tokens=10, output_tokens=2)
    got = usage_from_anthropic(usage, model="m", latency_ms=850.0)
    assert got == Usage(input_tokens=10, output_tokens=2, model="m", provider="anthropic",
                        latency_ms=850.0)
    assert got.cache_hit_rate == 0.0 and got.uncached_input_tokens == 10


def test_a_bad_count_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidMessage) as err:
        usage_from_openai_chat({"usage": {"prompt_tokens": -1}})
    assert err.value.path == "$.usage.prompt_tokens"
    with pytest.raises(InvalidMessage) as err:
        usage_from_anthropic({"input_tokens": 1, "cache_creation": {
            "ephemeral_1h_input_tokens": "9"}})
    assert err.value.path == "$.usage.cache_creation.ephemeral_1h_input_tokens"


def test_no_usage_is_none() -> None:
    assert usage_from_response({"id": "x"}) is None
    assert usage_from_response(object()) is None


def test_usage_is_never_sent_to_a_provider_nor_counted() -> None:
    from chathistory.tokens import cached_count, get_counter

    plain = [Message.user("hi"), Message.assistant("hello", id="a")]
    observed = [plain[0], msgspec.structs.replace(plain[1], usage=ANTHROPIC)]
    for encode in (to_openai_chat, to_openai_responses, to_gemini):
        assert encode(observed) == encode(plain)
    assert to_anthropic(observed) == to_anthropic(plain)
    counter = get_counter("approx")
    assert cached_count(observed[1], counter) == cached_count(
        Message.assistant("hello", id="a"), counter)


def test_sums_and_rates() -> None:
    total = ANTHROPIC + CHAT
    assert total.input_tokens == 3312 and total.cache_read_tokens == 2536
    assert total.cache_write_5m_tokens == 100 and total.model is None
    assert (CHAT + CHAT).cache_write_1h_tokens is None
    assert CHAT.cache_hit_rate == pytest.approx(0.768)
    assert Usage().cache_hit_rate is None
