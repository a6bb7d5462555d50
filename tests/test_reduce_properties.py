"""Property tests for the reducers and the context window (invariants 3-7 of docs/architecture.md).

Random conversations (tool calls, parallel calls, reasoning-only messages, orphan
results, late results, custom roles, system and developer messages anywhere) come from
``test_properties``, and so does the pair-safety checker: both share no code with
``groups.py``. Every expectation below (what is over a threshold, where a cut may land,
what a summary replaces, which messages are pinned, how long the reused prefix is) is
computed here from the docstrings, not by calling the library.

``tests/`` has no ``__init__.py``: pytest puts it on ``sys.path``, so the sibling module
imports by its own name (as ``tests/stores/test_postgres.py`` imports ``test_conformance``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from chathistory import History, KVStatus, Message
from chathistory.reduce import (
    MessageCountReducer,
    Pipeline,
    SummarizationFailed,
    SummarizationReducer,
    TokenBudgetReducer,
    TruncationReducer,
    is_summary,
    summary_of,
)
from chathistory.tokens import ApproxCounter, cached_count
from chathistory.window import ContextOverflow, ContextWindow, WindowPlan
from test_properties import (
    KEPT_ROLES,
    conversations,
    ids,
    pair_safety_violations,
    ref_groups,
    total_tokens,
)

APPROX = ApproxCounter()
PRIMING = APPROX.priming_tokens

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
REDUCE = settings(max_examples=120, deadline=None, suppress_health_check=_HEALTH)
SLOW = settings(max_examples=50, deadline=None, suppress_health_check=_HEALTH)
WINDOW = settings(max_examples=100, deadline=None, suppress_health_check=_HEALTH)


# ---------------------------------------------------------------- helpers


def cost(messages: Sequence[Message]) -> int:
    return sum(cached_count(m, APPROX) for m in messages)


def warm(messages: Sequence[Message]) -> None:
    """Cache the counts (the one mutation reducers are allowed) before a snapshot."""
    for m in messages:
        cached_count(m, APPROX)


def kept_roles(keep_system: bool) -> tuple[str, ...]:
    return KEPT_ROLES if keep_system else ()


def split(messages: Sequence[Message], keep: tuple[str, ...]
          ) -> tuple[list[Message], list[Message]]:
    """(kept messages, the rest), each in order."""
    return ([m for m in messages if m.role in keep], [m for m in messages if m.role not in keep])


def assert_subsequence(selection: Sequence[Message], full: Sequence[Message]) -> None:
    """Every message of ``selection`` is the very object of ``full``, in ``full``'s order."""
    where = {id(m): i for i, m in enumerate(full)}
    positions = []
    for m in selection:
        assert id(m) in where, f"{m.id} is not one of the input messages"
        positions.append(where[id(m)])
    assert positions == sorted(set(positions)), "order changed or a message repeated"


def assert_pair_safe(selection: Sequence[Message], full: Sequence[Message]) -> None:
    problems = pair_safety_violations(selection, full)
    assert not problems, problems


def leading_kept(messages: Sequence[Message], keep: tuple[str, ...]) -> int:
    n = 0
    while n < len(messages) and messages[n].role in keep:
        n += 1
    return n


def sendable_from(rest: Sequence[Message], start: int) -> list[str]:
    """Ids of the sendable groups of ``rest`` that start at or after ``start``."""
    return [m.id for a, b, ok in ref_groups(rest) if ok and a >= start for m in rest[a:b]]


def cut_start(rest: Sequence[Message], out_rest: Sequence[Message]) -> int:
    """The earliest group boundary of ``rest`` from which the sendable groups are exactly
    ``out_rest`` (what a reducer that cuts at a boundary and drops orphan groups keeps).
    Fails when there is none: the reducer did not cut at a group boundary."""
    want = ids(out_rest)
    starts = [a for a, _, _ in ref_groups(rest)] + [len(rest)]
    matching = [s for s in starts if sendable_from(rest, s) == want]
    assert matching, f"kept {want} is not the sendable tail of any group boundary"
    return min(matching)


def group_before(rest: Sequence[Message], start: int) -> int:
    """Start of the group that ends at boundary ``start`` (> 0)."""
    return next(a for a, b, _ in ref_groups(rest) if b == start)


def snapshot(messages: Sequence[Message]) -> list[bytes]:
    return [m.to_json() for m in messages]


# ---------------------------------------------------------------- strategies


@st.composite
def histories(draw: st.DrawFn, max_steps: int = 30) -> list[Message]:
    """A conversation from ``test_properties``, often behind a system prompt and a
    developer message (where apps put them; the conversations have them anywhere too)."""
    head = draw(st.lists(st.sampled_from(["system", "developer"]), max_size=2), label="head")
    messages = draw(conversations(max_steps=max_steps))
    prompts = [Message.system("You are terse.") if role == "system"
               else Message.developer("Answer in French.") for role in head]
    return prompts + messages


# ---------------------------------------------------------------- reducers


class FakeSummarizer:
    """A summarizer that records what it was given and says how much it saw."""

    def __init__(self) -> None:
        self.calls: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str:
        self.calls.append(list(messages))
        return f"{len(messages)} earlier messages, the last from {messages[-1].role}"


@st.composite
def deterministic_reducers(draw: st.DrawFn, keep_system: bool
                           ) -> TruncationReducer | MessageCountReducer | TokenBudgetReducer:
    kind = draw(st.sampled_from(["truncation", "count", "budget"]))
    if kind == "truncation":
        return TruncationReducer(draw(st.integers(1, 12)), draw(st.integers(0, 6)),
                                 keep_system=keep_system)
    if kind == "count":
        return MessageCountReducer(draw(st.integers(1, 15)), keep_system=keep_system)
    top = draw(st.integers(0, 500))
    return TokenBudgetReducer(top, draw(st.integers(0, top)), counter=APPROX,
                              keep_system=keep_system)


def rest_target(target_count: int, kept: Sequence[Message]) -> int:
    """Truncation and summarization count the kept messages within ``target_count``
    (Semantic Kernel's rule); this is what is left for the others."""
    return max(target_count - len(kept), 0)


def due(reducer: object, messages: Sequence[Message], keep: tuple[str, ...]) -> bool:
    """Whether a reducer has work to do, from its docstring."""
    kept, rest = split(messages, keep)
    if isinstance(reducer, TruncationReducer):
        return len(rest) > rest_target(reducer.target_count, kept) + reducer.threshold_count
    if isinstance(reducer, MessageCountReducer):
        return len(rest) > reducer.max_messages
    if isinstance(reducer, TokenBudgetReducer):  # over, and something can leave
        return cost(messages) + PRIMING > reducer.max_tokens and bool(rest)
    if isinstance(reducer, SummarizationReducer):
        plain = [m for m in rest if not is_summary(m)]
        t = reducer.truncation
        kept = [m for m in kept if not is_summary(m)]
        return len(plain) > rest_target(t.target_count, kept) + t.threshold_count
    raise AssertionError(reducer)


def check_common(out: list[Message], messages: Sequence[Message], keep: tuple[str, ...],
                 summary_keep: tuple[str, ...] | None = None) -> None:
    """Pair-safe, order kept, kept roles all there, summary (if any) right after the
    leading kept messages. ``summary_keep``: the roles a summary goes after."""
    plain = [m for m in out if not is_summary(m)]
    source = [m for m in messages if not is_summary(m)]
    assert_subsequence(plain, source)
    assert_pair_safe(plain, source)
    if keep:
        assert [m.id for m in out if m.role in KEPT_ROLES] == [
            m.id for m in messages if m.role in KEPT_ROLES]
    summaries = [i for i, m in enumerate(out) if is_summary(m)]
    assert len(summaries) <= 1, "summaries stacked instead of folded"
    if summaries:
        assert summary_keep is not None
        assert summaries[0] == leading_kept(plain, summary_keep)


# ---------------------------------------------------------------- truncation, count, budget


@REDUCE
@given(histories(max_steps=30), st.booleans(), st.data())
def test_truncation_reducer(messages: list[Message], keep_system: bool,
                            data: st.DataObject) -> None:
    target = data.draw(st.integers(1, 4) | st.integers(1, 12), label="target")
    threshold = data.draw(st.integers(0, 2) | st.integers(0, 6), label="threshold")
    reducer = TruncationReducer(target, threshold, keep_system=keep_system)
    keep = kept_roles(keep_system)
    kept, rest = split(messages, keep)
    before = snapshot(messages)
    out = reducer.reduce(messages)
    assert snapshot(messages) == before, "reduce changed its input"
    if len(messages) <= target + threshold:  # every message counts, kept ones too
        assert out is None
        return
    others = rest_target(target, kept)
    if len(rest) <= others + threshold:  # the kept messages alone are over it
        assert out is None
        return
    assert out is not None
    check_common(out, messages, keep)
    out_rest = [m for m in out if m.role not in keep]
    assert len(out_rest) <= others + threshold
    assert len(out) <= max(target, len(kept)) + threshold
    start = cut_start(rest, out_rest)
    # cut no further than the first group boundary at or after len(rest) - others
    assert start == 0 or len(rest) - group_before(rest, start) > others
    assert reducer.reduce(out) is None  # idempotent


@REDUCE
@given(histories(max_steps=30), st.booleans(), st.integers(1, 4) | st.integers(1, 15))
def test_message_count_reducer(messages: list[Message], keep_system: bool,
                               limit: int) -> None:
    reducer = MessageCountReducer(limit, keep_system=keep_system)
    keep = kept_roles(keep_system)
    _, rest = split(messages, keep)
    before = snapshot(messages)
    out = reducer.reduce(messages)
    assert snapshot(messages) == before, "reduce changed its input"
    if len(rest) <= limit:
        assert out is None
        return
    assert out is not None
    check_common(out, messages, keep)
    out_rest = [m for m in out if m.role not in keep]
    assert len(out_rest) <= limit
    start = cut_start(rest, out_rest)
    assert start == 0 or len(rest) - group_before(rest, start) > limit  # none cut needlessly
    assert reducer.reduce(out) is None


@REDUCE
@given(histories(max_steps=30), st.booleans(), st.data())
def test_token_budget_reducer(messages: list[Message], keep_system: bool,
                              data: st.DataObject) -> None:
    warm(messages)
    everything = cost(messages) + PRIMING
    top = data.draw(st.integers(0, everything + 20), label="max_tokens")
    low = data.draw(st.integers(0, top) | st.just(top), label="low_water_tokens")
    reducer = TokenBudgetReducer(top, low, counter=APPROX, keep_system=keep_system)
    keep = kept_roles(keep_system)
    kept, rest = split(messages, keep)
    before = snapshot(messages)
    out = reducer.reduce(messages)
    assert snapshot(messages) == before, "reduce changed its input"
    if everything <= top or not rest:  # under the budget, or nothing may leave
        assert out is None
        return
    assert out is not None
    check_common(out, messages, keep)
    _, out_rest = split(out, keep)
    floor = cost(kept) + PRIMING  # what cannot leave
    note(f"total={everything} max={top} low={low} floor={floor} out={total_tokens(out, APPROX)}")
    if floor <= low:
        assert total_tokens(out, APPROX) <= low
    else:
        assert out_rest == [], "over the low water with only the kept messages, yet kept more"
    if floor <= top:
        assert total_tokens(out, APPROX) <= top
    start = cut_start(rest, out_rest)
    if floor <= low and start > 0:  # the group before the cut did not fit the low water
        assert cost(rest[group_before(rest, start):]) > low - floor
    if floor <= top:
        assert reducer.reduce(out) is None  # idempotent once within the budget


@SLOW
@given(histories(max_steps=24), st.booleans())
def test_token_budget_every_low_water(messages: list[Message], keep_system: bool) -> None:
    """Sweep every low water mark on one history (max_tokens just under the total, so
    the reducer always runs): catches a cut one token off."""
    warm(messages)
    keep = kept_roles(keep_system)
    kept, rest = split(messages, keep)
    everything = cost(messages) + PRIMING
    floor = cost(kept) + PRIMING
    if not rest or everything < 1:
        return
    for low in range(0, everything):
        out = TokenBudgetReducer(everything - 1, low, counter=APPROX,
                                 keep_system=keep_system).reduce(messages)
        assert out is not None
        _, out_rest = split(out, keep)
        if floor > low:
            assert out_rest == []
            continue
        assert total_tokens(out, APPROX) <= low, low
        start = cut_start(rest, out_rest)
        assert start == 0 or cost(rest[group_before(rest, start):]) > low - floor, low


@SLOW
@given(histories(max_steps=30), st.booleans(), st.data())
def test_history_reduce_applies_the_reducer_and_marks_what_leaves(
    messages: list[Message], keep_system: bool, data: st.DataObject
) -> None:
    reducer = data.draw(deterministic_reducers(keep_system), label="reducer")
    warm(messages)
    history = History(messages, counter=APPROX)
    expected = reducer.reduce(list(messages))
    assert history.reduce(reducer) is (expected is not None)
    assert ids(history) == ids(messages if expected is None else expected)
    left = [m for m in messages if history.get(m.id) is None]
    assert all(m.kv_status == KVStatus.MARKED for m in left)
    # the history's own indexes agree with a fresh one built from what remains
    fresh = History(history.messages, counter=APPROX)
    assert ids(history.by_tokens(10**6, APPROX)) == ids(fresh.by_tokens(10**6, APPROX))


# ---------------------------------------------------------------- pipelines


@REDUCE
@given(histories(max_steps=30), st.booleans(), st.data())
def test_pipeline_is_the_stages_in_order(messages: list[Message], keep_system: bool,
                                         data: st.DataObject) -> None:
    stages = data.draw(st.lists(deterministic_reducers(keep_system), min_size=1, max_size=3),
                       label="stages")
    warm(messages)
    keep = kept_roles(keep_system)
    out = Pipeline(stages).reduce(messages)
    current: list[Message] = list(messages)
    changed = False
    for stage in stages:
        step = stage.reduce(current)
        assert (step is not None) == due(stage, current, keep)
        if step is not None:
            current, changed = step, True
    assert (out is not None) == changed
    if out is None:
        return
    assert ids(out) == ids(current)
    check_common(out, messages, keep)
    # a plain list is a pipeline too, also through History.reduce
    history = History(messages, counter=APPROX)
    assert history.reduce(list(stages)) is True
    assert ids(history) == ids(out)


@SLOW
@given(histories(max_steps=30), st.booleans(), st.data())
def test_pipeline_with_a_summarizer(messages: list[Message], keep_system: bool,
                                    data: st.DataObject) -> None:
    keep = kept_roles(keep_system)
    summarizer = SummarizationReducer(FakeSummarizer(), data.draw(st.integers(1, 10)),
                                      data.draw(st.integers(0, 4)), keep_system=keep_system)
    before = data.draw(st.lists(deterministic_reducers(keep_system), max_size=2))
    after = data.draw(st.lists(deterministic_reducers(keep_system), max_size=2))
    warm(messages)
    out = Pipeline([*before, summarizer, *after]).reduce(messages)
    if out is None:
        return
    check_common(out, messages, keep, summary_keep=keep)
    for m in out:
        if is_summary(m):
            assert len(set(summary_of(m))) == len(summary_of(m))
            assert not set(summary_of(m)) & set(ids(out))


# ---------------------------------------------------------------- summarization


@REDUCE
@given(histories(max_steps=30), st.booleans(), st.data())
def test_summarization_reducer(messages: list[Message], keep_system: bool,
                               data: st.DataObject) -> None:
    target = data.draw(st.integers(1, 4) | st.integers(1, 12), label="target")
    threshold = data.draw(st.integers(0, 2) | st.integers(0, 6), label="threshold")
    fake = FakeSummarizer()
    reducer = SummarizationReducer(fake, target, threshold, keep_system=keep_system)
    keep = kept_roles(keep_system)
    kept, rest = split(messages, keep)
    before = snapshot(messages)
    out = reducer.reduce(messages)
    assert snapshot(messages) == before, "reduce changed its input"
    if len(rest) <= rest_target(target, kept) + threshold:
        assert out is None and fake.calls == []
        return
    assert out is not None
    check_common(out, messages, keep, summary_keep=keep)
    (summary,) = [m for m in out if is_summary(m)]
    removed = [m for m in messages if m.id not in {x.id for x in out}]
    note(f"removed={ids(removed)} summary_of={summary_of(summary)}")
    assert summary_of(summary) == ids(removed)
    assert ids(fake.calls[-1]) == ids(removed)  # the summarizer saw what it replaces
    assert summary.text.endswith(fake(removed))
    plain_rest = [m for m in out if m.role not in keep and not is_summary(m)]
    assert len(plain_rest) <= rest_target(target, kept) + threshold
    assert reducer.reduce(out) is None  # the summary itself does not count


@SLOW
@given(histories(max_steps=40), st.booleans(), st.data())
def test_summaries_fold_across_repeated_reductions(messages: list[Message], keep_system: bool,
                                                   data: st.DataObject) -> None:
    fake = FakeSummarizer()
    target = data.draw(st.integers(1, 6), label="target")
    threshold = data.draw(st.integers(0, 3), label="threshold")
    reducer = SummarizationReducer(fake, target, threshold, keep_system=keep_system)
    keep = kept_roles(keep_system)
    history = History(counter=APPROX)
    added: list[str] = []
    i = 0
    while i < len(messages):
        size = data.draw(st.integers(1, 4), label="chunk")
        chunk = messages[i:i + size]
        i += size
        history.extend(chunk)
        added.extend(m.id for m in chunk if m.role not in keep)
        old = history.messages
        expect_change = due(reducer, old, keep)
        if data.draw(st.booleans(), label="async"):
            changed = asyncio.run(history.areduce(reducer))
        else:
            changed = history.reduce(reducer)
        assert changed is expect_change
        new = history.messages
        if not changed:
            assert new == old
            continue
        check_common(new, old, keep, summary_keep=keep)
        (summary,) = [m for m in new if is_summary(m)]
        earlier = [m for m in old if is_summary(m)]
        removed_now = [m for m in old if not is_summary(m) and history.get(m.id) is None]
        replaced = summary_of(summary)
        assert replaced == [x for e in earlier for x in summary_of(e)] + ids(removed_now)
        assert len(set(replaced)) == len(replaced), "an id listed twice"
        # folded: the summary lists every message that ever left
        assert sorted(replaced) == sorted(x for x in added if history.get(x) is None)
        assert ids(fake.calls[-1]) == ids(earlier) + ids(removed_now)
        assert all(m.kv_status == KVStatus.MARKED for m in removed_now + earlier)


FAILURES = ["raises", "empty", "blank", "none", "timeout"]


def failing(mode: str, release: threading.Event) -> Callable[[list[Message]], Any]:
    """A summarizer that fails in the way ``mode`` names (returning a non-text too)."""

    def summarize(messages: list[Message]) -> Any:
        summarize.calls += 1  # type: ignore[attr-defined]
        if mode == "raises":
            raise RuntimeError("model unavailable")
        if mode == "timeout":
            release.wait(10)
            return "too late"
        return {"empty": "", "blank": " \n\t", "none": None}[mode]

    summarize.calls = 0  # type: ignore[attr-defined]
    return summarize


async def _never(messages: list[Message]) -> str:
    await asyncio.sleep(30)
    return "too late"


@SLOW
@given(histories(max_steps=30), st.booleans(), st.sampled_from(FAILURES), st.data())
def test_a_failing_summarizer_changes_nothing(messages: list[Message], keep_system: bool,
                                              mode: str, data: st.DataObject) -> None:
    keep = kept_roles(keep_system)
    _, rest = split(messages, keep)
    target = data.draw(st.integers(1, max(1, len(rest))), label="target")
    threshold = data.draw(st.integers(0, 3), label="threshold")
    release = threading.Event()
    summarize = failing(mode, release)
    timeout = 0.05 if mode == "timeout" else 5.0
    reducer = SummarizationReducer(summarize, target, threshold, keep_system=keep_system,
                                   timeout=timeout)
    warm(messages)
    history = History(messages, counter=APPROX)
    saved = history.to_json()
    listed = snapshot(messages)
    try:
        if not due(reducer, messages, keep):
            assert reducer.reduce(messages) is None
            assert history.reduce(reducer) is False
            assert summarize.calls == 0  # type: ignore[attr-defined]
        else:
            with pytest.raises(SummarizationFailed):
                reducer.reduce(messages)
            with pytest.raises(SummarizationFailed):
                history.reduce(reducer)
            with pytest.raises(SummarizationFailed):
                history.reduce([TruncationReducer(10**6), reducer])  # inside a pipeline
            assert summarize.calls >= 1  # type: ignore[attr-defined]
            if mode == "timeout":  # the async path with a coroutine that never ends
                slow = SummarizationReducer(_never, target, threshold, keep_system=keep_system,
                                            timeout=timeout)
                with pytest.raises(SummarizationFailed):
                    asyncio.run(history.areduce(slow))
            else:
                with pytest.raises(SummarizationFailed):
                    asyncio.run(history.areduce(reducer))
    finally:
        release.set()
    assert history.to_json() == saved
    assert snapshot(messages) == listed
    assert [m.kv_status for m in history] == [m.kv_status for m in messages]


# ---------------------------------------------------------------- context window


def reset_kv(messages: Sequence[Message]) -> None:
    for m in messages:
        m.kv_status, m.kv_start, m.kv_size = KVStatus.LOADED, -1, -1


def copy_message(m: Message) -> Message:
    return Message.from_json(m.to_json())


class WindowModel:
    """What the window should do, turn after turn, from its docstrings: the live messages
    (never evicted), the kept ones, the pinned head, the newest group."""

    def __init__(self, window: ContextWindow) -> None:
        self.max_tokens = window.max_tokens
        self.low = window.low_water_tokens
        self.pin = window.pin_tokens
        self.keep = kept_roles(bool(window.keep_roles))
        self.evicted: set[str] = set()
        self.pending: set[str] = set()
        self.committed: set[str] = set()
        self.ever_pinned: set[str] = set()
        self.layout: list[tuple[str, int]] = []  # (id, size) of the last prompt

    def live(self, history: Sequence[Message]) -> list[Message]:
        return [m for m in history if m.id not in self.evicted]

    def pinned(self, rest: Sequence[Message]) -> set[str]:
        """The first groups whose tokens fit ``pin_tokens`` (orphan groups count but are
        never sent)."""
        out: set[str] = set()
        used = 0
        for a, b, ok in ref_groups(rest):
            size = cost(rest[a:b])
            if used + size > self.pin:
                break
            used += size
            if ok:
                out.update(m.id for m in rest[a:b])
        return out

    def reused(self, plan: WindowPlan) -> int:
        total = 0
        for (old_id, size), m in zip(self.layout, plan.messages, strict=False):
            if old_id != m.id:
                break
            total += size
        return total


def check_plan(model: WindowModel, history: History, live: list[Message],
               plan: WindowPlan) -> None:
    keep = model.keep
    kept, rest = split(live, keep)
    groups = ref_groups(rest)
    newest = [] if not groups or not groups[-1][2] else rest[groups[-1][0]:]
    pinned = model.pinned(rest)
    prompt = plan.messages
    note(f"plan={plan.message_ids} evicted={plan.evicted_ids}")
    # budget and layout
    assert plan.total_tokens == cost(prompt) + PRIMING <= model.max_tokens
    position = 0
    for m in prompt:
        assert (m.kv_start, m.kv_size, m.kv_status) == (
            position, cached_count(m, APPROX), KVStatus.LOADED)
        position += m.kv_size
    assert plan.reused_prefix_tokens == model.reused(plan)
    assert plan.new_tokens == plan.total_tokens - PRIMING - plan.reused_prefix_tokens
    assert plan.cache_breakpoint_id == (prompt[-1].id if prompt else None)
    # pair safety and order, against the whole history
    assert_subsequence(prompt, history)
    assert_pair_safe(prompt, history)
    # kept messages: all of them, in order
    if keep:
        assert [m.id for m in prompt if m.role in KEPT_ROLES] == [
            m.id for m in history if m.role in KEPT_ROLES]
    # evictions: only live messages leave, the prompt and the evicted cover what was live
    assert not model.evicted & set(plan.message_ids), "an evicted message came back"
    assert not set(plan.evicted_ids) & set(plan.message_ids)
    assert sorted(plan.evicted_ids + plan.message_ids) == sorted(ids(live))
    for m in history:
        if m.id in plan.evicted_ids:
            assert (m.kv_status, m.kv_start) == (KVStatus.MARKED, -1)
    # the newest group and the pinned head stay
    assert set(ids(newest)) <= set(plan.message_ids)
    if not pinned <= set(plan.message_ids):  # only to avoid an overflow
        head = [m for m in rest if m.id in pinned and m not in newest]
        assert cost(kept) + cost(head) + cost(newest) + PRIMING > model.max_tokens, (
            "a pinned head message left")
    orphans = {m.id for a, b, ok in groups if not ok for m in rest[a:b]}
    if cost(live) + PRIMING <= model.max_tokens:
        assert set(plan.evicted_ids) <= orphans, "evicted while under max_tokens"
    elif plan.total_tokens > model.low:  # then everything that may leave has left
        stays = pinned | set(ids(newest)) | {  # (a window may also keep once-pinned groups)
            m.id for a, b, _ in groups if any(x.id in model.ever_pinned for x in rest[a:b])
            for m in rest[a:b]}
        assert {m.id for m in prompt if m.role not in keep} <= stays


def check_overflow(model: WindowModel, live: list[Message], strict: bool) -> None:
    """``ContextOverflow`` only when what may not leave does not fit: the kept messages
    and the newest group (``strict``), or those and the pinned head (the weaker claim)."""
    kept, rest = split(live, model.keep)
    groups = ref_groups(rest)
    newest = [] if not groups or not groups[-1][2] else rest[groups[-1][0]:]
    alone = cost(kept) + cost(newest) + PRIMING
    head = [m for m in rest if m.id in model.pinned(rest) and m not in newest]
    note(f"overflow: kept+newest={alone} pinned head={cost(head)} max={model.max_tokens}")
    if strict:
        assert alone > model.max_tokens, "ContextOverflow although kept + newest group fit"
    else:
        assert alone + cost(head) > model.max_tokens, "ContextOverflow although all fit"


def check_sticky_pin(model: WindowModel, live: list[Message], plan: WindowPlan,
                     strict: bool) -> None:
    """A message once pinned stays in every later prompt, unless even the kept messages,
    the (once) pinned ones and the newest group together do not fit: then the pinned ones
    may go rather than overflow."""
    kept, rest = split(live, model.keep)
    model.ever_pinned |= model.pinned(rest)
    groups = ref_groups(rest)
    unsendable = {m.id for a, b, ok in groups if not ok for m in rest[a:b]}
    model.ever_pinned -= unsendable  # a stray result joined its group: it cannot be sent
    left = model.ever_pinned - set(plan.message_ids)
    if left and strict:
        newest = [] if not groups or not groups[-1][2] else rest[groups[-1][0]:]
        # keeping a pinned message means keeping its whole group, which may have grown
        head = [m for a, b, _ in groups[:-1] if any(x.id in model.ever_pinned for x in rest[a:b])
                for m in rest[a:b]]
        assert cost(kept) + cost(head) + cost(newest) + PRIMING > model.max_tokens, (
            "a once-pinned message left")
    model.ever_pinned -= left


def plans_agree(a: WindowPlan, b: WindowPlan) -> None:
    assert a.message_ids == b.message_ids
    assert [(m.kv_start, m.kv_size) for m in a.messages] == [
        (m.kv_start, m.kv_size) for m in b.messages]
    assert (a.reused_prefix_tokens, a.new_tokens, a.total_tokens, a.evicted_ids,
            a.cache_breakpoint_id) == (b.reused_prefix_tokens, b.new_tokens, b.total_tokens,
                                       b.evicted_ids, b.cache_breakpoint_id)


def plan_or_overflow(window: ContextWindow, history: History) -> WindowPlan | None:
    try:
        return window.plan(history)
    except ContextOverflow:
        return None


@st.composite
def windows(draw: st.DrawFn, total: int) -> ContextWindow:
    """A window, often a small one for the conversation (``total`` tokens) so that it
    evicts many times, with a pinned head from none to half the window."""
    top = draw(st.integers(20, max(20, total // 3)) | st.integers(20, 400), label="max_tokens")
    low = draw(st.none() | st.integers(0, top), label="low_water_tokens")
    pin = draw(st.none() | st.just(0) | st.integers(0, top // 2), label="pin_tokens")
    return ContextWindow(top, counter=APPROX, low_water_tokens=low,
                         keep_system=draw(st.booleans(), label="keep_system"), pin_tokens=pin)


def drive_window(messages: list[Message], data: st.DataObject, *,
                 strict_overflow: bool = False, sticky_pin: bool = False) -> None:
    """Grow a history a few messages at a time and plan every turn, checking each plan
    against ``WindowModel``; commit now and then; at one drawn turn save the window
    (``to_dict`` through JSON) and the history (``to_json``), restore both, and from then
    on run the copy in lockstep: every later plan must be the same."""
    reset_kv(messages)
    window = data.draw(windows(cost(messages) + PRIMING), label="window")
    model = WindowModel(window)
    history = History(counter=APPROX)
    mirror: tuple[ContextWindow, History] | None = None
    i = 0
    while i < len(messages):
        size = data.draw(st.integers(1, 3), label="chunk")
        chunk = messages[i:i + size]
        i += size
        copies = [copy_message(m) for m in chunk]
        history.extend(chunk)
        live = model.live(history)
        plan = plan_or_overflow(window, history)
        if mirror is not None:
            mirror[1].extend(copies)
            other = plan_or_overflow(mirror[0], mirror[1])
            assert (other is None) == (plan is None)
            if plan is not None and other is not None:
                plans_agree(plan, other)
        if plan is None:
            check_overflow(model, live, strict_overflow)
        else:
            check_plan(model, history, live, plan)
            check_sticky_pin(model, live, plan, strict=sticky_pin)
            model.evicted |= set(plan.evicted_ids)
            model.pending |= set(plan.evicted_ids)
            model.layout = [(m.id, m.kv_size) for m in plan.messages]
        assert set(window.pending_ids) == model.pending
        for m in history:
            if m.id in model.committed:
                assert m.kv_status == KVStatus.UNLOADED
            elif m.id in model.pending:
                assert m.kv_status == KVStatus.MARKED
        if data.draw(st.booleans(), label="commit"):
            assert set(window.commit()) == model.pending
            if mirror is not None:
                assert set(mirror[0].commit()) == model.pending
            for m in history:
                if m.id in model.pending:
                    assert m.kv_status == KVStatus.UNLOADED
            model.committed |= model.pending
            model.pending = set()
            assert window.pending_ids == []
        if mirror is None and data.draw(st.integers(0, 4), label="save") == 0:
            state = json.loads(json.dumps(window.to_dict()))
            restored = History.from_json(history.to_json(), counter=APPROX)
            mirror = (ContextWindow.from_dict(state, restored, counter=APPROX), restored)


@WINDOW
@given(histories(max_steps=36), st.data())
def test_context_window_turn_after_turn(messages: list[Message], data: st.DataObject) -> None:
    """Budget, contiguous KV positions, the reused prefix, pair safety, order, kept
    messages, evictions marked then unloaded and never back, the pinned head of each
    turn, the newest group, hysteresis, and the to_dict/from_dict round trip."""
    drive_window(messages, data)


@WINDOW
@given(histories(max_steps=36), st.data())
def test_context_window_overflows_only_when_kept_and_newest_do_not_fit(
    messages: list[Message], data: st.DataObject
) -> None:
    drive_window(messages, data, strict_overflow=True)


@WINDOW
@given(histories(max_steps=36), st.data())
def test_context_window_pinned_messages_never_leave(
    messages: list[Message], data: st.DataObject
) -> None:
    """A message once in the pinned head stays in every later prompt."""
    drive_window(messages, data, sticky_pin=True)


def test_window_model_catches_a_wrong_prefix() -> None:
    """The reference for ``reused_prefix_tokens`` is not the library's own bookkeeping:
    a prompt that changes in the middle reuses only the part before the change."""
    a, b, c = Message.user("one " * 5), Message.assistant("two " * 5), Message.user("three")
    window = ContextWindow(10_000, counter=APPROX)
    model = WindowModel(window)
    model.layout = [(a.id, cost([a])), (c.id, cost([c]))]
    plan = window.plan([a, b, c])
    assert model.reused(plan) == cost([a])
    assert msgspec.json.decode(msgspec.json.encode(plan), type=WindowPlan).message_ids == ids(
        [a, b, c])


# ---------------------------------------------------------------- regressions (minimal repros)
# Each is the shrunk form of a property above failing, kept as a fast deterministic test.


def test_truncation_when_the_newest_group_is_longer_than_the_target() -> None:
    """A tool round trip at the end, target 1: the first boundary at or after the target
    is the end of the list, and the cut must not index past it."""
    messages = [Message.user("q"), Message.assistant("", [{"id": "a", "name": "f"}]),
                Message.tool_result("a", "r")]
    for reducer in (TruncationReducer(1), SummarizationReducer(FakeSummarizer(), 1)):
        out = reducer.reduce(messages)
        assert out is not None
        assert_pair_safe([m for m in out if not is_summary(m)], messages)


def test_summary_lists_the_messages_its_cut_drops_with_an_orphan_group() -> None:
    """A stray result inside the newest call group makes the group unsendable: it leaves
    with the cut, so the summary must cover it (be given it, and list its ids)."""
    fake = FakeSummarizer()
    stray = Message.tool_result("zzz", "stray")
    messages = [Message.user("old"), Message.assistant("old answer"), Message.user("q"),
                Message.assistant("", [{"id": "c", "name": "f"}]), stray,
                Message.tool_result("c", "42")]
    out = SummarizationReducer(fake, 3).reduce(messages)
    assert out is not None
    (summary,) = out
    assert summary_of(summary) == ids(messages)
    assert ids(fake.calls[-1]) == ids(messages)


def test_token_budget_with_only_kept_messages_over_budget_changes_nothing() -> None:
    """Nothing can leave when the system prompt alone is over ``max_tokens``: ``reduce``
    returns None, and ``History.reduce`` reports no change."""
    big = Message.system("x" * 400)
    reducer = TokenBudgetReducer(50, counter=APPROX)
    assert reducer.reduce([big, Message.user("hi")]) == [big]
    assert reducer.reduce([big]) is None
    assert History([big], counter=APPROX).reduce(reducer) is False


def test_window_gives_up_the_pinned_head_before_overflowing() -> None:
    """System 7 + newest 36 + priming 3 = 46 tokens fit a 60-token window; only the
    pinned opening (17) does not fit with them."""
    history = History([Message.system("be brief"), Message.user("the task: " + "x" * 40)],
                      counter=APPROX)
    window = ContextWindow(60, counter=APPROX, pin_tokens=30)
    window.plan(history)
    history.add(Message.assistant("y" * 120))
    plan = window.plan(history)
    assert plan.total_tokens <= 60
    assert plan.message_ids == [history[0].id, history[2].id]


def test_window_keeps_a_pinned_call_when_its_result_arrives() -> None:
    """The opening user message and a tool call fit ``pin_tokens``; the result joins the
    call's group, which then no longer fits, and the pinned call is evicted."""
    history = History([Message.user("task " * 4), Message.assistant("", [{"id": "c",
                                                                          "name": "f"}])],
                      counter=APPROX)
    window = ContextWindow(100, counter=APPROX, low_water_tokens=50, pin_tokens=25)
    pinned = window.plan(history).message_ids
    history.add_tool_result("c", "result " * 3)
    for i in range(12):
        history.add_user(f"question {i} " * 3)
        plan = window.plan(history)
        assert set(pinned) <= set(plan.message_ids), f"turn {i}"
