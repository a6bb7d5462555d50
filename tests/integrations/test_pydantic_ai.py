"""pydantic-ai: conversion to and from ``list[ModelMessage]``, and use as an
``Agent``'s ``message_history`` with pydantic-ai's ``TestModel`` / ``FunctionModel``."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from chathistory import InvalidMessage, Message
from chathistory.integrations.pydantic_ai import from_pydantic_ai, to_pydantic_ai
from chathistory.model import ImagePart, Reasoning, ToolCall, ToolResult
from chathistory.model import TextPart as OurText
from chathistory.stores import BaseStore


def normalized(messages: list[ModelMessage]) -> list[ModelMessage]:
    """What pydantic-ai itself makes of a history after storing it."""
    loaded: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(messages))
    return loaded


def history(png: bytes) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[
            SystemPromptPart("Be terse."),
            UserPromptPart(["What is this?", ImageUrl("https://example.com/a.png"),
                            BinaryContent(png, media_type="image/png")]),
        ], instructions="Answer in English."),
        ModelResponse(parts=[
            ThinkingPart("Check the image.", signature="sig-1", provider_name="anthropic"),
            TextPart("Let me look."),
            ToolCallPart("describe", {"detail": "high"}, "call-1"),
            ToolCallPart("lookup", '{"q": "red"}', "call-2"),
        ], model_name="claude-test", provider_name="anthropic"),
        ModelRequest(parts=[
            ToolReturnPart("describe", {"colour": "red", "size": [4, 3]}, "call-1"),
            ToolReturnPart("lookup", "no such colour", "call-2", outcome="failed"),
        ]),
        ModelResponse(parts=[
            NativeToolCallPart("web_search", {"query": "red"}, "ws-1", provider_name="openai"),
            NativeToolReturnPart("web_search", {"hits": 1}, "ws-1", provider_name="openai"),
            TextPart("A red square."),
        ]),
        ModelRequest(parts=[UserPromptPart("Thanks!")]),
        ModelResponse(parts=[TextPart("You're welcome.")]),
    ]


def test_round_trip_gives_the_same_history(png_bytes: bytes) -> None:
    original = normalized(history(png_bytes))
    back = to_pydantic_ai(from_pydantic_ai(original))
    assert back == original


def test_output_survives_pydantic_ais_own_codec(png_bytes: bytes) -> None:
    out = to_pydantic_ai(from_pydantic_ai(history(png_bytes)))
    assert ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(out)) \
        == out


def test_mapping_to_roles_and_parts(png_bytes: bytes) -> None:
    ours = from_pydantic_ai(history(png_bytes))
    assert [m.role for m in ours] == ["system", "user", "assistant", "tool", "tool",
                                      "assistant", "user", "assistant"]
    user = ours[1]
    assert [type(p) for p in user.parts] == [OurText, ImagePart, ImagePart]
    binary = user.parts[2]
    assert isinstance(binary, ImagePart) and binary.attachment is not None
    assert binary.attachment.data == png_bytes
    thinking, text, call, raw_call = ours[2].parts
    assert isinstance(thinking, Reasoning) and thinking.signature == "sig-1"
    assert isinstance(text, OurText) and text.text == "Let me look."
    assert isinstance(call, ToolCall) and call.arguments == {"detail": "high"}
    assert isinstance(raw_call, ToolCall) and raw_call.arguments == {"q": "red"}
    ok, failed = ours[3].parts[0], ours[4].parts[0]
    assert isinstance(ok, ToolResult) and not ok.is_error
    assert ok.content == '{"colour": "red", "size": [4, 3]}'  # what the model is shown
    assert isinstance(failed, ToolResult) and failed.is_error and failed.name == "lookup"
    assert ours[5].text == "A red square."  # the native tool parts are kept aside


def test_legacy_retry_prompts_are_read_as_pydantic_ai_reads_them() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bound = RetryPromptPart("bad arguments", tool_name="lookup", tool_call_id="call-1")
        loose = RetryPromptPart("bad output")
    ours = from_pydantic_ai([
        ModelRequest(parts=[UserPromptPart("go")]),
        ModelResponse(parts=[ToolCallPart("lookup", {}, "call-1")]),
        ModelRequest(parts=[bound]),
        ModelResponse(parts=[TextPart("oops")]),
        ModelRequest(parts=[loose]),
    ])
    retried = ours[2].parts[0]
    assert isinstance(retried, ToolResult) and retried.is_error
    assert (retried.call_id, retried.content) == ("call-1", "bad arguments")
    assert (ours[4].role, ours[4].text) == ("user", "bad output")
    back = to_pydantic_ai(ours)
    tool_return = back[2].parts[0]
    assert isinstance(tool_return, ToolReturnPart) and tool_return.outcome == "retried"
    assert isinstance(back[4].parts[0], RetryFeedbackPart)


def test_messages_of_other_libraries_become_a_valid_history() -> None:
    ours = [Message.system("sys"), Message.developer("dev"), Message.user("hi"),
            Message.assistant("", [{"id": "c1", "name": "f", "arguments": {"a": 1}}],
                              reasoning="plan"),
            Message.tool_result("c1", "done", is_error=True),
            Message.assistant("bye")]
    out = to_pydantic_ai(ours)
    assert [type(m) for m in out] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
    assert [type(p) for p in out[0].parts] == [SystemPromptPart, SystemPromptPart, UserPromptPart]
    returned = out[2].parts[0]
    assert isinstance(returned, ToolReturnPart)
    assert (returned.tool_name, returned.outcome) == ("f", "failed")
    assert isinstance(out[1].parts[0], ThinkingPart)


def test_unknown_roles_are_refused_with_the_path() -> None:
    with pytest.raises(InvalidMessage) as caught:
        to_pydantic_ai([Message.user("hi"), Message(role="critic", parts=[OurText(text="x")])])
    assert caught.value.path == "$[1].role"


def test_empty_responses_are_kept_with_a_placeholder_no_format_sends() -> None:
    from chathistory.formats import to_anthropic, to_openai_chat

    ours = from_pydantic_ai([ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[]),
                             ModelRequest(parts=[UserPromptPart("again")])])
    assert [m.role for m in ours] == ["user", "assistant", "user"]
    assert [type(p) for p in ours[1].parts] == [Reasoning]
    assert [m["role"] for m in to_openai_chat(ours)] == ["user", "user"]
    assert [m["role"] for m in to_anthropic(ours)["messages"]] == ["user"]


def test_agent_runs_with_a_stored_history(store: BaseStore) -> None:
    agent = Agent(TestModel(custom_output_text="first answer"))
    first = agent.run_sync("Hello")
    store.create_session("s1")
    store.append("s1", from_pydantic_ai(first.all_messages()))
    assert [m.role for m in store.range("s1")] == ["user", "assistant"]

    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("second answer")])

    loaded = to_pydantic_ai(store.resolve(store.range("s1")))
    second = Agent(FunctionModel(respond)).run_sync("And again?", message_history=loaded)
    assert second.output == "second answer"
    prompts = [p.content for m in seen[0] for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["Hello", "And again?"]
    texts = [p.content for m in seen[0] for p in m.parts if isinstance(p, TextPart)]
    assert texts == ["first answer"]
    store.append("s1", from_pydantic_ai(second.new_messages()))
    assert [m.text for m in store.range("s1")] == ["Hello", "first answer", "And again?",
                                                   "second answer"]


def test_a_responses_usage_is_the_messages_usage(store: BaseStore) -> None:
    """``ModelResponse.usage`` of a run (pydantic-ai's ``RequestUsage``) is the stored
    assistant message's ``Usage``, with the response's model and provider names;
    the history still goes back to pydantic-ai as it was."""
    from pydantic_ai.usage import RequestUsage

    from chathistory import Usage

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("measured")], model_name="claude-x",
                             provider_name="anthropic", usage=RequestUsage(
                                 input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                                 cache_write_tokens=300, cache_write_1h_tokens=200))

    run = Agent(FunctionModel(respond)).run_sync("Hello")
    store.create_session("s1")
    store.append("s1", from_pydantic_ai(run.all_messages()))
    assert store.range("s1")[1].usage == Usage(
        input_tokens=1312, output_tokens=30, cache_read_tokens=1000, cache_write_tokens=300,
        cache_write_5m_tokens=100, cache_write_1h_tokens=200,
        model="function:respond:", provider="anthropic")  # the name pydantic-ai reports
    assert store.range("s1")[0].usage is None
    back = to_pydantic_ai(store.range("s1"))
    assert ModelMessagesTypeAdapter.dump_json(back) == ModelMessagesTypeAdapter.dump_json(
        run.all_messages())
    empty = ModelResponse(parts=[TextPart("unmeasured")])
    assert from_pydantic_ai([empty])[0].usage is None


def test_agent_with_tools_round_trips_through_the_store(store: BaseStore) -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def roll(sides: int) -> str:
        """Roll a die."""
        return f"rolled on {sides}"

    result = agent.run_sync("Roll it")
    ours = from_pydantic_ai(result.all_messages())
    assert any(m.tool_calls for m in ours) and any(m.tool_results for m in ours)
    store.create_session("tools")
    store.append("tools", ours, reject_orphans=True)
    loaded: Any = to_pydantic_ai(store.resolve(store.range("tools")))
    assert loaded == normalized(result.all_messages())
    again = asyncio.run(agent.run("Again", message_history=loaded))
    assert again.output
