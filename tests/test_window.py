"""ContextWindow: KV positions, chunked eviction with hysteresis, pinned head, persistence."""

from __future__ import annotations

import msgspec
import pytest

from chathistory import History, KVStatus, Message
from chathistory.tokens import ApproxCounter, cached_count
from chathistory.window import ContextOverflow, ContextWindow, WindowPlan

APPROX = ApproxCounter()


def turn(i: int) -> Message:
    return (Message.user if i % 2 == 0 else Message.assistant)(f"message number {i} " * 3)


def test_positions_are_contiguous_and_sizes_match() -> None:
    h = History([Message.system("be brief"), *(turn(i) for i in range(6))])
    plan = ContextWindow(10_000, counter=APPROX).plan(h)
    pos = 0
    for m in plan.messages:
        assert m.kv_start == pos and m.kv_size == cached_count(m, APPROX)
        assert m.kv_status == KVStatus.LOADED
        pos += m.kv_size
    assert plan.total_tokens == pos + APPROX.priming_tokens
    assert plan.reused_prefix_tokens == 0 and plan.new_tokens == pos
    assert plan.cache_breakpoint_id == h[-1].id


def test_growing_prompt_reuses_the_prefix() -> None:
    h = History([Message.system("s")])
    w = ContextWindow(10_000, counter=APPROX)
    previous = w.plan(h)
    for i in range(10):
        h.add(turn(i))
        plan = w.plan(h)
        assert plan.reused_prefix_tokens == previous.total_tokens - APPROX.priming_tokens
        assert plan.new_tokens == cached_count(h[-1], APPROX)
        assert plan.evicted_ids == []
        previous = plan


def test_chunked_eviction_with_hysteresis() -> None:
    size = cached_count(turn(0), APPROX)
    w = ContextWindow(20 * size, counter=APPROX, low_water_tokens=10 * size, pin_tokens=0)
    h = History([Message.system("s")])
    evictions = 0
    for i in range(200):
        h.add(turn(i))
        plan = w.plan(h)
        assert plan.total_tokens <= w.max_tokens
        assert plan.messages[0].role == "system"
        if plan.evicted_ids:
            evictions += 1
            assert plan.total_tokens <= w.low_water_tokens
            for mid in plan.evicted_ids:
                assert h.get(mid).kv_status == KVStatus.MARKED  # type: ignore[union-attr]
    # one eviction per ~10 turns, not one per turn
    assert 10 <= evictions <= 25


def test_commit_unloads_marked() -> None:
    h = History([turn(i) for i in range(30)])
    w = ContextWindow(cached_count(turn(0), APPROX) * 10 + 3, counter=APPROX, pin_tokens=0)
    plan = w.plan(h)
    assert plan.evicted_ids and w.pending_ids == plan.evicted_ids
    assert w.commit() == plan.evicted_ids
    for mid in plan.evicted_ids:
        assert h.get(mid).kv_status == KVStatus.UNLOADED  # type: ignore[union-attr]
    assert w.pending_ids == []
    again = w.plan(h)  # evicted messages stay out
    assert not set(again.message_ids) & set(plan.evicted_ids)


def test_pinned_head_survives_eviction() -> None:
    size = cached_count(turn(0), APPROX)
    h = History([Message.system("s"), *(turn(i) for i in range(4))])
    pin = sum(cached_count(m, APPROX) for m in h[1:3])
    w = ContextWindow(20 * size, counter=APPROX, low_water_tokens=12 * size, pin_tokens=pin)
    head = [m.id for m in h[:3]]
    first = w.plan(h)
    for i in range(4, 100):
        h.add(turn(i))
        plan = w.plan(h)
        assert plan.message_ids[:3] == head
        if plan.evicted_ids:
            assert plan.reused_prefix_tokens >= sum(cached_count(m, APPROX) for m in h[:3])
    assert first.message_ids[:3] == head


def test_tool_groups_leave_together() -> None:
    msgs = [Message.system("s")]
    for i in range(30):
        msgs += [
            Message.user(f"q{i}"),
            Message.assistant("", [{"id": f"c{i}a", "name": "f", "arguments": {}},
                                   {"id": f"c{i}b", "name": "g", "arguments": {}}]),
            Message.tool_result(f"c{i}a", "x" * 40),
            Message.tool_result(f"c{i}b", "y" * 40),
            Message.assistant(f"a{i}"),
        ]
    w = ContextWindow(400, counter=APPROX, pin_tokens=0)
    h = History()
    for m in msgs:
        h.add(m)
        plan = w.plan(h)
        ids = set(plan.message_ids)
        for pm in plan.messages:
            for r in pm.tool_results:
                call = next(x for x in h if any(c.id == r.call_id for c in x.tool_calls))
                assert call.id in ids
            for c in pm.tool_calls:
                results = [x for x in h if any(r.call_id == c.id for r in x.tool_results)]
                assert all(x.id in ids for x in results)


def test_overflow_is_a_clear_error() -> None:
    h = History([Message.system("x " * 500), Message.user("hi")])
    with pytest.raises(ContextOverflow, match="window holds 50"):
        ContextWindow(50, counter=APPROX).plan(h)


def test_few_shot_counts_like_any_other() -> None:
    shots = [Message.user("2+2?"), Message.assistant("4")]
    h = History(shots)
    plan = ContextWindow(1000, counter=APPROX).plan(h)
    assert plan.total_tokens == sum(cached_count(m, APPROX) for m in shots) + 3


def test_plan_is_a_serializable_value() -> None:
    h = History([turn(i) for i in range(5)])
    plan = ContextWindow(1000, counter=APPROX).plan(h)
    back = msgspec.json.decode(msgspec.json.encode(plan), type=WindowPlan)
    assert back.message_ids == plan.message_ids
    assert [m.kv_start for m in back.messages] == [m.kv_start for m in plan.messages]


def test_resume_restores_layout_without_retokenizing() -> None:
    calls = 0

    def count(text: str) -> int:
        nonlocal calls
        calls += 1
        return len(text) // 4 + 1

    from chathistory.tokens import CallableCounter

    counter = CallableCounter(count, name="c4")
    h = History([turn(i) for i in range(40)])
    w = ContextWindow(300, counter=counter, pin_tokens=0)
    plan = w.plan(h)
    state = w.to_dict()
    saved = h.to_json()
    before = calls
    h2 = History.from_json(saved)
    w2 = ContextWindow.from_dict(state, h2, counter=counter)
    h2.add(turn(40))
    plan2 = w2.plan(h2)
    assert calls == before + 2  # only the new message (role and text) was counted
    assert plan2.reused_prefix_tokens == plan.total_tokens - 3
    assert plan2.message_ids[:-1] == plan.message_ids


class _Counting(list):  # type: ignore[type-arg]
    """A list that counts the items read through it."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        found = super().__getitem__(index)
        type(self).reads += len(found) if isinstance(index, slice) else 1
        return found

    def __iter__(self):  # type: ignore[no-untyped-def]
        for item in super().__iter__():
            type(self).reads += 1
            yield item


class _FullScan(ContextWindow):
    """The window as it was: every plan reads the whole history."""

    def _candidates(self, history):  # type: ignore[no-untyped-def]
        return [m for m in history if m.id not in self._evicted]


def test_plan_reads_only_what_was_appended_and_plans_as_a_full_scan_would() -> None:
    """A turn costs O(window + new), not O(history) (issue 18), and lays out exactly
    what a plan reading the whole history lays out, evictions included."""
    texts = [f"message {i} " + "word " * (i % 17) for i in range(600)]
    ours, theirs = _Counting(), []
    window, full = ContextWindow(400, "approx"), _FullScan(400, "approx")
    reads_per_turn = []
    for i, text in enumerate(texts):
        make = Message.user if i % 2 == 0 else Message.assistant
        ours.append(make(text, id=f"m{i}"))
        theirs.append(make(text, id=f"m{i}"))
        _Counting.reads = 0
        a, b = window.plan(ours), full.plan(theirs)
        reads_per_turn.append(_Counting.reads)
        assert a.message_ids == b.message_ids and a.evicted_ids == b.evicted_ids
        assert [(m.kv_start, m.kv_size) for m in a.messages] == \
            [(m.kv_start, m.kv_size) for m in b.messages]
        window.commit()
        full.commit()
    assert max(reads_per_turn[100:]) <= 3  # the new message (and the last-seen check)
    ours.insert(0, Message.system("be brief", id="s"))  # an edit: read whole again
    theirs.insert(0, Message.system("be brief", id="s"))
    _Counting.reads = 0
    assert window.plan(ours).message_ids == full.plan(theirs).message_ids
    assert _Counting.reads >= len(ours)
