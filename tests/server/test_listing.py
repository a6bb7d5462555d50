"""``GET /v1/sessions`` as the viewer reads it: titles, previews, totals and search
snippets in the one response, over every backend, through a real server."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from serverkit import Served

from chathistory import Message
from chathistory.server import listing
from chathistory.server.listing import listing_json, snippet
from chathistory.stores.remote import RemoteStore
from chathistory.stores.search import words


def _post(client: httpx.Client, sid: str, *messages: Message) -> None:
    response = client.post(f"/v1/sessions/{sid}/messages",
                           json={"messages": [m.to_dict() for m in messages]})
    assert response.status_code == 200, response.text


def _all_pages(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = client.get("/v1/sessions", params={**params, **(
            {"cursor": cursor} if cursor else {})}).json()
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


def _utf16_slice(text: str, start: int, end: int) -> str:
    return text.encode("utf-16-le")[2 * start:2 * end].decode("utf-16-le")


def test_items_carry_title_and_preview_and_the_page_a_total(served: Served,
                                                            a: httpx.Client,
                                                            b: httpx.Client) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    named = served.new_session(a, user=user, metadata={"title": "Quarterly  plan",
                                                       "name": "ignored"})
    _post(a, named, Message.user("what about Q3?"))
    markdown = served.new_session(a, user=user, metadata={"title": "  "})
    _post(a, markdown, Message.system("be brief"),
          Message.user("## Fix the `build`\n\nIt fails at **512 \\* 512** pixels."))
    empty = served.new_session(a, user=user)
    long = served.new_session(a, user=user)
    _post(a, long, Message.assistant("hello"), Message.user("word " * 100))
    pages = _all_pages(a, user=user, limit=3)
    assert [p["total"] for p in pages] == [4, 4]
    assert all(p["total_is_lower_bound"] is False for p in pages)
    items = {i["id"]: i for p in pages for i in p["items"]}
    assert list(items) == [named, markdown, empty, long]
    assert items[named]["title"] == "Quarterly plan"
    assert items[named]["preview"] == "what about Q3?"
    assert items[markdown]["title"] == items[markdown]["preview"] == (
        "Fix the build It fails at 512 * 512 pixels.")
    assert items[empty]["title"] is None and items[empty]["preview"] is None
    assert "snippet" not in items[empty]  # only with q
    assert 100 <= len(items[long]["title"]) <= 120 and items[long]["title"].endswith("…")
    assert 140 <= len(items[long]["preview"]) <= 160 and items[long]["preview"].endswith("…")
    # the session fields are all still there
    assert items[named]["metadata"]["name"] == "ignored" and items[named]["user"] == user
    assert items[long]["message_count"] == 2
    # a one-page listing, and another tenant's view of the same filter
    assert a.get("/v1/sessions", params={"user": user}).json()["total"] == 4
    other = b.get("/v1/sessions", params={"user": user}).json()
    assert other["items"] == [] and other["total"] == 0


def test_a_fork_lists_the_title_it_inherits(served: Served, a: httpx.Client) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    root = served.new_session(a, user=user)
    _post(a, root, Message.user("*inherited* question"), Message.assistant("answer"))
    fork = a.post(f"/v1/sessions/{root}/fork", json={}).json()["id"]
    listed = a.get("/v1/sessions", params={"user": user}).json()
    assert {i["id"]: i["title"] for i in listed["items"]} == {
        root: "inherited question", fork: "inherited question"}


def test_search_gives_snippets_with_offsets_to_highlight(served: Served,
                                                         a: httpx.Client) -> None:
    word = f"zq{uuid.uuid4().hex[:8]}"
    in_text = served.new_session(a)
    long_before = "lorem ipsum " * 30
    _post(a, in_text, Message.user("nothing yet"),
          Message.assistant(f"{long_before}😀 the {word.upper()} is\n\n here, and {word} again"))
    in_metadata = served.new_session(a, metadata={"topic": f"about {word}"})
    _post(a, in_metadata, Message.user("plain words"))
    by_id = served.new_session(a, id=f"s-{word}-x")
    in_call = served.new_session(a)
    _post(a, in_call, Message.assistant("", [{"id": "c1", "name": "f",
                                              "arguments": {"q": word}}]),
          Message.tool_result("c1", "done"))
    page = a.get("/v1/sessions", params={"q": word}).json()
    assert page["total"] == 4 and page["total_is_lower_bound"] is False
    items = {i["id"]: i for i in page["items"]}
    assert set(items) == {in_text, in_metadata, by_id, in_call}
    assert items[in_metadata]["snippet"] is None
    assert items[by_id]["snippet"] is None
    # a tool call's name and arguments are searchable text, and so make a snippet
    call = items[in_call]["snippet"]
    assert call["role"] == "assistant" and call["text"] == f"f q {word}"
    assert [_utf16_slice(call["text"], *m) for m in call["match"]] == [word]
    found = items[in_text]["snippet"]
    assert found["role"] == "assistant"
    assert found["message_id"] == a.get(f"/v1/sessions/{in_text}/messages",
                                        params={"tail": 1}).json()["messages"][0]["id"]
    text = found["text"]
    assert text.startswith("…") and "\n" not in text
    assert len(text) <= listing.SNIPPET_WIDTH + 21  # (a cut moves to a space within 20)
    assert len(found["match"]) == 2
    for start, end in found["match"]:  # UTF-16 offsets: past the emoji, still exact
        assert _utf16_slice(text, start, end).lower() == word
    assert items[in_text]["preview"] == "nothing yet"
    pieces = a.get("/v1/sessions", params={"q": word[:-1]}).json()["items"]
    assert {i["id"] for i in pieces} == {in_metadata, by_id}  # messages: words, not pieces
    prefix = a.get("/v1/sessions", params={"q": word[:-1] + "*"}).json()
    assert {i["id"] for i in prefix["items"]} == {in_text, in_call}  # messages only


def test_a_search_total_stops_at_the_limit(served: Served, a: httpx.Client,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "SEARCH_COUNT_LIMIT", 3)  # the server runs in this process
    word = f"zq{uuid.uuid4().hex[:8]}"
    made = []
    for i in range(5):
        made.append(served.new_session(a))
        _post(a, made[-1], Message.user(f"{word} {i}"))
    pages = _all_pages(a, q=word, limit=2)
    assert [p["total"] for p in pages] == [3, 3, 3]
    assert [p["total_is_lower_bound"] for p in pages] == [True, True, True]
    assert [i["id"] for p in pages for i in p["items"]] == made
    assert a.get("/v1/sessions", params={"q": word}).json()["total"] == 5  # one page: exact
    a.delete(f"/v1/sessions/{made[0]}")
    a.delete(f"/v1/sessions/{made[1]}")
    exactly = a.get("/v1/sessions", params={"q": word, "limit": 1}).json()
    assert exactly["total"] == 3 and exactly["total_is_lower_bound"] is False


def test_a_service_over_another_reads_the_same_page(served: Served, a: httpx.Client) -> None:
    """A store that is not an engine (a RemoteStore) gets titles, previews and snippets
    message by message: the same answer."""
    word = f"zq{uuid.uuid4().hex[:8]}"
    user = f"u-{uuid.uuid4().hex[:8]}"
    first = served.new_session(a, user=user, metadata={"subject": "Named"})
    _post(a, first, Message.user(f"hi {word}"))
    second = served.new_session(a, user=user)
    _post(a, second, Message.system("sys"), Message.user(f"**bold** then {word}"))
    served.new_session(a, user=user)
    fork = a.post(f"/v1/sessions/{second}/fork", json={}).json()["id"]
    _post(a, fork, Message.user(f"fork says {word.upper()}"))
    remote = RemoteStore(served.url, served.keys["A"])
    try:
        for params in ({"user": user, "limit": 2}, {"user": user, "q": word, "limit": 50}):
            options = {"user": user, "metadata": None, "limit": params["limit"],
                       "cursor": None, "order": "created", "query": params.get("q")}
            direct = httpx.Response(200, content=listing_json(served.store, "A", **options))
            through = httpx.Response(200, content=listing_json(remote, "A", **options))
            served_page = a.get("/v1/sessions", params=params).json()
            assert through.json()["total"] == direct.json()["total"] == served_page["total"]
            for key in ("title", "preview", "snippet"):
                assert ([i.get(key) for i in through.json()["items"]]
                        == [i.get(key) for i in direct.json()["items"]]
                        == [i.get(key) for i in served_page["items"]])
        assert served_page["items"][-1]["snippet"]["text"] == f"fork says {word.upper()}"
    finally:
        remote.close()


def test_bad_listing_input_names_the_field(a: httpx.Client) -> None:
    assert a.get("/v1/sessions", params={"limit": 0}).status_code == 400
    bad = a.get("/v1/sessions", params={"order": "sideways"})
    assert bad.status_code == 422 and bad.json()["error"]["path"] == "order"


# ---------------------------------------------------------------- snippet(), no server


def test_snippet_examples() -> None:
    short = snippet(Message.user("say  Hello\tworld, hello!"), "HELLO")
    assert short is not None
    assert short.text == "say  Hello\tworld, hello!" and short.match == [(5, 10), (18, 23)]
    assert snippet(Message.user("nothing"), "x") is None
    assert snippet(Message.user("nothing"), "noth") is None  # a word, not a piece
    long = snippet(Message.user("a" * 500 + " the match " + "b " * 300), "match")
    assert long is not None
    assert long.text.startswith("…") and long.text.endswith("…")
    assert long.text[long.match[0][0]:long.match[0][1]] == "match"
    assert len(long.text) <= listing.SNIPPET_WIDTH + 21
    at_end = snippet(Message.user("word " * 100 + "final"), "final")
    assert at_end is not None and at_end.text.endswith("final")
    assert at_end.text.startswith("…word ")
    phrase = snippet(Message.user("the café, then the CAFE bar"), '"cafe bar" the')
    assert phrase is not None
    assert [phrase.text[a:b] for a, b in phrase.match] == ["the", "the", "CAFE", "bar"]


@given(st.text(min_size=0, max_size=400), st.from_regex(r"[^\W_]{1,12}", fullmatch=True),
       st.integers(min_value=0, max_value=400))
def test_snippet_offsets_always_point_at_a_matched_word(text: str, query: str,
                                                        at: int) -> None:
    assume(len(words(query)) == 1)
    at = min(at, len(text))
    message = Message.user(text[:at] + " " + query + " " + text[at:])
    found = snippet(message, query)
    assert found is not None and found.match
    for start, end in found.match:  # UTF-16 offsets into the snippet
        piece = _utf16_slice(found.text, start, end)
        assert "".join(words(piece)) == words(query)[0]
