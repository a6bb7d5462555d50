"""ContextWindow as a property: the reused prefix is what the previous prompt and this
one share at the same KV positions, turn after turn, across restores (with the same
counter or another one) and evictions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import History, Message
from chathistory.tokens import ApproxCounter, CallableCounter, TokenCounter, cached_count
from chathistory.window import ContextWindow, WindowPlan

COUNTERS: dict[str, TokenCounter] = {
    "approx": ApproxCounter(),
    # another tokenizer: other sizes for the same messages, so other positions
    "halves": CallableCounter(lambda text: len(text) // 2 + 1, name="halves"),
}

_SETTINGS = settings(max_examples=120,
                     deadline=None)


def _message(i: int, words: int) -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    return make(f"turn {i} " + "word " * words)


def _layout(plan: WindowPlan) -> list[tuple[str, int]]:
    """The prompt as (id, kv_start), read now (the next plan moves the messages)."""
    return [(m.id, m.kv_start) for m in plan.messages]


def _check(plan: WindowPlan, previous: list[tuple[str, int]], counter: TokenCounter) -> None:
    """The reused prefix: the leading messages at the same place as in the previous
    prompt, the same id at the same KV position, and nothing after the first that is not."""
    shared = 0
    for k, m in enumerate(plan.messages):
        if k >= len(previous) or previous[k] != (m.id, m.kv_start):
            break
        shared += m.kv_size
    assert plan.reused_prefix_tokens == shared, (plan.reused_prefix_tokens, shared)
    used = plan.total_tokens - counter.priming_tokens
    assert plan.new_tokens == used - shared
    position = 0
    for m in plan.messages:  # contiguous positions, sizes by this window's counter
        assert m.kv_start == position
        position += m.kv_size
    assert position == used


def _check_eviction(plan: WindowPlan, window: ContextWindow, history: History,
                    counter: TokenCounter) -> None:
    """An eviction goes down to ``low_water_tokens`` and no further: with the newest
    message it evicted back, the prompt would be over (every message here is a group
    of its own); it stops above only when nothing but the head and the newest is left."""
    if not plan.evicted_ids:
        return
    low = window.low_water_tokens
    assert plan.total_tokens <= low or len(plan.messages) - plan.head_count == 1
    newest = max(history.index(history.get(i)) for i in plan.evicted_ids)
    assert plan.total_tokens + cached_count(history[newest], counter) > low


@given(data=st.data(), first=st.sampled_from(sorted(COUNTERS)),
       max_tokens=st.integers(60, 400), low=st.floats(0.3, 1.0),
       pin=st.floats(0.0, 0.5))
@_SETTINGS
def test_reused_prefix_is_the_shared_layout(data: st.DataObject, first: str, max_tokens: int,
                                            low: float, pin: float) -> None:
    counter = COUNTERS[first]
    window = ContextWindow(max_tokens, counter=counter, low_water_tokens=int(max_tokens * low),
                           pin_tokens=int(max_tokens * pin))
    history = History([Message.system("be brief")])
    previous: list[tuple[str, int]] = []
    serial = 0
    for step in range(data.draw(st.integers(1, 8), "steps")):
        for _ in range(data.draw(st.integers(0 if step else 1, 4), f"adds {step}")):
            history.add(_message(serial, data.draw(st.integers(0, 12), f"words {serial}")))
            serial += 1
        if data.draw(st.booleans(), f"restore {step}"):
            # a resumed session: the saved history and layout, maybe another tokenizer
            counter = COUNTERS[data.draw(st.sampled_from(sorted(COUNTERS)), f"counter {step}")]
            state = window.to_dict()
            history = History.from_json(history.to_json())
            window = ContextWindow.from_dict(state, history, counter=counter)
        plan = window.plan(history)
        _check(plan, previous, counter)
        _check_eviction(plan, window, history, counter)
        if data.draw(st.booleans(), f"commit {step}"):
            window.commit()
        previous = _layout(plan)


def test_restored_with_another_counter_reuses_only_the_first_message() -> None:
    """The resumed prompt holds the same messages, in the same order, but each has
    another size: only the first sits where it sat, so only its tokens are reused."""
    history = History([_message(i, 6) for i in range(4)])
    window = ContextWindow(10_000, counter=COUNTERS["approx"])
    before = _layout(window.plan(history))
    restored = ContextWindow.from_dict(window.to_dict(), history, counter=COUNTERS["halves"])
    after = restored.plan(history)
    assert after.message_ids == [i for i, _ in before]
    assert _layout(after)[1] != before[1]  # the second message moved
    assert after.reused_prefix_tokens == after.messages[0].kv_size
    assert after.new_tokens == sum(m.kv_size for m in after.messages[1:])
