"""The prompt-cache plan: each provider's rules from the data file, the Anthropic
breakpoint chooser as a property against a simulation of the documented rules, and
the OpenAI and Gemini prefixes, costs and invalidation."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import Message, NotFound, Part, Reasoning, TextPart
from chathistory.cache import CachePlan, cache_rules, plan_cache, prompt_cache_key
from chathistory.formats import to_anthropic
from chathistory.tokens import cached_count, get_counter

COUNTER = get_counter("approx")  # ceil(chars / 4) per text, plus 3 + the role per message
LOOKBACK = 20
_SETTINGS = settings(max_examples=150, deadline=None)


# ---------------------------------------------------------------- rules


def test_every_rule_names_its_source_and_the_day_it_was_read() -> None:
    data = json.loads(resources.files("chathistory.cache").joinpath("rules.json").read_text())
    entries = [(p, None, v["default"]) for p, v in data["providers"].items()]
    entries += [(p, m, e) for p, v in data["providers"].items() for m, e in v["models"].items()]
    assert len(entries) > 3
    for provider, model, entry in entries:
        assert entry["source"].startswith("https://"), (provider, model)
        assert len(entry["read_on"]) == 10 and entry["read_on"].startswith("20"), (provider, model)
        rules = cache_rules(provider, model)
        assert rules.min_tokens == entry.get("min_tokens", data["providers"][provider]
                                             ["default"]["min_tokens"])


def test_model_matches_the_longest_prefix_and_unknown_models_get_the_default() -> None:
    assert cache_rules("anthropic", "claude-sonnet-4-5-20250929").min_tokens == 1024
    assert cache_rules("anthropic", "claude-sonnet-4-5-20250929").model == "claude-sonnet-4-5"
    unknown = cache_rules("anthropic", "claude-someday-9")
    assert unknown.model is None
    # the default is the most conservative minimum of the provider's models
    assert unknown.min_tokens == 4096 == max(
        cache_rules("anthropic", m).min_tokens for m in ("claude-3-haiku", "claude-opus-4-5"))
    assert (unknown.max_breakpoints, unknown.lookback_blocks) == (4, 20)
    assert unknown.write_multiplier == {"5m": 1.25, "1h": 2.0} and unknown.read_multiplier == 0.1
    assert cache_rules("gemini", "gemini-2.5-flash-001").min_tokens == 2048
    with pytest.raises(ValueError, match="no cache rules"):
        cache_rules("mistral")


def test_openai_prefix_rounds_to_1024_plus_128_steps() -> None:
    rules = cache_rules("openai", "gpt-4o")
    assert [rules.cacheable(n) for n in (0, 1023, 1024, 1151, 1152, 5000)] == [
        0, 0, 1024, 1024, 1152, 1024 + 3968 // 128 * 128]


# ---------------------------------------------------------------- Anthropic: examples


def _user(chars: int, id: str) -> Message:
    return Message.user("u" * chars, id=id)


def test_a_long_agent_turn_keeps_reading_the_previous_entry() -> None:
    """More than 20 blocks after the last breakpoint would silently miss the cache: the
    plan puts a breakpoint within reach of the previous turn's entry."""
    head = [Message.system("s" * 8000, id="sys"), _user(400, "q")]
    first = plan_cache(head, provider="anthropic", model="claude-sonnet-4-5", counter=COUNTER)
    assert first.breakpoint_ids == ("sys", "q") and first.tokens_read == 0
    assert first.tokens_written == first.total_tokens
    calls = [Message.assistant("step", id=f"a{i}") for i in range(25)]  # 25 blocks
    second = plan_cache([*head, *calls], provider="anthropic", model="claude-sonnet-4-5",
                        counter=COUNTER, previous=first)
    assert second.tokens_read == first.total_tokens
    assert second.breakpoint_ids[-1] == "a24"
    # the read breakpoint is within 20 blocks of the entry at "q" (one block each)
    read_at = next(i for i in second.breakpoint_ids if i.startswith("a"))
    assert int(read_at[1:]) + 1 < LOOKBACK
    assert second.tokens_written == second.total_tokens - first.total_tokens
    assert second.cost == pytest.approx(
        second.tokens_read * 0.1 + second.tokens_written * 1.25 + second.tokens_uncached)


def test_nothing_below_the_minimum_and_1h_ttl() -> None:
    short = [Message.system("s" * 100), Message.user("hi")]
    plan = plan_cache(short, provider="anthropic", model="claude-sonnet-4-5", counter=COUNTER,
                      ttl="1h")
    assert plan.breakpoint_ids == () and plan.tokens_uncached == plan.total_tokens
    assert plan.write_multiplier == 2.0
    with pytest.raises(ValueError, match="not '2h'"):
        plan_cache(short, provider="anthropic", counter=COUNTER, ttl="2h")


def test_invalidated_by_counts_what_an_edit_would_lose() -> None:
    msgs = [Message.system("s" * 8000, id="sys"), _user(400, "q"), Message.assistant("a" * 40,
            id="a"), _user(40, "q2")]
    plan = plan_cache(msgs, provider="anthropic", model="claude-sonnet-4-5", counter=COUNTER)
    sys_tokens = cached_count(msgs[0], COUNTER)
    assert "sys" in plan.breakpoint_ids and plan.cached_tokens() == plan.total_tokens
    assert plan.invalidated_by("q2") == plan.total_tokens - sys_tokens
    assert plan.invalidated_by("sys") == plan.total_tokens
    with pytest.raises(NotFound):
        plan.invalidated_by("nope")


def test_an_edit_makes_the_next_turn_read_only_the_entry_before_it() -> None:
    msgs = [Message.system("s" * 8000, id="sys"), _user(400, "q"), Message.assistant("a", id="a")]
    first = plan_cache(msgs, provider="anthropic", model="claude-sonnet-4-5", counter=COUNTER)
    edited = [msgs[0], _user(404, "q"), msgs[2], _user(10, "q2")]
    second = plan_cache(edited, provider="anthropic", model="claude-sonnet-4-5",
                        counter=COUNTER, previous=first)
    assert second.tokens_read == cached_count(msgs[0], COUNTER)


# ---------------------------------------------------------------- Anthropic: the property


def _test_blocks(msg: Message) -> int:
    """Blocks as the encoder makes them: encode the message alone."""
    request = to_anthropic([msg])
    if msg.role == "system":
        return 1 if isinstance(request["system"], str) else len(request["system"])
    content = request["messages"][0]["content"]
    return 1 if isinstance(content, str) else len(content)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    msgs = [Message.system("s" * draw(st.integers(1, 9000)), id="m0")]
    for i in range(1, draw(st.integers(1, 40))):
        role = "user" if i % 2 else "assistant"
        texts = [TextPart(text="x" * draw(st.integers(1, 3000)))
                 for _ in range(draw(st.integers(0 if role == "assistant" else 1, 4)))]
        parts: list[Part] = list(texts)
        if role == "assistant" and (not texts or draw(st.booleans())):
            parts.insert(0, Reasoning(text="hm", signature="sig"))  # a block taking no mark
        msgs.append(Message(role=role, parts=parts, id=f"m{i}"))
    return msgs


def _simulated_read(msgs: list[Message], breakpoints: tuple[str, ...], prev_msgs: list[Message],
                    prev_breakpoints: tuple[str, ...], min_tokens: int) -> tuple[int, int]:
    """(tokens read, deepest valid entry) by the documented rules, computed here."""
    last_block, prefix, total, blocks = {}, {}, 0, 0
    for m in msgs:
        blocks += _test_blocks(m)
        total += COUNTER.count_message(m)
        last_block[m.id], prefix[m.id] = blocks - 1, total
    same = 0
    for now, before in zip(msgs, prev_msgs, strict=False):
        if (now.id, now.role, now.parts) != (before.id, before.role, before.parts):
            break
        same += 1
    valid = [m.id for m in msgs[:same] if m.id in prev_breakpoints and prefix[m.id] >= min_tokens]
    read = max((prefix[e] for e in valid for b in breakpoints
                if 0 <= last_block[b] - last_block[e] < LOOKBACK), default=0)
    return read, max((prefix[e] for e in valid), default=0)


def _edit(msgs: list[Message], index: int) -> list[Message]:
    m = msgs[index]
    return [*msgs[:index], Message(role=m.role, parts=[*m.parts, TextPart(text="edited")],
                                   id=m.id), *msgs[index + 1:]]


@_SETTINGS
@given(msgs=conversations(), data=st.data(),
       model=st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-5", "claude-unknown"]))
def test_anthropic_breakpoints_obey_the_rules(msgs: list[Message], data: st.DataObject,
                                              model: str) -> None:
    cut = data.draw(st.integers(1, len(msgs)))
    before = msgs[:cut]
    # a pinned head (a ContextWindow's head_count): 0, or some leading messages
    pinned_before = data.draw(st.integers(0, cut), label="pinned before")
    if data.draw(st.booleans()):  # the turn before had its own previous turn
        head = data.draw(st.integers(1, cut))
        earlier = plan_cache(before[:head], provider="anthropic", model=model, counter=COUNTER,
                             pinned=min(pinned_before, head))
        previous = plan_cache(before, provider="anthropic", model=model, counter=COUNTER,
                              previous=earlier, pinned=pinned_before)
    else:
        previous = plan_cache(before, provider="anthropic", model=model, counter=COUNTER,
                              pinned=pinned_before)
    now = msgs
    if data.draw(st.booleans()):
        now = _edit(msgs, data.draw(st.integers(0, len(msgs) - 1)))
    pinned = data.draw(st.integers(0, len(now)), label="pinned")
    plan = plan_cache(now, provider="anthropic", model=model, counter=COUNTER, previous=previous,
                      pinned=pinned)
    min_tokens = cache_rules("anthropic", model).min_tokens

    assert len(plan.breakpoint_ids) <= 4
    prefix = dict(zip(plan.message_ids, plan.prefix_tokens, strict=True))
    assert all(prefix[b] >= min_tokens for b in plan.breakpoint_ids)
    read, deepest = _simulated_read(now, plan.breakpoint_ids, before, previous.breakpoint_ids,
                                    min_tokens)
    assert plan.tokens_read == read == deepest  # what the rules give, and the most there is
    assert plan.tokens_read + plan.tokens_written + plan.tokens_uncached == plan.total_tokens
    assert plan.tokens_written >= 0 and plan.tokens_uncached >= 0
    eligible_end = [m.id for m in now if prefix[m.id] >= min_tokens and any(
        isinstance(p, TextPart) for p in m.parts)]
    if eligible_end:  # the whole cacheable prompt is written for the next turn
        assert plan.breakpoint_ids[-1] == eligible_end[-1]
    head = {m.id for m in now[:pinned]}
    eligible_head = [i for i in eligible_end if i in head]
    if eligible_head:  # the end of the pinned head too (end and read take at most two)
        assert eligible_head[-1] in plan.breakpoint_ids
    assert plan.pinned == pinned  # system first: request order is the given order
    request = to_anthropic(now, cache_plan=plan)
    marked = [b for b in (request["system"] if isinstance(request["system"], list) else [])
              if "cache_control" in b]
    marked += [b for turn in request["messages"] if isinstance(turn["content"], list)
               for b in turn["content"] if "cache_control" in b]
    assert len(marked) == len(plan.breakpoint_ids)


def _eligible_prefix(plan: CachePlan, msgs: list[Message], count: int, min_tokens: int) -> int:
    """Tokens up to the last of the first ``count`` messages that may hold a breakpoint."""
    prefix = dict(zip(plan.message_ids, plan.prefix_tokens, strict=True))
    return max((prefix[m.id] for m in msgs[:count] if prefix[m.id] >= min_tokens
                and any(isinstance(p, TextPart) for p in m.parts)), default=0)


@_SETTINGS
@given(msgs=conversations(), data=st.data(),
       model=st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-5", "claude-unknown"]))
def test_an_eviction_after_the_pinned_head_reads_all_of_it(msgs: list[Message],
                                                           data: st.DataObject,
                                                           model: str) -> None:
    """A ContextWindow keeps its pinned head and evicts after it: the turn that evicts
    reads the head up to its last cacheable message from the cache, whatever came after
    it, because the plan before put a breakpoint there (and the simulation of the
    documented rules agrees that breakpoint is read)."""
    head = data.draw(st.integers(1, len(msgs)), label="pinned")
    kept = data.draw(st.integers(head, len(msgs)), label="kept tail end")
    previous = plan_cache(msgs, provider="anthropic", model=model, counter=COUNTER,
                          pinned=head)
    # the eviction: messages after the head leave, the newest stay, a new turn comes
    tail = [m for m in msgs[kept:] if data.draw(st.booleans(), label="kept")]
    fresh = [Message.user("n" * data.draw(st.integers(1, 3000), label="new"), id=f"new{i}")
             for i in range(data.draw(st.integers(1, 3), label="new turns"))]
    now = [*msgs[:head], *tail, *fresh]
    plan = plan_cache(now, provider="anthropic", model=model, counter=COUNTER,
                      previous=previous, pinned=head)
    min_tokens = cache_rules("anthropic", model).min_tokens
    expected = _eligible_prefix(previous, msgs, head, min_tokens)
    assert plan.tokens_read >= expected
    read, _ = _simulated_read(now, plan.breakpoint_ids, msgs, previous.breakpoint_ids,
                              min_tokens)
    assert plan.tokens_read == read
    assert len(plan.breakpoint_ids) <= 4


def test_an_eviction_turn_reads_the_head_at_its_reserved_breakpoint() -> None:
    """A window's pinned head longer than the minimum: without ``pinned`` the plan's
    breakpoints sit on the system prompt and the prompt's end, so the turn that evicts
    after the head reads only the system prompt; with it the head's end holds one, and
    that turn reads the whole head."""
    head = [Message.system("s" * 5000, id="sys"), _user(3000, "task"),
            Message.assistant("a" * 3000, id="plan")]
    tail = [_user(2000, f"q{i}") if i % 2 == 0 else Message.assistant("b" * 2000, id=f"r{i}")
            for i in range(6)]
    evicted = [*head, _user(2000, "q6")]  # the tail left, a new turn came
    reads = {}
    for pinned in (0, len(head)):
        first = plan_cache([*head, *tail], provider="anthropic", model="claude-sonnet-4-5",
                           counter=COUNTER, pinned=pinned)
        after = plan_cache(evicted, provider="anthropic", model="claude-sonnet-4-5",
                           counter=COUNTER, previous=first, pinned=pinned)
        assert ("plan" in first.breakpoint_ids) == bool(pinned)
        reads[pinned] = after.tokens_read
    head_tokens = sum(cached_count(m, COUNTER) for m in head)
    assert reads[0] == cached_count(head[0], COUNTER) < head_tokens
    assert reads[len(head)] == head_tokens
    with pytest.raises(ValueError, match="pinned head of 9"):
        plan_cache(evicted, provider="anthropic", counter=COUNTER, pinned=9)


# ---------------------------------------------------------------- OpenAI and Gemini


def test_openai_key_is_stable_per_session_and_the_prefix_is_shared_and_rounded() -> None:
    msgs = [Message.system("s" * 6000, id="sys"), _user(100, "q")]
    first = plan_cache(msgs, provider="openai", model="gpt-4o", session_id="sess-1",
                       counter=COUNTER)
    second = plan_cache([*msgs, Message.assistant("a" * 999, id="a")], provider="openai",
                        model="gpt-4o", session_id="sess-1", counter=COUNTER, previous=first)
    assert first.prompt_cache_key == second.prompt_cache_key == prompt_cache_key("sess-1")
    assert prompt_cache_key("sess-2") != prompt_cache_key("sess-1")
    assert "sess-1" not in (first.prompt_cache_key or "")
    assert first.tokens_read == 0
    assert second.tokens_read == cache_rules("openai").cacheable(first.total_tokens)
    assert second.tokens_read % 128 == 0 and second.tokens_read <= first.total_tokens
    assert second.tokens_uncached == second.total_tokens - second.tokens_read
    edited = plan_cache([Message.system("t" * 6000, id="sys"), *msgs[1:]], provider="openai",
                        session_id="sess-1", counter=COUNTER, previous=second)
    assert edited.tokens_read == 0
    assert second.invalidated_by("a") == (cache_rules("openai").cacheable(second.total_tokens)
                                          - cache_rules("openai").cacheable(first.total_tokens))
    assert plan_cache(msgs, provider="openai", counter=COUNTER).prompt_cache_key is None


def test_gemini_implicit_prefix_and_when_an_explicit_cache_pays_off() -> None:
    msgs = [Message.system("s" * 20000, id="sys"), _user(100, "q")]
    first = plan_cache(msgs, provider="gemini", model="gemini-2.5-flash", counter=COUNTER)
    assert first.explicit_cache_pays_off is None  # no storage price in the rules
    second = plan_cache([*msgs, _user(8, "q2")], provider="gemini", model="gemini-2.5-flash",
                        counter=COUNTER, previous=first)
    assert second.tokens_read == first.total_tokens  # increment 1: any length above 2,048
    # 3 reuses save 3 * 0.9 = 2.7 input-token prices per token; storage costs 2.5 / hour
    pays = plan_cache(msgs, provider="gemini", counter=COUNTER, expected_reuses=3,
                      cache_hours=1.0, storage_per_hour=2.5)
    assert pays.explicit_cache_pays_off is True
    assert plan_cache(msgs, provider="gemini", counter=COUNTER, expected_reuses=3,
                      cache_hours=1.2, storage_per_hour=2.5).explicit_cache_pays_off is False
    tiny = plan_cache([_user(10, "x")], provider="gemini", counter=COUNTER, expected_reuses=99,
                      storage_per_hour=0.01)
    assert tiny.explicit_cache_pays_off is False  # below the minimum nothing is cached


def test_plan_is_a_value() -> None:
    plan = plan_cache([_user(10, "x")], provider="openai", counter=COUNTER)
    assert isinstance(plan, CachePlan)
    with pytest.raises(AttributeError):
        plan.ttl = "1h"  # type: ignore[misc]
