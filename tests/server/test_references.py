"""References to stored bytes (issue 43, item 7): a write whose attachment names by
``sha256`` bytes the tenant does not hold is a 422 naming the field, whoever else
holds them, and stores nothing; a reference that dangles anyway (an old database)
leaves the conversation listable, the item shown with its reference and no bytes."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import Served

from chathistory import InvalidMessage, Message
from chathistory.assets import FileAssetStore
from chathistory.model import Attachment, ImagePart
from chathistory.server.references import check_references
from chathistory.stores import MemoryStore


def reference(data: bytes) -> dict[str, Any]:
    """A complete reference (no bytes) to ``data`` as a PNG."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "mime_type": "image/png"}


def with_image(text: str, attachment: dict[str, Any]) -> dict[str, Any]:
    message = Message.user(text).to_dict()
    message["parts"].append({"type": "image", "attachment": attachment})
    return message


def stored(client: httpx.Client, sid: str) -> tuple[int, int]:
    """The session's version and message count."""
    session = client.get(f"/v1/sessions/{sid}").json()
    return session["version"], session["message_count"]


def test_a_reference_to_bytes_the_tenant_does_not_hold_is_a_422(
        served: Served, a: httpx.Client, b: httpx.Client, png_bytes: bytes) -> None:
    others = png_bytes + b"B's own bytes"  # a PNG still, for the sniffer: trailing bytes
    assert b.post("/v1/assets", content=others,
                  headers={"Content-Type": "image/png"}).status_code == 201
    never = png_bytes + b"nobody's"
    sid = served.new_session(a)
    assert a.post(f"/v1/sessions/{sid}/messages",
                  json={"messages": [Message.user("first").to_dict()]}).status_code == 200
    before = stored(a, sid)
    answers = {}
    for name, data in (("never uploaded", never), ("B's upload", others)):
        got = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            Message.user("kept?").to_dict(), with_image("see", reference(data))]})
        assert got.status_code == 422, (served.kind, name, got.text)
        error = got.json()["error"]
        assert error["path"] == "$.messages[1].parts[1].attachment.sha256", error
        answers[name] = error["message"].replace(hashlib.sha256(data).hexdigest(), "<sha>")
    assert answers["never uploaded"] == answers["B's upload"]  # no cross-tenant oracle
    # inside a tool result's content too
    call = Message.assistant("", [{"id": "c1", "name": "look", "arguments": {}}]).to_dict()
    result = Message.tool_result("c1", "see").to_dict()
    result["parts"][0]["content"] = [{"type": "text", "text": "here"},
                                     {"type": "image", "attachment": reference(never)}]
    got = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [call, result]})
    assert got.status_code == 422, got.text
    assert got.json()["error"]["path"] == "$.messages[1].parts[0].content[1].attachment.sha256"
    # an edit of a message: the same
    first_id = a.get(f"/v1/sessions/{sid}/messages", params={"start": 0}).json()[
        "messages"][0]["id"]
    got = a.post(f"/v1/sessions/{sid}/edit", json={
        "message_id": first_id, "message": with_image("edited", reference(never))})
    assert got.status_code == 422, got.text
    assert got.json()["error"]["path"] == "$.message.parts[1].attachment.sha256"
    assert stored(a, sid) == before  # nothing of a refused request
    sessions = a.get("/v1/sessions", params={"limit": 1000}).json()["items"]
    assert not any(s.get("parent_id") == sid for s in sessions)


def test_a_reference_to_bytes_the_tenant_holds_is_stored(
        served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    uploaded = png_bytes + b"uploaded by A"
    inline = png_bytes + b"inline in this request"
    earlier = png_bytes + b"inline in an earlier append"
    assert a.post("/v1/assets", content=uploaded,
                  headers={"Content-Type": "image/png"}).status_code == 201
    sid = served.new_session(a)
    carried = {**reference(earlier), "data": base64.b64encode(earlier).decode()}
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        with_image("earlier", carried)]}).status_code == 200
    got = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        with_image("bytes", {**reference(inline), "data": base64.b64encode(inline).decode()}),
        with_image("the same again", reference(inline)),
        with_image("uploaded", reference(uploaded)),
        with_image("from before", reference(earlier)),
    ]})
    assert got.status_code == 200, got.text
    assert stored(a, sid)[1] == 5
    items = a.get(f"/openai/v1/conversations/{sid}/items", params={"order": "asc"})
    assert items.status_code == 200, items.text
    assert len(items.json()["data"]) == 5


def test_a_dangling_reference_leaves_the_conversation_listable(
        served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    """Written straight into the store, as an older server let it be: the items are
    listed, the dangling one with the URL of its bytes, which answers 404."""
    missing = png_bytes + b"gone"
    sha256 = hashlib.sha256(missing).hexdigest()
    sid = served.new_session(a)
    dangling = Attachment(sha256=sha256, size=len(missing), mime_type="image/png")
    served.store.append(sid, [Message.user("before"),
                              Message(role="user", parts=[ImagePart(attachment=dangling)]),
                              Message.assistant("after")], tenant="A")
    items = a.get(f"/openai/v1/conversations/{sid}/items", params={"order": "asc"})
    assert items.status_code == 200, (served.kind, items.text)
    data = items.json()["data"]
    assert len(data) == 3
    image = data[1]["content"][0]
    assert image["type"] == "input_image", image
    assert image["image_url"].endswith(f"/v1/assets/{sha256}"), image
    assert a.get(f"/v1/assets/{sha256}").status_code == 404
    one = a.get(f"/openai/v1/conversations/{sid}/items/{data[1]['id']}")
    assert one.status_code == 200 and one.json()["content"][0]["image_url"] == image["image_url"]


def test_a_reference_s_size_must_be_its_bytes(
        served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    uploaded = png_bytes + b"sized upload"
    earlier = png_bytes + b"sized inline"
    assert a.post("/v1/assets", content=uploaded,
                  headers={"Content-Type": "image/png"}).status_code == 201
    sid = served.new_session(a)
    carried = {**reference(earlier), "data": base64.b64encode(earlier).decode()}
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        with_image("earlier", carried)]}).status_code == 200
    before = stored(a, sid)
    for data in (uploaded, earlier):
        wrong = {**reference(data), "size": len(data) + 1}
        got = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            with_image("wrong size", wrong)]})
        assert got.status_code == 422, got.text
        assert got.json()["error"]["path"] == "$.messages[0].parts[1].attachment.size"
        assert str(len(data)) in got.json()["error"]["message"]
    assert stored(a, sid) == before


def test_checking_references_reads_a_bounded_amount_of_the_store(
        tmp_path: Path, png_bytes: bytes) -> None:
    """A small body naming many stored assets makes the check read at most its limit
    of the store, then a 422 that says to upload them."""
    store = MemoryStore()
    session = store.create_session(tenant="t")
    held = [png_bytes + bytes([i]) * 1000 for i in range(5)]
    store.append(session.id, [Message(role="user", parts=[ImagePart(
        attachment=Attachment.from_bytes(data, mime_type="image/png"))]) for data in held],
        tenant="t")
    refs = [Message.from_dict(with_image(str(i), reference(data)))
            for i, data in enumerate(held)]
    assets = FileAssetStore(tmp_path)
    check_references(refs, "$.messages", assets, store, "t")  # all held: fine
    size = len(held[0])
    check_references(refs[:2], "$.messages", assets, store, "t", read_limit=2 * size)
    with pytest.raises(InvalidMessage) as refused:
        check_references(refs, "$.messages", assets, store, "t", read_limit=2 * size)
    assert refused.value.path == "$.messages[2].parts[1].attachment.sha256"
    assert "upload" in refused.value.reason
