"""Gemini: round trips, SDK validity, call ids, function responses, thoughts."""

from __future__ import annotations

import json

import pytest
from format_helpers import check_gemini, essence, load_fixture
from google.genai import types as genai_types

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
from chathistory.formats import from_gemini, to_gemini

THOUGHT = {"gemini": {"thought": True}}


def conversation(png: Attachment, wav: Attachment, pdf: Attachment) -> list[Message]:
    return [
        Message.system("You run the house."),
        Message(role="user", parts=[
            TextPart(text="Here:"),
            ImagePart(attachment=png),
            AudioPart(attachment=wav),
            FilePart(attachment=pdf),
            FilePart(url="https://generativelanguage.googleapis.com/v1beta/files/abc",
                     mime_type="application/pdf"),
        ]),
        Message(role="assistant", parts=[
            Reasoning(text="Lights then music.", signature="c2lnbmF0dXJl",
                      provider_metadata=THOUGHT),
            ToolCall(id="call_1", name="dim_lights", arguments={"brightness": 0.5}),
            ToolCall(id="call_2", name="start_music", arguments={"loud": True}),
        ]),
        Message(role="tool", parts=[
            ToolResult(call_id="call_1", content="dimmed", name="dim_lights"),
            ToolResult(call_id="call_2", content="speaker offline", is_error=True,
                       name="start_music"),
        ]),
        Message.user("Try again later."),
        Message.assistant("Will do."),
    ]


def test_round_trip_with_call_ids(png: Attachment, wav: Attachment, pdf: Attachment) -> None:
    msgs = conversation(png, wav, pdf)
    request = to_gemini(msgs, send_call_ids=True)
    check_gemini(request)
    assert essence(from_gemini(request), names=False) == essence(msgs, names=False)


def test_round_trip_without_ids_pairs_by_name(png: Attachment, wav: Attachment,
                                              pdf: Attachment) -> None:
    msgs = conversation(png, wav, pdf)
    request = to_gemini(msgs)
    check_gemini(request)
    calls = [p["functionCall"] for p in request["contents"][1]["parts"] if "functionCall" in p]
    assert all("id" not in c for c in calls)
    back = from_gemini(request)
    new_ids = {c.name: c.id for c in back[2].tool_calls}
    assert {r.name: r.call_id for r in back[3].tool_results} == new_ids
    renamed = {"call_1": new_ids["dim_lights"], "call_2": new_ids["start_music"]}
    expected = [
        (role, name, [(p[0], renamed.get(p[1], p[1]), *p[2:]) if p[0] in ("call", "result")
                      else p for p in parts])
        for role, name, parts in essence(msgs, names=False)]
    assert essence(back, names=False) == expected


def test_wire_shape(png: Attachment, wav: Attachment, pdf: Attachment) -> None:
    request = to_gemini(conversation(png, wav, pdf))
    assert request["system_instruction"] == {"parts": [{"text": "You run the house."}]}
    user = request["contents"][0]["parts"]
    assert user[1]["inlineData"]["mimeType"] == "image/png"
    assert user[4] == {"fileData": {"mimeType": "application/pdf", "fileUri":
                       "https://generativelanguage.googleapis.com/v1beta/files/abc"}}
    model = request["contents"][1]["parts"]
    assert model[0] == {"text": "Lights then music.", "thought": True,
                        "thoughtSignature": "c2lnbmF0dXJl"}
    results = request["contents"][2]
    assert results["role"] == "user"
    assert [p.get("functionResponse", {}).get("response") for p in results["parts"]] == [
        {"output": "dimmed"}, {"error": "speaker offline"}, None]
    assert results["parts"][2] == {"text": "Try again later."}


def test_fixture_parallel_function_calling() -> None:
    fixture = load_fixture("gemini_parallel_function_calling.json")
    check_gemini(fixture)
    msgs = from_gemini(fixture)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    thought, *calls = msgs[2].parts
    assert isinstance(thought, Reasoning) and thought.text.startswith("**Planning the party**")
    assert [c.name for c in calls] == ["power_disco_ball", "start_music", "dim_lights"]
    results = msgs[3].tool_results
    assert [r.call_id for r in results] == [c.id for c in msgs[2].tool_calls]
    assert json.loads(results[0].text) == {"result": "Disco ball is spinning!"}
    # Responses, thought parts and the signature on the first call go back unchanged.
    assert to_gemini(msgs) == fixture


def test_minted_ids_are_sent_back() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "fc-1", "name": "w", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc-1", "name": "w",
                                                         "response": {"output": "sun"}}}]},
    ]
    msgs = from_gemini(contents)
    assert msgs[1].tool_calls[0].id == "fc-1"
    assert msgs[2].tool_results[0].call_id == "fc-1"
    assert to_gemini(msgs)["contents"] == contents


def test_snake_case_sdk_dump_decodes(png: Attachment) -> None:
    content = genai_types.Content(role="model", parts=[
        genai_types.Part(text="hi", thought_signature=b"sig"),
        genai_types.Part.from_bytes(data=png.data or b"", mime_type="image/png"),
        genai_types.Part.from_function_call(name="f", args={"x": 1}),
    ])
    for dumped in (content.model_dump(mode="json"), content.model_dump()):
        msg = from_gemini([dumped])[0]
        assert msg.parts[0].provider_metadata == {"gemini": {"thought_signature": "c2ln"}}
        assert msg.attachments[0].sha256 == png.sha256
        assert msg.tool_calls[0].arguments == {"x": 1}


def test_result_media_goes_in_response_parts(png: Attachment) -> None:
    msgs = [Message.assistant("", [ToolCall(id="c", name="shot")]),
            Message.tool_result("c", [TextPart(text="screen"), ImagePart(attachment=png)])]
    request = to_gemini(msgs)
    check_gemini(request)
    response = request["contents"][1]["parts"][0]["functionResponse"]
    assert response["name"] == "shot" and response["response"] == {"output": "screen"}
    assert response["parts"][0]["inlineData"]["mimeType"] == "image/png"
    back = from_gemini(request)
    assert essence(back)[1][2][0][2] == essence(msgs)[1][2][0][2]


def test_errors() -> None:
    orphan = [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]
    with pytest.raises(InvalidMessage) as err:
        from_gemini(orphan)
    assert err.value.path == "$[0].parts[0].functionResponse.name"
    with pytest.raises(InvalidMessage) as err:
        to_gemini([Message.tool_result("unknown", "x")])
    assert err.value.path == "$[0].parts[0].name"
    with pytest.raises(InvalidMessage) as err:
        to_gemini([Message.user("see", ImagePart(url="https://example.com/image"))])
    assert err.value.path == "$[0].parts[1].mime_type"
    with pytest.raises(InvalidMessage) as err:
        from_gemini([{"role": "model", "parts": [{"executableCode": {"code": "1"}}]}])
    assert err.value.path == "$[0].parts[0].executableCode"


def test_system_media_and_foreign_file_ids_are_unsupported(png: Attachment) -> None:
    msgs = [Message(role="system", parts=[TextPart(text="rules"), ImagePart(attachment=png)]),
            Message.user("x", FilePart(url="openai-file:file-1"))]
    with pytest.raises(InvalidMessage) as err:
        to_gemini(msgs)
    assert err.value.path == "$[0].parts[1]"
    request = to_gemini(msgs, drop_unsupported=True)
    assert request == {"contents": [{"role": "user", "parts": [{"text": "x"}]}],
                       "system_instruction": {"parts": [{"text": "rules"}]}}
