"""Message ids through ``POST /v1/sessions/{sid}/messages``, over every backend: an
append is idempotent by id (issue 23: inside a batch too, a second copy dropped, where
a SQLite or PostgreSQL store that wrote both would fail on its unique key: a 500), and
a message sent again under a stored id with other content is a 409 ``id_reused``
naming the id and the field, nothing of the batch stored (issue 43). A retry of the
same JSON, or of the same provider messages with their ``id_prefix``, is not refused."""

from __future__ import annotations

import base64
import copy
from typing import Any

import httpx
import pytest
from serverkit import Served, messages

from chathistory import Message


def _ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


def _refused(a: httpx.Client, sid: str, body: dict[str, Any], message_id: str, field: str,
             **kwargs: Any) -> None:
    """``body`` is answered 409 ``id_reused`` naming ``message_id`` and ``field``, and
    the session is as it was."""
    before = a.get(f"/v1/sessions/{sid}").json()
    answer = a.post(f"/v1/sessions/{sid}/messages", json=body, **kwargs)
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["type"] == "id_reused"
    assert (error["message_id"], error["field"]) == (message_id, field)
    assert repr(message_id) in error["message"] and f"{field} differs" in error["message"]
    after = a.get(f"/v1/sessions/{sid}").json()
    assert (after["version"], after["message_count"]) == (before["version"],
                                                         before["message_count"])


def test_one_id_twice_in_one_post(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    url = f"/v1/sessions/{sid}/messages"
    first, other = messages("first copy", "other")
    copy_ = {"id": first["id"], "role": "user", "parts": [{"text": "first copy",
                                                           "type": "text"}]}
    response = a.post(url, json={"messages": [first, other, copy_, other]})
    assert response.status_code == 200, response.text
    assert response.json() == {"version": 1}
    stored = a.get(url, params={"start": 0})
    assert _ids(stored) == [first["id"], other["id"]]
    assert [m["parts"][0]["text"] for m in stored.json()["messages"]] == ["first copy", "other"]
    assert stored.json()["messages"][0]["created_at"] == first["created_at"]
    assert a.get(f"/v1/sessions/{sid}").json()["message_count"] == 2
    again = a.post(url, json={"messages": [copy_, copy_]})  # a retry: what is stored
    assert again.status_code == 200 and again.json() == {"version": 1}
    fresh = messages("new")[0]
    more = a.post(url, json={"messages": [fresh, fresh, first]})
    assert more.status_code == 200 and more.json() == {"version": 2}
    assert _ids(a.get(url, params={"start": 0})) == [first["id"], other["id"], fresh["id"]]
    other_copy = Message.user("second copy", id="twice").to_dict()
    _refused(a, sid, {"messages": [messages("x")[0], Message.user("one", id="twice").to_dict(),
                                   other_copy]}, "twice", "parts[0].text")


def test_a_stored_id_with_other_content_is_a_409(served: Served, a: httpx.Client,
                                                  png_bytes: bytes) -> None:
    sid = served.new_session(a)
    url = f"/v1/sessions/{sid}/messages"
    sent = [
        {"id": "u1", "role": "user", "metadata": {"a": 1, "b": [1, 2]}, "parts": [
            {"type": "text", "text": "look"},
            {"type": "image", "attachment": {"data": base64.b64encode(png_bytes).decode(),
                                             "mime_type": "image/png"}}]},
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"q": "x"}}]},
        {"id": "t1", "role": "tool", "parts": [
            {"type": "tool_result", "call_id": "c1", "content": "found"}]},
    ]
    assert a.post(url, json={"messages": sent}).json() == {"version": 1}
    # the same JSON again, its keys in another order, a reference to the stored bytes
    reordered = copy.deepcopy(sent)
    reordered[0] = {"parts": reordered[0]["parts"], "metadata": {"b": [1, 2], "a": 1},
                    "role": "user", "id": "u1", "kv_size": 40, "created_at":
                    "2020-01-01T00:00:00Z"}
    stored = a.get(url, params={"start": 0}).json()["messages"]
    reference = copy.deepcopy(sent)
    reference[0]["parts"][1] = {"type": "image", "attachment": {
        k: stored[0]["parts"][1]["attachment"][k] for k in ("sha256", "size", "mime_type")}}
    for retry in (sent, reordered, reference, stored, sent[:1]):
        answer = a.post(url, json={"messages": retry}, headers={"If-Match": '"0"'})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"version": 1}
    new = messages("new")[0]
    changed = copy.deepcopy(sent)
    changed[0]["parts"][0]["text"] = "look!"
    _refused(a, sid, {"messages": changed}, "u1", "parts[0].text")
    changed[1]["parts"][0]["arguments"] = {"q": "y"}
    _refused(a, sid, {"messages": [new, changed[1]]}, "a1", "parts[0].arguments.q")
    changed[2]["metadata"] = {"k": True}
    _refused(a, sid, {"messages": [new, changed[2]]}, "t1", "metadata",
             headers={"If-Match": '"0"'})  # a stale If-Match does not make it a 412
    other_image = copy.deepcopy(sent[0])
    other_image["parts"][1]["attachment"]["data"] = base64.b64encode(
        png_bytes + b"\0").decode()
    _refused(a, sid, {"messages": [other_image]}, "u1", "parts[1].attachment.sha256")
    assert _ids(a.get(url, params={"start": 0})) == ["u1", "a1", "t1"]


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAQAAAACCAIAAADwyuo0AAAAEElEQVR42mP4n+wORwzIHACygg1JFQf1EgAAAABJ"
       "RU5ErkJggg==")
FORMATS: dict[str, dict[str, Any]] = {
    "openai_chat": {"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]},
    "openai_responses": {"input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]},
    "anthropic": {"system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {
            "type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": PNG}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "tool_use", "id": "tu_1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"},
            {"type": "text", "text": "and?"}]}]},
    "gemini": {"system_instruction": {"parts": [{"text": "be brief"}]}, "contents": [
        {"role": "user", "parts": [{"text": "hi"}, {
            "inline_data": {"mime_type": "image/png", "data": PNG}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}},
                                    {"functionCall": {"name": "f", "args": {"a": 2}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {"output": "one"}}},
            {"functionResponse": {"name": "f", "response": {"output": "two"}}}]}]},
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_provider_messages_sent_again_with_their_id_prefix_are_a_retry(
        served: Served, a: httpx.Client, fmt: str) -> None:
    """What a provider's messages decode to is the same each time (Gemini's calls
    without ids are named after their message), so a retry with the same
    ``id_prefix`` stores nothing, and other messages under that prefix are a 409."""
    sid = served.new_session(a)
    url = f"/v1/sessions/{sid}/messages?format={fmt}"
    body = {**FORMATS[fmt], "id_prefix": "turn-1"}
    first = a.post(url, json=body)
    assert first.status_code == 200, first.text
    count = a.get(f"/v1/sessions/{sid}").json()["message_count"]
    for _ in range(2):
        again = a.post(url, json=body)
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
    assert a.get(f"/v1/sessions/{sid}").json()["message_count"] == count
    changed = copy.deepcopy(body)
    key = next(k for k in ("messages", "input", "contents") if k in changed)
    changed[key] = changed[key][:1] + changed[key]  # the same first message, then shifted
    answer = a.post(url, json=changed)
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["type"] == "id_reused"
