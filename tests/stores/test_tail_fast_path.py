"""``tail``'s and ``window``'s fast paths (``reads.whole_tail``, ``reads.whole_window``)
against the walk over groups they skip.

A fast path answers when each of the newest rows it looks at is a group of its own; the
walk (``Reads._groups_backward``) is the plain path. On every backend, for conversations
of every shape ``pair_shapes`` builds, with messages marked or unloaded, results without
their call and forks read through their parent, both paths give the same rows for every
``n`` and both ``include_marked`` (tail), and for budgets from nothing to the whole
session (window).
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import pair_shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chathistory import KVStatus, Message
from chathistory.stores import BaseStore, reads
from chathistory.stores.model import Row
from chathistory.tokens import cached_count

_EXAMPLES = settings(max_examples=int(os.environ.get("CHATHISTORY_PAIR_EXAMPLES", "30")),
                     deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


def _ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


class _Spy:
    """``whole_tail`` as shipped, counting the reads it answered."""

    def __init__(self) -> None:
        self.answered = 0

    def __call__(self, *args: Any) -> list[Row] | None:
        found = _WHOLE_TAIL(*args)
        self.answered += found is not None
        return found


_WHOLE_TAIL = reads.whole_tail


_WHOLE_WINDOW = reads.whole_window


class _WindowSpy(_Spy):
    def __call__(self, *args: Any) -> list[Row] | None:
        found = _WHOLE_WINDOW(*args)
        self.answered += found is not None
        return found


def _walked(store: BaseStore, session_id: str, n: int, include_marked: bool) -> list[str]:
    with mock.patch.object(reads, "whole_tail", lambda *args: None):
        return _ids(store.tail(session_id, n, include_marked=include_marked))


@given(data=st.data())
@_EXAMPLES
def test_the_fast_path_reads_what_the_walk_reads(store: BaseStore, data: st.DataObject) -> None:
    msgs = data.draw(pair_shapes.conversations(), "messages")
    if data.draw(st.booleans(), "a result without its call"):
        msgs.append(Message.tool_result("no-such-call", "stray"))  # an orphan
    msgs += [Message.user("and then?"), Message.assistant("then this.")][
        :data.draw(st.integers(0, 2), "plain chat at the end")]
    s = store.create_session()
    for batch in data.draw(pair_shapes.batches(msgs), "batches"):
        store.append(s.id, batch)
    marked = data.draw(st.lists(st.sampled_from(msgs), max_size=3, unique_by=lambda m: m.id),
                       "marked")
    if marked:
        status = data.draw(st.sampled_from([KVStatus.MARKED, KVStatus.UNLOADED]), "status")
        store.mark(s.id, [m.id for m in marked], status)
    sessions = [(s.id, len(msgs))]
    if data.draw(st.booleans(), "a fork"):  # read through its parent, its own marks over it
        at = data.draw(st.sampled_from(msgs), "forked after")
        fork = store.fork(s.id, at.id)
        own = [Message.user("on the fork"), Message.assistant("forked answer")]
        store.append(fork.id, own)
        inherited = msgs[:msgs.index(at) + 1]
        store.mark(fork.id, [data.draw(st.sampled_from(inherited), "marked on the fork").id],
                   KVStatus.MARKED)
        sessions.append((fork.id, len(inherited) + len(own)))
    spy = _Spy()
    for session_id, count in sessions:
        for n in range(count + 2):
            for include_marked in (False, True):
                with mock.patch.object(reads, "whole_tail", spy):
                    fast = _ids(store.tail(session_id, n, include_marked=include_marked))
                assert fast == _walked(store, session_id, n, include_marked), \
                    (session_id, n, include_marked, pair_shapes.describe(msgs), _ids(marked))
    window_spy = _WindowSpy()
    for session_id, _ in sessions:
        total = store.get_session(session_id).token_count
        budgets = sorted({0, 3, 4, 10, total // 3, total // 2, total - 5, total + 3, total + 40,
                          *data.draw(st.lists(st.integers(0, total + 50), max_size=4),
                                     "budgets")})
        for budget in budgets:
            with mock.patch.object(reads, "whole_window", window_spy):
                fast = _ids(store.window(session_id, budget))
            with mock.patch.object(reads, "whole_window", lambda *args: None):
                walked = _ids(store.window(session_id, budget))
            assert fast == walked, (session_id, budget, pair_shapes.describe(msgs), _ids(marked))


def _plain_chat(store: BaseStore, n: int) -> tuple[str, list[Message]]:
    """A session of ``n`` messages, user and assistant in turn."""
    chat = store.create_session()
    msgs = [Message.user(f"question {i}") if i % 2 == 0 else Message.assistant(f"answer {i}")
            for i in range(n)]
    store.append(chat.id, msgs)
    return chat.id, msgs


def _tool_turn(store: BaseStore) -> tuple[str, list[Message]]:
    """A session of a question, a tool call and its result (the last two one group)."""
    tools = store.create_session()
    turn = [Message.user("weather?"),
            Message.assistant("", [{"id": "c1", "name": "weather", "arguments": {}}]),
            Message.tool_result("c1", "sunny")]
    store.append(tools.id, turn)
    return tools.id, turn


def test_the_fast_path_answers_plain_chat_and_leaves_the_rest_to_the_walk(
        store: BaseStore) -> None:
    chat, msgs = _plain_chat(store, 6)
    spy = _Spy()
    with mock.patch.object(reads, "whole_tail", spy):
        assert _ids(store.tail(chat, 3)) == _ids(msgs[3:])
        assert _ids(store.tail(chat, 10)) == _ids(msgs)  # the whole session
        assert spy.answered == 2
        store.mark(chat, [msgs[4].id], KVStatus.MARKED)
        assert _ids(store.tail(chat, 3)) == _ids([msgs[2], msgs[3], msgs[5]])
        assert spy.answered == 2  # a marked row among the newest: the walk
        assert _ids(store.tail(chat, 3, include_marked=True)) == _ids(msgs[3:])
        assert spy.answered == 3
        tools, turn = _tool_turn(store)
        assert _ids(store.tail(tools, 1)) == _ids(turn[1:])  # widened to the call
        assert spy.answered == 3


def _row(seq: int, *, cut_ok: bool = True, orphan: bool = False,
         status: int = int(KVStatus.LOADED)) -> Row:
    return Row(seq, f"m{seq}", "user", b"{}", 1, seq, cut_ok, orphan, status, 1)


def test_the_fast_path_takes_only_the_newest_rows_one_after_the_other() -> None:
    rows = [_row(s) for s in range(4, 10)]
    assert reads.whole_tail(rows, 3, 10, False) == rows[3:]
    assert reads.whole_tail(rows, 3, 11, False) is None  # not the newest rows
    assert reads.whole_tail([*rows[:4], *rows[5:]], 3, 10, False) is None  # one missing
    assert reads.whole_tail(rows, 9, 10, False) is None  # the session starts before them
    whole = [_row(s) for s in range(3)]
    assert reads.whole_tail(whole, 9, 3, False) == whole  # all of a short session
    assert reads.whole_tail([_row(9, cut_ok=False), *rows[1:]][-3:], 3, 10, False) == \
        rows[3:]  # a row before the newest n is not looked at
    assert reads.whole_tail([*rows[:5], _row(9, orphan=True)], 3, 10, False) is None
    assert reads.whole_tail([*rows[:5], _row(9, cut_ok=False)], 3, 10, False) is None
    unloaded = [*rows[:5], _row(9, status=int(KVStatus.UNLOADED))]
    assert reads.whole_tail(unloaded, 3, 10, False) is None
    assert reads.whole_tail(unloaded, 3, 10, True) == unloaded[3:]


def test_the_window_fast_path_answers_plain_chat_and_leaves_the_rest_to_the_walk(
        store: BaseStore) -> None:
    chat, msgs = _plain_chat(store, 8)
    spy = _WindowSpy()
    newest_three = sum(cached_count(m, store.counter) for m in msgs[5:])
    with mock.patch.object(reads, "whole_window", spy):
        newest = store.window(chat, newest_three + store.counter.priming_tokens)
        assert _ids(newest) == _ids(msgs[5:])
        assert _ids(store.window(chat, 10_000)) == _ids(msgs)  # the whole session
        assert spy.answered == 2
        tools, turn = _tool_turn(store)
        assert _ids(store.window(tools, 10_000)) == _ids(turn)
        assert spy.answered == 2  # a call and its result are one group: the walk


def test_the_window_fast_path_walks_only_single_rows_back_from_the_newest() -> None:
    rows = [_row(s) for s in range(4, 10)]  # one token each
    assert reads.whole_window(rows, 3, 10) == rows[3:]
    assert reads.whole_window(rows, 3, 11) is None  # not the newest rows
    assert reads.whole_window([*rows[:4], *rows[5:]], 3, 10) is None  # one missing
    assert reads.whole_window(rows, 9, 10) is None  # all fit: older rows might too
    whole = [_row(s) for s in range(3)]
    assert reads.whole_window(whole, 9, 3) == whole  # all of a short session
    assert reads.whole_window([_row(4, cut_ok=False), *rows[1:]], 3, 10) == rows[3:]
    assert reads.whole_window([*rows[:5], _row(9, cut_ok=False)], 3, 10) is None
    left_out = [*rows[:4], _row(8, orphan=True), _row(9, status=int(KVStatus.MARKED))]
    assert reads.whole_window(left_out, 3, 10) == rows[1:4]  # skipped, not counted
