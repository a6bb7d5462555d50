"""``store.since_compaction`` on every backend: ``History.since_compaction`` over the
stored messages (the oracle), through appends, pops, clears, marks, forks, edits and
imports, reading only the rows from the newest compaction on (issue 21)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
import pair_shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chathistory import History, KVStatus, Message, TextPart, ToolCall, ToolResult
from chathistory.model import Compaction
from chathistory.stores import BaseStore, Session
from chathistory.stores.model import COMPACTIONS_KEPT, SESSION_DECODER

_EXAMPLES = settings(max_examples=int(os.environ.get("CHATHISTORY_PAIR_EXAMPLES", "30")),
                     deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


def compaction(serial: int, anthropic: bool = False) -> Message:
    """An OpenAI compaction item (an assistant message of its own), or an Anthropic
    turn that holds a compaction block before its text."""
    if anthropic:
        return Message(role="assistant", parts=[
            Compaction(provider="anthropic", text=f"summary {serial}", data=f"e{serial}",
                       signature="s"), TextPart(text=f"after compaction {serial}")])
    return Message(role="assistant", parts=[
        Compaction(provider="openai_responses", data=f"gAAAA-{serial}")])


def holds_compaction(message: Message) -> bool:
    return any(type(p) is Compaction for p in message.parts)


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def check(store: BaseStore, session_id: str, messages: list[Message]) -> None:
    """The store's read equals History's over the same messages, and the session's
    bookkeeping names the newest compactions and counts the others."""
    history = History(messages, counter=store.counter)
    for keep in (False, True):
        got = store.since_compaction(session_id, keep_system=keep)
        want = history.since_compaction(keep_system=keep)
        assert ids(got) == ids(want), (keep, pair_shapes.describe(messages))
        assert not pair_shapes.pair_violations(got, messages), keep
    as_json = msgspec.json.decode(store.since_compaction_json(session_id, keep_system=True))
    assert [m["id"] for m in as_json] == ids(history.since_compaction(keep_system=True))
    session = store.get_session(session_id)
    positions = [i for i, m in enumerate(messages) if holds_compaction(m)]
    listed = session.compactions
    assert len(listed) <= COMPACTIONS_KEPT
    assert bool(listed) == bool(positions)
    assert listed == positions[len(positions) - len(listed):]
    assert session.compactions_before == len(positions) - len(listed)


def branch_points(messages: list[Message]) -> list[int]:
    """Where a fork or an edit may branch off ``messages`` for ``History`` to be the
    oracle: no result after the point answers a call before it. (Such a result, stored
    after the fork, joined the shared rows into its call's group, and the branch reads
    those rows as stored: its groups are then wider than History's, never split, for
    every read; ``test_conformance`` says so for pops.)"""
    call_at: dict[str, int] = {}
    for i, m in enumerate(messages):
        call_at.update((p.id, i) for p in m.parts if type(p) is ToolCall)
    answers = [(call_at[p.call_id], i) for i, m in enumerate(messages) for p in m.parts
               if type(p) is ToolResult and call_at.get(p.call_id, i) < i]
    return [at for at in range(len(messages) + 1)
            if not any(call < at <= result for call, result in answers)]


@st.composite
def with_compactions(draw: st.DrawFn) -> list[Message]:
    """A conversation of every shape (``pair_shapes``) with compactions anywhere: between
    turns, inside a tool group, after a reasoning-only message, last."""
    out: list[Message] = []
    for k, message in enumerate(draw(pair_shapes.conversations())):
        if draw(st.integers(0, 3)) == 0:
            out.append(compaction(k, draw(st.booleans())))
        out.append(message)
    if draw(st.booleans()):
        out.append(compaction(-1))
    return out


@given(data=st.data())
@_EXAMPLES
def test_since_compaction_equals_history(store: BaseStore, data: st.DataObject) -> None:
    """Conversations of every shape with compactions anywhere, appended in any batches;
    then pops, a fork (its own messages after), the parent going on, a mark, pops in the
    fork, an edit, a clear: after each, the read equals History's and the bookkeeping
    is right."""
    msgs = data.draw(with_compactions(), "messages")
    stored = data.draw(st.integers(1, len(msgs)), "the parent stores")
    parent = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs[:stored]), "parent batches"):
        store.append(parent.id, batch)
    model = msgs[:stored]
    check(store, parent.id, model)
    for _ in range(data.draw(st.integers(0, min(4, stored)), "popped")):
        assert store.pop(parent.id) is not None
        model.pop()
        check(store, parent.id, model)
    if not model:
        return
    at = data.draw(st.sampled_from(branch_points(model)[1:]), "fork after")
    fork = store.fork(parent.id, model[at - 1].id)
    fork_model = model[:at]
    check(store, fork.id, fork_model)
    rest = msgs[stored:]
    for batch in data.draw(pair_shapes.batches(rest), "fork batches") if rest else []:
        store.append(fork.id, batch)
    fork_model += rest
    check(store, fork.id, fork_model)
    other = [compaction(1000), Message.user("the parent goes on")]
    store.append(parent.id, other)
    model += other
    check(store, parent.id, model)
    check(store, fork.id, fork_model)
    marked = data.draw(st.sampled_from(fork_model), "marked")
    store.mark(fork.id, [marked.id], KVStatus.MARKED)  # kept, as range() keeps it
    check(store, fork.id, fork_model)
    for _ in range(data.draw(st.integers(0, min(4, len(fork_model) - at)), "fork pops")):
        store.pop(fork.id)
        fork_model.pop()
        check(store, fork.id, fork_model)
    points = [i for i in branch_points(fork_model) if i < len(fork_model)]
    if points:
        i = data.draw(st.sampled_from(points), "edited")
        new = data.draw(st.sampled_from([compaction(2000), Message.user("edited")]), "new")
        branch = store.edit(fork.id, fork_model[i].id, new)
        check(store, branch.id, [*fork_model[:i], new])
        store.clear(branch.id)
        check(store, branch.id, [])
        again = [Message.system("rules"), compaction(3000), Message.user("after")]
        store.append(branch.id, again)
        check(store, branch.id, again)
    check(store, fork.id, fork_model)


def many_compactions(turns: int = 12) -> list[Message]:
    """A system prompt, then turns that each end with a compaction: more compactions
    than a session lists, so the older ones are only counted."""
    out = [Message.system("be brief")]
    for k in range(turns):
        out += [Message.user(f"q{k}"), Message.assistant(f"a{k}"), compaction(k, k % 2 == 1)]
    return out


def test_pops_past_every_listed_compaction(store: BaseStore) -> None:
    msgs = many_compactions()
    s = store.create_session()
    store.append(s.id, msgs[:20])
    store.append(s.id, msgs[20:])
    assert store.get_session(s.id).compactions_before == 12 - COMPACTIONS_KEPT
    model = list(msgs)
    while model:
        check(store, s.id, model)
        popped = store.pop(s.id)
        assert popped is not None and popped.id == model.pop().id
    check(store, s.id, [])


def test_forks_and_edits_below_every_listed_compaction(store: BaseStore) -> None:
    msgs = many_compactions()
    parent = store.create_session()
    store.append(parent.id, msgs)
    for at in (1, 3, 4, 10, 15, 16, 27, len(msgs)):
        fork = store.fork(parent.id, msgs[at - 1].id)
        check(store, fork.id, msgs[:at])
        more = [Message.user("fork goes on"), compaction(100 + at)]
        store.append(fork.id, more)
        check(store, fork.id, [*msgs[:at], *more])
        grandchild = store.fork(fork.id, msgs[at // 2].id)  # through two segments
        check(store, grandchild.id, msgs[:at // 2 + 1])
        instead = Message.user("instead")
        branch = store.edit(parent.id, msgs[at - 1].id, instead)
        check(store, branch.id, [*msgs[:at - 1], instead])


def test_a_branch_below_its_parents_fork_point(store: BaseStore) -> None:
    """An edit (or a fork) of a fork, at a message the fork inherits while it has no
    messages of its own there, reads what it inherits up to that message only."""
    msgs = [Message.user("a"), compaction(1), Message.user("b"), compaction(3)]
    parent = store.create_session()
    store.append(parent.id, msgs)
    fork = store.fork(parent.id)
    instead = Message.user("instead of the compaction")
    branch = store.edit(fork.id, msgs[1].id, instead)
    check(store, branch.id, [msgs[0], instead])
    assert ids(store.tail(branch.id, 5)) == ids([msgs[0], instead])
    assert ids(store.range(branch.id)) == ids([msgs[0], instead])


def test_an_import_keeps_the_bookkeeping_right(store: BaseStore) -> None:
    msgs = many_compactions()
    s = store.create_session()
    store.append(s.id, msgs)
    fork = store.fork(s.id, msgs[14].id)
    last = compaction(99)
    store.append(fork.id, [last])
    store.import_(list(store.export()), tenant="other")
    for sid, model in ((s.id, msgs), (fork.id, [*msgs[:15], last])):
        history = History(model)
        assert ids(store.since_compaction(sid, tenant="other", keep_system=True)) == \
            ids(history.since_compaction(keep_system=True))
        imported, stored = store.get_session(sid, tenant="other"), store.get_session(sid)
        assert (imported.compactions, imported.compactions_before) == \
            (stored.compactions, stored.compactions_before)


def test_old_session_payloads_decode_without_the_bookkeeping() -> None:
    old = b'{"id":"s1","version":3,"message_count":2,"token_count":9}'
    session = SESSION_DECODER.decode(old)
    assert (session.compactions, session.compactions_before) == ([], 0)
    assert b"compactions" not in msgspec.json.encode(session)  # omitted while unused
    kept = msgspec.structs.replace(session, compactions=[1], compactions_before=2)
    assert SESSION_DECODER.decode(msgspec.json.encode(kept)) == kept
    assert Session.from_dict(kept.to_dict()) == kept


class RowsRead:
    """Counts the rows the engine reads through ``_b_rows`` and ``_b_kept_rows``."""

    def __init__(self, store: BaseStore) -> None:
        self.read = 0
        for name in ("_b_rows", "_b_kept_rows"):
            setattr(store, name, self._counting(getattr(store, name)))

    def _counting(self, read: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        def counted(*args: Any) -> list[Any]:
            found = read(*args)
            self.read += len(found)
            return found
        return counted


def test_the_read_is_bounded_by_what_follows_the_compaction(store: BaseStore) -> None:
    """5,000 messages compacted last at 4,990: the read is those 10 rows (and the
    system prompt), not 5,000; a pop of the last listed compaction reads back to the
    one before, not to the start."""
    n = 5000
    newest = list(range(4990 - COMPACTIONS_KEPT + 1, 4991))  # the listed ones
    at = {4950, 4960, *newest}
    msgs = [Message.system("be brief")] + [
        compaction(i) if i in at else Message.user(f"m{i}") for i in range(1, n)]
    s = store.create_session()
    for start in range(0, n, 1000):
        store.append(s.id, msgs[start:start + 1000])
    assert store.get_session(s.id).compactions == newest
    rows = RowsRead(store)
    assert ids(store.since_compaction(s.id)) == ids(msgs[4990:])
    assert rows.read == 10
    rows.read = 0
    assert ids(store.since_compaction(s.id, keep_system=True)) == ids([msgs[0], *msgs[4990:]])
    assert rows.read == 11
    while store.get_session(s.id).message_count > newest[0] + 1:
        store.pop(s.id)
    rows.read = 0
    store.pop(s.id)  # the oldest listed compaction: read back to 4960 (one batch of 64)
    assert rows.read <= 2 + 64, rows.read
    session = store.get_session(s.id)
    assert (session.compactions, session.compactions_before) == ([4960], 1)
    rows.read = 0
    window = store.since_compaction(s.id, keep_system=True)
    assert ids(window) == ids(History(msgs[:newest[0]]).since_compaction(keep_system=True))
    assert ids(window) == ids([msgs[0], *msgs[4960:newest[0]]])
    assert rows.read == len(window)
