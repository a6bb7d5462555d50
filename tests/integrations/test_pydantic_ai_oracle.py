"""pydantic-ai's own JSON round trip is the oracle: for every shape of history,
``to_pydantic_ai(from_pydantic_ai(h))`` and what a store gives back (every backend,
the history appended in one batch or one message at a time) equal
``ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(h))``."""

from __future__ import annotations

import random
import warnings

import pytest
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CachePoint,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    VideoUrl,
)

from chathistory.formats import to_anthropic, to_gemini, to_openai_chat, to_openai_responses
from chathistory.integrations.pydantic_ai import from_pydantic_ai, to_pydantic_ai
from chathistory.model import Reasoning
from chathistory.model import TextPart as OurText
from chathistory.stores import BaseStore


def oracle(history: list[ModelMessage]) -> list[ModelMessage]:
    """What pydantic-ai itself gives back after storing ``history`` as JSON."""
    loaded: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(history))
    return loaded


def ask(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def say(*parts: object) -> ModelResponse:
    return ModelResponse(parts=list(parts))  # type: ignore[arg-type]


def legacy_retry() -> RetryPromptPart:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RetryPromptPart("bad output")


ALPHABET_BYTES = (b"\xfb\xef\xbeabc", b"\xff\xff\xff", b"\xfb\xff", b"\xfe", b"\xf8>\x0f\xc0")
"""Base64 ``----YWJj`` / ``++++YWJj``, ``____`` / ``////``, ``-_8=`` / ``+/8=``,
``_g==`` / ``/g==`` and ``-D4PwA==`` / ``+D4PwA==``: URL-safe / standard."""


def corpus(png: bytes) -> dict[str, list[ModelMessage]]:
    call = ToolCallPart("lookup", {"q": "red"}, "c1")
    return {
        "plain": [ModelRequest(parts=[SystemPromptPart("Be terse."), UserPromptPart("hi")],
                               instructions="English."), say(TextPart("hello"))],
        "cache_point": [ModelRequest(parts=[UserPromptPart(["What?", CachePoint()])]),
                        say(TextPart("This."))],
        "cache_point_between": [ModelRequest(parts=[UserPromptPart(
            ["long context", CachePoint(ttl="1h"), "question"])]), say(TextPart("ok"))],
        "empty_text_response": [ask("hi"), say(TextPart("")), ask("again"), say(TextPart("x"))],
        "empty_response": [ask("hi"), say(), ask("again")],
        "empty_response_last": [ask("hi"), say()],
        "whitespace_response": [ask("hi"), say(TextPart("  \n"))],
        "empty_thinking": [ask("hi"), say(ThinkingPart(""))],
        "native_tools_only": [ask("hi"), say(
            NativeToolCallPart("web_search", {"query": "red"}, "ws-1", provider_name="openai"),
            NativeToolReturnPart("web_search", {"hits": 1}, "ws-1", provider_name="openai"))],
        "file_response": [ask("draw"), say(FilePart(BinaryContent(png, media_type="image/png")))],
        "thinking_text_calls": [ask("go"), say(
            ThinkingPart("plan", signature="sig", provider_name="anthropic"), TextPart("ok"),
            call, ToolCallPart("lookup", '{"q": "blue"}', "c2"))],
        "tool_args": [ask("go"), say(ToolCallPart("f", None, "c1"), ToolCallPart("g", "", "c2"),
                                     ToolCallPart("h", '{"a": ', "c3")),
                      ModelRequest(parts=[ToolReturnPart("f", "r1", "c1"),
                                          ToolReturnPart("g", "r2", "c2"),
                                          ToolReturnPart("h", "r3", "c3")])],
        "tool_returns": [ask("go"), say(call), ModelRequest(parts=[
            ToolReturnPart("lookup", {"colour": "red", "n": [1, 2]}, "c1"),
            UserPromptPart("and?")])],
        "tool_failed_and_empty": [ask("go"), say(call, ToolCallPart("f", {}, "c2")),
                                  ModelRequest(parts=[
                                      ToolReturnPart("lookup", "", "c1"),
                                      ToolReturnPart("f", "boom", "c2", outcome="failed")])],
        "compaction": [ask("go"), say(CompactionPart(  # as its OpenAI, Anthropic models do
            id="cmp_1", provider_name="openai", provider_details={
                "id": "cmp_1", "encrypted_content": "gAAA", "type": "compaction",
                "created_by": None}), TextPart("ok")),
            say(CompactionPart("Summary.", provider_name="anthropic",
                               provider_details={"signature": "sig"})),
            say(CompactionPart("x", provider_name="bedrock")),  # another provider's: as given
            ModelRequest(parts=[CompactionPart("an app's summary"), UserPromptPart("go on")])],
        "media": [ModelRequest(parts=[UserPromptPart([
            "look", ImageUrl("https://example.com/a.png"),
            BinaryContent(png, media_type="image/png"), DocumentUrl("https://example.com/d.pdf"),
            AudioUrl("https://example.com/a.wav"), VideoUrl("https://example.com/v.mp4")])])],
        # bytes whose base64 holds each of "-", "_" (pydantic writes the URL-safe
        # alphabet), "+" and "/", and each padding
        "binary_every_alphabet": [ModelRequest(parts=[UserPromptPart([
            "see", *(BinaryContent(data, media_type="image/png")
                     for data in ALPHABET_BYTES)])])],
        "prompt_list_with_empty_text": [ModelRequest(parts=[UserPromptPart(["", "b"])])],
        "retry_feedback": [ask("hi"), say(TextPart("x")), ModelRequest(parts=[legacy_retry()])],
        "empty_system_prompt": [ModelRequest(parts=[SystemPromptPart(""), UserPromptPart("hi")])],
        "several_users": [ModelRequest(parts=[UserPromptPart("a"), UserPromptPart("b")])],
        "consecutive_requests": [ask("a"), ask("b"), say(TextPart("x")), say(TextPart("y"))],
        # Requests with nothing to store as a message ride on a neighbour of their call:
        "empty_request_first": [ModelRequest(parts=[], instructions="Go on."),
                                say(TextPart("x"))],
        "empty_prompt_between": [ask("a"), say(TextPart("x")),
                                 ModelRequest(parts=[UserPromptPart("")]), say(TextPart("y"))],
        "empty_request_last": [ask("a"), say(TextPart("x")),
                               ModelRequest(parts=[UserPromptPart([CachePoint()])])],
    }


ALONE_NOTHING_TO_STORE = {"empty_request_first", "empty_prompt_between", "empty_request_last"}
"""Cases with a request that, appended alone, has no message to ride on (left out)."""

CASES = sorted(corpus(b"").keys())


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, png_bytes: bytes) -> list[ModelMessage]:
    return corpus(png_bytes)[request.param]


def stored(store: BaseStore, batches: list[list[ModelMessage]]) -> list[ModelMessage]:
    store.create_session("s")
    for batch in batches:
        store.append("s", from_pydantic_ai(batch))
    return to_pydantic_ai(store.resolve(store.range("s")))


# ---------------------------------------------------------------- the corpus


def test_conversion_matches_pydantic_ai(case: list[ModelMessage]) -> None:
    assert to_pydantic_ai(from_pydantic_ai(case)) == oracle(case)


def test_store_batch_matches_pydantic_ai(case: list[ModelMessage], backend: BaseStore) -> None:
    assert stored(backend, [case]) == oracle(case)


def test_store_one_at_a_time_matches_pydantic_ai(request: pytest.FixtureRequest,
                                                 case: list[ModelMessage],
                                                 backend: BaseStore) -> None:
    got = stored(backend, [[m] for m in case])
    name = request.node.callspec.params["case"]
    if name in ALONE_NOTHING_TO_STORE:
        # Alone in its call, a request with nothing to store has nothing to ride on.
        assert got == [m for m in oracle(case) if not _nothing_to_store(m)]
    else:
        assert got == oracle(case)


def _nothing_to_store(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and not from_pydantic_ai([message])


# ---------------------------------------------------------------- the reported cases


def test_cache_point_keeps_the_question(backend: BaseStore) -> None:
    history = [ModelRequest(parts=[UserPromptPart(["What is 2 + 2?", CachePoint()])])]
    [ours] = from_pydantic_ai(history)
    assert (ours.role, ours.text) == ("user", "What is 2 + 2?")  # the question is stored
    assert to_pydantic_ai([ours]) == oracle(history)
    assert stored(backend, [history]) == oracle(history)


def test_response_of_one_empty_text_part_is_kept(backend: BaseStore) -> None:
    history = [ask("hi"), say(TextPart("")), ask("still there?"), say(TextPart("yes"))]
    assert to_pydantic_ai(from_pydantic_ai(history)) == oracle(history)
    assert stored(backend, [history]) == oracle(history)


def test_empty_response_is_kept(backend: BaseStore) -> None:
    history = [ask("hi"), say()]
    assert to_pydantic_ai(from_pydantic_ai(history)) == oracle(history)
    assert stored(backend, [[m] for m in history]) == oracle(history)


def test_placeholder_of_an_empty_response_reaches_no_provider() -> None:
    ours = from_pydantic_ai([ask("hi"), say(), say(TextPart("")), ask("again")])
    assert [m.role for m in ours] == ["user", "assistant", "assistant", "user"]
    assert [type(p) for p in ours[1].parts] == [Reasoning]
    assert [type(p) for p in ours[2].parts] == [OurText, Reasoning]
    assert [m["role"] for m in to_openai_chat(ours)] == ["user", "user"]
    assert [m["role"] for m in to_openai_responses(ours)] == ["user", "user"]
    assert [m["role"] for m in to_anthropic(ours)["messages"]] == ["user"]
    assert [c["role"] for c in to_gemini(ours)["contents"]] == ["user"]


def test_a_request_with_nothing_to_store_alone_is_left_out() -> None:
    assert from_pydantic_ai([ModelRequest(parts=[], instructions="Go on.")]) == []
    assert from_pydantic_ai([ModelRequest(parts=[UserPromptPart([CachePoint()])])]) == []


# ---------------------------------------------------------------- bytes, as pydantic-ai writes them


def test_binary_content_in_the_url_safe_alphabet_keeps_its_bytes() -> None:
    """The reported case: pydantic-ai writes ``BinaryContent`` bytes in the URL-safe
    alphabet; a standard decoder dropped ``----`` and stored ``b"abc"``."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart([
        "see", BinaryContent(b"\xfb\xef\xbeabc", media_type="image/png")])])]
    dumped = ModelMessagesTypeAdapter.dump_python(history, mode="json")
    assert dumped[0]["parts"][0]["content"][1]["data"] == "----YWJj"  # the oracle's writing
    [message] = from_pydantic_ai(history)
    attachment = message.parts[1].attachment  # type: ignore[union-attr]
    assert attachment is not None and attachment.data == b"\xfb\xef\xbeabc"
    assert to_pydantic_ai([message]) == oracle(history)


def test_random_binary_payloads_keep_their_bytes() -> None:
    rng = random.Random(43)
    payloads = [rng.randbytes(rng.randrange(1, 48)) for _ in range(200)]
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart([
        "x", *(BinaryContent(p, media_type="image/png") for p in payloads)])])]
    [message] = from_pydantic_ai(history)
    assert [p.attachment.data for p in message.parts[1:]] == payloads  # type: ignore[union-attr]
    assert to_pydantic_ai([message]) == oracle(history)
