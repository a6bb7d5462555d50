"""What every backend's engine checks and answers, to the letter (issue 23: mutants of
stores/checks.py, sessions.py and reads.py that a mutmut run left alive): the errors a
caller gets (class, message, JSON path), session fields the other tests never read
back, the listing's bounds and cursors. Not run over RemoteStore: the service checks
these first and words them its own way (tests/server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from chathistory import Conflict, InvalidMessage, Message, NotFound
from chathistory.errors import InvalidArgument
from chathistory.stores import BaseStore
from chathistory.tokens import cached_count, get_counter


def _error(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _invalid(call: Callable[[], object], path: str, reason: str) -> None:
    error = _error(call)
    assert type(error) is InvalidMessage, error
    assert (error.path, error.reason) == (path, reason)


def _refused(call: Callable[[], object], kind: type[BaseException], text: str) -> None:
    error = _error(call)
    assert type(error) is kind and str(error) == text, (kind, text, error)


ID_RULE = "must be a non-empty string of at most 200 characters without NUL"


def test_ids_users_and_json_fields_are_checked(store: BaseStore) -> None:
    for bad in ("a" * 201, "a\x00b", 5):
        _invalid(lambda bad=bad: store.create_session(bad), "$.session_id",  # type: ignore[misc]
                 f"session_id {ID_RULE}")
        _invalid(lambda bad=bad: store.create_session("t-ok", tenant=bad),  # type: ignore[misc]
                 "$.tenant", f"tenant {ID_RULE}")
    _invalid(lambda: store.create_session("t-ok", tenant=""), "$.tenant", f"tenant {ID_RULE}")
    assert store.create_session("a" * 200).id == "a" * 200
    for bad_user in ("a\x00b", 7):
        _invalid(lambda u=bad_user: store.create_session(user=u),  # type: ignore[misc]
                 "$.user", "user must be a string without NUL")
    unjson = "is not JSON-serializable: Encoding objects of type object is unsupported"
    for field in ("metadata", "state"):
        _invalid(lambda f=field: store.create_session(**{f: {"x": object()}}),  # type: ignore[misc]
                 f"$.{field}", f"{field} {unjson}")
    s = store.create_session("checked", metadata={"v": 1})
    assert (s.root_id, store.get_session(s.id).root_id) == ("checked", "checked")
    _invalid(lambda: store.update_session(s.id, metadata=5), "$.metadata",  # type: ignore[arg-type]
             "metadata must be a JSON object")
    _invalid(lambda: store.update_session(s.id, state={"x": object()}), "$.state",
             f"state {unjson}")
    _invalid(lambda: store.update_session(s.id, state=[]), "$.state",  # type: ignore[arg-type]
             "state must be a JSON object")
    _invalid(lambda: store.append(s.id, [Message.user("a"), "x"]),  # type: ignore[list-item]
             "$[1]", "expected a Message, got str")
    _invalid(lambda: store.append(s.id, [Message.user("a")], state=[]),  # type: ignore[arg-type]
             "$.state", "state must be a JSON object")
    assert store.count(s.id) == 0
    store.update_session(s.id, metadata={"v": 2})
    assert store.get_session(s.id).metadata == {"v": 2}


def test_ttls_are_checked(store: BaseStore) -> None:
    for ttl in (0, -1.0, float("nan"), timedelta(0)):
        _refused(lambda t=ttl: store.create_session(ttl=t), InvalidArgument,  # type: ignore[misc]
                 "ttl must be positive")
    _refused(lambda: store.create_session(ttl=1e12), InvalidArgument,
             "ttl of 1e+12 seconds ends after the year 9999")
    s = store.create_session()
    _refused(lambda: store.update_session(s.id, ttl=0), InvalidArgument, "ttl must be positive")
    assert store.create_session(ttl=0.5).expires_at is not None


def test_read_arguments_and_missing_things(store: BaseStore) -> None:
    s = store.create_session("reads")
    store.append(s.id, [Message.user("one"), Message.assistant("two")])
    _refused(lambda: store.tail(s.id, -1), InvalidArgument, "n must be >= 0")
    _refused(lambda: store.window(s.id, -1), InvalidArgument, "max_tokens must be >= 0")
    _refused(lambda: store.range(s.id, 2, 1), InvalidArgument, "need 0 <= start <= stop")
    _refused(lambda: store.range(s.id, -1), InvalidArgument, "need 0 <= start <= stop")
    _refused(lambda: store.range(s.id, 3), InvalidArgument,
             "start (3) is past the session's end (2 messages)")
    assert store.range(s.id, 2) == []
    _refused(lambda: store.get_session("nope"), NotFound, "no session 'nope'")
    _refused(lambda: store.tail("nope", 1), NotFound, "no session 'nope'")
    _refused(lambda: store.get(s.id, "m"), NotFound, "no message 'm' in session 'reads'")
    _refused(lambda: store.get_asset("f" * 64), NotFound, f"no asset {'f' * 64!r}")
    _refused(lambda: store.append(s.id, [Message.user("x")], expected_version=0), Conflict,
             "session 'reads' is at version 1, not 0")
    _refused(lambda: store.update_session(s.id, state={}, expected_version=0), Conflict,
             "session 'reads' is at version 1, not 0")
    store.append(s.id, [Message.assistant("", [{"id": "known", "name": "f"}])])
    both = Message(role="tool", parts=[*Message.tool_result("known", "ok").parts,
                                       *Message.tool_result("ghost", "x").parts])
    _refused(lambda: store.append(s.id, [Message.user("fine"), both], reject_orphans=True),
             InvalidMessage, "tool result answers call 'ghost', which is not earlier in the "
             "conversation - at `$[1].parts`")
    assert store.count(s.id) == 3


def test_the_store_counts_with_its_own_counter(store: BaseStore) -> None:
    assert store.counter.name == get_counter("approx").name  # what conftest asked for
    s = store.create_session()
    store.append(s.id, [Message.user("a few words here")])
    assert store.get_session(s.id).token_count == cached_count(
        Message.user("a few words here"), get_counter("approx"))


def test_an_expired_session_takes_no_append(store: BaseStore) -> None:
    s = store.create_session(ttl=0.1)
    time.sleep(0.25)
    with pytest.raises(NotFound):
        store.append(s.id, [Message.user("too late")])


def test_listing_bounds_cursors_and_search(store: BaseStore) -> None:
    _refused(lambda: store.list_sessions(limit=0), InvalidArgument,
             "limit must be between 1 and 1000")
    _refused(lambda: store.list_sessions(limit=1001), InvalidArgument,
             "limit must be between 1 and 1000")
    _refused(lambda: store.list_sessions(query=5), InvalidArgument,  # type: ignore[arg-type]
             "query must be a string")
    for i in range(52):
        store.create_session(f"s{i:02}")
    page = store.list_sessions()  # 50 by default
    assert len(page.items) == 50 and page.next_cursor
    assert len(store.list_sessions(limit=1000).items) == 52
    # the cursor of older releases: "<created_at>|<id>", created order
    first = page.items[0]
    old = f"{first.created_at.isoformat()}|{first.id}"
    assert [s.id for s in store.list_sessions(cursor=old, limit=2).items] == ["s01", "s02"]
    _refused(lambda: store.list_sessions(cursor=old, order="recent"), InvalidArgument,
             "this cursor is for order=created, not order=recent")
    _refused(lambda: store.list_sessions(cursor="x|y"), InvalidArgument, "bad cursor 'x|y'")
    # a filter that keeps few sessions of each batch: each kept once, in order
    for i in range(10):
        store.create_session(f"f{i}", tenant="filtered", metadata={"rare": i in (3, 6)})
    assert [s.id for s in store.list_sessions(tenant="filtered", metadata={"rare": True},
                                              limit=3).items] == ["f3", "f6"]
    store.append("s07", [Message.user("the Zyx code")])
    assert [s.id for s in store.list_sessions(query="zyx").items] == ["s07"]
    assert store.list_sessions(query="Ayx").items == []  # every character counts
