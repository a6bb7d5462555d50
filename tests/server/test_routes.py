"""Every route of the v1 API, over every backend, through a real server."""

from __future__ import annotations

import uuid

import httpx
import msgspec
import pytest
from serverkit import Served, messages, tool_turn

from chathistory import Attachment, Message


def ids(body: dict[str, object]) -> list[str]:
    found = body["messages"]
    assert isinstance(found, list)
    return [m["id"] for m in found]


def test_session_lifecycle(served: Served, a: httpx.Client) -> None:
    created = a.post("/v1/sessions", json={"user": "u1", "metadata": {"app": "x"},
                                           "state": {"k": 1}, "ttl_seconds": 3600})
    assert created.status_code == 201
    session = created.json()
    sid = session["id"]
    assert session["schema_version"] == 1 and session["tenant"] == "A"
    assert created.headers["etag"] == '"0"'
    assert created.headers["location"] == f"/v1/sessions/{sid}"
    assert created.headers["x-request-id"]
    got = a.get(f"/v1/sessions/{sid}").json()
    assert got["metadata"] == {"app": "x"} and got["state"] == {"k": 1} and got["expires_at"]
    patched = a.patch(f"/v1/sessions/{sid}", json={"state": {"k": 2}},
                      headers={"If-Match": '"0"'})
    assert patched.status_code == 200 and patched.headers["etag"] == '"1"'
    stale = a.patch(f"/v1/sessions/{sid}", json={"state": {"k": 3}}, headers={"If-Match": "0"})
    assert stale.status_code == 412 and stale.json()["error"]["type"] == "precondition_failed"
    assert a.get(f"/v1/sessions/{sid}").json()["state"] == {"k": 2}
    again = a.post("/v1/sessions", json={"id": sid})
    assert again.status_code == 409
    assert a.delete(f"/v1/sessions/{sid}").status_code == 204
    assert a.get(f"/v1/sessions/{sid}").status_code == 404


def test_list_sessions_pages_and_filters(served: Served, a: httpx.Client) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    made = [served.new_session(a, user=user, metadata={"even": i % 2 == 0, "n": str(i)})
            for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"user": user, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = a.get("/v1/sessions", params=params).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made
    evens = a.get("/v1/sessions", params={"user": user, "metadata.even": "true"}).json()
    assert [s["id"] for s in evens["items"]] == made[0::2]
    by_string = a.get("/v1/sessions", params={"user": user, "metadata.n": "3"}).json()
    assert by_string["items"] == []  # "3" parses as the number 3; the value is a string
    quoted = a.get("/v1/sessions", params={"user": user, "metadata.n": '"3"'}).json()
    assert [s["id"] for s in quoted["items"]] == [made[3]]
    assert a.get("/v1/sessions", params={"limit": 0}).status_code == 400
    assert a.get("/v1/sessions", params={"limit": "x"}).status_code == 400


def test_list_sessions_recent_order_and_search(served: Served, a: httpx.Client,
                                               b: httpx.Client) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    word = f"w{uuid.uuid4().hex[:8]}"
    made = [served.new_session(a, user=user, metadata={"n": i}) for i in range(4)]
    said = a.post(f"/v1/sessions/{made[1]}/messages",
                  json={"messages": messages(f'Ask "Zoë" about the café {word}')})
    assert said.status_code == 200

    def listed(client: httpx.Client, **params: object) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            query = {"limit": 1, **params, **({"cursor": cursor} if cursor else {})}
            response = client.get("/v1/sessions", params=query)
            assert response.status_code == 200, response.text
            seen += [s["id"] for s in response.json()["items"]]
            cursor = response.json()["next_cursor"]
            if cursor is None:
                return seen

    assert listed(a, user=user, order="recent") == [made[1], made[3], made[2], made[0]]
    assert listed(a, user=user, order="created") == made
    assert listed(a, user=user) == made
    assert listed(a, q=f'"Zoë" ABOUT THE CAFé {word.upper()}') == [made[1]]
    assert listed(a, q=word, order="recent", user=user) == [made[1]]
    assert listed(a, q=word, user="someone else") == []
    assert listed(b, q=word) == []  # another tenant's text is never found
    assert listed(a, q=made[2], user=user) == [made[2]]  # by id
    recent = a.get("/v1/sessions", params={"user": user, "order": "recent", "limit": 1}).json()
    wrong = a.get("/v1/sessions", params={"user": user, "cursor": recent["next_cursor"]})
    assert wrong.status_code == 400 and "order" in wrong.json()["error"]["message"]
    bad = a.get("/v1/sessions", params={"order": "newest"})
    assert bad.status_code == 422
    error = bad.json()["error"]
    assert error["type"] == "invalid_message" and error["path"] == "order"
    assert "created" in error["message"] and "recent" in error["message"]
    document = httpx.get(served.url + "/openapi.json").json()
    names = [p["name"] for p in document["paths"]["/v1/sessions"]["get"]["parameters"]]
    assert {"order", "q", "cursor", "limit", "user"} <= set(names)


def test_append_read_and_idempotent_retry(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    batch = messages("hello", "hi there", "how are you", "fine")
    first = a.post(f"/v1/sessions/{sid}/messages", json={"messages": batch})
    assert first.status_code == 200 and first.json() == {"version": 1}
    assert first.headers["etag"] == '"1"'
    retried = a.post(f"/v1/sessions/{sid}/messages", json={"messages": batch},
                     headers={"If-Match": '"0"'})  # a retry with the stale If-Match: same answer
    assert retried.json() == {"version": 1}
    assert a.get(f"/v1/sessions/{sid}").json()["message_count"] == 4
    more = messages("again", "sure")
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": more},
                  headers={"If-Match": '"1"'}).json() == {"version": 2}
    conflict = a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("late")},
                      headers={"If-Match": '"1"'})
    assert conflict.status_code == 412
    all_ids = [m["id"] for m in batch + more]
    assert ids(a.get(f"/v1/sessions/{sid}/messages", params={"start": 0}).json()) == all_ids
    assert ids(a.get(f"/v1/sessions/{sid}/messages",
                     params={"start": 1, "stop": 3}).json()) == all_ids[1:3]
    assert ids(a.get(f"/v1/sessions/{sid}/messages", params={"tail": 2}).json()) == all_ids[-2:]
    window = a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 16}).json()
    assert ids(window) == all_ids[-2:]  # 3 priming + 2 x (3 + ~2 text) tokens
    one = a.get(f"/v1/sessions/{sid}/messages/{all_ids[2]}").json()
    assert one["id"] == all_ids[2] and one["parts"][0]["text"] == "how are you"
    assert a.get(f"/v1/sessions/{sid}/messages/nope").status_code == 404


def test_selectors_are_exclusive(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    url = f"/v1/sessions/{sid}/messages"
    for params in ({}, {"tail": 1, "max_tokens": 10}, {"tail": 1, "start": 0},
                   {"tail": 1, "counter": "o200k_base"}, {"max_tokens": 5, "include_marked": 1},
                   {"tail": -1}, {"max_tokens": "many"}):
        response = a.get(url, params=params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["error"]["type"] == "bad_request"


def test_window_keep_system_and_counter(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    system = Message.system("be brief").to_dict()
    rest = messages(*(f"turn {i} " + "word " * 20 for i in range(10)))
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": [system, *rest]})
    got = a.get(f"/v1/sessions/{sid}/messages",
                params={"max_tokens": 80, "keep_system": "true"}).json()
    assert ids(got)[0] == system["id"] and ids(got)[-1] == rest[-1]["id"]
    exact = a.get(f"/v1/sessions/{sid}/messages",
                  params={"max_tokens": 80, "counter": "o200k_base"}).json()
    assert ids(exact)[-1] == rest[-1]["id"]
    unknown = a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 80, "counter": "zz"})
    assert unknown.status_code == 422 and unknown.json()["error"]["path"] == "counter"


def test_validation_errors_name_the_path_and_store_nothing(served: Served,
                                                           a: httpx.Client) -> None:
    sid = served.new_session(a)
    good = messages("ok")[0]
    bad_type = {"role": "tool", "parts": [{"type": "tool_result", "call_id": 7}]}
    response = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [good, bad_type]})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_message"
    assert error["path"] == "$.messages[1].parts[0].call_id"
    empty_call = {"role": "tool", "parts": [{"type": "tool_result", "call_id": ""}]}
    response = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [good, empty_call]})
    assert response.status_code == 422
    assert response.json()["error"]["path"] == "$.messages[1].parts[0].call_id"
    unknown_part = {"role": "user", "parts": [{"type": "hologram"}]}
    response = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [unknown_part]})
    assert response.status_code == 422 and response.json()["error"]["path"].startswith(
        "$.messages[0].parts[0]")
    typo = a.post(f"/v1/sessions/{sid}/messages", json={"mesages": [good]})
    assert typo.status_code == 422
    orphan = Message.tool_result("ghost", "x").to_dict()
    response = a.post(f"/v1/sessions/{sid}/messages",
                      json={"messages": [good, orphan], "reject_orphans": True})
    assert response.status_code == 422 and response.json()["error"]["path"] == \
        "$.messages[1].parts"
    bad_state = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [good], "state": [1]})
    assert bad_state.status_code == 422 and bad_state.json()["error"]["path"] == "$.state"
    bad_session = a.post("/v1/sessions", json={"id": "", "ttl_seconds": -1})
    assert bad_session.status_code == 422
    session = a.get(f"/v1/sessions/{sid}").json()
    assert "message_count" not in session and "version" not in session  # both still 0


def test_client_token_counts_are_not_trusted(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    liar = Message.user("word " * 200).to_dict()
    liar["token_counts"] = {served.store.counter.name: 1}
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": [liar]})
    assert a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 50}).json() == {
        "messages": []}
    assert a.get(f"/v1/sessions/{sid}").json()["token_count"] > 200


def test_pop_clear_context_and_mark(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    system = Message.system("sys").to_dict()
    turn = tool_turn(0)
    chat = messages("x1", "y1", "x2", "y2")
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": [system, *turn, *chat]})
    context = a.get(f"/v1/sessions/{sid}/context", params={"head": 2, "tail": 2}).json()
    assert ids(context) == [system["id"], turn[0]["id"], chat[2]["id"], chat[3]["id"]]
    marked = a.post(f"/v1/sessions/{sid}/mark", json={"ids": [turn[2]["id"]], "status": 0})
    assert marked.json() == {"changed": 2}  # the result and its call
    visible = ids(a.get(f"/v1/sessions/{sid}/messages", params={"tail": 100}).json())
    assert turn[1]["id"] not in visible and turn[2]["id"] not in visible
    with_marked = a.get(f"/v1/sessions/{sid}/messages",
                        params={"tail": 100, "include_marked": "true"}).json()
    assert len(ids(with_marked)) == 9
    bad_status = a.post(f"/v1/sessions/{sid}/mark", json={"ids": [turn[2]["id"]], "status": 5})
    assert bad_status.status_code == 422 and bad_status.json()["error"]["path"] == "$.status"
    version = a.get(f"/v1/sessions/{sid}").json()["version"]
    stale = a.post(f"/v1/sessions/{sid}/pop", headers={"If-Match": f'"{version + 5}"'})
    assert stale.status_code == 412
    popped = a.post(f"/v1/sessions/{sid}/pop", headers={"If-Match": f'"{version}"'}).json()
    assert popped["message"]["id"] == chat[-1]["id"]
    cleared = a.delete(f"/v1/sessions/{sid}/messages")
    assert cleared.status_code == 200
    assert cleared.headers["etag"] == f'"{cleared.json()["version"]}"'
    assert a.post(f"/v1/sessions/{sid}/pop").json() == {"message": None}


def test_fork_edit_lineage_and_delete_cascade(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    chat = messages("a", "b", "c", "d")
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": chat})
    fork = a.post(f"/v1/sessions/{sid}/fork", json={"at_message_id": chat[1]["id"]})
    assert fork.status_code == 201
    fork_id = fork.json()["id"]
    assert ids(a.get(f"/v1/sessions/{fork_id}/messages", params={"start": 0}).json()) == [
        chat[0]["id"], chat[1]["id"]]
    edited = Message.user("edited").to_dict()
    branch = a.post(f"/v1/sessions/{sid}/edit",
                    json={"message_id": chat[2]["id"], "message": edited})
    assert branch.status_code == 201
    branch_ids = ids(a.get(f"/v1/sessions/{branch.json()['id']}/messages",
                           params={"start": 0}).json())
    assert branch_ids == [chat[0]["id"], chat[1]["id"], edited["id"]]
    bad_edit = a.post(f"/v1/sessions/{sid}/edit",
                      json={"message_id": chat[2]["id"],
                            "message": {"role": "user", "parts": []}})
    assert bad_edit.status_code == 422 and bad_edit.json()["error"]["path"] == "$.message.parts"
    lineage = a.get(f"/v1/sessions/{sid}/lineage").json()
    assert {s["id"] for s in lineage} == {sid, fork_id, branch.json()["id"]}
    refused = a.delete(f"/v1/sessions/{sid}")
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "conflict"
    assert a.delete(f"/v1/sessions/{sid}", params={"cascade": "true"}).status_code == 204
    assert a.get(f"/v1/sessions/{fork_id}").status_code == 404


def test_reduce_marks_what_leaves(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    system = Message.system("sys").to_dict()
    chat = messages(*(f"m{i}" for i in range(10)))
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": [system, *chat]})
    out = a.post(f"/v1/sessions/{sid}/reduce", json={"type": "count", "max_messages": 4}).json()
    assert out["removed"] == [m["id"] for m in chat[:6]]
    assert out["kept"] == [system["id"], *(m["id"] for m in chat[6:])]
    assert ids(a.get(f"/v1/sessions/{sid}/messages", params={"tail": 100}).json()) == out["kept"]
    assert a.get(f"/v1/sessions/{sid}").json()["message_count"] == 11  # nothing deleted
    again = a.post(f"/v1/sessions/{sid}/reduce", json={"type": "count", "max_messages": 4})
    assert again.json()["removed"] == []
    budget = a.post(f"/v1/sessions/{sid}/reduce",
                    json={"type": "token_budget", "max_tokens": 20}).json()
    assert budget["removed"] and system["id"] in budget["kept"]
    truncation = a.post(f"/v1/sessions/{sid}/reduce", json={"type": "truncation"})
    assert truncation.status_code == 400
    assert a.post(f"/v1/sessions/{sid}/reduce", json={"type": "magic"}).status_code == 422


def test_window_plans_evicts_and_keeps_its_layout(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages",
           json={"messages": [Message.system("sys").to_dict(),
                              *messages(*(f"turn {i} " + "w " * 30 for i in range(6)))]})
    body = {"max_tokens": 200, "pin_tokens": 0}
    first = a.post(f"/v1/sessions/{sid}/window", json=body).json()
    assert first["total_tokens"] <= 200 and first["reused_prefix_tokens"] == 0
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("short")})
    second = a.post(f"/v1/sessions/{sid}/window", json=body).json()
    assert second["reused_prefix_tokens"] > 0  # the previous layout came from the state
    state = a.get(f"/v1/sessions/{sid}").json()["state"]
    assert state["chathistory.window"]["max_tokens"] == 200
    a.post(f"/v1/sessions/{sid}/messages",
           json={"messages": messages(*("long " + "w " * 60 for _ in range(4)))})
    third = a.post(f"/v1/sessions/{sid}/window", json=body).json()
    assert third["evicted_ids"]
    visible = ids(a.get(f"/v1/sessions/{sid}/messages", params={"tail": 1000}).json())
    assert not set(third["evicted_ids"]) & set(visible)  # marked in the store
    version = a.get(f"/v1/sessions/{sid}").json()["version"]
    stale = a.post(f"/v1/sessions/{sid}/window", json=body,
                   headers={"If-Match": f'"{version - 1}"'})
    assert stale.status_code == 412
    assert a.post(f"/v1/sessions/{sid}/window", json={"max_tokens": 0}).status_code == 422


def test_formats(served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    pytest.importorskip("chathistory.formats")
    sid = served.new_session(a)
    pic = Message.user("look", Attachment.from_bytes(png_bytes, name="p.png"))
    a.post(f"/v1/sessions/{sid}/messages",
           json={"messages": [Message.system("sys").to_dict(), pic.to_dict(),
                              *messages("it is red")[:0], Message.assistant("red").to_dict()]})
    url = f"/v1/sessions/{sid}/messages"
    chat = a.get(url, params={"start": 0, "format": "openai_chat"}).json()
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant"]
    assert chat["messages"][1]["content"][1]["image_url"]["url"].startswith("data:image/png")
    anthropic = a.get(url, params={"tail": 10, "format": "anthropic"}).json()
    assert anthropic["system"] and [m["role"] for m in anthropic["messages"]] == [
        "user", "assistant"]
    assert "contents" in a.get(url, params={"tail": 10, "format": "gemini"}).json()
    assert "input" in a.get(url, params={"tail": 10, "format": "openai_responses"}).json()
    assert a.get(url, params={"tail": 1, "format": "cobol"}).status_code == 400
    odd = a.post(f"/v1/sessions/{sid}/messages",
                 json={"messages": [Message(role="agent", parts=[]).to_dict()
                                    | {"parts": [{"type": "text", "text": "x"}]}]})
    assert odd.status_code == 200
    unmapped = a.get(url, params={"tail": 1, "format": "openai_chat"})
    assert unmapped.status_code == 422 and unmapped.json()["error"]["path"].startswith("$[")


def test_format_not_available(served: Served, a: httpx.Client,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("hi")})
    monkeypatch.setitem(sys.modules, "chathistory.formats.gemini", None)  # import fails
    response = a.get(f"/v1/sessions/{sid}/messages", params={"tail": 1, "format": "gemini"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "format not available"


def test_export_import_erase_purge(served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    sid = served.new_session(a, user=user, metadata={"x": 1})
    pic = Message.user("pic", Attachment.from_bytes(png_bytes))
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": [pic.to_dict(),
                                                             *messages("a", "b")]})
    exported = a.get("/v1/export", params={"session_id": sid})
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.content.splitlines()
    assert len(lines) == 4 and msgspec.json.decode(lines[0])["kind"] == "session"
    assert a.get("/v1/export", params={"session_id": "missing"}).status_code == 404
    whole = a.get("/v1/export").content
    assert sid.encode() in whole
    assert a.post("/v1/erase", json={}).status_code == 400  # the whole tenant: say so
    assert a.post("/v1/erase", json={"user": user}).json() == {"deleted": 1}
    assert a.get(f"/v1/sessions/{sid}").status_code == 404
    imported = a.post("/v1/import", content=exported.content,
                      headers={"Content-Type": "application/x-ndjson"})
    assert imported.status_code == 200 and imported.json() == {"added": 3}
    again = a.post("/v1/import", content=exported.content,
                   headers={"Content-Type": "application/x-ndjson"})
    assert again.json() == {"added": 0}
    back = a.get(f"/v1/sessions/{sid}/messages", params={"start": 0}).json()
    assert ids(back)[0] == pic.id
    sha = pic.attachments[0].sha256
    assert a.get(f"/v1/assets/{sha}").content == png_bytes
    bad = a.post("/v1/import", content=b'{"kind": "nonsense"}\n')
    assert bad.status_code == 422
    shapeless = a.post("/v1/import", content=b'{"kind": "session"}\n')
    assert shapeless.status_code == 422
    wrong_type = a.post("/v1/import", content=b"x", headers={"Content-Type": "image/png"})
    assert wrong_type.status_code == 415
    short = a.post("/v1/sessions", json={"ttl_seconds": 0.05}).json()["id"]
    import time

    time.sleep(0.1)
    assert a.post("/v1/purge-expired").json()["purged"] >= 1
    assert a.get(f"/v1/sessions/{short}").status_code == 404


def test_me(served: Served, a: httpx.Client) -> None:
    me = a.get("/v1/me").json()
    assert me == {"tenant": "A", "counter": served.store.counter.name,
                  "key_id": served.key_ids["A"], "keys_required": True}
