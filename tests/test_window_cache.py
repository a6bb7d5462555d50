"""ContextWindow(cache=...): cost-aware eviction under a provider's prompt-cache rules.

The properties of the default window that do not depend on where it cuts hold here too
(the budget, pair safety, kept roles, the sticky pinned head, evictions never back);
on a fixed replay the summed cost of the turns' cache plans is at most the default's."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chathistory import History, Message, plan_cache
from chathistory.cache import CacheRules, cache_rules
from chathistory.model import KEPT_ROLES
from chathistory.window import ContextOverflow, ContextWindow
from test_properties import pair_safety_violations, ref_groups
from test_reduce_properties import APPROX, PRIMING, WINDOW, cost, histories, reset_kv

# Small minimums, so the tiny windows of the property test do cache (the real minimums,
# 1,024 tokens and more, would make every cut price the same).
SMALL = {
    "openai": CacheRules(provider="openai", model=None, min_tokens=16, increment=4,
                         read_multiplier=0.1, write_multiplier={"auto": 1.25},
                         ttls=("auto",), source="test", read_on="2026-11-25"),
    "anthropic": CacheRules(provider="anthropic", model=None, min_tokens=16, increment=1,
                            read_multiplier=0.1, write_multiplier={"5m": 1.25, "1h": 2.0},
                            ttls=("5m", "1h"), source="test", read_on="2026-11-25",
                            max_breakpoints=4, lookback_blocks=20),
    # rewrites dear and reads cheap: cuts other than today's are chosen more often
    "dear": CacheRules(provider="openai", model=None, min_tokens=4, increment=1,
                       read_multiplier=0.05, write_multiplier={"auto": 4.0},
                       ttls=("auto",), source="test", read_on="2026-11-25"),
}


@st.composite
def chats(draw: st.DrawFn) -> list[Message]:
    """A system prompt, then text turns and tool-call groups (one or two parallel calls,
    their results, a reply) of 1 to 40 words each: sizes like a real chat's, so that
    the cuts' prices differ (the tiny messages of ``histories`` mostly tie)."""
    def text(label: str) -> str:
        return "word " * draw(st.integers(1, 40), label=label)

    out = [Message.system(text("system"))]
    for step in range(draw(st.integers(1, 40), label="steps")):
        if draw(st.booleans(), label=f"tools {step}"):
            calls = [f"c{step}_{k}" for k in range(draw(st.integers(1, 2), label="calls"))]
            out.append(Message.assistant("", [{"id": c, "name": "f", "arguments": {}}
                                              for c in calls]))
            out += [Message.tool_result(c, text("result")) for c in calls]
        make = Message.user if step % 2 == 0 else Message.assistant
        out.append(make(text(f"text {step}")))
    return out


@WINDOW
@given(histories(max_steps=36), st.data())
def test_cost_aware_eviction_keeps_the_window_invariants(messages: list[Message],
                                                         data: st.DataObject) -> None:
    """Every turn: within the budget, pair safe, in history order, kept roles all there,
    nothing evicted comes back, and the last pinned head stays unless even the kept
    messages, that head and the newest group do not fit."""
    _drive(messages, data)


@WINDOW
@given(chats(), st.data())
def test_cost_aware_eviction_keeps_the_invariants_on_chat_sized_turns(
        messages: list[Message], data: st.DataObject) -> None:
    _drive(messages, data)


def _drive(messages: list[Message], data: st.DataObject) -> None:
    reset_kv(messages)
    top = data.draw(st.integers(20, max(20, (cost(messages) + PRIMING) // 3))
                    | st.integers(20, 400), label="max_tokens")
    low = data.draw(st.none() | st.integers(0, top), label="low_water_tokens")
    pin = data.draw(st.none() | st.just(0) | st.integers(0, top // 2), label="pin_tokens")
    rules = data.draw(st.sampled_from(sorted(SMALL)), label="rules")
    window = ContextWindow(top, counter=APPROX, low_water_tokens=low, pin_tokens=pin,
                           cache=SMALL[rules],
                           cache_horizon=data.draw(st.integers(1, 12), label="horizon"))
    history = History(counter=APPROX)
    evicted: set[str] = set()
    pinned: set[str] = set()
    i = 0
    while i < len(messages):
        size = data.draw(st.integers(1, 3), label="chunk")
        history.extend(messages[i:i + size])
        i += size
        live = [m for m in history if m.id not in evicted]
        try:
            plan = window.plan(history)
        except ContextOverflow:
            return  # the default window's tests pin down when it may overflow
        ids = [m.id for m in plan.messages]
        assert plan.total_tokens == PRIMING + cost(plan.messages) <= top
        assert not pair_safety_violations(plan.messages, list(history))
        order = [m.id for m in history]
        assert ids == sorted(ids, key=order.index)
        assert not evicted & set(ids)
        assert {m.id for m in live if m.role in KEPT_ROLES} <= set(ids)
        rest = [m for m in live if m.role not in KEPT_ROLES]
        spans = ref_groups(rest)
        sendable = {m.id for s, e, ok in spans if ok for m in rest[s:e]}
        pinned |= _head_ref(window, spans, rest,
                            cost([m for m in live if m.role in KEPT_ROLES]))
        if not pinned & sendable <= set(ids):  # orphan results are never sent
            # a pinned group stays whole (with what joined it since), and the newest
            held = [m for s, e, _ in spans if any(m.id in pinned for m in rest[s:e])
                    or e == len(rest) for m in rest[s:e]]
            assert PRIMING + cost([m for m in live if m.role in KEPT_ROLES] + held) > top
        assert set(plan.evicted_ids) == {m.id for m in live} - set(ids)
        assert plan.cache_plan is not None and set(plan.cache_plan.message_ids) == set(ids)
        evicted |= set(plan.evicted_ids)
        pinned &= set(ids)
        if data.draw(st.booleans(), label="commit"):
            window.commit()


def _head_ref(window: ContextWindow, spans: list[tuple[int, int, bool]],
              rest: list[Message], kept: int) -> set[str]:
    """The groups that join the pinned head this turn: the first within pin_tokens;
    under rules that cache only at breakpoints, with the kept roles (``kept`` tokens)
    under the minimum, past pin_tokens too while the head is under the minimum (each
    group at most pin_tokens)."""
    rules = window.cache_rules
    minimum = (rules.min_tokens if rules is not None and rules.max_breakpoints
               and kept < rules.min_tokens else None)
    used, ids = 0, set()
    for s, e, _ in spans:
        size = cost(rest[s:e])
        under_minimum = minimum is not None and kept + used < minimum
        if used + size > window.pin_tokens and not (under_minimum
                                                     and size <= window.pin_tokens):
            break
        used += size
        ids |= {m.id for m in rest[s:e]}
    return ids


def _conversation(turns: int) -> list[Message]:
    """A deterministic chat: a long system prompt, then turns of varied lengths."""
    out = [Message.system("Follow the house style guide. " * 60)]
    for i in range(turns):
        words = 40 + (i * 37) % 260
        make = Message.user if i % 2 == 0 else Message.assistant
        out.append(make(f"turn {i}: " + " ".join(f"w{(i * 7 + k) % 97}" for k in range(words))))
    return out


def _replay(cache: str | None, provider: str, model: str) -> tuple[float, float, int]:
    """Summed cache-plan cost, the share of prompt tokens read from the cache, and the
    evictions of a 4,000-token window over the fixed conversation."""
    return _priced(ContextWindow(4000, counter=APPROX, cache=cache), _conversation(240),
                   provider, model)


def _priced(window: ContextWindow, messages: list[Message], provider: str, model: str,
            before_replies: bool = False) -> tuple[float, float, int]:
    """Each turn's prompt planned by ``window`` and by ``plan_cache`` in order (with the
    window's pinned head, as its caller passes it): the summed cost, the share of prompt
    tokens read from the cache, and the evictions. A turn is each message added, or with
    ``before_replies`` each model request (the history up to an assistant message)."""
    history = History(counter=APPROX)
    previous = None
    total_cost, read, sent, evictions = 0.0, 0, 0, 0
    for message in messages:
        if not before_replies:
            history.add(message)
        if not before_replies or message.role == "assistant":
            plan = window.plan(history)
            window.commit()
            previous = plan_cache(plan.messages, provider=provider, model=model,
                                  previous=previous, counter=APPROX, pinned=plan.head_count)
            total_cost += previous.cost
            read += previous.tokens_read
            sent += previous.total_tokens
            evictions += bool(plan.evicted_ids)
        if before_replies:
            history.add(message)
    return total_cost, read / sent, evictions


@pytest.mark.parametrize(("provider", "model"), [
    ("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o"), ("gemini", "gemini-3-flash")])
def test_replay_costs_at_most_the_default(provider: str, model: str) -> None:
    default_cost, default_share, default_evictions = _replay(None, provider, model)
    cost_aware, share, evictions = _replay(f"{provider}/{model}", provider, model)
    assert default_evictions >= 5 and evictions >= 1  # the replay does evict
    assert cost_aware <= default_cost
    assert share >= default_share


def test_cost_aware_eviction_chooses_another_cut_than_the_default() -> None:
    """Not a no-op: on the replay some eviction keeps other messages than today's."""
    default = ContextWindow(4000, counter=APPROX)
    aware = ContextWindow(4000, counter=APPROX, cache="openai/gpt-4o")
    # each window on its own messages: a plan sets their KV fields
    ours, theirs = History(counter=APPROX), History(counter=APPROX)
    differ = 0
    for message in _conversation(120):
        ours.add(message)
        theirs.add(Message.from_json(message.to_json()))
        differ += default.plan(ours).message_ids != aware.plan(theirs).message_ids
    assert differ


def test_the_cache_option_round_trips_and_is_checked() -> None:
    window = ContextWindow(4000, counter=APPROX, cache="anthropic/claude-sonnet-4-5",
                           cache_horizon=3)
    state = json.loads(json.dumps(window.to_dict()))
    assert (state["cache"], state["cache_horizon"]) == ("anthropic/claude-sonnet-4-5", 3)
    restored = ContextWindow.from_dict(state)
    assert restored.cache_rules == cache_rules("anthropic", "claude-sonnet-4-5")
    assert restored.cache_horizon == 3
    assert "cache" not in ContextWindow(4000, counter=APPROX).to_dict()
    # a larger pinned head by default with cache= (DEFAULT_CACHE_PIN_RATIO): read from the
    # cache on every eviction turn
    assert (window.pin_tokens, ContextWindow(4000, counter=APPROX).pin_tokens) == (1500, 1000)
    assert restored.pin_tokens == 1500
    assert ContextWindow(100, counter=APPROX).cache_rules is None
    with pytest.raises(ValueError, match="cache_horizon"):
        ContextWindow(100, counter=APPROX, cache="openai", cache_horizon=0)
    with pytest.raises(ValueError, match="no cache rules"):
        ContextWindow(100, counter=APPROX, cache="nobody")


def test_plan_cache_takes_given_rules() -> None:
    prompt = [Message.system("rules " * 40), Message.user("go")]
    first = plan_cache(prompt, provider="openai", rules=SMALL["openai"], counter=APPROX)
    assert first.rules is SMALL["openai"] and first.entries  # the small minimum applies
    assert not plan_cache(prompt, provider="openai", counter=APPROX).entries
    with pytest.raises(ValueError, match="rules for"):
        plan_cache(prompt, provider="gemini", rules=SMALL["openai"])



def _agent_session(turns: int) -> list[Message]:
    """A deterministic tool-heavy session at a tenth of the agent replay's scale
    (``python -m bench cache``): a short system prompt, then per turn a user message,
    one to three tool calls each with a result of 200 to 2,000 tokens, and an answer."""
    out = [Message.system("Use the tools, then answer.")]
    call = 0
    for turn in range(turns):
        out.append(Message.user(f"question {turn}: " + "q " * (10 + turn * 7 % 40)))
        for _ in range(1 + turn * 5 % 3):
            call += 1
            words = 400 + (call * 2_617) % 3_600  # ~200-2,000 tokens (4 characters each)
            out.append(Message.assistant("", [{"id": f"c{call}", "name": "fetch",
                                               "arguments": {"page": call}}]))
            out.append(Message.tool_result(f"c{call}", "r " * words))
        out.append(Message.assistant(f"answer {turn}: " + "a " * (20 + turn * 11 % 80)))
    return out


def _agent_replay(cache: str | None, provider: str, model: str) -> tuple[float, float]:
    """Summed cache-plan cost and the share of prompt tokens read from the cache of a
    3,200-token window over the session, one prompt before each assistant message."""
    total_cost, share, _ = _priced(ContextWindow(3200, counter=APPROX, cache=cache),
                                   _agent_session(120), provider, model, before_replies=True)
    return total_cost, share


@pytest.mark.parametrize(("provider", "model"), [
    ("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o")])
def test_tool_heavy_replay_caches_more_than_the_default(provider: str, model: str) -> None:
    """Tool results of 200-2,000 tokens in a 3,200-token window: most turns that bring
    one must evict. The cost-aware window costs less than the default and caches at
    least 8 points more of its input (4 points more before cuts were priced by the
    cycle they start and, under Anthropic's rules, the pinned head ended at its entry)."""
    default_cost, default_share = _agent_replay(None, provider, model)
    cost_aware, share = _agent_replay(f"{provider}/{model}", provider, model)
    assert cost_aware < default_cost
    assert share >= default_share + 0.08


@pytest.mark.parametrize("pin_tokens", [400, 100])
def test_an_eviction_turn_reads_the_whole_pinned_head_from_the_cache(pin_tokens: int) -> None:
    """Rules with entries only at breakpoints and a system prompt under the minimum: the
    pinned head is the first groups within pin_tokens (past it while under the minimum,
    so that it is cacheable), the window passes it to ``plan_cache(pinned=...)``, which
    puts a breakpoint on its end, and every eviction turn reads the whole head. (Before,
    the head stopped where it became cacheable, the only place a breakpoint stayed.)"""
    rules = CacheRules(provider="anthropic", model=None, min_tokens=200, increment=1,
                       read_multiplier=0.1, write_multiplier={"5m": 1.25}, ttls=("5m",),
                       source="test", read_on="2026-11-25", max_breakpoints=4,
                       lookback_blocks=20)
    window = ContextWindow(1000, counter=APPROX, pin_tokens=pin_tokens, cache=rules)
    history = History([Message.system("Be brief.")], counter=APPROX)
    evictions = 0
    for i in range(60):
        make = Message.user if i % 2 == 0 else Message.assistant
        history.add(make(f"turn {i}: " + "w " * (100 + i * 13 % 40)))  # 55-75 tokens
        plan = window.plan(history)
        window.commit()
        head = plan.messages[:plan.head_count]
        pinned = cost(head[1:])  # the groups after the system prompt
        assert plan.cache_plan is not None and plan.cache_plan.pinned == plan.head_count
        if plan.evicted_ids:
            evictions += 1
            order = [m.id for m in history]
            following = history[order.index(head[-1].id) + 1]  # what came after the head
            next_group = cost([following])
            if cost(head) - cost(head[-1:]) < rules.min_tokens:  # joined to reach it
                assert pin_tokens < pinned
            else:  # the first groups within pin_tokens: the next did not fit
                assert pinned <= pin_tokens < pinned + next_group
            assert cost(head) >= rules.min_tokens
            assert plan.cache_plan.tokens_read >= cost(head)
            assert head[-1].id in plan.cache_plan.breakpoint_ids
    assert evictions >= 5
