"""Every backend: what a page of sessions needs for people (``count_sessions``,
``first_user_messages``, ``first_text_matches``, the listing's word search), each
backend's one-read answer checked against the engine's row-by-row reading (the
in-memory reference's)."""

from __future__ import annotations

from typing import Any

import pytest
from test_trees_and_expiry import _expire

from chathistory import InvalidArgument, Message
from chathistory.stores import BaseStore
from chathistory.stores.search import parse_query, search_text, words


def _without_fast_paths(store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's own reading: as if the backend implemented no one-read answer."""
    for name in ("_b_count_sessions", "_b_first_user_rows", "_b_search",
                 "_b_search_sessions"):
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


def _words_of(message: Message) -> list[str]:
    return words(search_text(message))


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
    store.create_session("ids-only")
    store.append("ids-only", [Message.user("x", id="rain-1"), Message.user("y", id="rain-2")])
    store.fork("text", new_session_id="fork")  # a fork: its own rows only
    store.append("fork", [Message.user("no match of its own")])
    store.fork("text", new_session_id="fork2")
    store.append("fork2", [Message.user("RAIN, said the fork")])
    sessions = store.list_sessions(limit=100).items
    found = store.first_text_matches(sessions, "rain")
    # a tool call's arguments are searchable text now; ids and metadata are not
    assert set(found) == {"text", "in-a-call", "fork2"}
    own = {sid: {m.id for m in store.range(sid)[_own_start(store, sid):]} for sid in found}
    query = parse_query("rain")
    for sid, message in found.items():
        assert message.id in own[sid] and query.matches(_words_of(message))
    assert found["fork2"].text == "RAIN, said the fork"
    assert store.first_text_matches(sessions, "") == {}
    assert store.first_text_matches(sessions, "snow") == {}
    assert store.first_text_matches(sessions, '"rain in spain"').keys() == {"text"}
    with pytest.raises(InvalidArgument, match="q"):
        store.first_text_matches(sessions, "%%")
    # without the index (or on a backend without one): each session's first match
    monkeypatch.setattr(store, "_b_search", lambda *args, **kwargs: None)
    first = store.first_text_matches(sessions, "rain")
    assert {sid: m.text for sid, m in first.items() if sid != "in-a-call"} == {
        "text": "The Rain in Spain", "fork2": "RAIN, said the fork"}
    assert first["in-a-call"].parts[0].name == "weather"  # type: ignore[union-attr]


def _own_start(store: BaseStore, session_id: str) -> int:
    session = store.get_session(session_id)
    return session.fork_seq if session.parent_id is not None else 0


def test_first_text_matches_finds_one_match_per_session_past_a_busy_one(
        store: BaseStore) -> None:
    """One session with many strong matches does not crowd the others out."""
    store.create_session("busy")
    store.append("busy", [Message.user("kiwi kiwi kiwi") for _ in range(40)])
    store.create_session("quiet")
    store.append("quiet", [Message.user(f"filler {i} " + "words " * 30) for i in range(10)]
                 + [Message.user("one kiwi among many other words " + "words " * 30)])
    sessions = store.list_sessions().items
    found = store.first_text_matches(sessions, "kiwi")
    assert set(found) == {"busy", "quiet"}
    assert found["quiet"].text.startswith("one kiwi")


def test_matching_is_by_words_folded(store: BaseStore) -> None:
    store.create_session("u")
    store.append("u", [Message.user("ÉCOLE and école, 50% off_now")])
    sessions = store.list_sessions().items
    for query in ("école", "ECOLE", "ecole", "off_now", '"off now"', "ecol*", "50"):
        assert "u" in store.first_text_matches(sessions, query), query
    for query in ("ecol", "% offnow", "5"):  # words, not substrings
        assert "u" not in store.first_text_matches(sessions, query), query


# ---------------------------------------------------------------- the listing's search


def test_listing_search_is_by_words_in_messages(store: BaseStore) -> None:
    """What changed (issue 22): the listing's ``query`` matches messages by words
    (``search.parse_query``), no longer by a substring of their stored JSON."""
    store.create_session("quote", metadata={"note": "Plans for the café"})
    store.append("quote", [Message.user("Ask Zoë about the crème brûlée"),
                           Message.assistant("Done.", id="msg-marker")])
    store.create_session("other")
    store.append("other", [Message.user("unrelated text")])

    def found(query: str) -> list[str]:
        return [s.id for s in store.list_sessions(query=query).items]

    assert found("brulee") == ["quote"]  # diacritics folded (was: exact bytes)
    assert found("BRÛLÉE") == ["quote"]  # any case (was: ASCII letters only)
    assert found("brû") == []  # a word, not a piece of one (was: found)
    assert found("brû*") == ["quote"]  # unless it ends with *
    assert found('"creme brulee"') == ["quote"]
    assert found('"brulee creme"') == []  # a phrase keeps its order
    assert found("zoe unrelated") == []  # every word in one message
    assert found("role") == []  # the stored JSON's field names are not text (were)
    assert found("marker") == []  # nor message ids
    # the id and metadata values still match by the text as written
    assert found("uot") == ["quote"]
    assert found("Plans for") == ["quote"]
    with pytest.raises(InvalidArgument, match="q: a search needs at least one word"):
        store.list_sessions(query="%_!")
    assert found("") == ["quote", "other"]  # an empty query is no filter


def test_listing_search_uses_one_index_read_past_the_first_batch(
        store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rare word: past the first batch, the walk reads sessions only (the index
    names the matching ones once), or rows where there is no index; same answer."""
    for i in range(230):
        store.create_session(f"r{i:03}")
        store.append(f"r{i:03}", [Message.user("common words" + (" rare" if i in (7, 199)
                                                                  else ""))])
    calls: list[Any] = []
    original = store._b_search_sessions

    def spy(tenant: str, query: Any, spans: Any, limit: int) -> Any:
        calls.append(spans)
        return original(tenant, query, spans, limit)

    monkeypatch.setattr(store, "_b_search_sessions", spy)
    assert [s.id for s in store.list_sessions(query="rare", limit=5).items] == ["r007", "r199"]
    assert calls[0] is not None and None in calls  # a batch, then the whole tenant once
    assert calls.index(None) == 1
    assert store.count_sessions(query="rare") == 2
    assert store.count_sessions(query="common") == 230
    assert store.count_sessions(query="common", at_most=120) == 120
