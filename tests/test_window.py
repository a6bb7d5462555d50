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


class _Counting(History):
    """A History that counts the items read through it."""

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


# ---------------------------------------------------------------- issue 23: mutants that lived


def test_settings_are_kept_and_checked() -> None:
    w = ContextWindow(100, counter=APPROX, low_water_tokens=40, keep_system=False, pin_tokens=10)
    assert (w.max_tokens, w.low_water_tokens, w.pin_tokens, w.keep_roles) == (
        100, 40, 10, frozenset())
    default = ContextWindow(100, counter=APPROX)
    assert (default.low_water_tokens, default.pin_tokens) == (62, 25)  # 62.5% and 25%
    assert default.keep_roles == frozenset({"system", "developer"})
    assert ContextWindow(1, counter=APPROX).max_tokens == 1
    for max_tokens, low in ((0, None), (-1, None), (100, 101), (100, -1)):
        with pytest.raises(ValueError) as info:
            ContextWindow(max_tokens, counter=APPROX, low_water_tokens=low)
        assert str(info.value) == "need max_tokens > 0 and 0 <= low_water_tokens <= max_tokens"


def test_an_empty_history_plans_an_empty_prompt() -> None:
    w = ContextWindow(100, counter=APPROX)
    for _ in range(2):
        plan = w.plan(History())
        assert plan.messages == [] and plan.cache_breakpoint_id is None
        assert (plan.total_tokens, plan.reused_prefix_tokens, plan.head_count) == (3, 0, 0)
    h = History([turn(0)])
    assert w.plan(h).message_ids == [h[0].id]


def test_head_count_is_the_fixed_head() -> None:
    """``head_count``: the leading kept messages and pinned head, before the tail; it
    stays the prompt's first messages through evictions."""
    msgs = [Message.system("s"), *(turn(i) for i in range(2)), Message.developer("d"),
            *(turn(i) for i in range(2, 30))]
    pin = cached_count(msgs[1], APPROX) + cached_count(msgs[2], APPROX)
    size = cached_count(turn(5), APPROX)
    h = History(msgs[:5])
    plan = ContextWindow(10_000, counter=APPROX, pin_tokens=pin).plan(h)
    assert plan.head_count == 4  # system, the two pinned turns, and the developer message
    full = ContextWindow(plan.total_tokens, counter=APPROX, pin_tokens=pin).plan(h)
    assert full.head_count == 4 and not full.evicted_ids  # a prompt that fills the window
    assert ContextWindow(10_000, counter=APPROX, pin_tokens=0).plan(h).head_count == 1
    unkept = ContextWindow(10_000, counter=APPROX, pin_tokens=pin, keep_system=False)
    assert unkept.plan(h).head_count == 2
    assert ContextWindow(10_000, counter=APPROX, pin_tokens=0, keep_system=False).plan(
        h).head_count == 0
    w = ContextWindow(12 * size, counter=APPROX, low_water_tokens=8 * size, pin_tokens=pin)
    h = History(msgs[:5])
    evicted = 0
    for m in msgs[5:]:
        h.add(m)
        plan = w.plan(h)
        evicted += len(plan.evicted_ids)
        assert plan.head_count == 4
        assert plan.message_ids[:4] == [m.id for m in msgs[:4]]
    assert evicted


def test_an_edit_breaks_the_prefix_from_the_edited_message() -> None:
    """A message replaced by another of the same size (in the resumed session's copy of
    the history): the messages after it sit where they sat, but their KV entries depend
    on the replaced one, so they are not reused."""
    h = History([Message.system("s"), turn(0), turn(1), turn(2)])
    w = ContextWindow(10_000, counter=APPROX)
    w.plan(h)
    replacement = Message.user("message number 7 " * 3)
    assert cached_count(replacement, APPROX) == cached_count(h[1], APPROX)
    resumed = History.from_json(h.to_json())
    resumed[1] = replacement
    plan = w.plan(resumed)
    assert plan.message_ids == [m.id for m in resumed]
    assert plan.reused_prefix_tokens == cached_count(h[0], APPROX)


def test_a_message_replaced_in_place_is_planned() -> None:
    h = History([Message.system("s"), turn(0), turn(1), turn(2)])
    w = ContextWindow(10_000, counter=APPROX)
    w.plan(h)
    h[1] = Message.user("edited")
    assert w.plan(h).message_ids == [m.id for m in h]
    listed = list(h)  # a plain list: its edits cannot be seen, so it is read whole
    w.plan(listed)
    listed[2] = Message.assistant("edited too")
    assert w.plan(listed).message_ids == [m.id for m in listed]


def _state(window: ContextWindow) -> dict[str, object]:
    return msgspec.json.decode(msgspec.json.encode(window.to_dict()))  # as stored


def test_state_round_trips_and_restores_without_a_counter() -> None:
    h = History([Message.system("s"), *(turn(i) for i in range(40))])
    w = ContextWindow(300, counter="o200k_base", low_water_tokens=150, pin_tokens=40)
    plan = w.plan(h)
    assert plan.evicted_ids and w.pending_ids
    state = _state(w)
    restored = ContextWindow.from_dict(state, h)  # the counter named in the state
    assert restored.to_dict() == state
    assert restored.counter.name == "o200k_base" and restored.pending_ids == w.pending_ids
    assert restored.commit() == plan.evicted_ids
    h.add(turn(40))
    again = restored.plan(h)
    assert again.reused_prefix_tokens == plan.total_tokens - 3
    assert again.message_ids[:3] == plan.message_ids[:3]  # the pinned head stayed
    other = ContextWindow(50, counter="cl100k_base", low_water_tokens=10, keep_system=False,
                          pin_tokens=0)
    assert ContextWindow.from_dict(_state(other)).to_dict() == _state(other)


def test_a_window_counting_approx_restores_without_a_counter() -> None:
    w = ContextWindow(100, counter="approx")
    assert ContextWindow.from_dict(_state(w)).counter.name == w.counter.name


def test_state_of_an_older_release_restores_with_the_defaults() -> None:
    """A state saved before keep_system, pin_tokens, pinned, pending or layout were
    stored: the defaults of a new window."""
    old = {"max_tokens": 100, "low_water_tokens": 50, "counter": "o200k_base"}
    w = ContextWindow.from_dict(old)
    assert w.to_dict() == {**old, "pin_tokens": 25, "keep_system": True, "layout": [],
                           "pending": [], "pinned": []}


def test_pinned_groups_give_way_before_the_whole_head() -> None:
    """A result joined a pinned call and the head outgrew the window: the groups kept
    only for having been pinned leave first, the opening message stays pinned."""
    opening, call = Message.user("the task"), Message.assistant("", [{"id": "c1", "name": "f"}])
    result = Message.tool_result("c1", "x " * 200)
    question = Message.user("next question")
    size = {m.id: cached_count(m, APPROX) for m in (opening, call, result, question)}
    pin = size[opening.id] + size[call.id]
    everything = sum(size.values()) + 3
    w = ContextWindow(everything - 1, counter=APPROX, low_water_tokens=everything // 2,
                      pin_tokens=pin)
    h = History([opening, call])
    assert w.plan(h).head_count == 2  # both pinned
    h.extend([result, question])
    plan = w.plan(h)
    assert plan.message_ids == [opening.id, question.id]
    assert plan.evicted_ids == [call.id, result.id] and plan.head_count == 1


def test_eviction_stops_when_it_reaches_low_water_exactly() -> None:
    """Equal messages, a low-water mark an exact number of them below the prompt: the
    eviction frees exactly what it needs and not one message more."""
    msgs = [Message.user(f"message {i:03d}") for i in range(11)]
    size = cached_count(msgs[0], APPROX)
    assert {cached_count(m, APPROX) for m in msgs} == {size}
    w = ContextWindow(10 * size + 3, counter=APPROX, low_water_tokens=7 * size + 3,
                      pin_tokens=0)
    h = History(msgs[:10])
    assert not w.plan(h).evicted_ids  # exactly full
    h.add(msgs[10])
    plan = w.plan(h)
    assert plan.evicted_ids == [m.id for m in msgs[:4]]
    assert plan.total_tokens == w.low_water_tokens


def test_another_history_is_read_whole() -> None:
    """A window that planned one History and then gets another (a copy that shares some
    message objects, as ``History(old.messages)`` does) reads all of the other."""
    first = History([Message.system("s"), turn(0)])
    w = ContextWindow(10_000, counter=APPROX)
    w.plan(first)
    other = History([Message.user("another start"), first[1], turn(1)])
    assert w.plan(other).message_ids == [m.id for m in other]


def test_every_edit_is_planned() -> None:
    h = History([Message.system("s"), turn(0), turn(1), turn(2)])
    w = ContextWindow(10_000, counter=APPROX)
    for k in range(3):
        w.plan(h)
        h[1 + k] = Message.user(f"edit {k}")
        assert w.plan(h).message_ids == [m.id for m in h], k
