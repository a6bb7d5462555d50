"""The cache plan's clock: entries expire after their TTL unless a read renews them, the
TTL per breakpoint is chosen by expected cost (1-hour ones first), OpenAI's retention and
Gemini's explicit cache lifetime apply, and without times the plan is today's and says so.
Properties: the prediction with times never undercuts the one without expiry when the
gaps outlive the TTL, and it equals an independent recomputation of the documented rules
over random timed sequences."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import ContextWindow, History, Message, TextPart
from chathistory.cache import CachePlan, cache_rules, plan_cache
from chathistory.formats import cache_request_fields, to_anthropic
from chathistory.tokens import get_counter

COUNTER = get_counter("approx")
MODEL = "claude-sonnet-4-5"  # minimum 1,024 tokens
LOOKBACK = 20
_SETTINGS = settings(max_examples=120, deadline=None)


def _chat(turns: int, size: int = 2000) -> list[Message]:
    msgs = [Message.system("s" * 8000, id="sys")]
    for i in range(turns):
        msgs.append(Message.user("u" * size, id=f"u{i}"))
        msgs.append(Message.assistant("a" * size, id=f"a{i}"))
    return msgs


def _anthropic(msgs: list[Message], previous: CachePlan | None = None, **options: object
               ) -> CachePlan:
    return plan_cache(msgs, provider="anthropic", model=MODEL, counter=COUNTER,
                      previous=previous, **options)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Anthropic: examples


def test_an_entry_unread_past_its_ttl_is_written_again() -> None:
    msgs = _chat(2)
    first = _anthropic(msgs[:3], now=1000.0, ttl="5m")
    assert first.at == 1000.0 and not first.assumes_no_expiry
    on_time = _anthropic(msgs, first, now=1300.0, ttl="5m")  # 300 s: still held
    assert on_time.tokens_read == first.total_tokens
    late = _anthropic(msgs, first, now=1301.0, ttl="5m")  # 301 s: expired
    assert late.tokens_read == 0
    assert late.tokens_written == late.total_tokens  # a write, not a read
    assert late.cost > on_time.cost
    assert late.gaps == (301.0,)
    # the same turn without a clock assumes the entry is there, and says so
    blind = _anthropic(msgs, _anthropic(msgs[:3], ttl="5m"), ttl="5m")
    assert blind.assumes_no_expiry and blind.at is None
    assert blind.tokens_read == on_time.tokens_read
    assert (blind.breakpoint_ids, blind.cost) == (on_time.breakpoint_ids, on_time.cost)


def test_a_read_renews_the_entry() -> None:
    msgs = _chat(3)
    first = _anthropic(msgs[:3], now=0.0, ttl="5m")
    second = _anthropic(msgs[:5], first, now=240.0, ttl="5m")
    assert second.tokens_read == first.total_tokens
    # 480 s after the first write but 240 s after the read: the entries of the second
    # turn (written or renewed at 240) are held
    third = _anthropic(msgs, second, now=480.0, ttl="5m")
    assert third.tokens_read == second.total_tokens
    # an entry neither read nor marked keeps its time: the system prompt's, written at 0
    # and marked again at 240, is renewed; one left alone since 0 would be gone by 480
    assert all(second.entry_time(k) == 240.0 for k in range(len(second.entries)))


def test_an_earlier_1h_entry_outlives_the_5m_ones_after_it() -> None:
    """An entry this turn neither marks nor reads stays held until its own TTL runs out:
    after a 15-minute pause the 5-minute entries are gone and the 1-hour one written two
    turns before (and read, so renewed, by the turn between) is read."""
    msgs = _chat(3)
    first = _anthropic(msgs[:3], now=0.0, ttl="1h")
    second = _anthropic(msgs[:5], first, now=60.0, ttl="5m")
    assert "a0" not in second.breakpoint_ids and second.tokens_read == first.total_tokens
    third = _anthropic(msgs, second, now=960.0, ttl="5m")
    assert third.tokens_read == first.total_tokens
    assert _anthropic(msgs, second, now=60.0 + 3601.0, ttl="5m").tokens_read == 0


def test_a_gap_between_5_and_60_minutes_chooses_1h() -> None:
    msgs = _chat(2)
    for gap, expected in ((60.0, "5m"), (1200.0, "1h"), (7200.0, "5m")):
        plan = _anthropic(msgs, now=0.0, expected_gap=gap)
        assert plan.breakpoint_ttls == (expected,) * len(plan.breakpoint_ids), gap
    hour = _anthropic(msgs[:3], now=0.0, expected_gap=1200.0)
    later = _anthropic(msgs, hour, now=1200.0)  # 20 minutes later: the 1h entry is read
    assert later.tokens_read == hour.total_tokens
    five = _anthropic(msgs[:3], now=0.0, ttl="5m")
    assert _anthropic(msgs, five, now=1200.0).tokens_read == 0
    # 1h writes cost 2x, 5m writes 1.25x: the plan prices each at its own
    assert hour.written_by_ttl == (("1h", hour.tokens_written),)
    assert hour.cost == pytest.approx(hour.tokens_written * 2.0 + hour.tokens_uncached)
    # a TTL given applies to every breakpoint, whatever the gap
    assert set(_anthropic(msgs, now=0.0, expected_gap=1200.0, ttl="5m").breakpoint_ttls) == {
        "5m"}
    # no gap known (a first plan, no hint): the default TTL
    assert set(_anthropic(msgs, now=0.0).breakpoint_ttls) == {"5m"}
    # no time for this request: as before the clock, whatever the gaps seen before
    timed = _anthropic(msgs, _anthropic(msgs[:3], now=0.0), now=1200.0)
    assert timed.gaps == (1200.0,) and set(timed.breakpoint_ttls) == {"1h"}
    untimed = _anthropic(msgs, timed)
    assert set(untimed.breakpoint_ttls) == {"5m"} and untimed.assumes_no_expiry


def test_mostly_short_gaps_with_pauses_give_the_head_1h_and_the_tail_5m() -> None:
    """The pinned head is read on many later turns, the tail once: with one gap in four
    past 5 minutes the head's entry pays off at 1h, the tail's at 5m; the 1h breakpoints
    come first (Anthropic refuses a 1h breakpoint after a 5m one) and the encoder writes
    each one's ttl (checked against the SDK's types in
    tests/formats/test_cache_plan_encoding.py)."""
    msgs = _chat(6)
    plan, at = None, 0.0
    for step, gap in enumerate((30.0, 30.0, 900.0, 30.0, 30.0, 30.0)):
        at += gap
        plan = _anthropic(msgs[:3 + 2 * step], plan, now=at, pinned=3)
    msgs.append(Message.user("x" * 20000, id="long"))  # new tokens, read once
    plan = _anthropic(msgs, plan, now=at + 30.0, pinned=3)
    assert plan.gaps == (30.0, 900.0, 30.0, 30.0, 30.0, 30.0)
    assert plan.breakpoint_ttls[0] == "1h" and plan.breakpoint_ttls[-1] == "5m"
    lifetimes = [plan.rules.lifetime(t) for t in plan.breakpoint_ttls]
    assert lifetimes == sorted(lifetimes, reverse=True)
    request = to_anthropic(msgs, cache_plan=plan)
    marks = [b["cache_control"] for b in request["system"] if "cache_control" in b]
    marks += [b["cache_control"] for turn in request["messages"] for b in turn["content"]
              if "cache_control" in b]
    assert marks == [{"type": "ephemeral", "ttl": "1h"} if t == "1h" else {"type": "ephemeral"}
                     for t in plan.breakpoint_ttls]


def test_times_as_datetimes_and_a_clock_going_back() -> None:
    msgs = _chat(1)
    when = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
    plan = _anthropic(msgs, now=when)
    assert plan.at == when.timestamp()
    with pytest.raises(ValueError, match=r"now .* is before the previous plan"):
        _anthropic(msgs, plan, now=when.timestamp() - 1)
    with pytest.raises(TypeError, match="now must be epoch seconds"):
        _anthropic(msgs, now="yesterday")
    with pytest.raises(ValueError, match="expected_gap"):
        _anthropic(msgs, now=0.0, expected_gap=-1.0)
    # a clock on this turn but not on the one before: the prediction assumes no expiry
    assert _anthropic(msgs, _anthropic(msgs), now=5000.0).assumes_no_expiry


def test_cached_tokens_and_invalidation_at_a_later_time() -> None:
    msgs = _chat(2)
    plan = _anthropic(msgs, now=0.0, ttl="5m")
    assert plan.cached_tokens() == plan.cached_tokens(300.0) == plan.total_tokens
    assert plan.cached_tokens(301.0) == 0
    assert plan.invalidated_by("u1", 301.0) == 0
    assert plan.invalidated_by("u1") > 0


# ---------------------------------------------------------------- OpenAI and Gemini


def test_openai_in_memory_retention_and_24h() -> None:
    msgs = [Message.system("s" * 6000, id="sys"), Message.user("q" * 400, id="q")]
    more = [*msgs, Message.assistant("a" * 999, id="a")]

    def pair(gap: float, ttl: str | None = None) -> CachePlan:
        first = plan_cache(msgs, provider="openai", model="gpt-5", counter=COUNTER,
                           session_id="s", now=0.0, ttl=ttl)
        return plan_cache(more, provider="openai", model="gpt-5", counter=COUNTER,
                          session_id="s", now=gap, previous=first, ttl=ttl)

    assert pair(300.0).tokens_read > 0
    assert pair(301.0).tokens_read == 0  # 5 minutes of inactivity predicted, not 10
    extended = pair(3 * 3600.0, "24h")
    assert extended.tokens_read > 0
    assert pair(86401.0, "24h").tokens_read == 0
    fields = cache_request_fields(extended)
    assert fields["prompt_cache_retention"] == "24h"
    assert "prompt_cache_retention" not in cache_request_fields(pair(1.0))


def test_gemini_explicit_cache_lives_its_ttl_from_creation() -> None:
    msgs = [Message.system("s" * 20000, id="sys"), Message.user("q" * 100, id="q")]
    made = plan_cache(msgs, provider="gemini", model="gemini-2.5-flash", counter=COUNTER,
                      explicit_cache_messages=1, now=0.0)
    assert made.explicit_cache_expires_at == 3600.0  # the default hour
    grown = [*msgs, Message.assistant("a", id="a")]
    kept = plan_cache(grown, provider="gemini", counter=COUNTER, previous=made, now=3000.0)
    assert kept.explicit_cache_messages == 1 and kept.explicit_cache_expires_at == 3600.0
    # reads do not extend it: 3,601 s after creation it is gone
    gone = plan_cache(grown, provider="gemini", counter=COUNTER, previous=kept, now=3601.0)
    assert gone.explicit_cache_messages == 0
    short = plan_cache(msgs, provider="gemini", counter=COUNTER, explicit_cache_messages=1,
                       now=0.0, explicit_cache_ttl=60.0)
    assert short.explicit_cache_expires_at == 60.0
    # the implicit cache: 5 minutes assumed
    assert plan_cache(grown, provider="gemini", counter=COUNTER, previous=made,
                      now=301.0).tokens_read == 0


def test_the_window_passes_its_clock_to_the_plan() -> None:
    history = History(counter=COUNTER)
    history.add(Message.system("s" * 8000))
    window = ContextWindow(20_000, COUNTER, cache=f"anthropic/{MODEL}")
    history.add(Message.user("u" * 2000))
    first = window.plan(history, now=0.0)
    history.add(Message.assistant("a" * 2000))
    history.add(Message.user("u" * 2000))
    late = window.plan(history, now=1000.0)
    assert first.cache_plan is not None and late.cache_plan is not None
    assert late.cache_plan.tokens_read == 0 and not late.cache_plan.assumes_no_expiry
    assert late.cache_plan.gaps == (1000.0,)


def test_the_cost_aware_cut_prices_what_is_still_cached() -> None:
    """Past the TTL nothing the last turn cached is left: every cut keeps nothing
    cached, and ``cached_after`` says so (the window asks the plan at ``now``)."""
    msgs = _chat(8)
    plan = _anthropic(msgs, now=0.0, ttl="5m")
    for message in msgs[1:]:
        assert plan.cached_tokens(1000.0) - plan.invalidated_by(message.id, 1000.0) == 0
        assert plan.cached_tokens() - plan.invalidated_by(message.id) >= 0


# ---------------------------------------------------------------- properties


@st.composite
def timed_turns(draw: st.DrawFn, min_gap: float = 0.0) -> list[tuple[list[Message], float]]:
    """Prompts that grow (and now and then edit a message), each with its time."""
    msgs = [Message.system("s" * draw(st.integers(1, 6000)), id="m0")]
    turns: list[tuple[list[Message], float]] = []
    at = 0.0
    for t in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(1, 3))):
            i = len(msgs)
            role = "user" if i % 2 else "assistant"
            parts = [TextPart(text="x" * draw(st.integers(1, 2500)))
                     for _ in range(draw(st.integers(1, 8 if role == "assistant" else 2)))]
            msgs.append(Message(role=role, parts=list(parts), id=f"m{i}"))
        if t and draw(st.integers(0, 5)) == 0:  # an edit
            k = draw(st.integers(1, len(msgs) - 1))
            old = msgs[k]
            msgs[k] = Message(role=old.role, parts=[*old.parts, TextPart(text="edit")],
                              id=old.id)
        spans = [(lo, hi) for lo, hi in ((0.0, 300.0), (300.0, 4000.0), (4000.0, 90000.0))
                 if hi > min_gap]
        at += draw(st.one_of([st.floats(max(lo, min_gap), hi) for lo, hi in spans]))
        turns.append((list(msgs), at))
    return turns


def _blocks(msg: Message) -> int:
    request = to_anthropic([msg])
    if msg.role == "system":
        return 1 if isinstance(request["system"], str) else len(request["system"])
    content = request["messages"][0]["content"]
    return 1 if isinstance(content, str) else len(content)


@dataclass
class _Entry:
    tokens: int
    ttl: str
    used: float


def _key(msgs: list[Message], end: int) -> tuple[object, ...]:
    return tuple((m.id, m.role, tuple(p.text for p in m.parts if isinstance(p, TextPart)))
                 for m in msgs[:end + 1])


class _Simulator:
    """Anthropic's documented rules, kept apart from ``chathistory.cache``: every entry
    written lives its TTL from when it was last written or read; a request reads the
    deepest live entry whose whole prefix it has, within 20 blocks before one of its
    breakpoints; each breakpoint writes (or renews) its prefix at its TTL."""

    def __init__(self) -> None:
        self.entries: dict[tuple[object, ...], _Entry] = {}
        rules = cache_rules("anthropic", MODEL)
        self.lifetime = {"5m": 300.0, "1h": 3600.0}
        self.read_price, self.write_price = rules.read_multiplier, {"5m": 1.25, "1h": 2.0}

    def send(self, msgs: list[Message], breakpoints: dict[str, str], at: float
             ) -> tuple[int, float]:
        self.entries = {k: e for k, e in self.entries.items()
                        if at - e.used <= self.lifetime[e.ttl]}
        last_block, prefix, blocks, total = [], [], 0, 0
        for m in msgs:
            blocks += _blocks(m)
            total += COUNTER.count_message(m)
            last_block.append(blocks - 1)
            prefix.append(total)
        marks = [i for i, m in enumerate(msgs) if m.id in breakpoints]
        read_at = max((e for e in range(len(msgs)) if _key(msgs, e) in self.entries
                       and any(0 <= last_block[b] - last_block[e] < LOOKBACK for b in marks)),
                      default=None)
        read = prefix[read_at] if read_at is not None else 0
        if read_at is not None:
            self.entries[_key(msgs, read_at)].used = at
        cost, done = read * self.read_price, read
        for b in marks:
            ttl = breakpoints[msgs[b].id]
            if prefix[b] > done:
                cost += (prefix[b] - done) * self.write_price[ttl]
                done = prefix[b]
            self.entries[_key(msgs, b)] = _Entry(prefix[b], ttl, at)
        return read, cost + total - done


@_SETTINGS
@given(turns=timed_turns(), data=st.data())
def test_the_plan_equals_an_independent_recomputation(turns: list[tuple[list[Message], float]],
                                                      data: st.DataObject) -> None:
    ttl = data.draw(st.sampled_from([None, "5m", "1h"]), label="ttl")
    hint = data.draw(st.sampled_from([None, 120.0, 1200.0]), label="expected_gap")
    simulator = _Simulator()
    plan = None
    for msgs, at in turns:
        pinned = data.draw(st.integers(0, len(msgs)), label="pinned")
        plan = _anthropic(msgs, plan, now=at, ttl=ttl, expected_gap=hint, pinned=pinned)
        assert not plan.assumes_no_expiry
        lifetimes = [plan.rules.lifetime(t) for t in plan.breakpoint_ttls]
        assert lifetimes == sorted(lifetimes, reverse=True)  # 1h before 5m
        read, cost = simulator.send(msgs, dict(zip(plan.breakpoint_ids, plan.breakpoint_ttls,
                                                   strict=True)), at)
        assert plan.tokens_read == read
        assert plan.cost == pytest.approx(cost)


@_SETTINGS
@given(turns=timed_turns(min_gap=301.0),
       provider=st.sampled_from(["anthropic", "openai", "gemini"]),
       ttl=st.sampled_from([None, "5m"]))
def test_with_gaps_past_the_ttl_the_cost_is_never_below_the_no_expiry_prediction(
        turns: list[tuple[list[Message], float]], provider: str, ttl: str | None) -> None:
    """Append-only prompts (each one the previous one and more) sent more than 5 minutes
    apart: the plan without times reads every earlier prompt, the plan with them cannot
    read more, nor write at a lower price."""
    ttl = ttl if provider == "anthropic" else None
    clocked = blind = None
    msgs, _ = turns[-1]
    grown = sorted({len(m) for m, _ in turns})
    for count, (_, at) in zip(grown, turns, strict=False):
        prompt = [m for m in msgs[:count]]
        clocked = plan_cache(prompt, provider=provider, counter=COUNTER, previous=clocked,
                             now=at, ttl=ttl)
        blind = plan_cache(prompt, provider=provider, counter=COUNTER, previous=blind, ttl=ttl)
        assert blind.assumes_no_expiry and not clocked.assumes_no_expiry
        assert clocked.cost >= blind.cost - 1e-9
        assert clocked.tokens_read <= blind.tokens_read
