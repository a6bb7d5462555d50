"""Conversations of every shape a real client stores, for the pair-safety properties.

A hypothesis strategy builds a message list turn by turn: plain chat, system and
developer messages, and tool turns whose calls sit in one assistant message or in
consecutive assistant messages one call each (what the OpenAI Agents SDK writes),
optionally after a reasoning-only message, answered by results in any order, or
by results that have not arrived yet (the last turn only), or sequential calls
each answered before the next, or *late*: answered only after other messages
(the user went on talking, another call came and went) that ``batches`` likes to
end an append with, so that the result arrives in a later append than its call
with the call not last in its append.  ``expected_*`` compute what a store read
must return from the in-memory ``History`` of the same messages: the oracle.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pydantic
from hypothesis import strategies as st

from chathistory import History, Message, Reasoning, TextPart, ToolCall, ToolResult
from chathistory.groups import Groups


def _text_turn(kind: str, serial: int) -> list[Message]:
    words = " ".join(f"w{serial}" for _ in range(serial % 5 + 1))
    if kind == "system":
        return [Message.system(f"rule {serial} {words}")]
    if kind == "developer":
        return [Message(role="developer", parts=[TextPart(text=f"dev {serial} {words}")])]
    if kind == "user":
        return [Message.user(f"question {serial} {words}")]
    return [Message.assistant(f"answer {serial} {words}")]


@st.composite
def tool_turn(draw: st.DrawFn, serial: int, last: bool) -> list[Message]:
    calls = draw(st.integers(1, 3))
    ids = [f"c{serial}_{k}" for k in range(calls)]
    layout = draw(st.sampled_from(["one", "split", "sequential", "late"]))
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message(role="assistant", parts=[Reasoning(text=f"think {serial}")]))
    if layout == "sequential":
        for k, cid in enumerate(ids):
            out.append(Message(role="assistant",
                               parts=[ToolCall(id=cid, name="f", arguments={"k": k})]))
            if not (last and k == calls - 1 and draw(st.booleans())):
                out.append(Message.tool_result(cid, f"result {cid}"))
        return out
    if layout == "one" or (layout == "late" and draw(st.booleans())):
        out.append(Message(role="assistant", parts=[
            ToolCall(id=cid, name="f", arguments={"k": k}) for k, cid in enumerate(ids)]))
    else:
        out.extend(Message(role="assistant", parts=[ToolCall(id=cid, name="f", arguments={})])
                   for cid in ids)
    if layout == "late":  # other messages before the results: they join the call's group
        for k in range(draw(st.integers(1, 3))):
            between = draw(st.sampled_from(["user", "assistant", "nested"]))
            if between == "nested":  # another call, answered at once
                nested = f"n{serial}_{k}"
                out += [Message(role="assistant", parts=[ToolCall(id=nested, name="g",
                                                                  arguments={})]),
                        Message.tool_result(nested, f"result {nested}")]
            else:
                out += _text_turn(between, serial * 10 + k)
    answered = draw(st.permutations(ids))
    if last:  # results that have not arrived yet
        answered = answered[:draw(st.integers(0, calls))]
    results = [Message.tool_result(cid, f"result {cid}") for cid in answered]
    if results and draw(st.booleans()):  # parallel results in one message
        out.append(Message(role="tool", parts=[p for m in results for p in m.parts]))
    else:
        out.extend(results)
    if (not last or draw(st.booleans())) and len(answered) == calls:
        out.append(Message.assistant(f"done {serial}"))
    return out


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 8) -> list[Message]:
    """A conversation of mixed shapes, orphan-free (every result follows its call)."""
    turns = draw(st.integers(1, max_turns))
    out: list[Message] = []
    for serial in range(turns):
        kind = draw(st.sampled_from(["user", "assistant", "tool", "tool", "system",
                                     "developer"]))
        if kind == "tool":
            out += draw(tool_turn(serial, serial == turns - 1))
        else:
            out += _text_turn(kind, serial)
    return out


def answers(messages: Sequence[Message]) -> list[int]:
    """Positions of the messages carrying a result for a call made in an earlier message:
    an append that starts there joins stored messages to the call (the call's own, and
    any after it: a late result), the place a fork or a batch edge is worth putting."""
    call_at: dict[str, int] = {}
    out: list[int] = []
    for i, m in enumerate(messages):
        if any(type(p) is ToolResult and p.call_id in call_at for p in m.parts):
            out.append(i)
        call_at.update((p.id, i) for p in m.parts if type(p) is ToolCall)
    return out


@st.composite
def batches(draw: st.DrawFn, messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` split into consecutive append batches at random, often just before
    a result (so that it arrives in an append after its call's, late or not)."""
    cuts = draw(st.sets(st.integers(1, max(1, len(messages) - 1)), max_size=6))
    answered = answers(messages)
    if answered:
        cuts |= draw(st.sets(st.sampled_from(answered)))
    edges = [0, *sorted(c for c in cuts if c < len(messages)), len(messages)]
    return [list(messages[a:b]) for a, b in itertools.pairwise(edges) if b > a]


def expected_context(history: History, head: int, tail: int) -> list[str]:
    """What ``store.context(head, tail)`` keeps: the first ``head`` positions widened to
    whole groups, every system and developer message, and ``history.recent(tail)``."""
    messages = history.messages
    groups = Groups.of(messages)
    chosen: set[int] = set()
    if head > 0 and messages:
        _, end = groups.widen(0, min(head, len(messages)))
        chosen.update(groups.sendable(0, end))
    chosen.update(i for i, m in enumerate(messages) if m.role in ("system", "developer"))
    index = {m.id: i for i, m in enumerate(messages)}
    chosen.update(index[m.id] for m in history.recent(tail))
    return [messages[i].id for i in sorted(chosen)]


def group_ids(messages: Sequence[Message], i: int) -> list[str]:
    """Ids of the group that holds message ``i``."""
    start, end = Groups.of(messages).widen(i, i + 1)
    return [m.id for m in messages[start:end]]


def pair_violations(selection: Sequence[Message], whole: Sequence[Message]) -> list[str]:
    """What breaks the pair rule in ``selection`` (a read of ``whole``): a result whose
    call is not earlier in it, a call whose existing result is missing from it."""
    answered = {p.call_id for m in whole for p in m.parts if type(p) is ToolResult}
    seen_calls: set[str] = set()
    seen_results: set[str] = set()
    problems: list[str] = []
    for m in selection:
        for p in m.parts:
            if type(p) is ToolCall:
                seen_calls.add(p.id)
            elif type(p) is ToolResult:
                if p.call_id not in seen_calls:
                    problems.append(f"result {p.call_id} without its call")
                seen_results.add(p.call_id)
    for cid in sorted(seen_calls & answered - seen_results):
        problems.append(f"call {cid} without its result")
    return problems


def describe(messages: Sequence[Message]) -> list[Any]:
    """A short picture of a conversation for failure reports."""
    out: list[Any] = []
    for m in messages:
        kinds = [type(p).__name__ + (f"({getattr(p, 'id', None) or getattr(p, 'call_id', '')})"
                                     if type(p) in (ToolCall, ToolResult) else "")
                 for p in m.parts]
        out.append((m.role, *kinds))
    return out


# What 0.1.0 stored wrongly: written here with the fixed code, then the flags that the
# old batch append set are put back by hand (SQLite has a real file of 0.1.0 instead).
OLD_RELEASE_WRONG_FLAGS = {"batch": [3], "fork": [4]}
"""Positions whose group-start flag 0.1.0 stored set in ``write_old_release_scenario``."""


def write_old_release_scenario(store: Any) -> None:
    """The sessions of ``tests/golden/sqlite_0_1_0.db``: parallel calls one per message
    answered in the same batch, the same one message at a time, and a fork inside the
    call group answering the inherited calls in one batch."""
    msgs = [Message.user("q"), Message(role="assistant", parts=[Reasoning(text="think")]),
            Message(role="assistant", parts=[ToolCall(id="c1", name="a", arguments={})]),
            Message(role="assistant", parts=[ToolCall(id="c2", name="b", arguments={})]),
            Message.tool_result("c1", "r1"), Message.tool_result("c2", "r2"),
            Message.assistant("done")]
    store.append(store.create_session("batch").id, msgs)
    one = store.create_session("one-by-one")
    for m in msgs:
        store.append(one.id, [m])
    store.append(store.create_session("parent").id, msgs[:4])
    fork = store.fork("parent", msgs[3].id, new_session_id="fork")
    store.append(fork.id, [
        Message(role="assistant", parts=[ToolCall(id="c3", name="c", arguments={})]),
        Message.tool_result("c2", "r2"), Message.tool_result("c1", "r1"),
        Message.tool_result("c3", "r3"), Message.assistant("fork done")])


def check_old_release_scenario(store: Any) -> None:
    """Every read of the scenario's sessions equals History's selector."""
    for sid in ("batch", "one-by-one", "fork", "parent"):
        msgs = store.range(sid)
        history = History(msgs)
        for k in range(len(msgs) + 1):
            assert [m.id for m in store.tail(sid, k)] == [m.id for m in history.recent(k)], \
                (sid, k)


_ADAPTERS: dict[str, pydantic.TypeAdapter[Any]] = {}


def check_provider_requests(selection: Sequence[Message]) -> None:
    """The selection encodes to requests that the OpenAI and Anthropic SDKs' request
    types accept, and whose tool results each answer a call earlier in the request
    (what the APIs check and answer with a 400 otherwise)."""
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

    from chathistory.formats import to_anthropic, to_openai_chat

    if not _ADAPTERS:
        _ADAPTERS["openai"] = pydantic.TypeAdapter(list[ChatCompletionMessageParam])
        _ADAPTERS["anthropic"] = pydantic.TypeAdapter(list[MessageParam])
    chat = to_openai_chat(selection)
    _ADAPTERS["openai"].validate_python(chat, strict=True)
    called: set[str] = set()
    for turn in chat:
        called.update(c["id"] for c in turn.get("tool_calls") or ())
        if turn["role"] == "tool":
            assert turn["tool_call_id"] in called, ("openai", turn["tool_call_id"])
    if not selection or all(m.role in ("system", "developer") for m in selection):
        return
    request = to_anthropic(selection)
    _ADAPTERS["anthropic"].validate_python(request["messages"], strict=True)
    used: set[str] = set()
    for turn in request["messages"]:
        for block in turn["content"] if isinstance(turn["content"], list) else ():
            if block["type"] == "tool_use":
                used.add(block["id"])
            elif block["type"] == "tool_result":
                assert block["tool_use_id"] in used, ("anthropic", block["tool_use_id"])
