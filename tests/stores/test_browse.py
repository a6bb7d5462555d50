"""Every backend: what a page of sessions needs for people (``count_sessions``,
``first_user_messages``, ``first_text_matches``), each backend's one-read answer
checked against the engine's row-by-row reading (the in-memory reference's)."""

from __future__ import annotations

from typing import Any

import pytest
from test_trees_and_expiry import _expire

from chathistory import InvalidArgument, Message
from chathistory.stores import BaseStore
from chathistory.stores.browse import CANDIDATES, ascii_casefold, find_all


def _without_fast_paths(store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's own reading: as if the backend implemented no one-read answer."""
    for name in ("_b_count_sessions", "_b_first_user_rows", "_b_rows_containing"):
        monkeypatch.setattr(store, name, lambda *args, **kwargs: None)


def _listed(store: BaseStore, **filters: Any) -> int:
    found, cursor = 0, None
    while True:
        page = store.list_sessions(limit=7, cursor=cursor, **filters)
        found += len(page.items)
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


# ---------------------------------------------------------------- count_sessions


def test_count_sessions_is_what_the_listing_lists(store: BaseStore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(23):
        store.create_session(f"s{i:02}", user="ann" if i % 3 == 0 else "bob",
                             metadata={"kind": "odd" if i % 2 else "even"},
                             ttl=3600 if i % 5 == 0 else None)
        store.append(f"s{i:02}", [Message.user(f"question {i}" + (" needle" if i % 4 == 0
                                                                   else ""))])
    store.create_session("other", tenant="elsewhere")
    for sid in ("s00", "s05", "s03"):  # two with an expiry entry, one without
        _expire(store, sid, "default")
    filters: list[dict[str, Any]] = [
        {}, {"user": "ann"}, {"user": "bob"}, {"user": "nobody"}, {"metadata": {"kind": "odd"}},
        {"query": "NEEDLE"}, {"query": "needle", "user": "ann"}, {"query": "s1"},
        {"query": "absent"}]
    expected = [_listed(store, **f) for f in filters]
    assert expected[:3] == [20, 6, 14]  # 23 less the 3 expired; ann: 8 less 2
    assert [store.count_sessions(**f) for f in filters] == expected
    assert store.count_sessions(tenant="elsewhere") == 1
    assert store.count_sessions(tenant="nobody") == 0
    assert store.count_sessions(at_most=5) == 5
    assert store.count_sessions(query="question", at_most=4) == 4
    assert store.count_sessions(query="question", at_most=100) == 20
    with pytest.raises(InvalidArgument, match="at_most"):
        store.count_sessions(at_most=-1)
    _without_fast_paths(store, monkeypatch)
    assert [store.count_sessions(**f) for f in filters] == expected


def test_count_sessions_follows_deletes(store: BaseStore) -> None:
    for i in range(4):
        store.create_session(f"d{i}", user="u")
    store.delete_session("d1")
    assert store.count_sessions() == 3
    assert store.count_sessions(user="u") == 3


# ---------------------------------------------------------------- first_user_messages


def _tree(store: BaseStore) -> dict[str, str]:
    """Sessions whose first user message is in various places; -> the expected text."""
    store.create_session("plain")
    store.append("plain", [Message.system("be brief"), Message.user("**first** question"),
                           Message.assistant("answer"), Message.user("second question")])
    store.create_session("no-user")
    store.append("no-user", [Message.system("only a system prompt"),
                             Message.assistant("and a greeting")])
    store.create_session("empty")
    store.create_session("late")
    store.append("late", [Message.assistant(f"filler {i}") for i in range(70)]
                 + [Message.user("at last")])
    # a fork inherits its first user message
    store.fork("plain", new_session_id="fork-of-plain")
    store.append("fork-of-plain", [Message.user("fork's own")])
    # a fork of a session whose prefix has none: its own message is the first
    prefix = store.range("no-user")
    store.fork("no-user", prefix[0].id, new_session_id="fork-of-no-user")
    store.append("fork-of-no-user", [Message.user("mine")])
    # a fork of a fork, cut before the parent's own messages
    store.fork("fork-of-plain", new_session_id="grandchild")
    # an edit branch: the first user message replaced
    plain = store.range("plain")
    edited = store.edit("plain", plain[1].id, Message.user("edited question"))
    return {"plain": "**first** question", "late": "at last",
            "fork-of-plain": "**first** question", "fork-of-no-user": "mine",
            "grandchild": "**first** question", edited.id: "edited question"}


def test_first_user_messages(store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _tree(store)
    sessions = [s for s in store.list_sessions(limit=100).items]
    assert {s.id for s in sessions} >= set(expected) | {"no-user", "empty"}
    found = store.first_user_messages(sessions)
    assert {sid: m.text for sid, m in found.items()} == expected
    assert all(m.role == "user" for m in found.values())
    # the same message as a read of the session gives
    plain = store.range("plain")
    assert found["plain"] == plain[1] and found["fork-of-plain"].id == plain[1].id
    _without_fast_paths(store, monkeypatch)
    assert store.first_user_messages(sessions) == found


def test_first_user_messages_of_nothing(store: BaseStore) -> None:
    assert store.first_user_messages([]) == {}


# ---------------------------------------------------------------- first_text_matches


def test_first_text_matches(store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_session("text")
    store.append("text", [Message.user("nothing here"), Message.assistant("The Rain in Spain"),
                          Message.user("rain again")])
    store.create_session("in-metadata", metadata={"topic": "rain"})
    store.append("in-metadata", [Message.user("dry")])
    store.create_session("in-a-call")
    store.append("in-a-call", [
        Message.user("look it up"),
        Message.assistant("", [{"id": "c1", "name": "weather", "arguments": {"q": "rain"}}]),
        Message.tool_result("c1", "sunny"), Message.assistant("It will be sunny; no RAIN.")])
    store.create_session("calls-only")
    store.append("calls-only", [Message.assistant(
        "", [{"id": f"k{i}", "name": "f", "arguments": {"q": "rain"}}]) for i in range(2)]
        + [Message.tool_result(f"k{i}", "ok") for i in range(2)])
    store.fork("text", new_session_id="fork")  # a fork: its own rows only
    store.append("fork", [Message.user("no match of its own")])
    store.fork("text", new_session_id="fork2")
    store.append("fork2", [Message.user("RAIN, said the fork")])
    sessions = store.list_sessions(limit=100).items
    found = store.first_text_matches(sessions, "rain")
    assert {sid: m.text for sid, m in found.items()} == {
        "text": "The Rain in Spain", "in-a-call": "It will be sunny; no RAIN.",
        "fork2": "RAIN, said the fork"}
    assert store.first_text_matches(sessions, "") == {}
    assert store.first_text_matches(sessions, "snow") == {}
    _without_fast_paths(store, monkeypatch)
    assert store.first_text_matches(sessions, "rain") == found


def test_first_text_matches_reads_a_bounded_number_of_candidates(store: BaseStore) -> None:
    store.create_session("ids")
    # CANDIDATES rows whose JSON holds the text only in their id, then a text match
    store.append("ids", [Message.user("x", id=f"rain-{i}") for i in range(CANDIDATES)]
                 + [Message.user("rain at last", id="late")])
    store.create_session("soon")
    store.append("soon", [Message.user("x", id=f"rain-{i}") for i in range(CANDIDATES - 1)]
                 + [Message.user("rain in time", id="in-time")])
    found = store.first_text_matches(store.list_sessions().items, "rain")
    assert "ids" not in found
    assert found["soon"].id == "in-time"


def test_matching_is_ascii_case_insensitive_only(store: BaseStore) -> None:
    store.create_session("u")
    store.append("u", [Message.user("ÉCOLE and école, 50% off_now")])
    sessions = store.list_sessions().items
    assert "u" in store.first_text_matches(sessions, "école")
    assert "u" in store.first_text_matches(sessions, "ÉCOLE")
    assert "u" in store.first_text_matches(sessions, "% OFF_NOW")  # LIKE's wildcards, literal
    assert "u" not in store.first_text_matches(sessions, "%_x")


def test_find_all() -> None:
    assert find_all("Rain, rain, go AWAY", "RAIN") == [(0, 4), (6, 10)]
    assert find_all("aaaa", "aa") == [(0, 2), (2, 4)]
    assert find_all("Émile", "émile") == []  # only ASCII letters fold, as the search
    assert find_all("x", "") == []
    assert ascii_casefold("ÀbC") == "Àbc"
