"""OpenAI's Conversations API (issue 20) with plain HTTP, against real servers on every
store: OpenAI's shapes and error bodies, pagination, idempotency by item id, tenancy,
deletion, items of messages written through ``/v1``, and the same conversation read
through ``/v1`` (the SDK as the oracle is ``test_conversations_sdk.py``)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from serverkit import LiveServer, Served, serve

from chathistory.server import ServerConfigError, auth, run
from chathistory.server.app import Limits, create_app
from chathistory.server.conversations import JOURNAL
from chathistory.stores import MemoryStore

P = "/openai/v1"
CONVERSATION_ID = re.compile(r"conv_[0-9a-f]{48}")


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres", "redis"])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Every store, Redis too (``conftest.served`` has no Redis)."""
    running = serve(request.param, tmp_path_factory.mktemp(f"api-{request.param}"))
    try:
        yield running
    finally:
        running.server.stop()
        running.store.close()


# ---------------------------------------------------------------- helpers


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def create(client: httpx.Client, **body: Any) -> dict[str, Any]:
    answer = client.post(f"{P}/conversations", json=body)
    assert answer.status_code == 200, answer.text
    conversation: dict[str, Any] = answer.json()
    return conversation


def listed(client: httpx.Client, cid: str, **params: Any) -> dict[str, Any]:
    answer = client.get(f"{P}/conversations/{cid}/items", params=params)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def all_ids(client: httpx.Client, cid: str, order: str = "asc", limit: int = 2) -> list[str]:
    """Every item id, page by page as the SDK reads them (``after`` = ``last_id``)."""
    ids: list[str] = []
    params: dict[str, Any] = {"order": order, "limit": limit}
    while True:
        page = listed(client, cid, **params)
        ids += [item["id"] for item in page["data"]]
        if not page["has_more"]:
            return ids
        params["after"] = page["last_id"]


def stored_ids(client: httpx.Client, cid: str) -> list[str]:
    answer = client.get(f"/v1/sessions/{cid}/messages", params={"start": 0})
    assert answer.status_code == 200, answer.text
    return [m["id"] for m in answer.json()["messages"]]


def error(answer: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error body of ``answer``, checked: its status, shape and ``param``."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"}, body
    detail: dict[str, Any] = body["error"]
    assert set(detail) == {"message", "type", "param", "code"}, detail
    assert isinstance(detail["message"], str) and detail["message"]
    assert detail["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    assert detail["param"] == param, detail
    return detail


MIXED = [
    user("What's the weather in Paris?"),
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look."}],
     "encrypted_content": "gAAAA-1"},
    {"type": "function_call", "call_id": "call_1", "name": "weather",
     "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "paris weather"}},
    {"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "18C and sunny.", "annotations": []}]},
]


# ---------------------------------------------------------------- shapes


def test_a_conversation_and_its_items_in_openais_shapes(a: httpx.Client) -> None:
    before = int(time.time())
    conversation = create(a, items=MIXED, metadata={"topic": "weather"})
    cid = conversation["id"]
    assert CONVERSATION_ID.fullmatch(cid)
    assert conversation["object"] == "conversation"
    assert conversation["metadata"] == {"topic": "weather"}
    assert before - 2 <= conversation["created_at"] <= time.time() + 2
    assert a.get(f"{P}/conversations/{cid}").json() == conversation

    items = listed(a, cid, order="asc")["data"]
    assert [i["type"] for i in items] == ["message", "reasoning", "function_call",
                                          "function_call_output", "web_search_call", "message"]
    first, reasoning, call, output, search, answer = items
    # an easy message is completed as OpenAI completes it
    assert first["id"].startswith("msg_") and first["status"] == "completed"
    assert first["content"] == [{"type": "input_text", "text": "What's the weather in Paris?"}]
    assert first["role"] == "user"
    # ids kept as given, or made in OpenAI's style; status where the SDK requires one
    assert reasoning == MIXED[1]
    assert call["id"].startswith("fc_") and call["status"] == "completed"
    assert output["id"].startswith("fco_") and output["status"] == "completed"
    assert {k: v for k, v in call.items() if k not in ("id", "status")} == MIXED[2]
    assert search == MIXED[4]  # a type chathistory has no part for: kept exactly
    assert answer["content"] == MIXED[5]["content"]
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        assert a.get(f"{P}/conversations/{cid}/items/{item['id']}").json() == item

    updated = a.post(f"{P}/conversations/{cid}", json={"metadata": {"a": "1", "b": "2"}})
    assert updated.status_code == 200 and updated.json()["metadata"] == {"a": "1", "b": "2"}
    cleared = a.post(f"{P}/conversations/{cid}", json={"metadata": None})
    assert cleared.json() == {**conversation, "metadata": {}}

    deleted = a.delete(f"{P}/conversations/{cid}")
    assert deleted.json() == {"id": cid, "object": "conversation.deleted", "deleted": True}
    error(a.get(f"{P}/conversations/{cid}"), 404)
    error(a.get(f"{P}/conversations/{cid}/items"), 404)
    assert a.get(f"/v1/sessions/{cid}").status_code == 404


def test_an_empty_body_creates_an_empty_conversation(a: httpx.Client) -> None:
    made = a.post(f"{P}/conversations")
    assert made.status_code == 200, made.text
    page = listed(a, made.json()["id"])
    assert page == {"object": "list", "data": [], "first_id": None, "last_id": None,
                    "has_more": False}


def test_pages_by_item_in_either_order(a: httpx.Client) -> None:
    cid = create(a, items=[user(f"m{i}") for i in range(7)])["id"]
    asc = all_ids(a, cid, "asc", 3)
    assert len(asc) == 7 and asc == stored_ids(a, cid)
    assert all_ids(a, cid, "desc", 3) == asc[::-1]
    default = listed(a, cid)  # OpenAI's defaults: 20, newest first
    assert [i["id"] for i in default["data"]] == asc[::-1] and not default["has_more"]
    page = listed(a, cid, order="asc", limit=3, after=asc[1])
    assert page["first_id"] == asc[2] and page["last_id"] == asc[4] and page["has_more"]
    assert [i["id"] for i in page["data"]] == asc[2:5]
    last = listed(a, cid, order="desc", limit=5, after=asc[3])
    assert [i["id"] for i in last["data"]] == asc[2::-1] and not last["has_more"]
    for params, param in [({"limit": 0}, "limit"), ({"limit": 101}, "limit"),
                          ({"limit": "x"}, "limit"), ({"order": "newest"}, "order"),
                          ({"after": "msg_nowhere"}, "after")]:
        error(a.get(f"{P}/conversations/{cid}/items", params=params), 400, param)
    assert len(listed(a, cid, limit=100)["data"]) == 7


def test_include_is_accepted_and_everything_stored_returned(a: httpx.Client) -> None:
    cid = create(a, items=[MIXED[1]])["id"]
    for key in ("include", "include[]"):
        params = [(key, "reasoning.encrypted_content"), (key, "message.output_text.logprobs")]
        page = a.get(f"{P}/conversations/{cid}/items", params=params)
        assert page.status_code == 200 and page.json()["data"] == [MIXED[1]]
    answer = a.post(f"{P}/conversations/{cid}/items",
                    params={"include": "reasoning.encrypted_content"}, json={"items": [user("x")]})
    assert answer.status_code == 200, answer.text
    error(a.get(f"{P}/conversations/{cid}/items", params={"include": "everything"}), 400,
          "include")
    error(a.get(f"{P}/conversations/{cid}/items/rs_1", params={"include": "x"}), 400, "include")


# ---------------------------------------------------------------- writes


def test_an_item_id_already_stored_is_not_stored_again(a: httpx.Client) -> None:
    cid = create(a)["id"]
    batch = [user("once", id="msg_retry_1"), user("twice", id="msg_retry_2")]
    first = a.post(f"{P}/conversations/{cid}/items", json={"items": batch})
    again = a.post(f"{P}/conversations/{cid}/items", json={"items": batch})  # a retry
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["first_id"] == "msg_retry_1" and first.json()["last_id"] == "msg_retry_2"
    assert stored_ids(a, cid) == ["msg_retry_1", "msg_retry_2"]
    a.post(f"{P}/conversations/{cid}/items", json={"items": [user("new"), batch[0]]})
    assert stored_ids(a, cid)[:2] == ["msg_retry_1", "msg_retry_2"]
    assert len(stored_ids(a, cid)) == 3


BAD_ITEMS = [
    ("x", "items[0]"),
    ({"content": "no role or type"}, "items[0].type"),
    ({"type": "message", "content": "no role"}, "items[0].role"),
    ({"type": "message", "role": "user", "content": 42}, "items[0].content"),
    ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": 1}]},
     "items[0].content[0].text"),
    ({"type": "message", "role": "user", "content": [{"type": "input_video"}]},
     "items[0].content[0].type"),
    ({"type": "no_such_item"}, "items[0].type"),
    ({"type": "item_reference", "id": "msg_1"}, "items[0].type"),
    ({"type": "function_call", "call_id": "c", "name": "f"}, "items[0].arguments"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
     "items[0].arguments"),
    ({"type": "function_call_output", "call_id": "c"}, "items[0].output"),
    (user("x", id=""), "items[0].id"),
    (user("x", id="m" * 201), "items[0].id"),
    (user("x", id="msg_a/b"), "items[0].id"),  # an id goes into URLs
    (user("x", id=".."), "items[0].id"),
    (user("x", id="msg~1"), "items[0].id"),  # the reserved form, naming no item listed
    (user("x", id="msg~"), "items[0].id"),
]


@pytest.mark.parametrize(("bad", "param"), BAD_ITEMS, ids=[p for _, p in BAD_ITEMS])
def test_a_bad_item_is_a_400_naming_it_and_nothing_is_stored(
        served: Served, a: httpx.Client, bad: Any, param: str) -> None:
    cid = create(a, items=[user("kept")])["id"]
    error(a.post(f"{P}/conversations/{cid}/items", json={"items": [bad, user("ok")]}), 400,
          param)
    error(a.post(f"{P}/conversations", json={"items": [bad]}), 400, param)
    assert len(stored_ids(a, cid)) == 1


def test_limits_of_a_request(a: httpx.Client) -> None:
    cid = create(a)["id"]
    error(a.post(f"{P}/conversations/{cid}/items", json={"items": [user("x")] * 21}), 400,
          "items")
    error(a.post(f"{P}/conversations", json={"items": [user("x")] * 21}), 400, "items")
    error(a.post(f"{P}/conversations/{cid}/items", json={"items": [], "extra": 1}), 400,
          "extra")
    error(a.post(f"{P}/conversations/{cid}/items", json={}), 400, None)
    bad_json = a.post(f"{P}/conversations/{cid}/items", content=b"{",
                      headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and "error" in bad_json.json()
    too_many = {f"k{i}": "v" for i in range(17)}
    for metadata, param in [(too_many, "metadata"), ({"k" * 65: "v"}, "metadata." + "k" * 64),
                            ({"k": "v" * 513}, "metadata.k"), ({"k": 1}, "metadata.k")]:
        error(a.post(f"{P}/conversations", json={"metadata": metadata}), 400, param)
        error(a.post(f"{P}/conversations/{cid}", json={"metadata": metadata}), 400, param)
    assert create(a, metadata={f"k{i}": "v" * 512 for i in range(16)})["metadata"]
    assert stored_ids(a, cid) == []


# ---------------------------------------------------------------- keys and tenants


def test_keys_and_tenants(served: Served, a: httpx.Client, b: httpx.Client) -> None:
    conversation = create(a, items=[user("A's secret")], metadata={"owner": "A"})
    cid = conversation["id"]
    item = listed(a, cid)["data"][0]["id"]
    answers = [
        b.get(f"{P}/conversations/{cid}"),
        b.post(f"{P}/conversations/{cid}", json={"metadata": {"owner": "B"}}),
        b.get(f"{P}/conversations/{cid}/items"),
        b.post(f"{P}/conversations/{cid}/items", json={"items": [user("B was here")]}),
        b.get(f"{P}/conversations/{cid}/items/{item}"),
        b.delete(f"{P}/conversations/{cid}/items/{item}"),
        b.delete(f"{P}/conversations/{cid}"),
    ]
    for answer in answers:
        error(answer, 404)
        assert "secret" not in answer.text and item not in answer.text
    assert a.get(f"{P}/conversations/{cid}").json() == conversation
    assert stored_ids(a, cid) == [item]
    with httpx.Client(base_url=served.url) as nobody:
        detail = error(nobody.get(f"{P}/conversations/{cid}"), 401)
        assert detail["code"] == "invalid_api_key"
        wrong = nobody.get(f"{P}/conversations/{cid}",
                           headers={"Authorization": "Bearer sk-not-a-key"})
        error(wrong, 401)


def test_open_mode_takes_any_bearer_the_sdk_sends(tmp_path: Path) -> None:
    store = MemoryStore(counter="approx")
    server = LiveServer(create_app(store, asset_dir=tmp_path / "assets")).start()
    try:
        sdk = httpx.Client(base_url=server.url, headers={"Authorization": "Bearer sk-any"})
        cid = create(sdk, items=[user("hi")])["id"]
        assert store.get_session(cid, tenant="default").message_count == 1
        assert sdk.get(f"/v1/sessions/{cid}").status_code == 401  # /v1 as before
        auth.create_key(store, "t", "the first key")
        time.sleep(1.1)  # open mode is checked at most once a second
        error(sdk.get(f"{P}/conversations/{cid}"), 401)
    finally:
        server.stop()


# ---------------------------------------------------------------- one conversation, every API


def test_the_conversation_reads_through_v1(a: httpx.Client) -> None:
    cid = create(a, items=MIXED)["id"]
    items = listed(a, cid, order="asc")["data"]
    messages = a.get(f"/v1/sessions/{cid}/messages", params={"start": 0}).json()["messages"]
    assert [m["id"] for m in messages] == [i["id"] for i in items]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "tool",
                                             "assistant", "assistant"]
    assert messages[0]["parts"] == [{"type": "text", "text": "What's the weather in Paris?"}]
    assert messages[2]["parts"][0]["type"] == "tool_call"
    assert messages[3]["parts"][0]["call_id"] == "call_1"
    assert json.loads(messages[4]["parts"][0]["text"]) == MIXED[4]  # kept as its JSON
    anthropic = a.get(f"/v1/sessions/{cid}/messages",
                      params={"start": 0, "format": "anthropic"}).json()["messages"]
    blocks = [block for m in anthropic for block in m["content"]]
    use = next(b for b in blocks if b["type"] == "tool_use")
    result = next(b for b in blocks if b["type"] == "tool_result")
    assert use["id"] == result["tool_use_id"] == "call_1" and use["input"] == {"city": "Paris"}
    assert anthropic[0] == {"role": "user", "content": [
        {"type": "text", "text": "What's the weather in Paris?"}]}


def test_messages_written_through_v1_are_items_with_ids_found_again(a: httpx.Client) -> None:
    sid = f"s-{time.time_ns()}"
    assert a.post("/v1/sessions", json={"id": sid}).status_code == 201
    turn = [
        {"id": "m-user", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"id": "m-both", "role": "assistant", "parts": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_call", "id": "call_v1", "name": "look", "arguments": {"q": 1}}]},
        {"id": "m-tool", "role": "tool", "parts": [
            {"type": "tool_result", "call_id": "call_v1", "content": "found"}]},
    ]
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": turn}).status_code == 200
    items = listed(a, sid, order="asc")["data"]
    assert [i["id"] for i in items] == ["m-user", "m-both~0", "m-both~1", "m-tool"]
    assert [i["type"] for i in items] == ["message", "message", "function_call",
                                          "function_call_output"]
    assert items[2]["call_id"] == items[3]["call_id"] == "call_v1"
    assert all_ids(a, sid, "asc", 1) == [i["id"] for i in items]  # after= a derived id
    assert all_ids(a, sid, "desc", 1) == [i["id"] for i in items][::-1]
    for item in items:
        assert a.get(f"{P}/conversations/{sid}/items/{item['id']}").json() == item
    for unknown in ("m-both", "m-user~0", "m-both~2", "m-both~01"):
        error(a.get(f"{P}/conversations/{sid}/items/{unknown}"), 404)
    error(a.delete(f"{P}/conversations/{sid}/items/m-both~1"), 400, "item_id")
    assert a.delete(f"{P}/conversations/{sid}/items/m-tool").status_code == 200
    assert stored_ids(a, sid) == ["m-user", "m-both"]


def test_listed_ids_never_collide_and_adding_a_listed_id_is_a_no_op(a: httpx.Client) -> None:
    """A /v1 message whose own id has the derived form is listed with '~' added;
    items.create naming a listed id stores nothing and answers the item as listed,
    and naming a message of several items is a 400, the batch refused whole; an
    empty batch is a 400 naming ``items``."""
    sid = f"s-{time.time_ns()}"
    assert a.post("/v1/sessions", json={"id": sid}).status_code == 201
    turn = [
        {"id": "m", "role": "assistant", "parts": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_call", "id": "call_m", "name": "look", "arguments": {}}]},
        {"id": "r", "role": "tool", "parts": [
            {"type": "tool_result", "call_id": "call_m", "content": "found"}]},
        {"id": "m~1", "role": "user", "parts": [{"type": "text", "text": "that form"}]},
    ]
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": turn}).status_code == 200
    items = listed(a, sid, order="asc")["data"]
    assert [i["id"] for i in items] == ["m~0", "m~1", "r", "m~1~"]
    assert all_ids(a, sid, "asc", 1) == [i["id"] for i in items]
    for item in items:
        assert a.get(f"{P}/conversations/{sid}/items/{item['id']}").json() == item
    for unknown in ("m~1~~", "r~", "r~0"):
        error(a.get(f"{P}/conversations/{sid}/items/{unknown}"), 404)
    again = [user("other text", id=i["id"]) for i in items]
    answer = a.post(f"{P}/conversations/{sid}/items", json={"items": again})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == items
    named_m = {"items": [user("new"), user("x", id="m")]}
    error(a.post(f"{P}/conversations/{sid}/items", json=named_m), 400, "items[1].id")
    error(a.post(f"{P}/conversations/{sid}/items", json={"items": []}), 400, "items")
    assert stored_ids(a, sid) == ["m", "r", "m~1"]


@pytest.mark.parametrize("inline_bytes", [20 * 1024 * 1024, 10])
def test_an_attachment_of_a_v1_message_is_inlined_up_to_the_limit(
        tmp_path: Path, png_bytes: bytes, inline_bytes: int) -> None:
    """Stored attachments of messages written through ``/v1`` are the items' data URLs
    within ``Limits.inline_bytes``, and past it the URL of ``GET /v1/assets/{sha256}``."""
    app = create_app(MemoryStore(counter="approx"), asset_dir=tmp_path / "assets",
                     limits=Limits(inline_bytes=inline_bytes))
    server = LiveServer(app).start()
    try:
        with httpx.Client(base_url=server.url) as a:
            assert a.post("/v1/sessions", json={"id": "pic"}).status_code == 201
            image = {"role": "user", "id": "m-pic", "parts": [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "attachment": {"data": base64.b64encode(png_bytes).decode()}}]}
            sent = a.post("/v1/sessions/pic/messages", json={"messages": [image]})
            assert sent.status_code == 200, sent.text
            (item,) = listed(a, "pic")["data"]
            assert item["id"] == "m-pic" and item["content"][0] == {
                "type": "input_text", "text": "what is this?"}
            url = item["content"][1]["image_url"]
            digest = hashlib.sha256(png_bytes).hexdigest()
            if inline_bytes > len(png_bytes):
                assert url == "data:image/png;base64," + base64.b64encode(png_bytes).decode()
            else:
                assert url == f"{server.url}/v1/assets/{digest}"
                assert a.get(url).content == png_bytes
    finally:
        server.stop()


# ---------------------------------------------------------------- deleting items


def test_deleting_items_keeps_the_rest_in_order(a: httpx.Client) -> None:
    cid = create(a, items=MIXED)["id"]
    ids = all_ids(a, cid)
    newest = a.delete(f"{P}/conversations/{cid}/items/{ids[-1]}")
    assert newest.status_code == 200, newest.text
    assert newest.json()["id"] == cid and newest.json()["object"] == "conversation"
    middle = a.delete(f"{P}/conversations/{cid}/items/{ids[0]}")
    assert middle.status_code == 200, middle.text
    kept = ids[1:-1]
    assert all_ids(a, cid) == kept == stored_ids(a, cid)
    assert listed(a, cid, order="asc")["data"][0] == MIXED[1]
    error(a.get(f"{P}/conversations/{cid}/items/{ids[0]}"), 404)
    error(a.delete(f"{P}/conversations/{cid}/items/{ids[0]}"), 404)
    session = a.get(f"/v1/sessions/{cid}").json()
    assert JOURNAL not in session.get("state", {}) and session["message_count"] == len(kept)
    more = a.post(f"{P}/conversations/{cid}/items", json={"items": [user("after")]})
    assert all_ids(a, cid) == [*kept, more.json()["first_id"]]


def test_an_item_at_any_depth_is_deleted(served: Served, a: httpx.Client) -> None:
    """The oldest of 260 items, then one in the middle: the rest stay, in order."""
    cid = create(a, items=[user("first")])["id"]
    for k in range(0, 259, 20):
        batch = [user(f"m{i}") for i in range(k, min(k + 20, 259))]
        assert a.post(f"{P}/conversations/{cid}/items", json={"items": batch}).status_code == 200
    ids = stored_ids(a, cid)
    assert len(ids) == 260
    for gone in (ids[0], ids[130]):
        answer = a.delete(f"{P}/conversations/{cid}/items/{gone}")
        assert answer.status_code == 200, answer.text
    kept = [i for i in ids if i not in (ids[0], ids[130])]
    assert stored_ids(a, cid) == kept
    assert all_ids(a, cid, limit=100) == kept
    tail = a.get(f"/v1/sessions/{cid}/messages", params={"tail": 3}).json()["messages"]
    assert [m["id"] for m in tail] == kept[-3:]


def test_a_deletion_an_earlier_release_left_is_finished(
        served: Served, a: httpx.Client) -> None:
    """What a crash between the steps of an earlier release's deletion left (the later
    messages taken off, listed in the journal) is put back by the next request."""
    cid = create(a, items=[user(f"m{i}") for i in range(4)])["id"]
    ids = stored_ids(a, cid)
    store = served.store
    session = store.get_session(cid, tenant="A")
    later = store.range(cid, 2, tenant="A")
    journal = {"deleting": ids[1], "at": time.time(),
               "restore": msgspec.json.encode(later).decode()}
    store.update_session(cid, tenant="A", state={**session.state, JOURNAL: journal})
    store.pop(cid, tenant="A")
    store.pop(cid, tenant="A")  # the crash came here: ids[2:] are off, ids[1] still there
    assert all_ids(a, cid) == ids
    assert JOURNAL not in store.get_session(cid, tenant="A").state


# ---------------------------------------------------------------- where it is served


def test_the_prefix_is_configurable_and_documented(tmp_path: Path) -> None:
    store = MemoryStore(counter="approx")
    server = LiveServer(create_app(store, asset_dir=tmp_path / "a", openai_prefix="/v1")).start()
    off = LiveServer(create_app(store, asset_dir=tmp_path / "b", openai_prefix="")).start()
    try:
        assert httpx.post(server.url + "/v1/conversations", json={}).status_code == 200
        assert httpx.post(server.url + P + "/conversations", json={}).status_code == 404
        assert httpx.post(off.url + P + "/conversations", json={}).status_code == 404
        # no such route: OpenAI's error shape under its prefix, ours elsewhere
        default = LiveServer(create_app(store, asset_dir=tmp_path / "d")).start()
        try:
            assert error(httpx.get(default.url + P + "/responses"), 404)["code"] == "not_found"
            assert error(httpx.delete(default.url + P + "/conversations"), 405)
            assert set(httpx.get(default.url + "/v1/nothing").json()["error"]) >= {"type",
                                                                                 "request_id"}
        finally:
            default.stop()
        assert set(httpx.get(server.url + "/v1/nothing").json()["error"]) >= {"type",
                                                                           "request_id"}
        document = httpx.get(server.url + "/openapi.json").json()
        operation = document["paths"]["/v1/conversations/{conversation_id}/items"]["get"]
        assert operation["tags"] == ["OpenAI Conversations"]
        assert {p["name"] for p in operation["parameters"]} >= {"after", "limit", "order"}
        error_schema = operation["responses"]["404"]["content"]["application/json"]["schema"]
        assert error_schema["$ref"].endswith("/OpenAIErrorBody")
        assert not any("conversations" in path for path in
                       httpx.get(off.url + "/openapi.json").json()["paths"])
    finally:
        server.stop()
        off.stop()
    for bad in ("openai/v1", "/openai/v1/", "/", "/a b", "/{x}"):
        with pytest.raises(ValueError, match="prefix"):
            create_app(store, asset_dir=tmp_path / "c", openai_prefix=bad)
        with pytest.raises(ServerConfigError, match="--openai-prefix"):
            run("memory://", openai_prefix=bad)
