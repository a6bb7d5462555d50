"""The provider prompt-cache simulator of ``python -m bench context`` (``bench.cache_sim``):
one test per documented rule (expiry, refresh on hit, TTL prices, minimums, OpenAI's
128-token increments, Anthropic's 20-block lookback)."""

from __future__ import annotations

import pytest
from bench.cache_sim import Block, Request

from bench import cache_sim


def blocks(*sizes: int, breakpoints: dict[int, str] | None = None,
           prefix: str = "b") -> tuple[Block, ...]:
    marks = breakpoints or {}
    return tuple(Block(n, f"{prefix}{i}", marks.get(i)) for i, n in enumerate(sizes))


def test_anthropic_write_then_read_within_the_ttl() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")  # minimum 1,024
    first = sim.send(Request(0, blocks(2000, 100, breakpoints={1: "5m"})))
    assert (first.cache_read, first.cache_write, first.input_tokens) == (0, {"5m": 2100}, 0)
    assert first.cost == pytest.approx(2100 * 1.25)
    second = sim.send(Request(200, blocks(2000, 100, 50, breakpoints={2: "5m"})))
    assert second.cache_read == 2100
    assert second.cache_write == {"5m": 50}
    assert second.cost == pytest.approx(210 + 62.5)


def test_anthropic_entry_expires_after_its_ttl() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    sim.send(Request(0, blocks(2000, breakpoints={0: "5m"})))
    late = sim.send(Request(301, blocks(2000, breakpoints={0: "5m"})))
    assert late.cache_read == 0 and late.cache_write == {"5m": 2000}


def test_anthropic_hit_refreshes_the_entry() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    sim.send(Request(0, blocks(2000, breakpoints={0: "5m"})))
    assert sim.send(Request(290, blocks(2000, breakpoints={0: "5m"}))).cache_read == 2000
    # 580 s after the write, 290 s after the hit: alive only because the hit refreshed it
    assert sim.send(Request(580, blocks(2000, breakpoints={0: "5m"}))).cache_read == 2000


def test_anthropic_one_hour_entries_live_an_hour_and_cost_twice() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    first = sim.send(Request(0, blocks(2000, breakpoints={0: "1h"})))
    assert first.cache_write == {"1h": 2000} and first.cost == pytest.approx(4000)
    assert sim.send(Request(3000, blocks(2000, breakpoints={0: "1h"}))).cache_read == 2000
    assert sim.send(Request(6601, blocks(2000, breakpoints={0: "1h"}))).cache_read == 0


def test_anthropic_writes_are_priced_per_ttl() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    usage = sim.send(Request(0, blocks(2000, 500, breakpoints={0: "1h", 1: "5m"})))
    assert usage.cache_write == {"1h": 2000, "5m": 500}
    assert usage.cost == pytest.approx(2000 * 2.0 + 500 * 1.25)


def test_anthropic_refuses_a_one_hour_breakpoint_after_a_five_minute_one() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    with pytest.raises(ValueError, match="1h"):
        sim.send(Request(0, blocks(2000, 500, breakpoints={0: "5m", 1: "1h"})))
    with pytest.raises(ValueError, match="at most 4"):
        sim.send(Request(0, blocks(*[2000] * 5, breakpoints=dict.fromkeys(range(5), "5m"))))


def test_anthropic_minimum_cacheable_length_per_model() -> None:
    assert cache_sim.anthropic_min_tokens("claude-sonnet-4-6") == 2048
    assert cache_sim.anthropic_min_tokens("claude-opus-4-6-20260101") == 4096
    sim = cache_sim.AnthropicCache("claude-sonnet-4-6")
    short = sim.send(Request(0, blocks(2000, breakpoints={0: "5m"})))
    assert short.cache_write == {} and short.input_tokens == 2000
    assert sim.send(Request(1, blocks(2000, breakpoints={0: "5m"}))).cache_read == 0


def test_anthropic_lookback_reaches_twenty_blocks_and_no_further() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    sim.send(Request(0, blocks(2000, breakpoints={0: "5m"})))
    # the entry at block 0 is the 20th block counting back from a breakpoint at block 19
    near = sim.send(Request(1, blocks(2000, *[10] * 19, breakpoints={19: "5m"})))
    assert near.cache_read == 2000
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    sim.send(Request(0, blocks(2000, breakpoints={0: "5m"})))
    far = sim.send(Request(1, blocks(2000, *[10] * 20, breakpoints={20: "5m"})))
    assert far.cache_read == 0 and far.cache_write == {"5m": 2200}


def test_anthropic_changed_prefix_misses() -> None:
    sim = cache_sim.AnthropicCache("claude-sonnet-4-5")
    sim.send(Request(0, blocks(2000, 100, breakpoints={1: "5m"})))
    edited = (Block(2000, "other"), Block(100, "b1", "5m"))
    assert sim.send(Request(1, edited)).cache_read == 0


def test_openai_caches_from_1024_tokens_in_128_token_increments() -> None:
    assert cache_sim.openai_cached_tokens(1023) == 0
    assert cache_sim.openai_cached_tokens(1024) == 1024
    assert cache_sim.openai_cached_tokens(1151) == 1024
    assert cache_sim.openai_cached_tokens(1152) == 1152
    sim = cache_sim.openai_cache("gpt-5")
    first = sim.send(Request(0, blocks(1000, 300)))
    assert first.cache_read == 0 and first.cost == 1300  # writes cost nothing
    second = sim.send(Request(10, blocks(1000, 300, 500)))
    assert second.cache_read == 1280
    assert second.cost == pytest.approx(1280 * 0.1 + 520)


def test_openai_prompt_below_the_minimum_is_not_held() -> None:
    sim = cache_sim.openai_cache("gpt-5")
    sim.send(Request(0, blocks(1000)))
    assert sim.send(Request(1, blocks(1000, 2000))).cache_read == 0


def test_openai_entry_evicted_after_inactivity_refreshed_by_use() -> None:
    sim = cache_sim.openai_cache("gpt-5")
    sim.send(Request(0, blocks(2048)))
    assert sim.send(Request(250, blocks(2048, 10))).cache_read == 2048
    assert sim.send(Request(500, blocks(2048, 20, prefix="c"))).cache_read == 0  # other
    assert sim.send(Request(540, blocks(2048, 10))).cache_read == 2048  # used at 250
    assert sim.send(Request(841, blocks(2048, 10))).cache_read == 0  # 301 s idle
    extended = cache_sim.openai_cache("gpt-5", retention="24h")
    extended.send(Request(0, blocks(2048)))
    assert extended.send(Request(3 * 3600, blocks(2048))).cache_read == 2048


def test_gemini_implicit_minimum_and_discount() -> None:
    assert cache_sim.gemini_min_tokens("gemini-2.5-flash") == 2048
    sim = cache_sim.gemini_implicit_cache("gemini-2.5-flash")
    sim.send(Request(0, blocks(2100)))
    hit = sim.send(Request(5, blocks(2100, 7)))
    assert hit.cache_read == 2100 and hit.cost == pytest.approx(210 + 7)
    sim = cache_sim.gemini_implicit_cache("gemini-2.5-flash")
    sim.send(Request(0, blocks(2000)))
    assert sim.send(Request(5, blocks(2000, 500))).cache_read == 0


def test_gemini_explicit_cache_lives_its_ttl() -> None:
    cache = cache_sim.GeminiExplicitCache(0, 10_000, storage_per_token_hour=0.5)
    assert cache.creation_cost() == pytest.approx(15_000)  # 1 hour by default
    assert cache.read(3599, 100).cost == pytest.approx(1100)
    with pytest.raises(ValueError, match="expired"):
        cache.read(3600, 100)


# --- the replay's checks (bench.context) ------------------------------------------------


def test_user_first_and_invalid_prompts() -> None:
    from bench import context
    from chathistory import Message
    from chathistory.model import ToolCall, ToolResult

    system, user = Message.system("s"), Message.user("u")
    call = Message(role="assistant", parts=[ToolCall(id="c1", name="f", arguments={})])
    result = Message(role="tool", parts=[ToolResult(call_id="c1", content="r")])
    assert context.user_first([system, user, call, result])
    assert not context.user_first([system, call, result])
    assert context.invalid([system, user, call, result], "anthropic") == ""
    assert context.invalid([system, user, result], "openai") == "result without its call"
    assert context.invalid([system, user, call], "openai") == "call without its result"
    # Anthropic merges same-role neighbours into a turn: an assistant text after the
    # call is the call's turn; a user and an assistant message between are not
    between = [Message.user("meanwhile"), Message.assistant("noted")]
    assert context.invalid([system, user, call, Message.assistant("x"), result],
                           "anthropic") == ""
    assert context.invalid([system, user, call, *between, result], "anthropic") == (
        "tool_result not after its tool_use")
    assert context.invalid([system, user, call, *between, result], "openai") == ""


def test_agent_replay_is_seeded_and_records_the_facts_asked_for() -> None:
    from bench import context

    first, again = context.agent_replay(60, seed=7), context.agent_replay(60, seed=7)
    assert [m.text for m in first.messages] == [m.text for m in again.messages]
    assert first.times == again.times and first.requests == again.requests
    assert len(first.requests) >= 60 and first.times == sorted(first.times)
    assert first.anchor_id == first.messages[1].id and first.messages[1].role == "user"
    by_id = {m.id: m for m in first.messages}
    for request, fact_id, label in first.asks:
        fact = next(f for f in context.FACTS if f[0] == label)
        assert fact[2] in by_id[fact_id].text or any(
            fact[2] in str(r.content) for r in by_id[fact_id].tool_results)
        asking = first.messages[first.requests[request] - 1]
        assert asking.role == "user" and label in asking.text
