"""``store.delete_message`` on every backend: a message deleted from anywhere in a
session, at once (issue 43): the later messages move down with their ids, statuses and
counts, the groups around the gap are those ``History`` makes of the remaining
messages (the oracle: every read agrees with it), and what cannot be done safely (a
message a fork inherits, a stale version) is refused with nothing changed."""

from __future__ import annotations

import msgspec
import pair_shapes
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_conformance import _PAIRS, _check_reads, chat, ids, tool_turn
from test_since_compaction import check as check_compactions
from test_since_compaction import compaction

from chathistory import Conflict, History, KVStatus, Message, NotFound, Reasoning
from chathistory.groups import Groups
from chathistory.stores import BaseStore


def _check_stored(store: BaseStore, session_id: str, expected: list[Message]) -> None:
    """The rows as stored after a deletion (a read leaves orphans out): each message at
    its index, the running totals and the session's token count the sums, the group
    flags those ``Groups`` makes of the remaining messages; ``get`` finds each one."""
    session = store.get_session(session_id)
    assert session.message_count == len(expected)
    assert session.token_count == History(expected, counter=store.counter).token_count()
    rows = store._read(session, 0, session.message_count)
    groups = Groups.of(expected)
    assert [(r.seq, r.id) for r in rows] == list(enumerate(ids(expected)))
    assert [r.cum_before for r in rows] == [
        sum(r.tokens for r in rows[:i]) for i in range(len(rows))]
    assert [(r.cut_ok, r.orphan) for r in rows] == [
        (groups.starts_group(k), groups.is_orphan(k)) for k in range(len(rows))]
    for m in expected:
        assert store.get(session_id, m.id).id == m.id


def _check_after(store: BaseStore, session_id: str, expected: list[Message]) -> None:
    """``_check_stored``, then the reads: ``History``'s over the same messages (the
    oracle while none is an orphan); with orphans (a call deleted before its results),
    no read holds one, and a range holds every group without one."""
    _check_stored(store, session_id, expected)
    groups = Groups.of(expected)
    if not groups.has_orphans:
        _check_reads(store, session_id, expected)
        return
    orphans = {expected[k].id for k in range(len(expected)) if groups.is_orphan(k)}
    for k in range(len(expected) + 2):
        got = store.tail(session_id, k)
        assert not orphans & set(ids(got)), k
        assert not pair_shapes.pair_violations(got, expected), k
    sendable = [expected[k].id for k in groups.sendable(0, len(expected))]
    assert ids(store.range(session_id)) == sendable


def test_delete_first_middle_last(store: BaseStore) -> None:
    msgs = chat(9)
    s = store.create_session()
    first = store.append(s.id, msgs[:5])
    store.append(s.id, msgs[5:])
    model = list(msgs)
    version = store.get_session(s.id).version
    for victim in (msgs[0], msgs[4], msgs[8]):  # first, middle, last
        session = store.delete_message(s.id, victim.id)
        model.remove(victim)
        version += 1
        assert session.version == version == store.get_session(s.id).version
        assert session.message_count == len(model)
        _check_after(store, s.id, model)
        with pytest.raises(NotFound):
            store.get(s.id, victim.id)
    # an append goes after the last message; a retry of a kept message is a no-op,
    # one of the deleted message stores it again, at the end
    more = chat(2, "more")
    assert store.append(s.id, more) == version + 1
    assert store.append(s.id, [model[2]]) == first  # (the version that stored it)
    store.append(s.id, [msgs[4]])
    model += [*more, msgs[4]]
    _check_stored(store, s.id, model)
    assert ids(store.tail(s.id, 3)) == ids(model[-3:])
    with pytest.raises(NotFound):
        store.delete_message(s.id, "no-such-message")
    with pytest.raises(NotFound):
        store.delete_message("no-such-session", model[0].id)


def test_delete_at_any_depth(store: BaseStore) -> None:
    """Far more than a hundred messages after the deleted one."""
    msgs = chat(300)
    s = store.create_session()
    for a in range(0, 300, 50):
        store.append(s.id, msgs[a:a + 50])
    store.delete_message(s.id, msgs[1].id)
    model = [m for m in msgs if m.id != msgs[1].id]
    assert ids(store.range(s.id)) == ids(model)
    assert ids(store.tail(s.id, 5)) == ids(model[-5:])
    history = History(model, counter=store.counter)
    assert ids(store.window(s.id, 200)) == ids(history.by_tokens(200))
    assert store.get_session(s.id).token_count == history.token_count()


def test_expected_version(store: BaseStore) -> None:
    msgs = chat(4)
    s = store.create_session()
    version = store.append(s.id, msgs)
    with pytest.raises(Conflict):
        store.delete_message(s.id, msgs[1].id, expected_version=version - 1)
    assert ids(store.range(s.id)) == ids(msgs)  # nothing changed
    assert store.delete_message(s.id, msgs[1].id, expected_version=version).version == \
        version + 1


def test_delete_inside_a_tool_group(store: BaseStore) -> None:
    """One message of a group is deleted alone and the rest regrouped as an append of
    them would: the call gone, its results are orphans (stored, left out of reads);
    one result gone, the other stays with the call; the reasoning gone, the call
    still stands."""
    turns = [*chat(2, "before"), *tool_turn(0), *tool_turn(1), *chat(2, "after")]
    # tool_turn: user, reasoning-only, call (two ids), result a, result b, answer
    for victim_at in (3, 4, 5, 6, 9, 10):
        s = store.create_session()
        store.append(s.id, turns[:5])  # the call ends an append, its results come later
        store.append(s.id, turns[5:])
        model = [m for k, m in enumerate(turns) if k != victim_at]
        store.delete_message(s.id, turns[victim_at].id)
        _check_after(store, s.id, model)
    # the call deleted: its results are left out of every read as orphans
    s = store.create_session()
    store.append(s.id, turns)
    store.delete_message(s.id, turns[4].id)
    read = ids(store.tail(s.id, 100))
    assert turns[5].id not in read and turns[6].id not in read
    assert turns[7].id in read and turns[-1].id in read


def test_delete_the_message_a_reasoning_joined(store: BaseStore) -> None:
    """A reasoning-only message joins the message after it: its message deleted, it
    joins the next one; the newest deleted, the session ends with the reasoning."""
    think = Message(role="assistant", parts=[Reasoning(text="hmm")])
    msgs = [Message.user("q"), think, Message.assistant("a"), Message.user("next")]
    s = store.create_session()
    store.append(s.id, msgs)
    store.delete_message(s.id, msgs[2].id)
    model = [msgs[0], think, msgs[3]]
    _check_after(store, s.id, model)
    store.delete_message(s.id, msgs[3].id)
    assert store.get_session(s.id).ends_reasoning_only
    after = Message.assistant("joined")
    store.append(s.id, [after])
    _check_after(store, s.id, [msgs[0], think, after])


def test_delete_in_a_fork(store: BaseStore) -> None:
    msgs = chat(6)
    parent = store.create_session()
    store.append(parent.id, msgs)
    fork = store.fork(parent.id, msgs[3].id)
    own = chat(3, "fork")
    store.append(fork.id, own)
    with pytest.raises(Conflict):  # inherited: the parent stores it
        store.delete_message(fork.id, msgs[1].id)
    with pytest.raises(Conflict):  # the fork shares this position of the parent
        store.delete_message(parent.id, msgs[2].id)
    store.delete_message(fork.id, own[0].id)
    view = [*msgs[:4], *own[1:]]
    _check_after(store, fork.id, view)
    store.delete_message(parent.id, msgs[4].id)  # past the fork point: the parent's own
    _check_after(store, parent.id, [*msgs[:4], msgs[5]])
    _check_reads(store, fork.id, view)
    # a fork's own message answering a call the fork inherits
    calls, before, later = tool_turn(7), chat(2), chat(2, "b")
    root = store.create_session()
    store.append(root.id, [*before, *calls[:3]])
    branch = store.fork(root.id)
    store.append(branch.id, [*calls[3:], *later])
    for victim in (calls[5], calls[3]):  # the answer, then a result of the inherited call
        store.delete_message(branch.id, victim.id)
    view = [*before, *calls[:3], calls[4], *later]
    _check_after(store, branch.id, view)


def test_delete_keeps_marks_statuses_and_versions(store: BaseStore) -> None:
    msgs = chat(8)
    s = store.create_session()
    first = store.append(s.id, msgs[:4])
    store.append(s.id, msgs[4:])
    store.mark(s.id, [msgs[5].id], KVStatus.MARKED)
    store.delete_message(s.id, msgs[2].id)
    assert msgs[5].id not in ids(store.range(s.id, include_marked=False))
    assert msgs[5].id in ids(store.range(s.id))
    assert store.get(s.id, msgs[5].id).kv_status == KVStatus.MARKED
    # a retry of the first append answers the version that stored its messages
    assert store.append(s.id, [msgs[0], msgs[3]]) == first


def test_delete_keeps_compactions(store: BaseStore) -> None:
    msgs = [*chat(3), compaction(1), *chat(3, "b"), compaction(2, anthropic=True),
            *chat(2, "c")]
    s = store.create_session()
    store.append(s.id, msgs)
    model = list(msgs)
    for victim in (msgs[1], msgs[7], msgs[3], msgs[-1]):  # before, the newest, the only
        store.delete_message(s.id, victim.id)
        model.remove(victim)
        check_compactions(store, s.id, model)


def test_delete_from_the_search_index(store: BaseStore) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    msgs = [Message.user(f"{w} zulu") for w in words]
    s = store.create_session()
    store.append(s.id, msgs)
    assert len(store.search("zulu", session_id=s.id).items) == 5
    store.delete_message(s.id, msgs[1].id)
    assert store.search("bravo", session_id=s.id).items == []
    hits = store.search("delta", session_id=s.id).items
    assert [(h.message.id, h.seq) for h in hits] == [(msgs[3].id, 2)]
    found = {h.message.id: h.seq for h in store.search("zulu", session_id=s.id).items}
    assert found == {m.id: i for i, m in enumerate([msgs[0], *msgs[2:]])}
    store.append(s.id, [Message.user("foxtrot zulu")])
    assert len(store.search("zulu", session_id=s.id).items) == 5


@given(data=st.data())
@_PAIRS
def test_reads_after_deletes_equal_history_selectors(store: BaseStore,
                                                      data: st.DataObject) -> None:
    """Deleting any messages, in any order, leaves what a list without them holds:
    every read equals ``History``'s over the remaining messages (pair safety around
    the gaps), and later appends go after them."""
    msgs = data.draw(pair_shapes.conversations(), "messages")
    s = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs), "batches"):
        store.append(s.id, batch)
    model = list(msgs)
    for _ in range(data.draw(st.integers(1, min(3, len(msgs))), "deletions")):
        victim = model[data.draw(st.integers(0, len(model) - 1), "deleted")]
        store.delete_message(s.id, victim.id)
        model.remove(victim)
    _check_after(store, s.id, model)
    stored = [m["id"] for m in msgspec.json.decode(store.range_json(s.id))]
    assert stored == ids(store.range(s.id))
    more = [Message.user("after the deletions")]
    store.append(s.id, more)
    _check_stored(store, s.id, [*model, *more])
