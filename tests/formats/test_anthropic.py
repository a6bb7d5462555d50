"""Anthropic Messages: round trips, SDK validity, system extraction, turn merging,
thinking blocks, cache breakpoints and the request's own cache layout."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from format_helpers import check_anthropic, essence, load_fixture

from chathistory import (
    Attachment,
    FilePart,
    ImagePart,
    InvalidMessage,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from chathistory.formats import from_anthropic, to_anthropic
from chathistory.stores import Store


def conversation(png: Attachment, pdf: Attachment) -> list[Message]:
    text_doc = Attachment.from_bytes(b"plain notes\n", name="notes.txt", mime_type="text/plain")
    return [
        Message.system("You are careful."),
        Message(role="user", parts=[
            TextPart(text="Read these."),
            ImagePart(attachment=png),
            ImagePart(url="https://example.com/x.png"),
            FilePart(attachment=pdf, name="report.pdf"),
            FilePart(attachment=text_doc, name="notes.txt"),
            FilePart(url="anthropic-file:file_011CNha8iCJcU1wXNR6q4V8w", name="spec"),
        ]),
        Message(role="assistant", parts=[
            Reasoning(text="Two lookups.", signature="EqQBCgIYAhIM"),
            Reasoning(data="EmwKAhgBEgy3va3pzix"),
            TextPart(text="Checking."),
            ToolCall(id="toolu_1", name="search", arguments={"q": "a"}),
            ToolCall(id="toolu_2", name="search", arguments={"q": "b"}),
        ]),
        Message(role="tool", parts=[
            ToolResult(call_id="toolu_1", content="found a", name="search"),
            ToolResult(call_id="toolu_2", content=[TextPart(text="chart"),
                                                   ImagePart(attachment=png)],
                       is_error=True, name="search"),
        ]),
        Message.user("Thanks, summarize."),
        Message.assistant("Done."),
    ]


def test_round_trip(png: Attachment, pdf: Attachment) -> None:
    msgs = conversation(png, pdf)
    request = to_anthropic(msgs)
    check_anthropic(request)
    assert essence(from_anthropic(**request), names=True) == essence(msgs)


def test_wire_shape(png: Attachment, pdf: Attachment) -> None:
    request = to_anthropic(conversation(png, pdf))
    assert request["system"] == "You are careful."
    user = request["messages"][0]["content"]
    assert user[1]["source"]["type"] == "base64"
    assert user[1]["source"]["media_type"] == "image/png"
    assert user[2] == {"type": "image", "source": {"type": "url",
                                                   "url": "https://example.com/x.png"}}
    assert user[3]["type"] == "document" and user[3]["title"] == "report.pdf"
    assert user[4]["source"] == {"type": "text", "media_type": "text/plain",
                                 "data": "plain notes\n"}
    assert user[5]["source"] == {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}
    assistant = request["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "Two lookups.",
                            "signature": "EqQBCgIYAhIM"}
    assert assistant[1] == {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    assert assistant[3] == {"type": "tool_use", "id": "toolu_1", "name": "search",
                            "input": {"q": "a"}}
    # The tool message and the user message after it share one user turn.
    turn = request["messages"][2]
    assert turn["role"] == "user"
    assert [b["type"] for b in turn["content"]] == ["tool_result", "tool_result", "text"]
    assert turn["content"][1]["is_error"] is True
    assert "is_error" not in turn["content"][0]


def test_fixture_thinking_and_tools() -> None:
    fixture = load_fixture("anthropic_thinking_tools.json")
    check_anthropic(fixture)
    msgs = from_anthropic(fixture["system"], fixture["messages"])
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    thinking = msgs[2].parts[0]
    assert isinstance(thinking, Reasoning)
    assert thinking.signature is not None and thinking.signature.startswith("BDaL4VrbR2Oj")
    assert msgs[2].tool_calls[0].arguments == {"location": "Paris"}
    assert msgs[3].tool_results[0].name == "get_weather"
    # Blocks go back unchanged; string content (the shorthand for one text block) is
    # always written as a block list.
    expected = {**fixture, "messages": [
        {**t, "content": [{"type": "text", "text": t["content"]}]}
        if isinstance(t["content"], str) else t for t in fixture["messages"]]}
    assert to_anthropic(msgs) == expected


def test_system_and_developer_go_to_the_top_wherever_they_are() -> None:
    msgs = [Message.system("A"), Message.user("hi"), Message.developer("B"),
            Message.assistant("yo")]
    request = to_anthropic(msgs)
    check_anthropic(request)
    assert request["system"] == [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]
    assert [t["role"] for t in request["messages"]] == ["user", "assistant"]
    assert "system" not in to_anthropic([Message.user("hi")])


def test_consecutive_turns_merge_and_tool_results_come_first() -> None:
    msgs = [
        Message.user("q"),
        Message.assistant("", [ToolCall(id="t1", name="f"), ToolCall(id="t2", name="f")]),
        Message.user("(also, hurry)"),  # odd but possible: text before the results
        Message.tool_result("t1", "1"),
        Message.tool_result("t2", "2"),
        Message(role="assistant", parts=[Reasoning(text="ok", signature="s")]),
        Message.assistant("both done"),
    ]
    request = to_anthropic(msgs)
    check_anthropic(request)
    turns = request["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert [b["type"] for b in turns[3]["content"]] == ["thinking", "text"]


def test_cache_breakpoint_on_last_block_of_the_message(png: Attachment) -> None:
    sys = Message.system("Long instructions")
    first = Message.user("look", png)
    msgs = [sys, first, Message.assistant("a picture"), Message.user("and now?")]
    request = to_anthropic(msgs, cache_breakpoint_id=first.id)
    check_anthropic(request)
    blocks = request["messages"][0]["content"]
    assert blocks[-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in blocks[0]
    both = to_anthropic(msgs, cache_breakpoint_id=[sys.id, first.id])
    check_anthropic(both)
    assert both["system"] == [{"type": "text", "text": "Long instructions",
                               "cache_control": {"type": "ephemeral"}}]
    back = from_anthropic(**both)
    assert essence(back) == essence(msgs)


def test_cache_breakpoint_errors() -> None:
    thinking_only = Message(role="assistant", parts=[Reasoning(text="t", signature="s")])
    with pytest.raises(InvalidMessage) as err:
        to_anthropic([Message.user("x"), thinking_only], cache_breakpoint_id=thinking_only.id)
    assert err.value.path == "$[1]"
    with pytest.raises(InvalidMessage, match="no message has id 'nope'"):
        to_anthropic([Message.user("x")], cache_breakpoint_id="nope")


def test_audio_is_unsupported(wav: Attachment) -> None:
    msgs = [Message.user("listen", wav)]
    with pytest.raises(InvalidMessage) as err:
        to_anthropic(msgs)
    assert err.value.path == "$[0].parts[1]"
    assert "drop_unsupported" in str(err.value)
    assert to_anthropic(msgs, drop_unsupported=True) == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "listen"}]}]}


def test_foreign_reasoning_is_not_sent() -> None:
    msg = Message(role="assistant", parts=[
        Reasoning(text="x", data="enc", provider_metadata={"openai_responses": {"id": "rs"}}),
        Reasoning(text="plain"),
        TextPart(text="answer"),
    ])
    assert to_anthropic([Message.user("q"), msg])["messages"][1]["content"] == [
        {"type": "text", "text": "answer"}]


@pytest.mark.parametrize(("turn", "path"), [
    ({"role": "user", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search",
                                   "input": {}}]}, "$.messages[0].content[0].type"),
    ({"role": "user", "content": [{"type": "image", "source": {"type": "base64",
                                                               "media_type": "image/png",
                                                               "data": "%%%"}}]},
     "$.messages[0].content[0].source.data"),
    ({"role": "tool", "content": "x"}, "$.messages[0].role"),
])
def test_decode_errors_name_the_path(turn: dict[str, object], path: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        from_anthropic(None, [turn])
    assert err.value.path == path



# ---------------------------------------------------------------- the request's cache layout


def b64(att: Attachment) -> str:
    assert att.data is not None
    return base64.b64encode(att.data).decode("ascii")


def cached_requests(png: Attachment, pdf: Attachment) -> dict[str, dict[str, Any]]:
    """Requests with cache_control on every kind of block that takes it (at most four
    breakpoints each, as the API allows)."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(png)}}
    document = {"type": "document", "title": "report.pdf",
                "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf)}}
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    ephemeral = {"type": "ephemeral"}
    return {
        "system_image_tool_use_result": {
            "system": [{"type": "text", "text": "You are careful.", "cache_control": one_hour},
                       {"type": "text", "text": "Today is Monday."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                             {**image, "cache_control": ephemeral}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCgIYAhIM"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "search",
                     "input": {"q": "red"}, "cache_control": ephemeral}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "a red square"}],
                     "cache_control": ephemeral}]},
                {"role": "assistant", "content": [{"type": "text", "text": "A red square."}]},
            ],
        },
        "document_nested_text_assistant_user": {
            "system": [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}],
            "messages": [
                {"role": "user", "content": [{**document, "cache_control": one_hour},
                                             {"type": "text", "text": "Summarize."}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_2", "name": "pages", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                        {"type": "text", "text": "12 pages", "cache_control": ephemeral},
                        image]}]},
                {"role": "assistant", "content": [{"type": "text", "text": "12 pages.",
                                                   "cache_control": ephemeral}]},
            ],
        },
    }


CACHED = ["system_image_tool_use_result", "document_nested_text_assistant_user"]


@pytest.mark.parametrize("name", CACHED)
def test_cache_control_round_trips(png: Attachment, pdf: Attachment, name: str) -> None:
    request = cached_requests(png, pdf)[name]
    check_anthropic(request)
    msgs = from_anthropic(**request)
    assert all(m.validate() is m for m in msgs)
    out = to_anthropic(msgs)
    check_anthropic(out)
    assert out == request


@pytest.mark.parametrize("name", CACHED)
def test_cache_control_survives_a_store(store: Store, png: Attachment, pdf: Attachment,
                                        name: str) -> None:
    request = cached_requests(png, pdf)[name]
    store.create_session("s")
    store.append("s", from_anthropic(**request))
    out = to_anthropic(store.range("s"), resolver=lambda att: store.get_asset(att.sha256))
    check_anthropic(out)
    assert out == request


def test_cache_breakpoint_id_beside_kept_cache_control(png: Attachment, pdf: Attachment) -> None:
    request = cached_requests(png, pdf)["document_nested_text_assistant_user"]  # 4 breakpoints
    msgs = from_anthropic(**request)
    # on a block that has one already: kept as it is (its ttl too)
    same = to_anthropic(msgs, cache_breakpoint_id=msgs[-1].id)
    check_anthropic(same)
    assert same == request
    # a fifth is refused, naming the message, as the API would refuse it
    question = Message.user("And the conclusion?")
    with pytest.raises(InvalidMessage, match="keep_cache_control=False") as err:
        to_anthropic([*msgs, question], cache_breakpoint_id=question.id)
    assert err.value.path == f"$[{len(msgs)}]"
    # without the kept ones, only the breakpoint asked for
    moved = to_anthropic([*msgs, question], cache_breakpoint_id=question.id,
                         keep_cache_control=False)
    check_anthropic(moved)
    marked = [json.dumps(b) for t in moved["messages"] for b in t["content"]
              if "cache_control" in json.dumps(b)]
    assert marked == [json.dumps({"type": "text", "text": "And the conclusion?",
                                  "cache_control": {"type": "ephemeral"}})]
    assert moved["system"] == "Be brief."
