"""Chat Completions: round trips, SDK validity, the documented mapping choices."""

from __future__ import annotations

import json
from typing import Any

import pytest
from format_helpers import (
    check_anthropic,
    check_gemini,
    check_openai_chat,
    check_openai_responses,
    essence,
    load_fixture,
    without_nulls,
)

from chathistory import (
    Attachment,
    AudioPart,
    FilePart,
    ImagePart,
    InvalidMessage,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from chathistory.formats import (
    from_openai_chat,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)
from chathistory.stores import Store


def conversation(png: Attachment, wav: Attachment, pdf: Attachment) -> list[Message]:
    return [
        Message.system("You are terse."),
        Message.developer("Answer in French."),
        Message(role="user", name="alice", parts=[
            TextPart(text="What is in these?"),
            ImagePart(attachment=png, detail="high"),
            ImagePart(url="https://example.com/cat.jpg", detail="low"),
            AudioPart(attachment=wav),
            FilePart(attachment=pdf, name="report.pdf"),
            FilePart(url="openai-file:file-abc123", name="notes.pdf"),
        ]),
        Message.assistant("Let me look.", [
            ToolCall(id="call_1", name="lookup", arguments={"q": "cat", "n": 2}),
            ToolCall(id="call_2", name="lookup", arguments={"q": "réseau"}),
        ], name="bot"),
        Message.tool_result("call_1", "a cat", name="lookup"),
        Message.tool_result("call_2", [TextPart(text="a"), TextPart(text="network")],
                            name="lookup"),
        Message.assistant("Un chat et un réseau."),
    ]


def test_round_trip(png: Attachment, wav: Attachment, pdf: Attachment) -> None:
    msgs = conversation(png, wav, pdf)
    out = to_openai_chat(msgs)
    check_openai_chat(out)
    assert essence(from_openai_chat(out)) == essence(msgs)


def test_wire_shape(png: Attachment, wav: Attachment, pdf: Attachment) -> None:
    out = to_openai_chat(conversation(png, wav, pdf))
    assert out[0] == {"role": "system", "content": "You are terse."}
    assert out[1] == {"role": "developer", "content": "Answer in French."}
    user = out[2]
    assert user["name"] == "alice"
    kinds = [c["type"] for c in user["content"]]
    assert kinds == ["text", "image_url", "image_url", "input_audio", "file", "file"]
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert user["content"][1]["image_url"]["detail"] == "high"
    assert user["content"][3]["input_audio"]["format"] == "wav"
    assert user["content"][4]["file"]["filename"] == "report.pdf"
    assert user["content"][4]["file"]["file_data"].startswith("data:application/pdf;base64,")
    assert user["content"][5]["file"] == {"file_id": "file-abc123", "filename": "notes.pdf"}
    call = out[3]["tool_calls"][1]
    assert call == {"id": "call_2", "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"réseau"}'}}
    assert out[4] == {"role": "tool", "tool_call_id": "call_1", "content": "a cat"}


def test_fixture_parallel_tool_calls() -> None:
    fixture = load_fixture("openai_chat_parallel_tools.json")
    check_openai_chat(without_nulls(fixture))
    msgs = from_openai_chat(fixture)
    assert [m.role for m in msgs] == ["developer", "user", "assistant", "tool", "tool", "tool",
                                      "assistant"]
    calls = msgs[2].tool_calls
    assert [c.id for c in calls] == ["call_ujD1NwPxzeOSCbgw2NOabOin",
                                     "call_7hcYSxtNXDtYmN4dIvnmgH7T",
                                     "call_4ZxkZcvtLZb4vB6ivG7a7Ume"]
    assert calls[1].arguments == {"location": "Tokyo, Japan", "unit": "celsius"}
    assert [m.tool_results[0].name for m in msgs[3:6]] == ["get_current_weather"] * 3
    # Re-encoding gives back the provider's payload byte for byte (the model's own
    # arguments strings included), so a provider prompt cache stays valid.
    assert to_openai_chat(msgs) == without_nulls(fixture)


def test_several_results_in_one_message_become_several_tool_messages() -> None:
    msg = Message(role="tool", parts=[
        ToolResult(call_id="a", content="1"),
        ToolResult(call_id="b", content="2"),
        TextPart(text="Both done; what next?"),
    ])
    out = to_openai_chat([Message.assistant("", [ToolCall(id="a", name="f"),
                                                 ToolCall(id="b", name="f")]), msg])
    check_openai_chat(out)
    assert [(m["role"], m.get("tool_call_id")) for m in out] == [
        ("assistant", None), ("tool", "a"), ("tool", "b"), ("user", None)]
    assert "content" not in out[0]


def test_reasoning_is_not_sent() -> None:
    msgs = [
        Message.user("hi"),
        Message(role="assistant", parts=[Reasoning(text="thinking", signature="sig")]),
        Message.assistant("hello", reasoning=Reasoning(text="more", data="enc")),
    ]
    out = to_openai_chat(msgs)
    check_openai_chat(out)
    assert out == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def test_reasoning_content_from_compatible_servers_is_read() -> None:
    msgs = from_openai_chat([{"role": "assistant", "content": "4",
                              "reasoning_content": "2+2 is 4"}])
    assert isinstance(msgs[0].parts[0], Reasoning)
    assert msgs[0].parts[0].text == "2+2 is 4"
    assert to_openai_chat(msgs) == [{"role": "assistant", "content": "4"}]


def test_empty_content_beside_reasoning_content_is_sent_as_given() -> None:
    msgs = from_openai_chat([{"role": "assistant", "content": "", "reasoning_content": "hm"}])
    assert isinstance(msgs[0].parts[0], Reasoning)
    assert to_openai_chat(msgs) == [{"role": "assistant", "content": ""}]


def test_refusal_round_trip() -> None:
    items = [{"role": "assistant", "content": None, "refusal": "I can't help with that."}]
    msgs = from_openai_chat(items)
    assert msgs[0].text == "I can't help with that."
    assert to_openai_chat(msgs) == without_nulls(items)


def test_response_message_dump_is_accepted() -> None:
    # ChatCompletionMessage.model_dump() spells out every optional field.
    dumped = {"content": None, "refusal": None, "role": "assistant", "annotations": [],
              "audio": None, "function_call": None,
              "tool_calls": [{"id": "call_9", "type": "function",
                              "function": {"name": "f", "arguments": "{}"}}]}
    msgs = from_openai_chat([dumped])
    assert msgs[0].tool_calls == [ToolCall(id="call_9", name="f")]


def test_tool_result_with_image_is_unsupported(png: Attachment) -> None:
    msgs = [Message.assistant("", [ToolCall(id="c", name="shot")]),
            Message.tool_result("c", [TextPart(text="here"), ImagePart(attachment=png)])]
    with pytest.raises(InvalidMessage) as err:
        to_openai_chat(msgs)
    assert err.value.path == "$[1].parts[0].content[1]"
    out = to_openai_chat(msgs, drop_unsupported=True)
    assert out[1]["content"] == [{"type": "text", "text": "here"}]


def test_audio_other_than_wav_or_mp3_is_unsupported() -> None:
    flac = Attachment.from_bytes(b"fLaC" + b"\0" * 40, mime_type="audio/flac")
    with pytest.raises(InvalidMessage) as err:
        to_openai_chat([Message.user("listen", flac)])
    assert err.value.path == "$[0].parts[1]"
    assert to_openai_chat([Message.user("listen", flac)], drop_unsupported=True) == [
        {"role": "user", "content": "listen"}]


def test_arguments_are_compact_json() -> None:
    out = to_openai_chat([Message.assistant("", [ToolCall(id="c", name="f",
                                                          arguments={"a": [1, 2], "b": "é"})])])
    assert out[0]["tool_calls"][0]["function"]["arguments"] == '{"a":[1,2],"b":"é"}'
    assert json.loads(out[0]["tool_calls"][0]["function"]["arguments"]) == {"a": [1, 2], "b": "é"}


@pytest.mark.parametrize(("item", "path"), [
    ({"role": "function", "name": "f", "content": "x"}, "$[0].role"),
    ({"role": "user", "content": [{"type": "video", "video": {}}]}, "$[0].content[0].type"),
    ({"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
     "$[0].function_call"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                           "function": {"name": "f", "arguments": {"a": 1}}}]},
     "$[0].tool_calls[0].function.arguments"),
    ({"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url",
                                                        "image_url": {"url": "x"}}]},
     "$[0].content[0].type"),
])
def test_decode_errors_name_the_path(item: dict[str, object], path: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        from_openai_chat([item])
    assert err.value.path == path


CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
EMPTY_ASSISTANTS = {
    "audio_only": {"role": "assistant", "audio": {"id": "audio_abc123"}},
    "empty_content": {"role": "assistant", "content": ""},
    "empty_content_audio": {"role": "assistant", "content": "", "audio": {"id": "audio_abc123"}},
    "empty_content_named": {"role": "assistant", "content": "", "name": "bot"},
    "empty_content_calls": {"role": "assistant", "content": "", "tool_calls": [CALL]},
    "text_audio": {"role": "assistant", "content": "Hi!", "audio": {"id": "audio_abc123"}},
    "nothing": {"role": "assistant"},
}


def around(assistant: dict[str, Any]) -> list[dict[str, Any]]:
    after = ([{"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
             if "tool_calls" in assistant else [])
    return [{"role": "user", "content": "Say hi out loud."}, assistant, *after,
            {"role": "user", "content": "Again, please."}]


@pytest.mark.parametrize("assistant", EMPTY_ASSISTANTS.values(), ids=list(EMPTY_ASSISTANTS))
def test_assistant_with_audio_or_empty_content_round_trips(assistant: dict[str, Any]) -> None:
    payload = around(assistant)
    check_openai_chat(payload)
    msgs = from_openai_chat(payload)
    assert len(msgs) == len(payload)
    assert all(m.validate() is m for m in msgs)
    assert Message.from_json(msgs[1].to_json()) == msgs[1]
    out = to_openai_chat(msgs)
    check_openai_chat(out)
    assert out == payload


@pytest.mark.parametrize("assistant", EMPTY_ASSISTANTS.values(), ids=list(EMPTY_ASSISTANTS))
def test_empty_assistant_through_a_store(store: Store, assistant: dict[str, Any]) -> None:
    payload = around(assistant)
    store.create_session("s")
    store.append("s", from_openai_chat(payload))
    out = to_openai_chat(store.range("s"))
    check_openai_chat(out)
    assert out == payload


def test_an_audio_reference_reaches_no_other_provider() -> None:
    """It names audio OpenAI holds; the placeholder that keeps the message is sent nowhere."""
    msgs = from_openai_chat(around(EMPTY_ASSISTANTS["audio_only"]))
    request = to_anthropic(msgs)
    check_anthropic(request)
    assert request["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Say hi out loud."}, {"type": "text", "text": "Again, please."}]}]
    gemini = to_gemini(msgs)
    check_gemini(gemini)
    assert [c["role"] for c in gemini["contents"]] == ["user"]
    responses = to_openai_responses(msgs)
    check_openai_responses(responses)
    assert [item["role"] for item in responses] == ["user", "user"]
