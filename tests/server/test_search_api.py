"""``GET /v1/search`` on every backend through a real server with two tenants' keys:
the hits and their JSON, paging, filters, errors naming their parameter, a tenant
that can never be widened, and ``RemoteStore.search`` / ``AsyncRemoteStore.search``
answering what the server's store answers."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import EVERY_BACKEND, Served, serving

from chathistory import Message, NotFound
from chathistory.errors import InvalidArgument
from chathistory.stores.remote import AsyncRemoteStore, RemoteStore
from chathistory.stores.search import SearchPage, parse_query

# every backend (the directory's ``served`` has no Redis): ``a`` and ``b`` use this one
served = pytest.fixture(scope="module", params=EVERY_BACKEND, name="served")(serving)


def _post(client: httpx.Client, sid: str, *messages: Message) -> None:
    response = client.post(f"/v1/sessions/{sid}/messages",
                           json={"messages": [m.to_dict() for m in messages]})
    assert response.status_code == 200, response.text


def _search(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get("/v1/search", params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def _utf16_slice(text: str, start: int, end: int) -> str:
    return text.encode("utf-16-le")[2 * start:2 * end].decode("utf-16-le")


def _word() -> str:
    return f"zq{uuid.uuid4().hex[:10]}"


def test_hits_carry_their_session_message_and_marked_snippet(served: Served,
                                                             a: httpx.Client) -> None:
    word = _word()
    sid = served.new_session(a, user="ana", metadata={"topic": "trips"})
    said = Message.user(f"😀 Where is the {word.upper()}? The {word} is near.")
    _post(a, sid, Message.user("nothing"), said, Message.assistant("no match here"))
    page = _search(a, q=word)
    assert page["next_cursor"] is None
    [hit] = page["items"]
    assert (hit["session_id"], hit["seq"]) == (sid, 1)
    assert hit["message"] == a.get(f"/v1/sessions/{sid}/messages/{said.id}").json()
    assert isinstance(hit["score"], float) and hit["score"] > 0
    assert len(hit["marks"]) == 2  # UTF-16 offsets: past the emoji, still exact
    assert [_utf16_slice(hit["snippet"], *m).lower() for m in hit["marks"]] == [word, word]
    if served.store._b_search("A", parse_query(word), None, None, None, 1) is None:
        # a store without an index says how much it read
        assert page["scanned"] >= 3
    else:
        assert "scanned" not in page


def test_pages_filters_and_phrases(served: Served, a: httpx.Client) -> None:
    word = _word()
    ann, bob = served.new_session(a, user="ann", metadata={"kind": "x"}), served.new_session(
        a, user="bob")
    _post(a, ann, *[Message.user(f"{word} number {i}") for i in range(5)])
    _post(a, bob, Message.user(f"{word} from bob"), Message.user(f"bob says {word} last"))
    seen: list[tuple[str, int]] = []
    cursor = None
    while True:
        page = _search(a, q=word, limit=2, **({"cursor": cursor} if cursor else {}))
        assert len(page["items"]) <= 2
        seen += [(h["session_id"], h["seq"]) for h in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([(ann, i) for i in range(5)] + [(bob, 0), (bob, 1)])
    scores = [h["score"] for h in _search(a, q=word, limit=7)["items"]]
    assert scores == sorted(scores, reverse=True)

    def where(**params: Any) -> set[tuple[str, int]]:
        return {(h["session_id"], h["seq"]) for h in _search(a, q=word, **params)["items"]}

    assert where(user="bob") == {(bob, 0), (bob, 1)}
    assert where(session_id=ann, limit=10) == {(ann, i) for i in range(5)}
    assert where(**{"metadata.kind": "x"}, limit=10) == {(ann, i) for i in range(5)}
    assert where(**{"metadata.kind": "y"}) == set()
    assert where(user="ann", session_id=bob) == set()
    assert {(h["session_id"], h["seq"]) for h in _search(a, q=f'"says {word}"')["items"]} == {
        (bob, 1)}
    assert {h["seq"] for h in _search(a, q=f"{word} numb*", limit=10)["items"]} == set(range(5))


def test_a_tenant_never_sees_another_tenants_messages(served: Served, a: httpx.Client,
                                                      b: httpx.Client) -> None:
    word = _word()
    secret = served.new_session(a, user="ann")
    _post(a, secret, Message.user(f"the secret is {word}"))
    assert len(_search(a, q=word)["items"]) == 1
    assert _search(b, q=word)["items"] == []
    # no parameter widens the search: a tenant named in the query is ignored
    assert _search(b, q=word, tenant="A")["items"] == []
    assert _search(b, q=word, user="ann")["items"] == []
    # another tenant's session id is no session of this tenant
    assert b.get("/v1/search", params={"q": word, "session_id": secret}).status_code == 404
    # the same id in tenant B: B's own session, without A's messages
    served.new_session(b, id=secret)
    _post(b, secret, Message.user("b's own words"))
    assert _search(b, q=word, session_id=secret)["items"] == []
    assert _search(b, q="own words", session_id=secret)["items"][0]["session_id"] == secret
    # the listing's search keeps to the tenant too
    listed = b.get("/v1/sessions", params={"q": word}).json()
    assert listed["items"] == [] and listed["total"] == 0


@pytest.mark.parametrize("params, names", [
    ({}, "q"), ({"q": ""}, "q"), ({"q": "  "}, "q"), ({"q": "?!"}, "q"),
    ({"q": " ".join(f"w{i}" for i in range(17))}, "q"),
    ({"q": "x", "limit": "0"}, "limit"), ({"q": "x", "limit": "101"}, "limit"),
    ({"q": "x", "limit": "many"}, "limit"), ({"q": "x", "cursor": "not-a-cursor"}, "cursor"),
    ({"q": "x", "cursor": "WzEsMl0"}, "cursor")])
def test_bad_input_is_a_400_naming_the_parameter(a: httpx.Client, params: dict[str, str],
                                                 names: str) -> None:
    response = a.get("/v1/search", params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "bad_request" and names in error["message"]


def test_a_query_given_twice_is_refused(a: httpx.Client) -> None:
    response = a.get("/v1/search?q=one&q=two")
    assert response.status_code == 400 and "q" in response.json()["error"]["message"]


def _same(remote: SearchPage, local: SearchPage) -> None:
    assert remote.next_cursor == local.next_cursor and remote.scanned == local.scanned
    assert [(h.session_id, h.seq, h.message.id, h.snippet, h.marks) for h in remote.items] == [
        (h.session_id, h.seq, h.message.id, h.snippet, h.marks) for h in local.items]
    assert [h.message for h in remote.items] == [h.message for h in local.items]
    assert [h.score for h in remote.items] == pytest.approx([h.score for h in local.items])


def test_remote_store_search_is_the_servers(served: Served, a: httpx.Client,
                                            tmp_path: Path) -> None:
    word = _word()
    sid = served.new_session(a, user="ann", metadata={"kind": "y"})
    _post(a, sid, Message.user(f"𝄞 music {word}"), Message.user(f"{word} again and {word}"),
          Message.assistant("", [{"id": "c1", "name": "lookup", "arguments": {"q": word}}]))
    remote = RemoteStore(served.url, served.keys["A"])
    try:
        for options in ({}, {"limit": 1}, {"user": "ann"}, {"session_id": sid},
                        {"metadata": {"kind": "y"}}, {"metadata": {"kind": "z"}}):
            local = served.store.search(word, tenant="A", **options)
            _same(remote.search(word, **options), local)
            if local.next_cursor:
                _same(remote.search(word, cursor=local.next_cursor, **options),
                      served.store.search(word, tenant="A", cursor=local.next_cursor, **options))
        first = remote.search(f'"music {word}"').items[0]
        assert first.snippet[first.marks[0][0]:first.marks[0][1]] == "music"  # code points
        with pytest.raises(InvalidArgument, match="q"):
            remote.search("?!")
        with pytest.raises(NotFound):
            remote.search(word, session_id="no-such-session")
        with pytest.raises(ValueError, match="tenant"):
            remote.search(word, tenant="B")
    finally:
        remote.close()

    async def through_async() -> SearchPage:
        async with AsyncRemoteStore(served.url, served.keys["A"]) as store:
            return await store.search(word, tenant="A", limit=2)

    _same(asyncio.run(through_async()), served.store.search(word, tenant="A", limit=2))
