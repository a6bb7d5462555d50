"""One suite, every backend: the Store contract."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from typing import Any

import msgspec
import pair_shapes
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chathistory import (
    Attachment,
    Conflict,
    History,
    IdReused,
    ImagePart,
    InvalidArgument,
    InvalidMessage,
    KVStatus,
    Message,
    NotFound,
    Reasoning,
    TextPart,
    ToolResult,
    Usage,
)
from chathistory.stores import BaseStore
from chathistory.tokens import cached_count


def chat(n: int, prefix: str = "m") -> list[Message]:
    return [(Message.user if i % 2 == 0 else Message.assistant)(f"{prefix} {i} " + "w " * (i % 7))
            for i in range(n)]


def tool_turn(i: int) -> list[Message]:
    return [
        Message.user(f"q{i}"),
        Message(role="assistant", parts=[Reasoning(text=f"think {i}")]),
        Message.assistant("", [{"id": f"c{i}a", "name": "f", "arguments": {"i": i}},
                               {"id": f"c{i}b", "name": "g", "arguments": {}}]),
        Message.tool_result(f"c{i}a", f"ra{i}"),
        Message.tool_result(f"c{i}b", f"rb{i}"),
        Message.assistant(f"a{i}"),
    ]


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


# ---------------------------------------------------------------- sessions


def test_create_get_update_delete(store: BaseStore) -> None:
    s = store.create_session("s1", metadata={"app": "x"}, state={"k": 1}, user="u1")
    assert (s.id, s.tenant, s.version, s.user) == ("s1", "default", 0, "u1")
    got = store.get_session("s1")
    assert got.metadata == {"app": "x"} and got.state == {"k": 1}
    with pytest.raises(Conflict):
        store.create_session("s1")
    updated = store.update_session("s1", state={"k": 2})
    assert updated.version == 1 and store.get_session("s1").state == {"k": 2}
    assert store.get_session("s1").metadata == {"app": "x"}
    with pytest.raises(Conflict):
        store.update_session("s1", metadata={}, expected_version=0)
    store.delete_session("s1")
    with pytest.raises(NotFound):
        store.get_session("s1")
    generated = store.create_session()
    assert len(generated.id) == 36


def test_unknown_session(store: BaseStore) -> None:
    for call in (lambda: store.get_session("nope"), lambda: store.tail("nope", 3),
                 lambda: store.append("nope", [Message.user("x")]),
                 lambda: store.window("nope", 100)):
        with pytest.raises(NotFound):
            call()


def test_session_round_trips_through_dict(store: BaseStore) -> None:
    from chathistory.stores import Session

    s = store.create_session(state={"provider": {"a": [1, 2]}})
    store.append(s.id, chat(3))
    s = store.get_session(s.id)
    assert Session.from_dict(s.to_dict()) == s


def test_list_sessions_pages_and_filters(store: BaseStore) -> None:
    for i in range(7):
        store.create_session(f"s{i}", metadata={"even": i % 2 == 0})
        time.sleep(0.002)
    store.create_session("other", tenant="t2")
    page = store.list_sessions(limit=3)
    seen = [s.id for s in page.items]
    while page.next_cursor:
        page = store.list_sessions(limit=3, cursor=page.next_cursor)
        seen += [s.id for s in page.items]
    assert seen == [f"s{i}" for i in range(7)]
    evens = store.list_sessions(metadata={"even": True}, limit=10).items
    assert [s.id for s in evens] == ["s0", "s2", "s4", "s6"]
    assert [s.id for s in store.list_sessions(tenant="t2").items] == ["other"]


def _all_pages(store: BaseStore, limit: int, **options: Any) -> list[str]:
    """Every session id the listing yields, page by page (no page over ``limit``)."""
    page = store.list_sessions(limit=limit, **options)
    seen = [s.id for s in page.items]
    while page.next_cursor:
        assert len(page.items) == limit
        page = store.list_sessions(limit=limit, cursor=page.next_cursor, **options)
        assert len(page.items) <= limit
        seen += [s.id for s in page.items]
    return seen


def test_list_sessions_recent_order(store: BaseStore) -> None:
    for i in range(5):
        store.create_session(f"s{i}", user="u" if i % 2 else None)
        time.sleep(0.002)
    store.append("s1", chat(1))  # older sessions change: they move to the front
    time.sleep(0.002)
    store.append("s3", chat(1))
    time.sleep(0.002)
    store.update_session("s0", metadata={"touched": True})
    recent = [s.id for s in store.list_sessions(order="recent").items]
    assert recent == ["s0", "s3", "s1", "s4", "s2"]
    assert [s.id for s in store.list_sessions().items] == [f"s{i}" for i in range(5)]
    assert [s.id for s in store.list_sessions(order="recent", user="u").items] == ["s3", "s1"]
    time.sleep(0.002)
    store.pop("s1")
    assert [s.id for s in store.list_sessions(order="recent", limit=2).items] == ["s1", "s0"]
    got = store.list_sessions(order="recent")
    assert [s.updated_at for s in got.items] == sorted((s.updated_at for s in got.items),
                                                       reverse=True)


@pytest.mark.parametrize("order", ["created", "recent"])
def test_list_sessions_pages_without_gaps(store: BaseStore, order: str) -> None:
    for i in range(13):
        store.create_session(f"p{i:02}", metadata={"odd": i % 2 == 1})
    for i in (4, 0, 9):  # some sessions change after all were created
        store.append(f"p{i:02}", chat(1))
    every = store.list_sessions(limit=1000, order=order).items  # type: ignore[arg-type]
    if order == "recent":
        expected = sorted(every, key=lambda s: (s.updated_at, s.id), reverse=True)
    else:
        expected = sorted(every, key=lambda s: (s.created_at, s.id))
    assert [s.id for s in every] == [s.id for s in expected]
    assert sorted(s.id for s in every) == [f"p{i:02}" for i in range(13)]
    for limit in (1, 4, 13):
        assert _all_pages(store, limit, order=order) == [s.id for s in every]
    odd = [s.id for s in every if s.metadata["odd"]]
    assert _all_pages(store, 2, order=order, metadata={"odd": True}) == odd


def test_list_sessions_cursor_belongs_to_its_order(store: BaseStore) -> None:
    for i in range(3):
        store.create_session(f"c{i}")
    by_created = store.list_sessions(limit=1).next_cursor
    by_recent = store.list_sessions(limit=1, order="recent").next_cursor
    assert by_created and by_recent and by_created != by_recent
    # the caller's mistake: InvalidArgument (a 400 through the service), not a bare
    # ValueError (which the service answers as a bug)
    with pytest.raises(InvalidArgument, match="order=created"):
        store.list_sessions(cursor=by_created, order="recent")
    with pytest.raises(InvalidArgument, match="order=recent"):
        store.list_sessions(cursor=by_recent)
    with pytest.raises(InvalidArgument, match="cursor"):
        store.list_sessions(cursor="not a cursor")
    # (through the service, the route refuses the parameter first: 422 naming it)
    with pytest.raises((InvalidArgument, InvalidMessage), match="order"):
        store.list_sessions(order="newest")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="past the session's end"):
        store.range("c0", 3)


def _found(store: BaseStore, query: str, **options: Any) -> list[str]:
    return sorted(s.id for s in store.list_sessions(query=query, limit=100, **options).items)


def test_list_sessions_search(store: BaseStore) -> None:
    store.create_session("quote", metadata={"title": "Plans"})
    store.append("quote", [Message.user('He said "ship it" at the café'),
                           Message.assistant("line one\nline two, C:\\temp, 50% off, a_b")])
    store.create_session("tool", metadata={"title": "Crème brûlée", "n": 12345,
                                           "seen": [True, None, 12345]})
    store.append("tool", [Message.user("weather?"),
                          Message.assistant("", [{"id": "c1", "name": "lookup",
                                                  "arguments": {"city": "Zürich"}}]),
                          Message.tool_result("c1", "sunny and warm")])
    store.create_session("Invoice-2024", user="u1")
    store.create_session("plain")
    store.append("plain", [Message.user("a 500 error, ab")])
    # message text, tool arguments and results, by words (issue 22: was a substring of
    # the stored JSON; tests/stores/test_browse.py has what changed)
    assert _found(store, "ship it") == ["quote"]
    assert _found(store, "SUNNY") == ["tool"]
    assert _found(store, "zurich") == ["tool"]  # diacritics folded
    assert _found(store, "lookup") == ["tool"]  # a tool call's name
    # quotes make a phrase; other punctuation separates words, as in the text
    assert _found(store, '"ship it"') == ["quote"]
    assert _found(store, '"it ship"') == []
    assert _found(store, 'said "SHIP') == ["quote"]
    assert _found(store, "one\nline") == ["quote"]
    assert _found(store, "C:\\temp") == ["quote"]
    assert _found(store, "50%") == ["quote"]
    assert _found(store, "a_b") == ["quote"]  # the phrase "a b"
    assert _found(store, "CAFÉ") == ["quote"]
    assert _found(store, "caf") == []  # a word, not a piece of one
    assert _found(store, "caf*") == ["quote"]
    # the session id, and metadata values as JSON text, by the query as written
    assert _found(store, "invoice-20") == ["Invoice-2024"]
    assert _found(store, "PLANS") == ["quote"]
    assert _found(store, "brûlée") == ["tool"]
    assert _found(store, "TRUE,null,12345") == ["tool"]
    assert _found(store, '"Plans"') == []  # neither a message's words nor metadata's text
    assert _found(store, "no such text") == []
    # with the other filters
    assert _found(store, "invoice", user="u1") == ["Invoice-2024"]
    assert _found(store, "invoice", user="u2") == []
    assert _found(store, "a") == ["plain", "quote"]
    assert _found(store, "a", metadata={"title": "Plans"}) == ["quote"]
    assert _found(store, "", order="recent") == sorted(
        ["quote", "tool", "Invoice-2024", "plain"])  # an empty query keeps everything
    with pytest.raises(InvalidArgument, match="q: a search needs at least one word"):
        _found(store, "\\")


def test_list_sessions_search_pages_in_both_orders(store: BaseStore) -> None:
    for i in range(9):
        store.create_session(f"q{i}")
        store.append(f"q{i}", [Message.user(f"turn {i}: " + ("Needle" if i % 3 else "hay"))])
    store.append("q1", [Message.user("later")])
    hits = {f"q{i}" for i in range(9) if i % 3}
    for order in ("created", "recent"):
        every = [s.id for s in store.list_sessions(order=order).items]  # type: ignore[arg-type]
        expected = [sid for sid in every if sid in hits]
        assert _all_pages(store, 2, order=order, query="needle") == expected
        assert _all_pages(store, 6, order=order, query="needle") == expected
    assert store.list_sessions(order="recent", query="needle", limit=1).items[0].id == "q1"


def test_list_sessions_search_reads_past_a_batch(store: BaseStore) -> None:
    for i in range(105):  # more than one batch of a search between the two matches
        store.create_session(f"b{i:03}", metadata={"tag": "first" if i in (0, 104) else "x"})
    page = store.list_sessions(query="first", limit=1)
    assert [s.id for s in page.items] == ["b000"] and page.next_cursor
    page = store.list_sessions(query="first", limit=1, cursor=page.next_cursor)
    assert [s.id for s in page.items] == ["b104"]
    if page.next_cursor:
        assert store.list_sessions(query="first", limit=1, cursor=page.next_cursor).items == []


def test_list_sessions_search_is_per_tenant_and_skips_expired(store: BaseStore) -> None:
    store.create_session("secret-a", tenant="a", metadata={"k": "secret-meta"})
    store.append("secret-a", [Message.user("the secret word is kumquat")], tenant="a")
    store.create_session("secret-a", tenant="b")  # same id in tenant b, other content
    store.create_session("mine", tenant="b")
    for query in ("kumquat", "secret-meta"):
        assert _found(store, query, tenant="a") == ["secret-a"]
        assert _found(store, query, tenant="b") == []
    assert _found(store, "secret", tenant="b") == ["secret-a"]  # b's own session, by id
    store.create_session("short", tenant="b", ttl=1.0)
    store.append("short", [Message.user("kumquat in b")], tenant="b")
    assert _found(store, "kumquat", tenant="b") == ["short"]
    time.sleep(1.2)
    assert _found(store, "kumquat", tenant="b") == []
    assert _found(store, "short", tenant="b", order="recent") == []
    assert "short" not in [s.id for s in store.list_sessions(tenant="b", order="recent").items]


def test_list_sessions_search_and_forks(store: BaseStore) -> None:
    parent = store.create_session("parent")
    store.append(parent.id, [Message.user("the kiwi question"), Message.assistant("answer")])
    fork = store.fork(parent.id, new_session_id="fork")
    store.append(fork.id, [Message.user("and a mango")])
    kiwi = _found(store, "kiwi")  # in the shared prefix: the parent that stores it
    assert "parent" in kiwi and set(kiwi) <= {"parent", "fork"}
    assert _found(store, "mango") == ["fork"]


def test_tenants_are_isolated(store: BaseStore) -> None:
    store.create_session("shared-name", tenant="a")
    store.append("shared-name", [Message.user("secret of a")], tenant="a")
    with pytest.raises(NotFound):
        store.get_session("shared-name", tenant="b")
    with pytest.raises(NotFound):
        store.tail("shared-name", 5, tenant="b")
    store.create_session("shared-name", tenant="b")  # same id, other tenant: a new session
    assert store.tail("shared-name", 5, tenant="b") == []
    assert [m.text for m in store.tail("shared-name", 5, tenant="a")] == ["secret of a"]


# ---------------------------------------------------------------- appending


def test_append_versions_and_idempotency(store: BaseStore) -> None:
    s = store.create_session()
    batch = chat(3)
    v1 = store.append(s.id, batch)
    assert v1 == 1
    assert store.append(s.id, batch) == v1  # a retry stores nothing and answers the same
    v2 = store.append(s.id, chat(2, "n"))
    assert v2 == 2
    assert store.append(s.id, batch) == v1  # still the version that stored them
    assert store.count(s.id) == 5
    retried = [Message.from_json(m.to_json()) for m in batch]
    assert store.append(s.id, retried + chat(1, "x")) == 3  # only the new one is added
    assert store.count(s.id) == 6
    assert store.append(s.id, []) == 3


def test_expected_version(store: BaseStore) -> None:
    s = store.create_session()
    assert store.append(s.id, chat(1), expected_version=0) == 1
    with pytest.raises(Conflict):
        store.append(s.id, chat(1, "late"), expected_version=0)
    assert store.count(s.id) == 1


def test_invalid_message_stores_nothing(store: BaseStore) -> None:
    s = store.create_session()
    bad = Message(role="tool", parts=[ToolResult(call_id="")])
    with pytest.raises(InvalidMessage) as info:
        store.append(s.id, [Message.user("ok"), bad])
    assert info.value.path == "$[1].parts[0].call_id"
    assert store.count(s.id) == 0 and store.get_session(s.id).version == 0


def test_order_and_round_trip(store: BaseStore, png_bytes: bytes) -> None:
    s = store.create_session()
    msgs = [Message.system("sys"), *chat(4), *tool_turn(1),
            Message.user("pic", Attachment.from_bytes(png_bytes, name="p.png")),
            Message(role="mcp_response", name="srv", parts=[TextPart(text="{}")],
                    metadata={"a": 1}, provider_metadata={"x": {"y": 2}})]
    store.append(s.id, msgs[:5])
    store.append(s.id, msgs[5:])
    back = store.range(s.id)
    assert ids(back) == ids(msgs)
    assert back[-1].metadata == {"a": 1} and back[-1].provider_metadata == {"x": {"y": 2}}
    assert back[-1].name == "srv" and back[-1].role == "mcp_response"
    assert [m.text for m in back] == [m.text for m in msgs]
    assert store.get(s.id, msgs[7].id).tool_calls[0].arguments == {"i": 1}
    with pytest.raises(NotFound):
        store.get(s.id, "missing")


def test_attachments_stored_once_and_resolved(store: BaseStore, png_bytes: bytes) -> None:
    a = store.create_session()
    b = store.create_session()
    att = Attachment.from_bytes(png_bytes, name="p.png")
    store.append(a.id, [Message.user("one", att), Message.user("two", att)])
    store.append(b.id, [Message.user("three", att)])
    stored = store.tail(a.id, 2)
    part = stored[0].parts[1]
    assert isinstance(part, ImagePart) and part.attachment is not None
    assert part.attachment.data is None  # a reference; the bytes live in the asset storage
    assert store.get_asset(att.sha256) == png_bytes
    resolved = store.resolve(stored)
    assert resolved[0].attachments[0].data == png_bytes
    with pytest.raises(NotFound):
        store.get_asset(att.sha256, tenant="other")
    store.delete_session(a.id)
    assert store.get_asset(att.sha256) == png_bytes  # b still uses it
    store.delete_session(b.id)
    with pytest.raises(NotFound):
        store.get_asset(att.sha256)


# ---------------------------------------------------------------- reading


def test_tail_widens_to_groups(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [*chat(2), *tool_turn(0), *chat(1, "after")]
    store.append(s.id, msgs)
    assert ids(store.tail(s.id, 1)) == ids(msgs[-1:])
    # 3 newest: after, a0, rb0 -> widened back to the reasoning before the call
    assert ids(store.tail(s.id, 3)) == ids(msgs[3:])
    assert ids(store.tail(s.id, 100)) == ids(msgs)
    assert store.tail(s.id, 0) == []


def test_window_matches_history_by_tokens(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [Message.system("be brief")]
    for i in range(12):
        msgs += chat(3, f"t{i}") + tool_turn(i)
    for start in range(0, len(msgs), 7):  # many appends, groups across batch edges
        store.append(s.id, msgs[start:start + 7])
    history = History(msgs, counter=store.counter)
    total = history.token_count() + 3
    for budget in (0, 3, 10, 37, 100, 333, total - 5, total, total + 50):
        for keep in (False, True):
            got = store.window(s.id, budget, keep_system=keep)
            assert ids(got) == ids(history.by_tokens(budget, keep_system=keep)), (budget, keep)
            if got:
                assert sum(cached_count(m, store.counter) for m in got) + 3 <= budget


def test_window_with_another_counter(store: BaseStore) -> None:
    s = store.create_session()
    msgs = chat(40)
    store.append(s.id, msgs)
    history = History(msgs)
    for budget in (50, 200, 1000):
        assert ids(store.window(s.id, budget, "o200k_base")) == ids(history.by_tokens(budget))


def test_orphan_results_are_never_read(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [Message.user("hi"), Message.tool_result("ghost", "boo"), Message.assistant("yo")]
    store.append(s.id, msgs)
    assert [m.text for m in store.tail(s.id, 3)] == ["hi", "yo"]
    assert [m.text for m in store.window(s.id, 10_000)] == ["hi", "yo"]


def test_results_arriving_in_a_later_append(store: BaseStore) -> None:
    s = store.create_session()
    call = Message.assistant("", [{"id": "late", "name": "f", "arguments": {}}])
    store.append(s.id, [Message.user("go"), call])
    assert ids(store.tail(s.id, 1)) == [call.id]  # pending call: fine at the end
    result = Message.tool_result("late", "done")
    store.append(s.id, [result])
    assert ids(store.tail(s.id, 1)) == [call.id, result.id]


def _late_call() -> tuple[Message, Message, Message]:
    """``user, assistant(call c1), user``: the call is not last in its append."""
    return (Message.user("go"), Message.assistant("", [{"id": "c1", "name": "f"}]),
            Message.user("while it runs: hurry"))


def _check_late(store: BaseStore, session_id: str, msgs: list[Message]) -> None:
    """``msgs`` end with the result of the call at position 1: every newest read takes
    the call and everything after it, never the result without its call."""
    history = History(msgs, counter=store.counter)
    group = ids(msgs[1:])
    for k in (1, 2, 3):
        assert ids(store.tail(session_id, k)) == group == ids(history.recent(k)), k
    assert ids(store.range(session_id, len(msgs) - 1)) == group  # widened back to the call
    assert ids(store.range(session_id, 2, 3)) == group
    assert ids(store.range(session_id, 0, 1)) == ids(msgs[:1])
    budget = sum(cached_count(m, store.counter) for m in msgs[1:]) + 3
    assert ids(store.window(session_id, budget)) == group == ids(history.by_tokens(budget))
    assert store.window(session_id, budget - 1) == []  # not the result alone
    assert ids(store.context(session_id, 0, 1)) == group
    assert store.mark(session_id, [msgs[-1].id], KVStatus.MARKED) == len(group)
    assert ids(store.tail(session_id, 10)) == ids(msgs[:1])
    store.mark(session_id, [msgs[-1].id], KVStatus.LOADED)


def test_late_result_after_further_messages(store: BaseStore) -> None:
    """The result arrives in a later append than its call, which was not last in its
    append: the result clears the group start of the messages stored after the call."""
    s = store.create_session()
    user, call, more = _late_call()
    store.append(s.id, [user, call, more])
    assert ids(store.tail(s.id, 1)) == [more.id]  # a pending call: boundaries after it
    result = Message.tool_result("c1", "done")
    store.append(s.id, [result])
    _check_late(store, s.id, [user, call, more, result])
    answer = Message.assistant("finished")
    store.append(s.id, [answer])
    assert ids(store.tail(s.id, 1)) == [answer.id]
    assert ids(store.tail(s.id, 2)) == ids([call, more, result, answer])


def test_late_result_in_a_fork(store: BaseStore) -> None:
    """A fork made after the call and a later message receives the result: the fork
    records the inherited range the result joined (the parent's rows are shared and
    keep their flags), so the fork's reads take the call with it and the parent's do not."""
    parent = store.create_session()
    user, call, more = _late_call()
    store.append(parent.id, [user, call, more])
    fork = store.fork(parent.id, more.id)
    result = Message.tool_result("c1", "done")
    store.append(fork.id, [result])
    _check_late(store, fork.id, [user, call, more, result])
    assert ids(store.tail(parent.id, 1)) == [more.id]  # the parent never got the result
    # a fork of the fork inherits the joined range, and records its own
    child = store.fork(fork.id)
    _check_late(store, child.id, [user, call, more, result])
    twice = store.create_session()
    store.append(twice.id, [user, call])
    middle = store.fork(twice.id)
    store.append(middle.id, [more])
    last = store.fork(middle.id)
    store.append(last.id, [result])  # joins a row of twice's and one of middle's
    _check_late(store, last.id, [user, call, more, result])
    assert ids(store.tail(middle.id, 1)) == [more.id]
    # the fork stores a message of its own first, then the result of an inherited call
    own = store.fork(twice.id)
    store.append(own.id, [more])
    store.append(own.id, [result])
    _check_late(store, own.id, [user, call, more, result])
    # the call two forks up, found before the oldest ancestor is reached
    root = store.create_session()
    store.append(root.id, [user])
    holder = store.fork(root.id)
    store.append(holder.id, [call, more])
    answered = store.fork(holder.id)
    store.append(answered.id, [result])
    _check_late(store, answered.id, [user, call, more, result])


def test_late_results_of_split_calls_in_reverse_order(store: BaseStore) -> None:
    """Parallel calls one per message, answered in a later append newest call first: the
    older call's result joins the newer call to it (the range to clear starts just after
    the oldest call answered, whatever the order of the results)."""
    s = store.create_session()
    calls = [Message.assistant("", [{"id": f"p{k}", "name": "f"}]) for k in range(2)]
    user = Message.user("go")
    store.append(s.id, [user, *calls])
    results = [Message.tool_result(f"p{k}", f"r{k}") for k in (1, 0)]
    store.append(s.id, results)
    msgs = [user, *calls, *results]
    history = History(msgs, counter=store.counter)
    for k in (1, 2, 4):
        assert ids(store.tail(s.id, k)) == ids(history.recent(k)) == ids(msgs[1:]), k
    assert not pair_shapes.pair_violations(store.window(s.id, 10_000), msgs)
    assert ids(store.range(s.id, 2, 3)) == ids(msgs[1:])


def test_one_id_twice_in_one_append(store: BaseStore) -> None:
    """Idempotent by message id inside a batch too: a second message with an id the
    batch already holds, and the same content, is dropped (the first copy is stored),
    as ``History.extend`` does; nothing is stored twice and the append is not refused."""
    s = store.create_session()
    first, other = Message.user("first copy"), Message.assistant("other")
    copy = Message.user("first copy", id=first.id)  # made again: another created_at
    assert store.append(s.id, [first, other, copy, other]) == 1
    history = History()
    history.extend([first, other, copy, other])
    assert ids(store.range(s.id)) == [first.id, other.id] == ids(history.messages)
    assert [m.text for m in store.range(s.id)] == ["first copy", "other"]
    assert store.count(s.id) == 2 and store.get(s.id, first.id).created_at == first.created_at
    assert store.get_session(s.id).token_count == sum(
        cached_count(m, store.counter) for m in (first, other))
    assert store.append(s.id, [copy, copy]) == 1  # a retry of what is stored
    fresh = Message.user("new")
    assert store.append(s.id, [fresh, copy, fresh]) == 2  # stored ids and repeats dropped
    assert ids(store.range(s.id)) == ids([first, other, fresh])
    assert store.pop(s.id).id == fresh.id  # type: ignore[union-attr]
    assert ids(store.range(s.id)) == ids([first, other])
    fork = store.fork(s.id)
    call = Message.assistant("", [{"id": "d1", "name": "f"}])
    result = Message.tool_result("d1", "ok")
    store.append(fork.id, [first, call, result, call, result, first])  # inherited + repeats
    assert ids(store.range(fork.id)) == ids([first, other, call, result])
    assert ids(store.tail(fork.id, 1)) == ids([call, result])


def _refused(store: BaseStore, session_id: str, batch: list[Message], message_id: str,
             field: str) -> None:
    """``batch`` is refused with ``IdReused`` naming ``message_id`` and ``field``, and
    nothing of it is stored."""
    before = store.get_session(session_id)
    stored = ids(store.range(session_id))
    with pytest.raises(IdReused) as caught:
        store.append(session_id, batch)
    assert isinstance(caught.value, Conflict)
    assert (caught.value.message_id, caught.value.field) == (message_id, field)
    assert repr(message_id) in str(caught.value) and f"{field} differs" in str(caught.value)
    after = store.get_session(session_id)
    assert (after.version, after.message_count) == (before.version, before.message_count)
    assert ids(store.range(session_id)) == stored


def test_id_reused_with_other_content_is_refused(store: BaseStore) -> None:
    """An id names one message: a message sent again under a stored id with other
    content is no retry, so the append is refused (``IdReused``, a ``Conflict``) naming
    the id and the field, and nothing of the batch is stored: a whole retry, a batch
    that also holds new messages, an id the batch repeats, an id a fork inherits."""
    s = store.create_session()
    call = Message.assistant("", [{"id": "c1", "name": "f", "arguments": {"a": 1}}])
    first = Message.user("hello", id="abc", metadata={"k": 1})
    batch = [first, call, Message.tool_result("c1", "ok", id="r1")]
    assert store.append(s.id, batch) == 1
    new = Message.user("new")
    _refused(store, s.id, [Message.user("hello!", id="abc", metadata={"k": 1})],
             "abc", "parts[0].text")
    _refused(store, s.id, [new, Message.user("hello", id="abc", metadata={"k": 2})],
             "abc", "metadata.k")
    _refused(store, s.id, [new, Message.assistant("hello", id="abc", metadata={"k": 1})],
             "abc", "role")
    _refused(store, s.id, [Message.user("hello", id="abc", metadata={"k": 1}, name="bo")],
             "abc", "name")
    changed_call = Message.assistant("", [{"id": "c1", "name": "f", "arguments": {"a": 2}}],
                                     id=call.id)
    _refused(store, s.id, [*batch[:1], changed_call, new], call.id, "parts[0].arguments.a")
    _refused(store, s.id, [Message.tool_result("c1", "ok", is_error=True, id="r1")],
             "r1", "parts[0].is_error")
    _refused(store, s.id, [Message(id="abc", role="user", parts=[
        TextPart(text="hello"), TextPart(text="more")], metadata={"k": 1})], "abc", "parts")
    # an id the batch repeats with other content: refused, though neither copy is stored
    twice = [new, Message.user("two", id="t"), Message.user("other", id="t")]
    _refused(store, s.id, twice, "t", "parts[0].text")
    # a stale expected_version does not hide it: the body is refused as such
    with pytest.raises(IdReused):
        store.append(s.id, [Message.user("x", id="abc")], expected_version=0)
    # an id the fork inherits from its parent, and one stored by the fork itself
    fork = store.fork(s.id)
    _refused(store, fork.id, [new, Message.user("hello?", id="abc", metadata={"k": 1})],
             "abc", "parts[0].text")
    assert store.append(fork.id, [Message.user("own", id="own")]) == 1
    _refused(store, fork.id, [Message.user("own!", id="own")], "own", "parts[0].text")
    assert store.get(s.id, "abc").text == "hello" and store.count(s.id) == 3


def test_usage_round_trips_and_is_not_content(store: BaseStore) -> None:
    """A response's observed usage is stored with its message and read back by every
    read (tail, window, range, get, a fork's inherited prefix, export); a retry that
    lost or re-measured it is still a retry, never ``IdReused``."""
    s = store.create_session()
    usage = Usage(input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                  cache_write_tokens=300, cache_write_5m_tokens=100,
                  cache_write_1h_tokens=200, model="claude-x", provider="anthropic",
                  latency_ms=812.5)
    answer = msgspec.structs.replace(Message.assistant("hello", id="a1"), usage=usage)
    assert store.append(s.id, [Message.user("hi"), answer]) == 1
    assert store.tail(s.id, 1)[0].usage == usage
    assert store.window(s.id, 10_000)[-1].usage == usage
    assert store.range(s.id)[1].usage == usage
    assert store.get(s.id, "a1").usage == usage
    assert store.range(s.id)[0].usage is None
    fork = store.fork(s.id)
    assert store.tail(fork.id, 1)[0].usage == usage
    for retry in (Message.assistant("hello", id="a1"),
                  msgspec.structs.replace(Message.assistant("hello", id="a1"),
                                          usage=Usage(input_tokens=1))):
        assert store.append(s.id, [retry]) == 1
    assert store.get(s.id, "a1").usage == usage  # the first stored stays
    _refused(store, s.id, [msgspec.structs.replace(Message.assistant("other", id="a1"),
                                                   usage=usage)], "a1", "parts[0].text")
    exported = [line for line in store.export(session_ids=[s.id]) if b'"a1"' in line]
    assert exported and b'"cache_write_1h_tokens":200' in b"".join(exported)


def test_id_resent_unchanged_is_a_retry(store: BaseStore) -> None:
    """The same message sent again is a retry whatever the library or the store fill in
    (its creation time, its KV fields and token counts, an attachment's id and image
    size, its bytes moved to the asset storage), however its objects order their keys,
    and with what JSON makes of its values (NaN is null): the append answers the
    version that stored it and stores nothing."""
    s = store.create_session()
    png = _png()
    image = Attachment.from_bytes(png, mime_type="image/png")
    first = Message(id="m1", role="user", parts=[TextPart(text="look"), ImagePart(
        attachment=image)], metadata={"a": 1, "b": {"c": [1, 2]}, "n": float("nan")})
    call = Message.assistant("", [{"id": "c9", "name": "f", "arguments": '{"x": 1}'}])
    result = Message.tool_result("c9", [TextPart(text="seen"), ImagePart(attachment=image)])
    assert store.append(s.id, [first, call, result]) == 1
    store.mark(s.id, [first.id], KVStatus.MARKED)
    again = Message(id="m1", role="user", parts=[
        TextPart(text="look"), ImagePart(attachment=Attachment.from_bytes(png))],
        metadata={"n": float("nan"), "b": {"c": [1, 2]}, "a": 1}, kv_size=12, kv_start=3,
        token_counts={"other": 5})
    reference = Message(id="m1", role="user", parts=[TextPart(text="look"), ImagePart(
        attachment=image.without_data())], metadata={"a": 1, "b": {"c": [1, 2]}, "n": None})
    for retry in ([again], [reference], [Message.from_json(m.to_json()) for m in
                                         (first, call, result)], [first, again]):
        assert store.append(s.id, retry) == 1
    assert store.append(s.id, [again, Message.user("next")]) == 2
    assert store.count(s.id) == 4
    fork = store.fork(s.id)
    assert store.append(fork.id, [again, call, Message.user("mine")]) == 1
    assert ids(store.range(fork.id))[-1] == store.tail(fork.id, 1)[0].id
    other = Attachment.from_bytes(_png(2), mime_type="image/png")
    _refused(store, s.id, [Message(id="m1", role="user", parts=[
        TextPart(text="look"), ImagePart(attachment=other)], metadata=first.metadata)],
        "m1", "parts[1].attachment.sha256")


def _png(width: int = 1) -> bytes:
    """A valid PNG header of an image ``width`` pixels wide (enough to sniff and size)."""
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", width, 1, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)) + b"\x00" * 16)


def _long_conversation() -> list[Message]:
    """Longer than the engine's read batches (64 rows, then doubling) and margins: a
    tool group longer than a batch (a call, 80 messages, its result), a system message
    far back, parallel results at batch edges."""
    msgs = [Message.system("rules"), *chat(40, "a")]
    msgs.append(Message.assistant("", [{"id": "long", "name": "f"}]))
    msgs += chat(80, "while")
    msgs.append(Message.tool_result("long", "at last"))
    for i in range(12):
        msgs += tool_turn(100 + i)
    return msgs


def _check_long(store: BaseStore, session_id: str, msgs: list[Message]) -> None:
    history = History(msgs, counter=store.counter)
    n = len(msgs)
    for k in (1, 2, 63, 64, 65, 72, 73, 120, 160, n):
        assert ids(store.tail(session_id, k)) == ids(history.recent(k)), ("tail", k)
    for start, stop in ((0, 5), (41, 42), (60, 61), (100, 101), (121, 123), (125, 190),
                        (3, n), (n - 1, n)):
        assert ids(store.range(session_id, start, stop)) == ids(
            history.range(n - start, n - stop)), ("range", start, stop)
    total = history.token_count() + store.counter.priming_tokens
    for budget in (total // 5, total // 2, total - 40, total):
        for keep in (False, True):
            assert ids(store.window(session_id, budget, keep_system=keep)) == ids(
                history.by_tokens(budget, keep_system=keep)), ("window", budget, keep)
    assert ids(store.window(session_id, total // 2)) == ids(history.by_tokens(total // 2))
    for head, tail in ((30, 2), (45, 20), (3, 100), (0, 90)):
        assert ids(store.context(session_id, head, tail)) == pair_shapes.expected_context(
            history, head, tail), ("context", head, tail)


def test_reads_of_a_long_session_equal_history(store: BaseStore) -> None:
    msgs = _long_conversation()
    s = store.create_session()
    for start in range(0, len(msgs), 50):
        store.append(s.id, msgs[start:start + 50])
    _check_long(store, s.id, msgs)
    # a fork that inherits all but its last messages, and a mark inside the long group
    fork = store.fork(s.id, msgs[-20].id)
    store.append(fork.id, msgs[-19:])  # the same messages: inherited ids, stored by the fork
    extra = chat(6, "fork")
    store.append(fork.id, extra)
    _check_long(store, fork.id, [*msgs, *extra])
    group = ids(msgs[41:123])
    assert store.mark(s.id, [msgs[100].id], KVStatus.MARKED) == len(group)
    kept = [m for m in msgs if m.id not in group]
    assert ids(store.tail(s.id, len(msgs))) == ids(kept)
    assert ids(store.context(s.id, 50, 200)) == ids(kept)
    assert ids(store.window(s.id, 100_000, keep_system=True)) == ids(kept)
    assert ids(store.range(s.id, 60, 61, include_marked=False)) == []


def test_a_group_longer_than_a_read_batch_from_the_first_message(store: BaseStore) -> None:
    msgs = [Message.assistant("", [{"id": "first", "name": "f"}]), *chat(90, "w"),
            Message.tool_result("first", "done"), *chat(3, "z")]
    s = store.create_session()
    store.append(s.id, msgs)
    group = ids(msgs[:92])
    for start in (0, 1, 65, 66, 80, 91):
        assert ids(store.range(s.id, start, start + 1)) == group, start
    assert ids(store.tail(s.id, 4)) == group + ids(msgs[92:])
    assert store.mark(s.id, [msgs[50].id], KVStatus.MARKED) == len(group)
    assert ids(store.context(s.id, 0, 200)) == ids(msgs[92:])
    before, middle, after = chat(4), [Message.user("m1"), Message.assistant("m2")], chat(3, "a")
    later = store.create_session()
    store.append(later.id, [*before, msgs[0], *middle, Message.tool_result("first", "r"),
                            *after])
    store.mark(later.id, [middle[0].id], KVStatus.MARKED)  # the group in the middle goes
    assert ids(store.context(later.id, 0, 100)) == ids(before + after)


def test_reads_with_another_counter_defaults_and_marks(store: BaseStore) -> None:
    """``window`` with a counter not the store's (nor the default), ``keep_system`` with
    a marked system message, and the defaults of the JSON reads."""
    from chathistory.model.codec import encode

    rules, old_rules = Message.system("rules"), Message.system("older rules")
    msgs = [old_rules, rules, *chat(30), *tool_turn(0), *chat(4, "z")]
    s = store.create_session()
    store.append(s.id, msgs)
    exact = History(msgs, counter="cl100k_base")
    total = exact.token_count("cl100k_base") + 3
    for budget in (40, total // 2, total):
        for keep in (False, True):
            got = store.window(s.id, budget, "cl100k_base", keep_system=keep)
            assert ids(got) == ids(exact.by_tokens(budget, keep_system=keep)), (budget, keep)
            assert store.window_json(s.id, budget, "cl100k_base", keep_system=keep) == encode(
                got)
    assert store.window_json(s.id, 60) == encode(store.window(s.id, 60))
    assert rules.id not in ids(store.window(s.id, 60))  # keep_system is off by default
    store.mark(s.id, [old_rules.id], KVStatus.MARKED)
    assert ids(store.window(s.id, 10_000, keep_system=True))[:1] == [rules.id]
    assert old_rules.id not in ids(store.context(s.id, 0, 2))
    assert rules.id in ids(store.context(s.id, 0, 2))
    assert store.tail_json(s.id, 100) == encode(store.tail(s.id, 100))  # marked left out
    assert old_rules.id not in ids(msgspec.json.decode(store.tail_json(s.id, 100), type=list[
        Message]))
    marked_only = msgspec.json.decode(store.range_json(s.id, 0, 1), type=list[Message])
    assert [(m.id, m.kv_status) for m in marked_only] == [(old_rules.id, KVStatus.MARKED)]
    assert store.range_json(s.id) == encode(store.range(s.id))  # marked kept by default


def test_reads_name_their_tenant(store: BaseStore) -> None:
    for tenant, text in (("t", "tenant t"), ("b", "tenant b")):
        store.create_session("same", tenant=tenant)
        store.append("same", [Message.user(text)], tenant=tenant)
    store.append("same", [Message.assistant("second in b")], tenant="b")
    assert store.append("same", [], tenant="t") == 1
    assert [m.text for m in store.context("same", 5, 5, tenant="t")] == ["tenant t"]
    first_b = store.range("same", tenant="b")[0]
    assert store.get("same", first_b.id, tenant="b").text == "tenant b"
    with pytest.raises(NotFound):
        store.get("same", first_b.id, tenant="t")


def test_range_by_position(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [*chat(3), *tool_turn(0), *chat(3, "z")]
    store.append(s.id, msgs)
    assert ids(store.range(s.id, 0, 2)) == ids(msgs[:2])
    assert ids(store.range(s.id, 6, 7)) == ids(msgs[4:8])  # widened to the group
    assert ids(store.range(s.id, 9)) == ids(msgs[9:])
    assert store.range(s.id, 5, 5) == []


# ---------------------------------------------------------------- changing


def test_pop_and_clear(store: BaseStore) -> None:
    s = store.create_session()
    msgs = chat(4)
    store.append(s.id, msgs)
    assert store.pop(s.id).id == msgs[-1].id  # type: ignore[union-attr]
    assert ids(store.range(s.id)) == ids(msgs[:3])
    store.append(s.id, [msgs[-1]])  # a popped id can come back
    assert ids(store.range(s.id)) == ids(msgs)
    version = store.clear(s.id)
    assert store.count(s.id) == 0 and store.pop(s.id) is None
    assert store.get_session(s.id).version == version
    store.append(s.id, chat(2, "again"))
    assert store.range(s.id)[0].text.startswith("again")
    history = History(store.range(s.id), counter=store.counter)
    assert ids(store.window(s.id, 30)) == ids(history.by_tokens(30))


def test_mark_hides_whole_groups(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [*chat(2), *tool_turn(0), *chat(2, "z")]
    store.append(s.id, msgs)
    changed = store.mark(s.id, [msgs[4].id], KVStatus.MARKED)  # the call: its group goes
    assert changed == 4  # reasoning, call and both results
    visible = store.tail(s.id, 100)
    assert ids(visible) == ids(msgs[:3] + msgs[7:])
    assert len(store.tail(s.id, 100, include_marked=True)) == len(msgs)
    assert store.get(s.id, msgs[5].id).kv_status == KVStatus.MARKED
    store.mark(s.id, [msgs[5].id], KVStatus.LOADED)
    assert ids(store.tail(s.id, 100)) == ids(msgs)


def test_json_reads_equal_the_encoded_messages(store: BaseStore, png_bytes: bytes) -> None:
    """``tail_json`` / ``window_json`` / ``range_json`` pass stored JSON through: the
    bytes equal encoding what ``tail`` / ``window`` / ``range`` decode, statuses set by
    ``mark()`` (in a fork too), attachments and a message stored as MARKED included."""
    from chathistory.model.codec import encode

    s = store.create_session()
    image = Attachment.from_bytes(png_bytes, name="red.png")
    stored_marked = Message.assistant("stored marked")
    stored_marked.kv_status = KVStatus.MARKED
    msgs = [Message.system("sys"), *chat(3), *tool_turn(0),
            Message(role="user", parts=[TextPart(text="look"), ImagePart(attachment=image)]),
            stored_marked, *chat(4, "z")]
    store.append(s.id, msgs)
    store.mark(s.id, [msgs[2].id], KVStatus.MARKED)
    store.mark(s.id, [stored_marked.id], KVStatus.LOADED)
    fork = store.fork(s.id, msgs[-2].id)
    store.mark(fork.id, [msgs[3].id], KVStatus.UNLOADED)
    for sid in (s.id, fork.id):
        for marked in (False, True):
            assert store.tail_json(sid, 5, include_marked=marked) == encode(
                store.tail(sid, 5, include_marked=marked))
            assert store.range_json(sid, 1, 9, include_marked=marked) == encode(
                store.range(sid, 1, 9, include_marked=marked))
        for keep in (False, True):
            for budget in (0, 40, 10_000):
                assert store.window_json(sid, budget, keep_system=keep) == encode(
                    store.window(sid, budget, keep_system=keep))
    assert b'"kv_status"' not in store.range_json(s.id, len(msgs) - 5, len(msgs) - 4)


# ---------------------------------------------------------------- branches


def test_fork_shares_the_prefix(store: BaseStore) -> None:
    s = store.create_session(metadata={"m": 1})
    msgs = chat(6)
    store.append(s.id, msgs)
    fork = store.fork(s.id, msgs[3].id)
    assert fork.parent_id == s.id and fork.message_count == 4
    assert ids(store.range(fork.id)) == ids(msgs[:4])
    extra = chat(2, "fork")
    store.append(fork.id, extra)
    assert ids(store.range(fork.id)) == ids(msgs[:4] + extra)
    assert ids(store.range(s.id)) == ids(msgs)  # the source is untouched
    history = History(msgs[:4] + extra, counter=store.counter)
    assert ids(store.window(fork.id, 40)) == ids(history.by_tokens(40))
    assert ids(store.tail(fork.id, 3)) == ids((msgs[:4] + extra)[-3:])
    version = store.get_session(fork.id).version
    assert store.append(fork.id, [msgs[0]]) == version  # inherited: nothing written
    assert store.get_session(fork.id).version == version
    with pytest.raises(NotFound):
        store.get(fork.id, msgs[4].id)  # the parent's, past the fork point
    assert store.pop(s.id).id == msgs[5].id  # type: ignore[union-attr]
    assert store.pop(s.id).id == msgs[4].id  # type: ignore[union-attr]
    with pytest.raises(Conflict):
        store.pop(s.id)  # the fork shares that message
    store.append(s.id, msgs[4:])
    with pytest.raises(Conflict):
        store.delete_session(s.id)
    grandchild = store.fork(fork.id)
    assert ids(store.range(grandchild.id)) == ids(msgs[:4] + extra)
    tree = store.lineage(grandchild.id)
    assert [t.id for t in tree] == [s.id, fork.id, grandchild.id]
    store.mark(fork.id, [msgs[1].id], KVStatus.MARKED)  # a mark in a fork stays in the fork
    assert store.get(s.id, msgs[1].id).kv_status == KVStatus.LOADED
    assert msgs[1].id not in ids(store.tail(fork.id, 100))
    store.delete_session(s.id, cascade=True)
    with pytest.raises(NotFound):
        store.get_session(grandchild.id)


def test_edit_creates_a_branch(store: BaseStore) -> None:
    s = store.create_session()
    msgs = chat(5)
    store.append(s.id, msgs)
    edited = Message.user("edited question")
    branch = store.edit(s.id, msgs[2].id, edited)
    assert ids(store.range(branch.id)) == [*ids(msgs[:2]), edited.id]
    assert ids(store.range(s.id)) == ids(msgs)
    assert {t.id for t in store.lineage(s.id)} == {s.id, branch.id}


def test_fork_inside_a_tool_group(store: BaseStore) -> None:
    s = store.create_session()
    turn = tool_turn(0)
    store.append(s.id, [*chat(2), *turn])
    fork = store.fork(s.id, turn[2].id)  # right after the call, before its results
    new_results = [Message.tool_result("c0a", "other a"), Message.tool_result("c0b", "other b")]
    store.append(fork.id, new_results)
    assert ids(store.tail(fork.id, 1)) == ids(turn[1:3] + new_results)


# ---------------------------------------------------------------- retention


def test_ttl_and_purge(store: BaseStore) -> None:
    s = store.create_session(ttl=1.0)
    keep = store.create_session()
    store.append(s.id, chat(2))
    time.sleep(1.2)
    with pytest.raises(NotFound):
        store.get_session(s.id)
    assert store.purge_expired() >= 1
    assert store.get_session(keep.id).id == keep.id
    store.update_session(keep.id, ttl=timedelta(hours=1))
    assert store.get_session(keep.id).expires_at is not None


def test_erase_a_data_subject(store: BaseStore, png_bytes: bytes) -> None:
    att = Attachment.from_bytes(png_bytes)
    mine = store.create_session(user="alice", tenant="t")
    store.append(mine.id, [Message.user("alice's", att)], tenant="t")
    fork = store.fork(mine.id, tenant="t")
    theirs = store.create_session(user="bob", tenant="t")
    store.append(theirs.id, chat(1), tenant="t")
    assert store.erase(tenant="t", user="alice") == 2
    for sid in (mine.id, fork.id):
        with pytest.raises(NotFound):
            store.get_session(sid, tenant="t")
    with pytest.raises(NotFound):
        store.get_asset(att.sha256, tenant="t")
    assert store.count(theirs.id, tenant="t") == 1


# ---------------------------------------------------------------- export / import


def test_export_import_round_trip(store: BaseStore, png_bytes: bytes) -> None:
    s = store.create_session(metadata={"x": 1}, state={"y": 2})
    msgs = [Message.system("s"), *tool_turn(0),
            Message.user("img", Attachment.from_bytes(png_bytes))]
    store.append(s.id, msgs)
    store.mark(s.id, [msgs[1].id], KVStatus.MARKED)
    fork = store.fork(s.id, msgs[2].id)
    store.append(fork.id, chat(2, "f"))
    lines = list(store.export())
    assert lines[0].startswith(b'{"kind":"session"')
    from chathistory.stores import MemoryStore

    target = MemoryStore(counter=store.counter)
    added = target.import_(lines, tenant="copy")
    assert added == len(msgs) + 2
    assert ids(target.range(s.id, tenant="copy")) == ids(msgs)
    assert ids(target.range(fork.id, tenant="copy")) == ids(store.range(fork.id))
    assert target.get_session(s.id, tenant="copy").state == {"y": 2}
    assert target.get_asset(msgs[-1].attachments[0].sha256, tenant="copy") == png_bytes
    assert target.import_(lines, tenant="copy") == 0  # idempotent
    with pytest.raises(InvalidMessage):
        target.import_([b'{"kind": "nonsense"}'])


# ---------------------------------------------------------------- concurrency


def test_concurrent_writers(store: BaseStore) -> None:
    one = store.create_session("shared")
    many = [store.create_session(f"own-{i}").id for i in range(16)]
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for k in range(10):
                batch = [Message.user(f"w{w} k{k}"), Message.assistant(f"w{w} k{k} reply")]
                store.append(one.id, batch)
                store.append(one.id, batch)  # a retry: no duplicate
                store.append(many[w], batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stored = store.range(one.id)
    assert len(stored) == 16 * 10 * 2 == len({m.id for m in stored})
    for w in range(16):  # each writer's messages in its own order, pairs adjacent
        mine = [m.text for m in stored if m.text.startswith(f"w{w} ")]
        assert mine == [t for k in range(10) for t in (f"w{w} k{k}", f"w{w} k{k} reply")]
    assert store.get_session(one.id).version == 160
    for sid in many:
        assert store.count(sid) == 20


# ---------------------------------------------------------------- for providers


def test_append_with_state_is_one_write(store: BaseStore) -> None:
    s = store.create_session(state={"a": 1})
    v = store.append(s.id, chat(2), state={"a": 2, "b": [1]})
    got = store.get_session(s.id)
    assert got.version == v == 1 and got.state == {"a": 2, "b": [1]}
    with pytest.raises(InvalidMessage):
        store.append(s.id, chat(1, "x"), state={"bad": object()})  # type: ignore[dict-item]
    assert store.count(s.id) == 2 and store.get_session(s.id).state == {"a": 2, "b": [1]}


def test_reject_orphans(store: BaseStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.user("go"), Message.assistant("", [{"id": "known", "name": "f"}])])
    with pytest.raises(InvalidMessage, match="'ghost'") as info:
        store.append(s.id, [Message.tool_result("known", "ok"), Message.tool_result("ghost", "x")],
                     reject_orphans=True)
    assert info.value.path == "$[1].parts"
    assert store.count(s.id) == 2
    store.append(s.id, [Message.tool_result("known", "ok")], reject_orphans=True)
    fork = store.fork(s.id)
    store.append(fork.id, [Message.assistant("", [{"id": "k2", "name": "f"}]),
                           Message.tool_result("k2", "ok")], reject_orphans=True)


def test_context_reads_head_kept_and_tail(store: BaseStore) -> None:
    s = store.create_session()
    msgs = [Message.system("sys"), *chat(4), Message.developer("mid-dev"), *chat(10, "x"),
            *tool_turn(0)]
    store.append(s.id, msgs)
    got = store.context(s.id, head=3, tail=2)
    expected = [*msgs[:3], msgs[5], *msgs[-5:]]  # head, the developer message, widened tail
    assert ids(got) == ids(expected)
    store.mark(s.id, [msgs[1].id], KVStatus.MARKED)
    assert msgs[1].id not in ids(store.context(s.id, head=3, tail=2))
    assert ids(store.context(s.id, head=0, tail=0)) == [msgs[0].id, msgs[5].id]


# ---------------------------------------------------------------- pair safety, as a property

_PAIRS = settings(max_examples=int(os.environ.get("CHATHISTORY_PAIR_EXAMPLES", "30")),
                  deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow, HealthCheck.data_too_large])


def _check_reads(store: BaseStore, session_id: str, msgs: list[Message]) -> None:
    """Every read of ``session_id`` (whose messages are ``msgs``) equals the ``History``
    selector over the same messages, and keeps calls and results together."""
    history = History(msgs, counter=store.counter)
    n = len(msgs)
    shape = pair_shapes.describe(msgs)
    for k in range(n + 2):
        got = store.tail(session_id, k)
        assert ids(got) == ids(history.recent(k)), ("tail", k, shape)
        assert not pair_shapes.pair_violations(got, msgs), ("tail", k, shape)
        pair_shapes.check_provider_requests(got)
    assert [m["id"] for m in msgspec.json.decode(store.tail_json(session_id, 3))] == \
        ids(history.recent(3))
    total = history.token_count() + store.counter.priming_tokens
    for budget in sorted({0, 5, 12, 25, 40, total // 3, total // 2, total - 7, total}):
        for keep in (False, True):
            got = store.window(session_id, max(0, budget), keep_system=keep)
            want = history.by_tokens(max(0, budget), keep_system=keep)
            assert ids(got) == ids(want), ("window", budget, keep, shape)
            assert not pair_shapes.pair_violations(got, msgs), ("window", budget, keep)
    for start in range(0, n, 2):
        for stop in sorted({start + 1, start + 3, n}):
            if stop > n:
                continue
            got = store.range(session_id, start, stop)
            assert ids(got) == ids(history.range(n - start, n - stop)), \
                ("range", start, stop, shape)
    for head, tail in ((0, 1), (1, 1), (2, 3), (3, 0), (n, 2)):
        got = store.context(session_id, head, tail)
        assert ids(got) == pair_shapes.expected_context(history, head, tail), \
            ("context", head, tail, shape)
        assert not pair_shapes.pair_violations(got, msgs), ("context", head, tail)


@given(data=st.data())
@_PAIRS
def test_reads_equal_history_selectors(store: BaseStore, data: st.DataObject) -> None:
    """Pair safety at every read (docs/architecture.md, invariant 3): for conversations of mixed
    shapes (calls split across messages, parallel results in any order, reasoning, results
    not yet arrived) appended in any batches, tail, window, range, context and mark
    agree with ``History`` and never yield a result without its call."""
    msgs = data.draw(pair_shapes.conversations(), "messages")
    s = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs), "batches"):
        store.append(s.id, batch)
    _check_reads(store, s.id, msgs)
    # mark takes whole groups: the group of any one message, and nothing else
    i = data.draw(st.integers(0, len(msgs) - 1), "marked")
    group = pair_shapes.group_ids(msgs, i)
    assert store.mark(s.id, [msgs[i].id], KVStatus.MARKED) == len(group)
    assert ids(store.range(s.id, include_marked=False)) == \
        [m.id for m in History(msgs).recent(len(msgs)) if m.id not in group]
    store.mark(s.id, [msgs[i].id], KVStatus.LOADED)


@given(data=st.data())
@_PAIRS
def test_fork_reads_equal_history_selectors(store: BaseStore, data: st.DataObject) -> None:
    """The same property for a fork: the fork point anywhere (inside a tool group
    too, often just before a result that answers a call made before other inherited
    messages), the fork's own messages appended in any batches, and the parent going on
    with other messages; a mark in the fork takes whole groups of the fork's view."""
    msgs = data.draw(pair_shapes.conversations(), "messages")
    points = st.integers(1, len(msgs))
    answered = pair_shapes.answers(msgs)
    if answered:  # often just before a result: the fork's first append joins inherited rows
        points = st.one_of(st.sampled_from(answered), points)
    at = data.draw(points, "fork after")
    parent = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs[:at]), "parent batches"):
        store.append(parent.id, batch)
    fork = store.fork(parent.id, msgs[at - 1].id)
    for batch in data.draw(pair_shapes.batches(msgs[at:]), "fork batches") if at < len(
            msgs) else []:
        store.append(fork.id, batch)
    other = [Message.user("the parent goes on"), Message.assistant("elsewhere")]
    store.append(parent.id, other)
    _check_reads(store, fork.id, msgs)
    _check_reads(store, parent.id, [*msgs[:at], *other])
    i = data.draw(st.integers(0, len(msgs) - 1), "marked")
    group = pair_shapes.group_ids(msgs, i)
    assert store.mark(fork.id, [msgs[i].id], KVStatus.MARKED) == len(group)
    assert [m.id for m in store.range(fork.id, include_marked=False)] == \
        [m.id for m in History(msgs).recent(len(msgs)) if m.id not in group]
    store.mark(fork.id, [msgs[i].id], KVStatus.LOADED)
    # Popped down into what it inherits, a fork cannot reopen a boundary that a result
    # the parent stored later closed (the parent's rows are shared, the result is not
    # in the fork's view): its groups may then be wider than History's, never split.
    popped = data.draw(st.integers(0, len(msgs) - at), "popped from the fork")
    for _ in range(popped):
        store.pop(fork.id)
    _check_reads(store, fork.id, msgs[:len(msgs) - popped])


@given(data=st.data())
@_PAIRS
def test_reads_after_pop_equal_history_selectors(store: BaseStore, data: st.DataObject
                                                 ) -> None:
    """Popping messages off the end undoes what they did to the groups: a popped result
    no longer holds its call's group together."""
    msgs = data.draw(pair_shapes.conversations(), "messages")
    s = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs), "batches"):
        store.append(s.id, batch)
    popped = data.draw(st.integers(1, len(msgs)), "popped")
    for _ in range(popped):
        store.pop(s.id)
    _check_reads(store, s.id, msgs[:len(msgs) - popped])
