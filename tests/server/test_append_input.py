"""What an append accepts (issue 19): inline attachments described by the server from
their bytes, unknown fields refused at every depth with the path named, and provider
shapes with ``?format=``. Every refused request leaves the session as it was."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import Served

from chathistory import Message
from chathistory.formats import (
    from_anthropic,
    from_gemini,
    from_openai_chat,
    from_openai_responses,
)
from chathistory.tokens import openai_image_tokens

PHOTO = (Path(__file__).resolve().parent.parent / "data" / "photo_400x300.png").read_bytes()
B64 = base64.b64encode(PHOTO).decode()
DIGEST = hashlib.sha256(PHOTO).hexdigest()


def _append(a: httpx.Client, sid: str, body: dict[str, Any], **params: str) -> httpx.Response:
    return a.post(f"/v1/sessions/{sid}/messages", json=body, params=params)


def _stored(a: httpx.Client, sid: str) -> list[dict[str, Any]]:
    response = a.get(f"/v1/sessions/{sid}/messages", params={"start": 0})
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def _refused(a: httpx.Client, sid: str, body: dict[str, Any], path: str, *words: str,
             **params: str) -> str:
    """Append ``body``: a 422 naming ``path`` whose message holds ``words``, and
    nothing stored. Returns the message."""
    before = a.get(f"/v1/sessions/{sid}").headers["ETag"]
    response = _append(a, sid, body, **params)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["path"] == path, error
    for word in words:
        assert word in error["message"], error
    assert a.get(f"/v1/sessions/{sid}").headers["ETag"] == before
    message: str = error["message"]
    return message


def _image_message(attachment: dict[str, Any], text: str = "what is this?") -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": text},
                                      {"type": "image", "attachment": attachment}]}


# ---------------------------------------------------------------- inline attachments


def test_an_inline_attachment_needs_only_its_bytes(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    body = {"messages": [_image_message({"name": "photo.png", "mime_type": "image/png",
                                         "data": B64}),
                         _image_message({"data": B64}, "and this one?")]}
    assert _append(a, sid, body).status_code == 200
    for stored in _stored(a, sid):
        att = stored["parts"][1]["attachment"]
        assert (att["size"], att["sha256"], att["modality"], att["mime_type"]) == (
            len(PHOTO), DIGEST, "image", "image/png")
        assert (att["width"], att["height"]) == (400, 300)
        assert "data" not in att  # kept once, by hash
    names = [m["parts"][1]["attachment"]["name"] for m in _stored(a, sid)]
    assert names == ["photo.png", f"{DIGEST[:12]}.png"]
    assert a.get(f"/v1/assets/{DIGEST}").content == PHOTO


def test_an_image_counts_the_same_inline_uploaded_and_referenced(
        served: Served, a: httpx.Client) -> None:
    """The same 400x300 PNG: inline, as the upload's answer, and as a bare reference
    by sha256 (the server completes it from the upload) counts the same tokens."""
    sid = served.new_session(a)
    upload = a.post("/v1/assets", content=PHOTO, params={"name": "photo.png"})
    assert upload.status_code == 201
    uploaded = upload.json()
    assert (uploaded["width"], uploaded["height"]) == (400, 300)
    body = {"messages": [
        _image_message({"name": "photo.png", "mime_type": "image/png", "data": B64}),
        _image_message(uploaded),
        _image_message({"sha256": DIGEST}),
    ]}
    assert _append(a, sid, body).status_code == 200
    stored = _stored(a, sid)
    counts = [m["token_counts"] for m in stored]
    assert counts[0] == counts[1] == counts[2]
    referenced = stored[2]["parts"][1]["attachment"]
    assert (referenced["name"], referenced["size"], referenced["width"]) == (
        "photo.png", len(PHOTO), 400)
    # the dimensions were used: an image of unknown size counts as 1024x1024 (765)
    counter = served.store.counter
    text_only = counter.count_message(Message.user("what is this?"))
    assert counts[0][counter.name] - text_only == openai_image_tokens(400, 300) == 255


@pytest.mark.parametrize(("field", "value", "words"), [
    ("size", 10, ("size does not match",)),
    ("sha256", "0" * 64, ("sha256 does not match",)),
    ("modality", "document", ("modality is 'image'",)),
    ("width", 401, ("width is 400",)),
    ("height", 299, ("height is 300",)),
])
def test_given_fields_that_disagree_with_the_bytes_are_refused(
        served_sqlite: Served, field: str, value: Any, words: tuple[str, ...]) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        attachment = {"name": "p.png", "mime_type": "image/png", "data": B64, field: value}
        body = {"messages": [Message.user("first").to_dict(), _image_message(attachment)]}
        _refused(a, sid, body, f"$.messages[1].parts[1].attachment.{field}", *words)


def test_an_image_parts_own_dimensions_are_checked_too(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        message = _image_message({"data": B64})
        message["parts"][1]["width"] = 1024
        _refused(a, sid, {"messages": [message]}, "$.messages[0].parts[1].width", "width is 400")


def test_an_edit_is_checked_against_its_bytes_as_an_append_is(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        first = Message.user("hi").to_dict()
        assert _append(a, sid, {"messages": [first]}).status_code == 200
        message = _image_message({"name": "p.png", "mime_type": "image/png", "data": B64,
                                  "width": 401})
        edit = a.post(f"/v1/sessions/{sid}/edit",
                      json={"message_id": first["id"], "message": message})
        assert edit.status_code == 422, edit.text
        assert edit.json()["error"]["path"] == "$.message.parts[1].attachment.width"
        assert len(a.get(f"/v1/sessions/{sid}/lineage").json()) == 1  # no branch made


def test_a_reference_without_what_cannot_be_derived_is_refused(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        _refused(a, sid, {"messages": [_image_message({"name": "p.png"})]},
                 "$.messages[0].parts[1].attachment.sha256", "data", "sha256")
        never_uploaded = {"sha256": "ab" * 32}
        _refused(a, sid, {"messages": [_image_message(never_uploaded)]},
                 "$.messages[0].parts[1].attachment.size", "needs its size")
        upload = a.post("/v1/assets", content=PHOTO).json()
        wrong = {"sha256": upload["sha256"], "size": 5}
        _refused(a, sid, {"messages": [_image_message(wrong)]},
                 "$.messages[0].parts[1].attachment.size", str(len(PHOTO)))


# ---------------------------------------------------------------- unknown fields


TOOL_CALL = {"type": "tool_call", "id": "c1", "name": "look", "arguments": {}}


@pytest.mark.parametrize(("messages", "path", "hint"), [
    ([{"role": "user", "nmae": "bob", "parts": [{"type": "text", "text": "hi"}]}],
     "$.messages[0].nmae", "did you mean `name`?"),
    ([{"role": "user", "parts": [{"type": "text", "text": "hi", "txet": "x"}]}],
     "$.messages[0].parts[0].txet", "did you mean `text`?"),
    ([_image_message({"data": B64, "mime_typ": "image/png"})],
     "$.messages[0].parts[1].attachment.mime_typ", "did you mean `mime_type`?"),
    ([{"role": "assistant", "parts": [{**TOOL_CALL, "argumnets": {"a": 1}}]}],
     "$.messages[0].parts[0].argumnets", "did you mean `arguments`?"),
    ([{"role": "assistant", "parts": [TOOL_CALL]},
      {"role": "tool", "parts": [{"type": "tool_result", "call_id": "c1", "content": [
          {"type": "text", "text": "seen"},
          {"type": "image", "attachment": {"data": B64, "extra": 1}}]}]}],
     "$.messages[1].parts[0].content[1].attachment.extra", ""),
])
def test_unknown_fields_are_refused_at_every_depth(
        served: Served, a: httpx.Client, messages: list[dict[str, Any]], path: str,
        hint: str) -> None:
    sid = served.new_session(a)
    message = _refused(a, sid, {"messages": messages}, path, "unknown field", hint)
    assert message.startswith(f"unknown field `{path.rsplit('.', 1)[1]}`")
    assert _stored(a, sid) == []


def test_unknown_fields_of_the_body_and_of_an_edit(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        body = {"messages": [Message.user("hi").to_dict()], "stat": {"x": 1}}
        _refused(a, sid, body, "$.stat", "did you mean `state`?")
        first = Message.user("hi").to_dict()
        assert _append(a, sid, {"messages": [first]}).status_code == 200
        edit = a.post(f"/v1/sessions/{sid}/edit", json={
            "message_id": first["id"],
            "message": {"role": "user", "nmae": "x", "parts": [{"type": "text", "text": "b"}]}})
        assert edit.status_code == 422
        assert edit.json()["error"]["path"] == "$.message.nmae"
        assert len(a.get(f"/v1/sessions/{sid}/lineage").json()) == 1  # no branch made


def test_a_provider_shaped_message_is_told_how_to_send_it(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        _refused(a, sid, {"messages": [{"role": "user", "content": "hi"}]},
                 "$.messages[0].content", "`parts`", "?format=openai_chat")
        gemini = {"role": "user", "parts": [{"text": "hi"}]}
        _refused(a, sid, {"messages": [gemini]}, "$.messages[0].parts[0]",
                 "`type`", "?format=")


def test_known_fields_with_free_form_values_are_kept(served_sqlite: Served) -> None:
    """metadata, provider_metadata, tool arguments and state hold any JSON: the strict
    check never looks inside them."""
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        message = {"role": "assistant", "metadata": {"any": {"nmae": 1}},
                   "provider_metadata": {"openai_chat": {"weird": [1]}},
                   "parts": [{**TOOL_CALL, "arguments": {"nmae": {"x": None}}}]}
        body = {"messages": [message], "state": {"nested": {"nmae": True}}}
        assert _append(a, sid, body).status_code == 200
        stored = _stored(a, sid)[0]
        assert stored["metadata"] == {"any": {"nmae": 1}}
        assert stored["parts"][0]["arguments"] == {"nmae": {"x": None}}


# ---------------------------------------------------------------- ?format=


OPENAI_CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                 {"type": "image_url",
                                  "image_url": {"url": f"data:image/png;base64,{B64}"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "look", "arguments": "{\"at\": \"photo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a photo"},
    {"role": "assistant", "content": "A photo."},
]
RESPONSES = [
    {"role": "user", "content": "hi"},
    {"type": "function_call", "call_id": "call_1", "name": "look", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    {"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "done"}]},
]
ANTHROPIC = {"system": "be brief", "messages": [
    {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                 {"type": "image", "source": {"type": "base64",
                                                              "media_type": "image/png",
                                                              "data": B64}}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "look",
                                       "input": {"at": "photo"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                  "content": "a photo"},
                                 {"type": "text", "text": "and?"}]},
]}
GEMINI = {"system_instruction": {"parts": [{"text": "be brief"}]}, "contents": [
    {"role": "user", "parts": [{"text": "what is this?"},
                               {"inline_data": {"mime_type": "image/png", "data": B64}}]},
    {"role": "model", "parts": [{"function_call": {"name": "look", "args": {"at": "x"}}}]},
    {"role": "user", "parts": [{"function_response": {"name": "look",
                                                      "response": {"result": "a photo"}}}]},
]}
CASES = {
    "openai_chat": ({"messages": OPENAI_CHAT}, lambda: from_openai_chat(OPENAI_CHAT)),
    "openai_responses": ({"input": RESPONSES}, lambda: from_openai_responses(RESPONSES)),
    "anthropic": (ANTHROPIC, lambda: from_anthropic(**ANTHROPIC)),
    "gemini": (GEMINI, lambda: from_gemini(GEMINI)),
}


def _content(messages: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Roles and parts without what differs between two conversions: attachment ids,
    and call ids made up for Gemini's calls (numbered in order instead)."""
    out = []
    calls: dict[str, str] = {}
    for m in messages:
        parts = []
        for p in m["parts"]:
            p = dict(p)
            if "attachment" in p:
                p["attachment"] = {k: v for k, v in p["attachment"].items()
                                   if k not in ("id", "data")}
            if p["type"] == "tool_call":
                p["id"] = calls.setdefault(p["id"], f"call {len(calls)}")
            if p["type"] == "tool_result":
                p["call_id"] = calls.get(p["call_id"], p["call_id"])
            parts.append(p)
        out.append((m["role"], parts))
    return out


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_an_append_in_a_providers_shape(served: Served, a: httpx.Client, fmt: str) -> None:
    """Stored as the library's ``from_*`` converts the same payload (the oracle), system
    prompts included; what a read in that format returns appends again unchanged."""
    body, convert = CASES[fmt]
    sid = served.new_session(a)
    response = _append(a, sid, body, format=fmt)
    assert response.status_code == 200, response.text
    stored = _stored(a, sid)
    assert _content(stored) == _content([m.to_dict() for m in convert()])
    read = a.get(f"/v1/sessions/{sid}/messages", params={"start": 0, "format": fmt})
    again = served.new_session(a)
    assert _append(a, again, read.json(), format=fmt).status_code == 200
    assert _content(_stored(a, again)) == _content(stored)


def test_id_prefix_makes_a_retry_store_nothing_twice(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    body = {"messages": OPENAI_CHAT[:2], "id_prefix": "turn-1"}
    first = _append(a, sid, body, format="openai_chat")
    assert first.json() == {"version": 1}
    assert _append(a, sid, body, format="openai_chat").json() == {"version": 1}
    assert [m["id"] for m in _stored(a, sid)] == ["turn-1-0", "turn-1-1"]
    without = {"messages": OPENAI_CHAT[:2]}  # no ids: a retry stores the messages again
    _append(a, sid, without, format="openai_chat")
    _append(a, sid, without, format="openai_chat")
    assert len(_stored(a, sid)) == 6


@pytest.mark.parametrize(("fmt", "body", "path", "words"), [
    ("openai_chat", {"messages": [{"role": "user", "content": "hi"},
                                  {"role": "user", "content": [{"type": "image"}]}]},
     "$.messages[1].content[0].type", ("unsupported",)),
    ("openai_chat", {"messages": [{"role": "user", "content": "hi", "nmae": "x"}]},
     "$.messages[0].nmae", ("nmae",)),
    ("openai_responses", {"input": [{"role": "user", "content": "hi"}, {"type": "nope"}]},
     "$.input[1].type", ("nope",)),
    ("anthropic", {"system": [{"type": "image"}], "messages": []}, "$.system[0].type", ()),
    ("gemini", {"contents": [{"role": "user", "parts": [{"txt": "hi"}]}]},
     "$.contents[0].parts[0].txt", ("txt",)),
    ("gemini", {"messages": [{"role": "user", "parts": [{"text": "hi"}]}]},
     "$.messages", ("`contents`", "`system_instruction`")),
    ("openai_chat", {"messages": [], "id_prefix": "a/b"}, "$.id_prefix", ("'/'",)),
    ("openai_chat", {"messages": [{"role": "user",
                                   "content": [{"type": "text", "text": "t"}] * 1001}]},
     "$.messages", ("1001 parts", "1000")),
    ("openai_chat", {"messages": [{"role": "tool", "tool_call_id": "none", "content": "x"}],
                     "reject_orphans": True}, "$.messages", ("'none'", "$[0]")),
])
def test_errors_in_a_providers_shape_name_the_path(
        served_sqlite: Served, fmt: str, body: dict[str, Any], path: str,
        words: tuple[str, ...]) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        _refused(a, sid, body, path, *words, format=fmt)
        assert _stored(a, sid) == []


def test_an_unknown_format_is_a_400(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        response = _append(a, sid, {"messages": []}, format="cohere")
        assert response.status_code == 400
        assert "openai_chat" in response.json()["error"]["message"]


# ---------------------------------------------------------------- observed usage


def test_usage_is_taken_and_read_back_and_checked(served: Served, a: httpx.Client) -> None:
    """An assistant message's observed usage goes in with the append and comes back
    with every read; a bad count or an unknown usage field is a 422 naming it."""
    sid = served.new_session(a)
    usage = {"input_tokens": 1312, "output_tokens": 30, "cache_read_tokens": 1000,
             "cache_write_tokens": 300, "cache_write_5m_tokens": 100,
             "cache_write_1h_tokens": 200, "model": "claude-x", "provider": "anthropic",
             "latency_ms": 812.5}
    answer = {"role": "assistant", "parts": [{"type": "text", "text": "hello"}],
              "usage": usage}
    _refused(a, sid, {"messages": [{**answer, "usage": {**usage, "input_tokens": -1}}]},
             "$.messages[0].usage.input_tokens", ">= 0")
    _refused(a, sid, {"messages": [{**answer, "usage": {**usage, "cache_hits": 1}}]},
             "$.messages[0].usage.cache_hits", "unknown field")
    response = _append(a, sid, {"messages": [{"role": "user", "parts": [
        {"type": "text", "text": "hi"}]}, answer]})
    assert response.status_code == 200, response.text
    assert _stored(a, sid)[1]["usage"] == usage
    assert "usage" not in _stored(a, sid)[0]
    window = a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 8000}).json()
    assert window["messages"][-1]["usage"] == usage
    assert a.get(f"/v1/sessions/{sid}/messages", params={
        "start": 0, "format": "anthropic"}).status_code == 200  # never sent to a provider
