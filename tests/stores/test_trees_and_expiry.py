"""Every backend: imports that would store a broken tree or an unreachable id, tree
walks over parent links that loop (stored by 0.1), a purge that one tenant's bad data
cannot stop, expired sessions gone for every call, and expiry by the store's clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from chathistory import Conflict, InvalidMessage, Message, NotFound
from chathistory.stores import BaseStore, MemoryStore
from chathistory.stores.clock import StoreClock
from chathistory.stores.model import Session


def _session(sid: str, **fields: Any) -> bytes:
    return msgspec.json.encode({"kind": "session", "session": {"id": sid, **fields}})


def _message(sid: str, text: str) -> bytes:
    return msgspec.json.encode({"kind": "message", "session_id": sid,
                                "message": Message.user(text).to_dict()})


def _everything(store: BaseStore, tenant: str) -> list[str]:
    """Every session stored for ``tenant``, expired or not."""
    return [s.id for s in store._b_list_sessions(tenant, None, 1000, None)]


def _expire(store: BaseStore, sid: str, tenant: str = "t") -> None:
    """Set the session's deadline a minute in the past (by the store's clock)."""
    found = store._b_get_session(tenant, sid)
    assert found is not None
    past = msgspec.structs.replace(found, version=found.version + 1,
                                   expires_at=store.now() - timedelta(minutes=1))
    assert store._b_save_session(past, found.version)


def _raw(store: BaseStore, sid: str, tenant: str = "t", **fields: Any) -> None:
    """A session row as an import of 0.1 could store it (no checks)."""
    store._b_insert_session(Session(id=sid, tenant=tenant, root_id=fields.pop("root_id", sid),
                                    **fields))


# ---------------------------------------------------------------- import (items 6, 13)


OK = [_session("p"), _message("p", "m0"), _message("p", "m1")]

BAD_IMPORTS = {
    "its own parent": ([_session("x", parent_id="x")], "$.line[4].session.parent_id"),
    "a loop": ([_session("x1", parent_id="x2"), _session("x2", parent_id="x1")],
               "$.line[4].session.parent_id"),
    "an unknown parent": ([_session("f", parent_id="nobody", fork_seq=1)],
                          "$.line[4].session.parent_id"),
    "a parent listed later": ([_session("f", parent_id="q"), _session("q")],
                              "$.line[4].session.parent_id"),
    "fork_seq -1": ([_session("f", parent_id="p", fork_seq=-1)], "$.line[4].session.fork_seq"),
    "fork_seq past the parent": ([_session("f", parent_id="p", fork_seq=3)],
                                 "$.line[4].session.fork_seq"),
    "an empty id": ([_session("")], "$.line[4].session.id"),
    "a NUL in the id": ([_session("a\x00b")], "$.line[4].session.id"),
    "a message of another session": ([_message("zzz", "m")], "$.line[4].session_id"),
    "a bad message": ([msgspec.json.encode({"kind": "message", "session_id": "p",
                                            "message": {"role": 7}})],
                      "$.line[4].message.role"),
}


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_import_refuses_bad_trees_and_ids_storing_nothing(store: BaseStore, case: str) -> None:
    bad, path = BAD_IMPORTS[case]
    with pytest.raises(InvalidMessage) as caught:
        store.import_([*OK, *bad], tenant="t")  # a list: checked whole before anything
    assert caught.value.path == path
    assert _everything(store, "t") == []


def test_import_of_lines_given_once_stops_before_the_bad_session(store: BaseStore) -> None:
    def lines() -> Iterator[bytes]:
        yield from OK
        yield _session("x1", parent_id="x2")
        yield _session("x2", parent_id="x1")

    with pytest.raises(InvalidMessage, match="needs its parent"):
        store.import_(lines(), tenant="t")
    assert _everything(store, "t") == ["p"]  # what came before it; the loop never stored
    with pytest.raises(InvalidMessage):  # and check_import on a first pass stores nothing
        store.check_import(lines(), tenant="u")
    assert _everything(store, "u") == []


def test_import_checks_forks_against_what_is_stored_and_the_caller_id_rule(
        store: BaseStore) -> None:
    store.import_(OK, tenant="t")
    fork = [_session("f", parent_id="p", fork_seq=2), _message("f", "own")]
    with pytest.raises(InvalidMessage) as caught:  # the parent in the store: 2 messages
        store.import_([_session("g", parent_id="p", fork_seq=3)], tenant="t")
    assert caught.value.path.endswith("fork_seq")
    assert store.import_(fork, tenant="t") == 1
    assert [m.text for m in store.range("f", tenant="t")] == ["m0", "m1", "own"]
    assert store.get_session("f", tenant="t").root_id == "p"
    at_zero = store.import_([_session("z", parent_id="p", fork_seq=0)], tenant="t")
    assert at_zero == 0 and store.get_session("z", tenant="t").parent_id == "p"

    def url_rule(value: str, path: str) -> None:
        if "/" in value:
            raise InvalidMessage("no slash", path)

    with pytest.raises(InvalidMessage) as slash:
        store.check_import([_session("a/b")], tenant="t", check_id=url_rule)
    assert slash.value.path == "$.line[1].session.id"
    store.check_import(fork, tenant="t", check_id=url_rule)  # continued sessions pass


# ---------------------------------------------------------------- tree walks (item 6)


def test_parent_links_that_loop_end_every_walk(store: BaseStore) -> None:
    _raw(store, "self", parent_id="self")
    _raw(store, "x1", parent_id="x2", root_id="x1")
    _raw(store, "x2", parent_id="x1", root_id="x1")
    _raw(store, "y1", parent_id="y2", fork_seq=1, message_count=1)
    _raw(store, "y2", parent_id="y1", fork_seq=1, message_count=1)
    with pytest.raises(NotFound, match="loops"):  # a read through the loop: never a hang
        store.range("y1", tenant="t")
    assert {s.id for s in store.lineage("x1", tenant="t")} == {"x1", "x2"}
    store.delete_session("self", tenant="t")  # itself is not a fork of itself
    store.delete_session("x1", tenant="t", cascade=True)
    assert sorted(_everything(store, "t")) == ["y1", "y2"]
    assert store.erase(tenant="t") == 2
    _raw(store, "z1", parent_id="z2", expires_at=store.now() - timedelta(hours=1))
    _raw(store, "z2", parent_id="z1")
    assert store.purge_expired() == 2  # was: RecursionError for every tenant


def test_a_deep_tree_is_deleted_without_recursion(store: BaseStore) -> None:
    _raw(store, "n0")
    for i in range(1, 1100):  # deeper than Python's recursion limit
        _raw(store, f"n{i}", parent_id=f"n{i - 1}", root_id="n0")
    with pytest.raises(Conflict):
        store.delete_session("n0", tenant="t")
    store.delete_session("n0", tenant="t", cascade=True)
    assert _everything(store, "t") == []


def test_one_tenants_failure_never_stops_anothers_purge(
        store: BaseStore, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    for tenant in ("bad", "good"):
        for k in range(2):
            store.create_session(f"s{k}", tenant=tenant, ttl=3600)
            _expire(store, f"s{k}", tenant)
    keep = store.create_session("keep", tenant="good", ttl=3600)
    delete = store._b_delete_session

    def failing(tenant: str, session_id: str) -> None:
        if tenant == "bad":
            raise ValueError("a row that does not decode")
        delete(tenant, session_id)

    monkeypatch.setattr(store, "_b_delete_session", failing)
    with caplog.at_level(logging.ERROR, logger="chathistory.stores"):
        assert store.purge_expired() == 2
    assert _everything(store, "good") == [keep.id]
    assert sorted(_everything(store, "bad")) == ["s0", "s1"]
    failures = [r for r in caplog.records if "could not be deleted" in r.getMessage()]
    assert len(failures) == 2 and "'bad'" in failures[0].getMessage()
    assert "2 failure(s)" in caplog.records[-1].getMessage()

    def unreachable(tenant: str, session_id: str) -> None:
        raise ConnectionRefusedError("the store is down")

    monkeypatch.setattr(store, "_b_delete_session", unreachable)
    with pytest.raises(ConnectionRefusedError):  # an outage is not bad data: it stops
        store.purge_expired()
    monkeypatch.setattr(store, "_b_delete_session", delete)
    assert store.purge_expired(tenant="good") == 0
    assert store.purge_expired(tenant="bad") == 2


# ---------------------------------------------------------------- expired sessions (item 15)


def test_an_expired_session_is_gone_for_every_call(store: BaseStore) -> None:
    old = store.create_session("old", tenant="t", metadata={"v": 1}, ttl=3600)
    store.append(old.id, [Message.user("q"), Message.assistant("a")], tenant="t")
    fork = store.fork(old.id, tenant="t", new_session_id="old-fork")
    live_parent = store.create_session("parent", tenant="t")
    store.append(live_parent.id, [Message.user("q")], tenant="t")
    gone_fork = store.fork(live_parent.id, tenant="t", new_session_id="gone-fork")
    for sid in (old.id, fork.id, gone_fork.id):
        _expire(store, sid)
    for call in (lambda: store.get_session("old", tenant="t"),
                 lambda: store.range("old", tenant="t"),
                 lambda: store.append("old", [Message.user("x")], tenant="t"),
                 lambda: store.update_session("old", tenant="t", metadata={}),
                 lambda: store.fork("old", tenant="t")):
        with pytest.raises(NotFound):
            call()
    assert "old" not in [s.id for s in store.list_sessions(tenant="t").items]
    assert b'"old"' not in b"".join(store.export(tenant="t"))
    assert [s.id for s in store.lineage("parent", tenant="t")] == ["parent"]
    assert store.pop("parent", tenant="t") is not None  # the expired fork shares nothing
    again = store.create_session("old", tenant="t", metadata={"v": 2})  # was: Conflict
    assert (again.metadata, again.message_count, again.expires_at) == ({"v": 2}, 0, None)
    assert store.range("old", tenant="t") == []
    with pytest.raises(NotFound):
        store.get_session("old-fork", tenant="t")  # gone with it, as a purge would
    with pytest.raises(Conflict):
        store.create_session("old", tenant="t")  # a live session keeps its id
    store.fork("old", tenant="t", new_session_id="gone-fork")  # an expired id is free
    store.delete_session("parent", tenant="t")  # its expired fork does not block it
    _expire(store, "gone-fork")
    store.import_([_session("gone-fork")], tenant="t")
    assert store.get_session("gone-fork", tenant="t").parent_id is None


# ---------------------------------------------------------------- the store's clock (item 16)


@pytest.fixture
def node_two_hours_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's wall clock, as the stores read it, 2 h ahead."""
    import chathistory.stores.append as append
    import chathistory.stores.clock as clock
    import chathistory.stores.lifecycle as lifecycle
    import chathistory.stores.model as model
    import chathistory.stores.sessions as sessions

    def ahead() -> datetime:
        return datetime.now(UTC) + timedelta(hours=2)

    for module in (model, sessions, append, lifecycle, clock):
        monkeypatch.setattr(module, "utcnow", ahead)


def test_expiry_is_judged_by_the_stores_clock(store: BaseStore, request: pytest.FixtureRequest
                                              ) -> None:
    """Was: a node 2 h ahead purged another node's live 1 h session. PostgreSQL and
    Redis judge by their own clock; SQLite and memory by this machine's (documented)."""
    live = store.create_session("live", tenant="t", ttl=3600)
    own_clock = store._b_clock() is not None
    request.getfixturevalue("node_two_hours_ahead")
    store._clock = StoreClock(store._b_clock)  # a node that starts now, skewed
    if own_clock:
        assert store.get_session(live.id, tenant="t").id == "live"
        assert store.purge_expired() == 0
        made = store.create_session("made-ahead", tenant="t", ttl=3600)
        assert made.expires_at is not None
        assert abs(made.expires_at - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(
            minutes=1)
    else:
        with pytest.raises(NotFound):
            store.get_session(live.id, tenant="t")
        assert store.purge_expired() == 1


def test_the_store_clock_is_read_once_a_minute_and_carried_forward() -> None:
    reads: list[datetime] = []
    start = datetime(2030, 1, 1, tzinfo=UTC)

    def read() -> datetime:
        reads.append(start)
        return start

    clock = StoreClock(read)
    first, second = clock.now(), clock.now()
    assert len(reads) == 1 and start <= first <= second < start + timedelta(seconds=1)
    clock.now(fresh=True)
    assert len(reads) == 2
    assert StoreClock(read, refresh_seconds=0).now() >= start
    local = StoreClock(lambda: None)
    assert abs(local.now() - datetime.now(UTC)) < timedelta(seconds=1)
    assert isinstance(MemoryStore().now(), datetime)
