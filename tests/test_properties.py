"""Property tests for the invariants of docs/architecture.md as they apply to ``History`` and
``chathistory.groups``: dedup by id (1), order (2), pair safety (3), system and
developer messages kept (4), token budgets (5) and the codec round trip.

The references below (groups, pair safety, the selectors) are written from the
docstrings and share no code with ``groups.py`` or ``history.py``: each is the
slow, obvious version of what the library does fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import pairwise

import msgspec
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from chathistory import (
    Attachment,
    DuplicateMessage,
    History,
    IdReused,
    ImagePart,
    InvalidMessage,
    KVStatus,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from chathistory.groups import Groups, group_spans
from chathistory.stores import MemoryStore
from chathistory.tokens import ApproxCounter, TokenCounter, cached_count, get_counter

APPROX = ApproxCounter()
KEPT_ROLES = ("system", "developer")

FAST = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EXACT = settings(max_examples=12, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------- strategies

texts = st.text(min_size=1, max_size=60).filter(lambda s: s.strip() != "")
names = st.none() | st.text(min_size=1, max_size=8)
tool_names = st.sampled_from(["search", "get_weather", "run_sql", "读取文件"])
arguments = st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=10), max_size=3)
custom_roles = st.sampled_from(["mcp_response", "agent", "function"])
result_contents: st.SearchStrategy[str | list[TextPart]] = st.text(max_size=40) | st.lists(
    texts, min_size=1, max_size=2).map(lambda ts: [TextPart(text=t) for t in ts])

ACTIONS = (
    ["user"] * 3 + ["assistant"] * 2 + ["calls"] * 3 + ["results"] * 4
    + ["system", "developer", "custom", "orphan", "reasoning", "late_result"]
)


def _reasoning_only(draw: st.DrawFn) -> Message:
    part = draw(st.sampled_from(["text", "signature", "data"]))
    if part == "text":
        reasoning = Reasoning(text=draw(texts))
    elif part == "signature":
        reasoning = Reasoning(text=draw(texts), signature="sig-" + draw(st.text(max_size=8)))
    else:
        reasoning = Reasoning(data="opaque-" + draw(st.text(max_size=8)))
    return Message(role="assistant", parts=[reasoning]).validate()


def _results(draw: st.DrawFn, call_ids: list[str]) -> list[Message]:
    """Results for ``call_ids``: one ``tool`` message each, one custom-role message each,
    or all of them as parts of one message (Anthropic style)."""
    style = draw(st.sampled_from(["tool", "custom", "anthropic"]))
    if style == "tool":
        return [Message.tool_result(cid, draw(result_contents), draw(st.booleans()),
                                    name=draw(st.none() | tool_names)) for cid in call_ids]
    parts: list[ToolResult] = [
        ToolResult(call_id=cid, content=draw(result_contents), is_error=draw(st.booleans()))
        for cid in call_ids
    ]
    if style == "custom":
        role = draw(custom_roles)
        return [Message(role=role, parts=[p]).validate() for p in parts]
    extra: list[TextPart] = [TextPart(text=draw(texts))] if draw(st.booleans()) else []
    return [Message(role="user", parts=[*parts, *extra]).validate()]


def _user(draw: st.DrawFn) -> Message:
    extras: list[Attachment | ImagePart] = []
    kind = draw(st.sampled_from(["plain", "plain", "plain", "file", "image_url"]))
    if kind == "file":
        data = draw(texts).encode()
        extras.append(Attachment.from_bytes(data, name="notes.txt", mime_type="text/plain"))
    elif kind == "image_url":
        extras.append(ImagePart(url="https://example.com/cat.png", detail="low"))
    return Message.user(draw(texts), *extras, name=draw(names))


@st.composite
def conversations(draw: st.DrawFn, max_steps: int = 24) -> list[Message]:
    """A random valid conversation: any mix of system, developer, user, assistant and
    custom-role text; parallel tool calls (sometimes after a reasoning-only message)
    whose results arrive later, interleaved, several per message or never; late
    duplicate results; orphan results; KV fields and cached counts on some messages."""
    steps = draw(st.lists(st.sampled_from(ACTIONS), max_size=max_steps))
    messages: list[Message] = []
    pending: list[str] = []  # calls made and not answered yet
    answered: list[str] = []
    next_call = 0
    for number, step in enumerate(steps, 1):
        if step == "system":
            messages.append(Message.system(draw(texts)))
        elif step == "developer":
            messages.append(Message.developer(draw(texts)))
        elif step == "user":
            messages.append(_user(draw))
        elif step == "assistant":
            messages.append(Message.assistant(draw(texts), name=draw(names)))
        elif step == "custom":
            messages.append(Message(role=draw(custom_roles), name=draw(names),
                                    parts=[TextPart(text=draw(texts))]).validate())
        elif step == "reasoning":
            # reasoning before a text answer, or a turn cut off after its reasoning
            messages.append(_reasoning_only(draw))
            if number < len(steps):
                messages.append(Message.assistant(draw(texts)))
        elif step == "calls":
            if draw(st.booleans()):
                messages.append(_reasoning_only(draw))
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                next_call += 1
                args = draw(arguments)
                calls.append({"id": f"call_{next_call}", "name": draw(tool_names),
                              "arguments": json.dumps(args) if draw(st.booleans()) else args})
            text = draw(st.just("") | texts)
            messages.append(Message.assistant(text, tool_calls=calls, name=draw(names)))
            pending.extend(c["id"] for c in calls)
        elif step == "results" and pending:
            chosen = draw(st.lists(st.sampled_from(pending), min_size=1,
                                   max_size=len(pending), unique=True))
            messages.extend(_results(draw, chosen))
            for cid in chosen:
                pending.remove(cid)
                answered.append(cid)
        elif step == "late_result" and answered:
            messages.extend(_results(draw, [draw(st.sampled_from(answered))]))
        elif step == "orphan":
            messages.append(Message.tool_result(f"orphan_{len(messages)}", draw(texts)))
    for message in messages:
        if draw(st.integers(0, 4)) == 0:
            message.kv_size = draw(st.integers(0, 5000))
            message.kv_start = draw(st.integers(-1, 100_000))
            message.kv_status = draw(st.sampled_from(KVStatus))
        if draw(st.integers(0, 5)) == 0:
            message.token_counts = {"someone-else": draw(st.integers(0, 10_000))}
    return messages


nonempty_conversations = conversations().filter(bool)


# ---------------------------------------------------------------- references


def _calls(message: Message) -> list[str]:
    return [p.id for p in message.parts if isinstance(p, ToolCall)]


def _result_ids(message: Message) -> list[str]:
    return [p.call_id for p in message.parts if isinstance(p, ToolResult)]


def _reasoning_only_ref(message: Message) -> bool:
    return bool(message.parts) and all(isinstance(p, Reasoning) for p in message.parts)


def orphan_positions(messages: Sequence[Message]) -> set[int]:
    """Positions of messages with a result whose call is in no earlier message."""
    return {i for i, m in enumerate(messages)
            if any(all(c not in _calls(earlier) for earlier in messages[:i])
                   for c in _result_ids(m))}


def ref_groups(messages: Sequence[Message]) -> list[tuple[int, int, bool]]:
    """Atomic groups as ``(start, end, sendable)``: merge every span that must stay
    together (a call to each of its later results; reasoning-only to the next
    message), then mark the groups holding a result with no earlier call."""
    n = len(messages)
    spans = [(i, i) for i in range(n)]
    orphans: set[int] = set()
    for i, message in enumerate(messages):
        for call_id in _result_ids(message):
            callers = [j for j in range(i) if call_id in _calls(messages[j])]
            if callers:
                spans.append((callers[-1], i))
            else:
                orphans.add(i)
        if _reasoning_only_ref(message) and i + 1 < n:
            spans.append((i, i + 1))
    merged: list[list[int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [(a, b + 1, not any(a <= k <= b for k in orphans)) for a, b in merged]


def pair_safety_violations(selection: Sequence[Message], full: Sequence[Message]) -> list[str]:
    """Why ``selection`` is not a pair-safe, ordered selection of ``full`` (empty: it is).
    A selected message is one of ``full`` or an equal copy (History's selectors copy)."""
    position = {m.id: i for i, m in enumerate(full)}
    problems: list[str] = []
    index: list[int] = []
    for m in selection:
        i = position.get(m.id)
        if i is None or (full[i] is not m and full[i] != m):
            return [f"{m.id} is not a message of the history"]
        index.append(i)
    for a, b in pairwise(index):
        if a >= b:
            problems.append(f"out of order or repeated: {a} then {b}")
    chosen = set(index)
    calls_so_far: set[str] = set()
    for k, i in enumerate(index):
        message = full[i]
        for call_id in _result_ids(message):
            if call_id not in calls_so_far:
                problems.append(f"result for {call_id} at {i} without its call before it")
        for call_id in _calls(message):
            calls_so_far.add(call_id)
            for later in range(i + 1, len(full)):
                if call_id in _result_ids(full[later]) and later not in chosen:
                    problems.append(f"call {call_id} at {i} without its result at {later}")
        if _reasoning_only_ref(message) and i + 1 < len(full) and (
            k + 1 >= len(index) or index[k + 1] != i + 1
        ):
            problems.append(f"reasoning at {i} separated from message {i + 1}")
        if i > 0 and _reasoning_only_ref(full[i - 1]) and (k == 0 or index[k - 1] != i - 1):
            problems.append(f"message {i} separated from the reasoning before it")
    return problems


def is_pair_safe(selection: Sequence[Message], full: Sequence[Message]) -> bool:
    return not pair_safety_violations(selection, full)


def assert_pair_safe(selection: Sequence[Message], full: Sequence[Message]) -> None:
    problems = pair_safety_violations(selection, full)
    assert not problems, problems


def ref_range(messages: Sequence[Message], from_end: int, to_end: int) -> list[Message]:
    """``range``: the sendable groups that touch the asked positions (widening)."""
    n = len(messages)
    low, high = max(0, n - from_end), max(0, n - to_end)
    if low >= high:
        return []
    return [messages[i] for s, e, ok in ref_groups(messages) if ok and s < high and e > low
            for i in range(s, e)]


def ref_by_tokens(messages: Sequence[Message], max_tokens: int, counter: TokenCounter,
                  keep_system: bool) -> list[Message]:
    """``by_tokens`` from its docstring: kept messages are all in and paid up front; then
    walk back whole groups from the newest, skip orphan groups, stop at the first that
    does not fit; the result in history order."""
    cost = [cached_count(m, counter) for m in messages]
    kept = [i for i, m in enumerate(messages) if m.role in KEPT_ROLES] if keep_system else []
    left = max_tokens - counter.priming_tokens - sum(cost[i] for i in kept)
    if left < 0:
        return []
    chosen: list[int] = []
    for start, end, sendable in reversed(ref_groups(messages)):
        if not sendable:
            continue
        group_cost = sum(cost[i] for i in range(start, end) if i not in kept)
        if group_cost > left:
            break
        left -= group_cost
        chosen[:0] = range(start, end)
    return [messages[i] for i in sorted(set(kept) | set(chosen))]


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


def total_tokens(selection: Sequence[Message], counter: TokenCounter) -> int:
    return sum(cached_count(m, counter) for m in selection) + counter.priming_tokens


def _snapshot(history: History) -> tuple[object, ...]:
    budget = total_tokens(history, APPROX)
    return (ids(history), [id(m) for m in history], history.to_json(),
            ids(history.by_tokens(budget, APPROX)), ids(history.recent(len(history) + 1)))


# ---------------------------------------------------------------- the references themselves


def test_references_on_a_known_conversation() -> None:
    """The references agree with a hand-checked conversation (so they can fail)."""
    system = Message.system("be brief")
    user = Message.user("weather?")
    thinking = Message(role="assistant", parts=[Reasoning(text="two lookups")])
    calls = Message.assistant(tool_calls=[{"id": "a", "name": "w", "arguments": {}},
                                          {"id": "b", "name": "w", "arguments": {}}])
    result_a = Message.tool_result("a", "sunny")
    aside = Message.user("still there?")
    result_b = Message.tool_result("b", "rain")
    orphan = Message.tool_result("zzz", "lost")
    last = Message.assistant("done")
    full = [system, user, thinking, calls, result_a, aside, result_b, orphan, last]
    assert ref_groups(full) == [(0, 1, True), (1, 2, True), (2, 7, True), (7, 8, False),
                                (8, 9, True)]
    assert is_pair_safe([user, last], full)
    assert not is_pair_safe([calls, result_a, aside, result_b], full)  # reasoning left behind
    assert not is_pair_safe([thinking, calls, result_a, aside], full)  # half the parallel call
    assert not is_pair_safe([result_b, last], full)
    assert not is_pair_safe([orphan], full) and not is_pair_safe([last, user], full)
    assert ids(ref_range(full, 3, 1)) == ids(full[2:7])
    assert ids(ref_range(full, 2, 0)) == ids([last])
    everything = total_tokens(full, APPROX)
    assert ids(ref_by_tokens(full, everything, APPROX, False)) == ids([*full[:7], last])
    last_two_groups = total_tokens([*full[2:7], last], APPROX)
    assert ids(ref_by_tokens(full, last_two_groups, APPROX, False)) == ids([*full[2:7], last])
    assert ids(ref_by_tokens(full, last_two_groups, APPROX, True)) == ids([system, last])
    assert ref_by_tokens(full, 5, APPROX, True) == []


# ---------------------------------------------------------------- groups


@FAST
@given(conversations())
def test_group_spans_match_reference(messages: list[Message]) -> None:
    assert group_spans(messages) == ref_groups(messages)


@FAST
@given(nonempty_conversations, st.data())
def test_widen_and_narrow_are_the_aligned_hull_and_core(messages: list[Message],
                                                        data: st.DataObject) -> None:
    groups = Groups.of(messages)
    n = len(messages)
    boundaries = sorted({0, n} | {s for s, _, _ in ref_groups(messages)})
    assert [k for k in range(n + 1) if groups.boundary_ok(k)] == boundaries
    start = data.draw(st.integers(0, n), label="start")
    end = data.draw(st.integers(start, n), label="end")
    if start < end:
        assert groups.widen(start, end) == (max(b for b in boundaries if b <= start),
                                            min(b for b in boundaries if b >= end))
    core_start = min(b for b in boundaries if b >= start)
    core_end = max(b for b in boundaries if b <= end)
    got = groups.narrow(start, end)
    if core_start < core_end:
        assert got == (core_start, core_end)
    else:
        assert got[0] == got[1] and start <= got[0] <= end


@FAST
@given(conversations(), st.data())
def test_groups_continued_after_a_stored_prefix_agree_with_the_whole(
    messages: list[Message], data: st.DataObject
) -> None:
    """What a store does on append: continue the groups of a stored prefix from its
    calls by position and whether it ended in reasoning, then clear the prefix's
    boundaries from ``clear_from`` on. The result is the grouping of the whole."""
    k = data.draw(st.integers(0, len(messages)), label="split")
    whole = ref_groups(messages)
    starts = {s for s, _, _ in whole}
    orphans = orphan_positions(messages)
    head = Groups.of(messages[:k])
    earlier = {call_id: pos for pos, m in enumerate(messages[:k]) for call_id in _calls(m)}
    tail = Groups(earlier_calls=earlier, prev_reasoning_only=head.ends_reasoning_only)
    for m in messages[k:]:
        tail.append(m)
    for j in range(len(messages) - k):
        assert tail.starts_group(j) == (k + j in starts), j
        assert tail.is_orphan(j) == (k + j in orphans), j
    cleared = len(messages) if tail.clear_from is None else tail.clear_from
    for b in range(1, k):
        assert (head.boundary_ok(b) and b < cleared) == (b in starts), b
    if messages:
        assert tail.ends_reasoning_only == _reasoning_only_ref(messages[-1])


# ---------------------------------------------------------------- count selectors


@FAST
@given(conversations(), st.integers(0, 30))
def test_recent_is_the_widened_tail(messages: list[Message], n: int) -> None:
    history = History(messages, counter=APPROX)
    got = history.recent(n)
    assert_pair_safe(got, messages)
    assert ids(got) == ids(ref_range(messages, n, 0))
    # widening: every sendable message among the newest n is there
    tail = {m.id for m in messages[max(0, len(messages) - n):] if n}
    sendable = {messages[i].id for s, e, ok in ref_groups(messages) if ok for i in range(s, e)}
    assert tail & sendable <= set(ids(got))


@FAST
@given(conversations(), st.data())
def test_range_is_the_widened_window(messages: list[Message], data: st.DataObject) -> None:
    history = History(messages, counter=APPROX)
    to_end = data.draw(st.integers(0, len(messages) + 2), label="to_end")
    from_end = data.draw(st.integers(to_end + 1, len(messages) + 4), label="from_end")
    got = history.range(from_end, to_end)
    assert_pair_safe(got, messages)
    assert ids(got) == ids(ref_range(messages, from_end, to_end))


def test_range_rejects_bad_positions() -> None:
    history = History([Message.user("hi")], counter=APPROX)
    for from_end, to_end in [(2, 2), (1, 3), (3, -1)]:
        with pytest.raises(ValueError):
            history.range(from_end, to_end)
    with pytest.raises(ValueError):
        history.recent(-1)


# ---------------------------------------------------------------- by_tokens


def _check_by_tokens(messages: list[Message], history: History, budget: int,
                     counter: TokenCounter, keep_system: bool) -> None:
    got = history.by_tokens(budget, counter, keep_system=keep_system)
    note(f"budget={budget} keep_system={keep_system} got={ids(got)}")
    if got:
        assert total_tokens(got, counter) <= budget
    assert ids(got) == ids(ref_by_tokens(messages, budget, counter, keep_system))
    assert_pair_safe(got, messages)
    if keep_system:
        kept = [m for m in messages if m.role in KEPT_ROLES]
        if total_tokens(kept, counter) <= budget:
            assert {m.id for m in kept} <= set(ids(got))
        else:
            assert got == []


@FAST
@given(conversations(), st.data(), st.booleans())
def test_by_tokens_fits_is_pair_safe_and_maximal(messages: list[Message], data: st.DataObject,
                                                 keep_system: bool) -> None:
    history = History(messages, counter=APPROX)
    budget = data.draw(st.integers(0, total_tokens(messages, APPROX) + 10), label="budget")
    _check_by_tokens(messages, history, budget, APPROX, keep_system)


@FEW
@given(conversations())
def test_by_tokens_every_budget(messages: list[Message]) -> None:
    """Sweep all budgets on one history: catches a boundary one token off."""
    history = History(messages, counter=APPROX)
    top = total_tokens(messages, APPROX) + 2
    for budget in range(0, top, max(1, top // 60)):
        for keep_system in (False, True):
            _check_by_tokens(messages, history, budget, APPROX, keep_system)


@EXACT
@given(conversations(max_steps=14), st.data(), st.booleans())
def test_by_tokens_with_the_exact_default_counter(messages: list[Message], data: st.DataObject,
                                                  keep_system: bool) -> None:
    history = History(messages)  # o200k_base
    exact = get_counter("o200k_base")
    assert history.counter.name == exact.name
    budget = data.draw(st.integers(0, total_tokens(messages, exact) + 10), label="budget")
    got = history.by_tokens(budget, keep_system=keep_system)
    assert ids(got) == ids(history.by_tokens(budget, exact, keep_system=keep_system))
    _check_by_tokens(messages, history, budget, exact, keep_system)
    for m in messages:
        assert m.token_counts is not None
        assert m.token_counts[exact.name] == exact.count_message(m)


@FAST
@given(conversations(), st.data())
def test_selectors_return_new_lists(messages: list[Message], data: st.DataObject) -> None:
    history = History(messages, counter=APPROX)
    before = _snapshot(history)
    n = data.draw(st.integers(0, len(messages) + 2), label="n")
    budget = data.draw(st.integers(0, total_tokens(messages, APPROX)), label="budget")
    for selection in (history.recent(n), history.range(n + 1, 0),
                      history.by_tokens(budget, APPROX),
                      history.by_tokens(budget, APPROX, keep_system=True), history.messages):
        selection.append(Message.user("intruder"))
        selection.reverse()
        del selection[: len(selection) // 2]
    assert _snapshot(history) == before
    assert ids(history) == ids(messages)
    # the selected messages themselves are safe to transform (History.messages is not
    # a selector: it gives the stored messages, as iteration does)
    last = [m for m in (history.last_user(), history.last_assistant()) if m is not None]
    for selection in (history.recent(n), history.range(n + 1, 0), last,
                      history.by_tokens(budget, APPROX, keep_system=True)):
        for message in selection:
            message.role = data.draw(st.sampled_from(["user", "system", "agent"]), label="role")
            message.metadata.setdefault("seen", []).append(1)
            for value in message.provider_metadata.values():
                if isinstance(value, dict):
                    value["touched"] = True
            message.parts[:] = [TextPart(text="rewritten")]
            if message.token_counts:
                message.token_counts.clear()
    assert _snapshot(history) == before


# ---------------------------------------------------------------- dedup (invariant 1)


@FAST
@given(nonempty_conversations, st.data())
def test_adding_a_present_id_changes_nothing(messages: list[Message],
                                             data: st.DataObject) -> None:
    history = History(messages, counter=APPROX)
    before = _snapshot(history)
    target = data.draw(st.sampled_from(messages), label="target")
    retries = [
        target,  # the same object again
        Message.from_json(target.to_json()),  # a retry that went over the wire
        msgspec.structs.replace(target, parts=[TextPart(text="changed")], role="user"),
    ]
    for retry in retries:
        assert history.add(retry) is False
    assert history.extend(retries) == 0
    assert history.extend(list(messages) * 2) == 0
    assert _snapshot(history) == before
    assert history.get(target.id) is target


@FAST
@given(nonempty_conversations, st.data())
def test_a_store_takes_a_message_sent_again_and_refuses_other_content(
        messages: list[Message], data: st.DataObject) -> None:
    """A store's append is a retry for a message sent again as the wire makes it (its
    JSON, without ``created_at``, with the store's token counts and statuses), and
    refuses the message with other content under its id (``IdReused``); ``History``
    keeps its list semantics (above: a present id is a no-op)."""
    store = MemoryStore(counter=APPROX)
    store.create_session("s")
    assert store.append("s", messages) == 1
    stored = [store.get("s", m.id) for m in messages]  # (a read leaves orphans out)
    resent = []
    for m in stored:
        wire = json.loads(m.to_json())
        wire.pop("created_at")
        resent.append(Message.from_dict(wire))
    assert store.append("s", data.draw(st.permutations(resent), label="order")) == 1
    assert store.append("s", [*messages, *stored]) == 1
    target = data.draw(st.sampled_from(messages), label="target")
    other = msgspec.structs.replace(target, metadata={**target.metadata, "other": True})
    with pytest.raises(IdReused) as caught:
        store.append("s", [Message.user("new"), other])
    assert (caught.value.message_id, caught.value.field) == (target.id, "metadata")
    assert store.get_session("s").version == 1 and store.count("s") == len(messages)


@FAST
@given(conversations(), conversations(max_steps=8).filter(bool), st.data())
def test_extend_with_repeated_ids_adds_each_once(old: list[Message], new: list[Message],
                                                 data: st.DataObject) -> None:
    history = History(old, counter=APPROX)
    batch = data.draw(st.permutations(old + new + new[:2]), label="batch")
    # a repeat in the batch is a retry: the first occurrence of each new id wins
    assert history.extend(batch) == len(new)
    first_new = [m for m in batch if m in new]
    expected = ids(old) + list(dict.fromkeys(ids(first_new)))
    assert ids(history) == expected
    assert history.extend(batch) == 0
    assert ids(history) == expected
    assert len(set(ids(history))) == len(history)
    for i, m in enumerate(history):
        assert history.index_of(m.id) == i
    assert ids(history.by_tokens(10**9, APPROX)) == ids(History(history.messages,
                                                                counter=APPROX).by_tokens(10**9))


def _invalid_messages() -> list[Message]:
    return [
        Message(role="user", parts=[TextPart(text="  \n")]),
        Message(role=" ", parts=[TextPart(text="hi")]),
        Message(role="user", name="", parts=[TextPart(text="hi")]),
        Message(role="assistant", parts=[ToolCall(id="", name="f")]),
        Message(role="tool", parts=[ToolResult(call_id="", content="x")]),
        Message(role="assistant", parts=[]),
    ]


@FAST
@given(conversations(), conversations(max_steps=8), st.data())
def test_extend_with_one_invalid_message_adds_nothing(old: list[Message], new: list[Message],
                                                      data: st.DataObject) -> None:
    history = History(old, counter=APPROX)
    before = _snapshot(history)
    bad = data.draw(st.sampled_from(_invalid_messages()), label="bad")
    at = data.draw(st.integers(0, len(new)), label="at")
    batch = [*new[:at], bad, *new[at:]]
    with pytest.raises(InvalidMessage) as info:
        history.extend(batch)
    assert info.value.path.startswith(f"$[{at}]")
    assert _snapshot(history) == before
    with pytest.raises(InvalidMessage):
        history.add(bad)
    with pytest.raises(InvalidMessage):
        history.replace(batch)
    assert _snapshot(history) == before


# ---------------------------------------------------------------- codec


def _warm(messages: Sequence[Message]) -> None:
    for m in messages:
        cached_count(m, APPROX)


@FAST
@given(conversations(), st.dictionaries(st.text(max_size=5), st.integers() | st.text(),
                                        max_size=2))
def test_history_round_trips_through_json_and_dict(messages: list[Message],
                                                   metadata: dict[str, object]) -> None:
    _warm(messages[::2])  # some messages carry cached counts, some do not
    history = History(messages, counter=APPROX, metadata=metadata)
    for copy in (History.from_json(history.to_json(), counter=APPROX),
                 History.from_dict(history.to_dict(), counter=APPROX),
                 History.from_dict(json.loads(json.dumps(history.to_dict())), counter=APPROX)):
        assert copy == history
        assert copy.metadata == history.metadata
        assert ids(copy) == ids(messages)
        for mine, theirs in zip(history, copy, strict=True):
            assert theirs == mine
            assert (theirs.kv_size, theirs.kv_start, theirs.kv_status) == (
                mine.kv_size, mine.kv_start, mine.kv_status)
            assert type(theirs.kv_status) is KVStatus
            assert theirs.token_counts == mine.token_counts
            assert theirs.created_at == mine.created_at
        assert copy.to_json() == history.to_json()


@FAST
@given(conversations())
def test_messages_round_trip_one_by_one(messages: list[Message]) -> None:
    _warm(messages[1::2])
    for m in messages:
        for copy in (Message.from_json(m.to_json()), Message.from_dict(m.to_dict()),
                     Message.from_dict(json.loads(json.dumps(m.to_dict())))):
            assert copy == m
            assert type(copy.kv_status) is KVStatus
            assert copy.token_counts == m.token_counts


@FEW
@given(conversations())
def test_restored_history_selects_without_retokenizing(messages: list[Message]) -> None:
    history = History(messages, counter=APPROX)
    budget = total_tokens(messages, APPROX) // 2
    selected = ids(history.by_tokens(budget, APPROX, keep_system=True))
    restored = History.from_json(history.to_json(), counter=APPROX)
    for m in restored:
        assert m.token_counts is not None and APPROX.name in m.token_counts
    assert ids(restored.by_tokens(budget, APPROX, keep_system=True)) == selected


# ---------------------------------------------------------------- removal


OPERATIONS = st.lists(st.sampled_from(["pop_last", "pop_at", "replace", "clear", "add",
                                       "select"]), min_size=1, max_size=6)


@FAST
@given(conversations(), conversations(max_steps=6), OPERATIONS, st.data())
def test_pop_replace_clear_agree_with_a_fresh_history(
    messages: list[Message], extra: list[Message], operations: list[str], data: st.DataObject
) -> None:
    history = History(messages, counter=APPROX)
    history.by_tokens(10, APPROX)  # build the running totals before changing anything
    spare = list(extra)
    for op in operations:
        if op == "pop_last" and len(history):
            popped = history.pop()
            assert popped.id not in history
        elif op == "pop_at" and len(history):
            index = data.draw(st.integers(-len(history), len(history) - 1), label="index")
            expected = history[index]
            assert history.pop(index) is expected
            assert expected.id not in history
        elif op == "replace":
            pool = history.messages + spare
            keep = data.draw(st.lists(st.booleans(), min_size=len(pool), max_size=len(pool)),
                             label="keep")
            history.replace([m for m, k in zip(pool, keep, strict=True) if k])
        elif op == "clear":
            history.clear()
            assert len(history) == 0 and history.by_tokens(10**9, APPROX) == []
        elif op == "add" and spare:
            history.add(spare.pop(0))
        fresh = History(history.messages, counter=APPROX)
        assert ids(history) == ids(fresh)
        assert history.token_count(APPROX) == fresh.token_count(APPROX)
        for i, m in enumerate(history):
            assert history.index_of(m.id) == i
        top = total_tokens(history, APPROX) + 2
        for budget in {0, 3, top // 3, top // 2, top}:
            for keep_system in (False, True):
                assert ids(history.by_tokens(budget, APPROX, keep_system=keep_system)) == ids(
                    fresh.by_tokens(budget, APPROX, keep_system=keep_system))
        assert ids(history.recent(3)) == ids(fresh.recent(3))


@FEW
@given(nonempty_conversations)
def test_replace_with_the_history_itself_keeps_it(messages: list[Message]) -> None:
    """A reducer that keeps everything may hand back the history object itself."""
    history = History(messages, counter=APPROX)
    history.replace(history)
    assert ids(history) == ids(messages)


# ---------------------------------------------------------------- list edits (MutableSequence)


EDITS = ["append", "insert", "set_new", "set_edit", "set_slice", "set_step", "del_at",
         "del_slice", "del_step", "pop", "remove", "reverse", "add", "extend", "iadd",
         "duplicate", "clear"]


def _selectors_agree(history: History, model: list[Message]) -> None:
    """After any edit: the history holds ``model`` and every index and selector
    equals the same on a History built fresh from ``model``."""
    assert ids(history) == ids(model) and len(history) == len(model)
    assert [id(m) for m in history] == [id(m) for m in model]
    fresh = History(model, counter=APPROX)
    for i, m in enumerate(model):
        assert history.index_of(m.id) == i and history.get(m.id) is m and m in history
    assert history.token_count(APPROX) == fresh.token_count(APPROX)
    top = total_tokens(model, APPROX) + 2
    for budget in sorted({0, 3, top // 3, top // 2, top}):
        for keep_system in (False, True):
            assert ids(history.by_tokens(budget, APPROX, keep_system=keep_system)) == ids(
                fresh.by_tokens(budget, APPROX, keep_system=keep_system)), (budget, keep_system)
    n = len(model)
    for count in sorted({0, 1, 2, n // 2, n, n + 1}):
        assert ids(history.recent(count)) == ids(fresh.recent(count))
    for from_end, to_end in ((n, 0), (n, n // 2), (max(1, n // 2), 0), (3, 1)):
        if from_end > to_end:
            assert ids(history.range(from_end, to_end)) == ids(fresh.range(from_end, to_end))
    for last in ("last_user", "last_assistant"):
        mine, theirs = getattr(history, last)(), getattr(fresh, last)()
        assert (mine and mine.id) == (theirs and theirs.id)


@FAST
@given(conversations(max_steps=16), conversations(max_steps=10),
       st.lists(st.sampled_from(EDITS), min_size=1, max_size=10), st.data())
def test_list_edits_agree_with_a_plain_list(messages: list[Message], extra: list[Message],
                                            edits: list[str], data: st.DataObject) -> None:
    """Random list operations on a History and on a plain list: after each, the
    history's id index, system index, groups (pair safety) and running totals give
    what a History built from the list gives. A present id put in raises
    ``DuplicateMessage`` and changes nothing."""
    history = History(messages, counter=APPROX)
    model = list(messages)
    history.by_tokens(10, APPROX)  # running totals exist before the edits
    outside = list(extra)  # messages whose ids are not in the history

    def take() -> Message | None:
        return outside.pop(data.draw(st.integers(0, len(outside) - 1))) if outside else None

    def position(end: bool = False) -> int:
        return data.draw(st.integers(-len(model) - 1, len(model) + (1 if end else -1)))

    def left(gone: list[Message]) -> None:
        ids_now = {m.id for m in model}
        outside.extend(m for m in gone if m.id not in ids_now)

    for edit in edits:
        note(f"{edit} on {len(model)} messages")
        if edit in ("append", "add", "extend", "iadd"):
            fresh = [m for m in (take(), take()) if m is not None][: 1 if edit in (
                "append", "add") else 2]
            if edit == "append" and fresh:
                history.append(fresh[0])
            elif edit == "add" and fresh:
                assert history.add(fresh[0]) is True
            elif edit == "extend":
                assert history.extend(fresh + model[:1]) == len(fresh)  # a present id: skipped
            elif edit == "iadd":
                history += fresh
            model.extend(fresh)
        elif edit == "insert" and (new := take()) is not None:
            at = position(end=True)
            history.insert(at, new)
            model.insert(at, new)
        elif edit == "set_new" and model and (new := take()) is not None:
            at = data.draw(st.integers(-len(model), len(model) - 1))
            gone = model[at]
            history[at] = new
            model[at] = new
            left([gone])
        elif edit == "set_edit" and model:
            at = data.draw(st.integers(-len(model), len(model) - 1))
            role = data.draw(st.sampled_from(["user", "assistant", "system", "developer"]))
            # a new version of the message: same id, new content (its counts reset)
            edited = msgspec.structs.replace(model[at], role=role, token_counts=None,
                                             parts=[TextPart(text=f"edited {edit}")])
            history[at] = edited
            model[at] = edited
        elif edit == "set_slice":
            start, stop = sorted((position(end=True), position(end=True)))
            count = data.draw(st.integers(0, 3))
            batch = [m for m in (take() for _ in range(count)) if m is not None]
            gone = model[start:stop]
            history[start:stop] = batch
            model[start:stop] = batch
            left(gone)
        elif edit == "set_step" and model:
            step = data.draw(st.sampled_from([2, 3, -1, -2]))
            positions = range(len(model))[::step]
            batch = [m for m in (take() for _ in positions) if m is not None]
            if len(batch) == len(positions):
                gone = model[::step]
                history[::step] = batch
                model[::step] = batch
                left(gone)
            else:
                outside.extend(batch)
        elif edit == "del_at" and model:
            at = data.draw(st.integers(-len(model), len(model) - 1))
            gone = [model[at]]
            del history[at]
            del model[at]
            left(gone)
        elif edit == "del_slice":
            start, stop = position(end=True), position(end=True)
            gone = model[start:stop]
            del history[start:stop]
            del model[start:stop]
            left(gone)
        elif edit == "del_step":
            step = data.draw(st.sampled_from([2, 3, -2]))
            gone = model[::step]
            del history[::step]
            del model[::step]
            left(gone)
        elif edit == "pop" and model:
            at = data.draw(st.integers(-len(model), len(model) - 1))
            assert history.pop(at) is model[at]
            left([model.pop(at)])
        elif edit == "remove" and model:
            target = data.draw(st.sampled_from(model))
            history.remove(target)
            model.remove(target)
            left([target])
        elif edit == "reverse":
            history.reverse()
            model.reverse()
        elif edit == "duplicate" and model:
            present = data.draw(st.sampled_from(model))
            twin = msgspec.structs.replace(present, parts=[TextPart(text="twin")])
            before = (ids(history), history.to_json())
            at = position(end=True)
            others = [i for i, m in enumerate(model) if m.id != present.id]
            attempts: list[tuple[Callable[..., object], tuple[object, ...]]] = [
                (history.insert, (at, twin)), (history.append, (twin,)),
                (history.__setitem__, (slice(at, at), [twin]))]
            if others:
                attempts.append((history.__setitem__, (data.draw(st.sampled_from(others)), twin)))
            for method, args in attempts:
                with pytest.raises(DuplicateMessage) as info:
                    method(*args)
                assert info.value.message_id == present.id
                assert (ids(history), history.to_json()) == before
        elif edit == "clear":
            gone = list(model)
            history.clear()
            model.clear()
            left(gone)
        _selectors_agree(history, model)
