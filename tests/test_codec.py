"""The serialized form: round trips, attachment dedup, the v1 golden file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chathistory import (
    Attachment,
    AudioPart,
    FilePart,
    History,
    ImagePart,
    InvalidMessage,
    KVStatus,
    Message,
    Reasoning,
    ToolCall,
    ToolResult,
)
from chathistory.model.codec import SCHEMA_VERSION

GOLDEN = Path(__file__).parent / "golden"


def test_v1_golden_file_loads() -> None:
    h = History.from_json((GOLDEN / "history_v1.json").read_bytes())
    assert len(h) == 7
    assert h.metadata == {"title": "golden"}
    system, user, call, result, err, mcp, answer = h
    assert system.role == "system" and system.text == "You are terse."
    assert user.name == "alice" and user.metadata == {"channel": "web"}
    img, pdf, url = user.parts[1], user.parts[2], user.parts[3]
    assert isinstance(img, ImagePart) and img.attachment is not None
    assert img.attachment.data is not None and img.attachment.data.startswith(b"\x89PNG")
    assert (img.attachment.width, img.attachment.height, img.detail) == (4, 3, "high")
    assert isinstance(pdf, FilePart) and pdf.filename == "report.pdf"
    assert isinstance(url, ImagePart) and url.url == "https://example.com/cat.jpg"
    assert isinstance(call.parts[0], Reasoning) and call.parts[0].signature == "sig-abc"
    assert [c.name for c in call.tool_calls] == ["get_weather", "get_time"]
    assert call.tool_calls[0].arguments == {"city": "Paris"}
    assert (call.kv_size, call.kv_start, call.kv_status) == (42, 17, KVStatus.MARKED)
    assert call.token_counts == {"o200k_base": 42}
    assert call.provider_metadata == {"openai": {"response_id": "resp_1"}}
    assert result.kv_status == KVStatus.UNLOADED
    assert result.tool_results[0].text == "18C, sunny"
    res = err.tool_results[0]
    assert res.is_error and isinstance(res.content, list)
    inner = res.content[1]
    assert isinstance(inner, ImagePart) and inner.attachment is not None
    assert inner.attachment.data == img.attachment.data
    assert mcp.role == "mcp_response"
    assert isinstance(answer.parts[1], AudioPart) and answer.parts[1].transcript == "sunny"
    # the newest 4 widen back to the call that the results answer
    assert h.recent(4) == [call, result, err, mcp, answer]
    assert h.to_json() == History.from_json(h.to_json()).to_json()


def test_golden_file_stores_each_asset_once() -> None:
    doc = json.loads((GOLDEN / "history_v1.json").read_bytes())
    assert doc["schema_version"] == 1
    assert len(doc["assets"]) == 3  # the png is used twice and stored once


def test_round_trip_equal(png_bytes: bytes) -> None:
    att = Attachment.from_bytes(png_bytes)
    h = History([
        Message.system("s"),
        Message.user("pic", att),
        Message.assistant("", [ToolCall(id="c", name="f", arguments={"a": [1, 2]})]),
        Message(role="tool", parts=[ToolResult(call_id="c", content=[ImagePart(attachment=att)])]),
        Message(role="mcp_response", parts=[Reasoning(data="opaque")], name="srv"),
    ])
    h.by_tokens(1000)  # cache counts: they must survive
    back = History.from_json(h.to_json())
    assert back == h
    assert [m.token_counts for m in back] == [m.token_counts for m in h]
    assert History.from_dict(h.to_dict()) == h
    assert h.to_json().count(att.sha256.encode()) >= 2  # referenced twice, stored once
    assert json.loads(h.to_json())["schema_version"] == SCHEMA_VERSION


def test_future_version_is_refused_clearly() -> None:
    data = json.dumps({"schema_version": 99, "messages": []})
    with pytest.raises(InvalidMessage, match="upgrade chathistory") as info:
        History.from_json(data)
    assert info.value.path == "$.schema_version"


def test_bad_document_paths() -> None:
    doc = {"schema_version": 1, "messages": [
        {"role": "user", "parts": [{"type": "text", "text": "ok"}]},
        {"role": "tool", "parts": [{"type": "tool_result", "call_id": 7}]},
    ]}
    with pytest.raises(InvalidMessage) as info:
        History.from_json(json.dumps(doc))
    assert info.value.path == "$.messages[1].parts[0].call_id"
    doc["messages"][1] = {"role": "user", "parts": []}
    with pytest.raises(InvalidMessage) as info:
        History.from_json(json.dumps(doc))
    assert info.value.path == "$.messages[1].parts"
    with pytest.raises(InvalidMessage, match="invalid JSON"):
        History.from_json(b"{\"schema_version\": 1, \"messages\": [")


def test_raw_arguments_round_trip_and_are_left_out_when_unset() -> None:
    """``ToolCall.raw_arguments`` is a field added with a default: absent from documents
    that do not need it (so v1 documents decode unchanged), kept exactly when set."""
    cut = ToolCall.from_json_arguments('{"city": "Par', id="c1", name="get_weather")
    plain = ToolCall(id="c2", name="get_weather", arguments={"city": "Rome"})
    msg = Message(role="assistant", parts=[cut, plain])
    raw = json.loads(msg.to_json())
    assert raw["parts"][0]["raw_arguments"] == '{"city": "Par'
    assert "arguments" not in raw["parts"][0]  # {} is the default
    assert "raw_arguments" not in raw["parts"][1]
    h = History([Message.user("weather?"), msg,
                 Message.tool_result("c1", "bad arguments"), Message.tool_result("c2", "21C")])
    back = History.from_json(h.to_json())
    assert back == h
    call = back[1].tool_calls[0]
    assert call.raw_arguments == '{"city": "Par' and call.arguments_json == '{"city": "Par'
    golden = json.loads((GOLDEN / "history_v1.json").read_bytes())
    calls = [p for m in golden["messages"] for p in m["parts"] if p["type"] == "tool_call"]
    assert calls and all("raw_arguments" not in c for c in calls)


def test_usage_round_trips_and_old_data_has_none() -> None:
    from chathistory import Usage
    from chathistory.model.codec import decode_document, decode_message, encode_document

    usage = Usage(input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                  cache_write_tokens=300, cache_write_1h_tokens=200, model="claude-x",
                  provider="anthropic", latency_ms=812.5)
    msg = Message.assistant("hi")
    msg.usage = usage
    assert Message.from_json(msg.to_json()).usage == usage
    assert decode_document(encode_document([msg]))[0][0].usage == usage
    assert json.loads(msg.to_json())["usage"]["cache_write_1h_tokens"] == 200
    assert "usage" not in json.loads(Message.assistant("hi").to_json())  # omitted unset
    messages, _ = decode_document((GOLDEN / "history_v1.json").read_bytes())
    assert all(m.usage is None for m in messages)
    with pytest.raises(InvalidMessage) as err:
        decode_message(b'{"role": "assistant", "usage": {"input_tokens": -3}}')
    assert err.value.path == "$.usage.input_tokens"


def test_a_usage_built_in_python_is_checked_by_validate() -> None:
    from chathistory import Usage

    msg = Message.assistant("hi")
    msg.usage = Usage(input_tokens=5, cache_read_tokens=-1)
    with pytest.raises(InvalidMessage) as err:
        msg.validate()
    assert err.value.path == "$.usage.cache_read_tokens"
    msg.usage = Usage(input_tokens=5, latency_ms=float("nan"))
    with pytest.raises(InvalidMessage) as err:
        msg.validate()
    assert err.value.path == "$.usage.latency_ms"
    msg.usage = Usage(input_tokens=5, cache_write_1h_tokens=0, latency_ms=3)
    assert msg.validate() is msg
