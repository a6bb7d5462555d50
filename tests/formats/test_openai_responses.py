"""Responses API: round trips, SDK validity, reasoning items and output messages."""

from __future__ import annotations

import pytest
from format_helpers import (
    assert_sdk_valid,
    check_openai_responses,
    essence,
    load_fixture,
    without_nulls,
)
from openai.types.responses import ResponseInputAudioParam

from chathistory import (
    Attachment,
    FilePart,
    ImagePart,
    InvalidMessage,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
)
from chathistory.formats import from_openai_responses, to_openai_responses

RS = {"openai_responses": {"id": "rs_1"}}


def conversation(png: Attachment, pdf: Attachment) -> list[Message]:
    return [
        Message.developer("Be brief."),
        Message(role="user", parts=[
            TextPart(text="Look:"),
            ImagePart(attachment=png),
            ImagePart(url="https://example.com/a.png", detail="high"),
            FilePart(attachment=pdf, name="report.pdf"),
            FilePart(url="https://example.com/b.pdf"),
            FilePart(url="openai-file:file-xyz"),
        ]),
        Message(role="assistant", parts=[
            Reasoning(text="Need both tools.", data="gAAAAB-encrypted", provider_metadata=RS),
            ToolCall(id="call_a", name="ocr", arguments={"page": 1}),
            ToolCall(id="call_b", name="ocr", arguments={"page": 2}),
        ]),
        Message.tool_result("call_a", "page one", name="ocr"),
        Message.tool_result("call_b", [TextPart(text="page two"), ImagePart(attachment=png)],
                            name="ocr"),
        Message.assistant("Two pages."),
    ]


def test_round_trip(png: Attachment, pdf: Attachment) -> None:
    msgs = conversation(png, pdf)
    out = to_openai_responses(msgs)
    check_openai_responses(out)
    back = from_openai_responses(out)
    assert essence(back, names=False) == essence(msgs, names=False)
    assert back[2].parts[0].provider_metadata == RS


def test_wire_shape(png: Attachment, pdf: Attachment) -> None:
    out = to_openai_responses(conversation(png, pdf))
    assert out[0] == {"type": "message", "role": "developer", "content": "Be brief."}
    content = out[1]["content"]
    assert content[1]["type"] == "input_image" and content[1]["detail"] == "auto"
    assert content[1]["image_url"].startswith("data:image/png;base64,")
    assert content[3]["filename"] == "report.pdf"
    assert content[4] == {"type": "input_file", "file_url": "https://example.com/b.pdf"}
    assert content[5] == {"type": "input_file", "file_id": "file-xyz"}
    assert out[2] == {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAB-encrypted",
                      "summary": [{"type": "summary_text", "text": "Need both tools."}]}
    assert out[3] == {"type": "function_call", "call_id": "call_a", "name": "ocr",
                      "arguments": '{"page":1}'}
    assert out[5] == {"type": "function_call_output", "call_id": "call_a", "output": "page one"}
    assert out[6]["output"][1]["type"] == "input_image"
    assert out[7] == {"type": "message", "role": "assistant", "content": "Two pages."}


def test_fixture_reasoning_and_function_calls() -> None:
    fixture = load_fixture("openai_responses_reasoning_tools.json")
    check_openai_responses(without_nulls(fixture))
    msgs = from_openai_responses(fixture)
    assert [m.role for m in msgs] == ["developer", "user", "assistant", "tool", "assistant"]
    reasoning, call = msgs[2].parts
    assert isinstance(reasoning, Reasoning) and isinstance(call, ToolCall)
    assert reasoning.data is not None and reasoning.data.startswith("gAAAAABoISQ24")
    assert reasoning.text.startswith("**Getting the weather**")
    assert call.id == "call_4fFGx7EXyBuEHHqNVMmu5x1F"
    assert call.arguments == {"latitude": 48.8566, "longitude": 2.3522}
    assert msgs[3].tool_results[0].name == "get_weather"
    # Every item goes back as the API gave it: ids, status, encrypted content
    # (``type: message``, optional on input messages, is always written).
    expected = [{"type": "message", **item} for item in without_nulls(fixture)]
    assert to_openai_responses(msgs) == expected


def test_output_message_parts_share_their_item() -> None:
    items = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
              "phase": "final_answer",
              "content": [{"type": "output_text", "text": "a", "annotations": []},
                          {"type": "refusal", "refusal": "no"}]}]
    msgs = from_openai_responses(items)
    assert len(msgs) == 1 and [p.text for p in msgs[0].parts] == ["a", "no"]
    out = to_openai_responses(msgs)
    check_openai_responses(out)
    assert out == items


def test_summary_with_several_entries_is_kept() -> None:
    item = {"type": "reasoning", "id": "rs_2", "encrypted_content": "enc",
            "summary": [{"type": "summary_text", "text": "one"},
                        {"type": "summary_text", "text": "two"}]}
    msgs = from_openai_responses([item, {"type": "function_call", "call_id": "c", "name": "f",
                                         "arguments": "{}"}])
    assert msgs[0].parts[0].text == "one\n\ntwo"  # type: ignore[union-attr]
    assert to_openai_responses(msgs)[0] == item


def test_reasoning_from_other_providers_is_not_sent() -> None:
    msg = Message(role="assistant", parts=[Reasoning(text="hm", signature="anthropic-sig"),
                                           TextPart(text="ok")])
    assert to_openai_responses([msg]) == [
        {"type": "message", "role": "assistant", "content": "ok"}]


def test_audio_is_input_audio(wav: Attachment) -> None:
    out = to_openai_responses([Message.user("hear", wav)])
    audio = out[0]["content"][1]
    # openai 3.54 defines ResponseInputAudioParam but leaves it out of the message
    # content union, so the part is checked against its own type.
    assert_sdk_valid(ResponseInputAudioParam, audio)
    assert audio["input_audio"]["format"] == "wav"
    back = from_openai_responses(out)
    assert back[0].attachments[0].sha256 == wav.sha256


def test_media_in_assistant_message_is_unsupported(png: Attachment) -> None:
    msg = Message(role="assistant", parts=[TextPart(text="see"), ImagePart(attachment=png)])
    with pytest.raises(InvalidMessage) as err:
        to_openai_responses([msg])
    assert err.value.path == "$[0].parts[1]"
    assert len(to_openai_responses([msg], drop_unsupported=True)) == 1


@pytest.mark.parametrize(("item", "path"), [
    ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "$[0].type"),
    ({"type": "message", "role": "user", "content": [{"type": "input_video"}]},
     "$[0].content[0].type"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": 1},
     "$[0].arguments"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
      "caller": {"type": "program", "caller_id": "p"}}, "$[0].caller"),
])
def test_decode_errors_name_the_path(item: dict[str, object], path: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        from_openai_responses([item])
    assert err.value.path == path
