"""Prompt-cache benchmark with time: what the cache plan predicts with and without its
clock on a chat that pauses (issue 44, item 3).

The window suite's ShareGPT conversation (`bench.window.conversation`, 8,000-token
window) given times: a turn every 20-120 s, 5% of turns after a pause of 6-30 minutes,
and a new session 3-8 hours later every 100 turns (seeded). Each policy (the default
`ContextWindow` and the cost-aware one, `cache=rules`) lays out every prompt; its prompts
go in order through `plan_cache(previous=...)`:

- "no clock": as before the clock, the plan assumes no entry expires (what it predicted);
- "clock, 5m": the same prompts and breakpoints with `now=` (Anthropic's default TTL):
  what the provider's rules give for them (the plan with a clock is checked against an
  independent simulation of those rules in tests/test_cache_clock.py);
- "clock, chosen TTL": the window and the plan given `now=`, the TTL per breakpoint
  chosen by expected cost (Anthropic; OpenAI has one TTL, in-memory retention).

A second timing without pauses (every turn 20-120 s apart) checks the claim that
holds without them. Reported: the cached share of input tokens (all requests) and the
cost of all requests over sending them uncached.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from . import peers, window
from .foundation import print_table

PROVIDERS = (("anthropic", "claude-sonnet-4-6"), ("openai", "gpt-5"))
SEED = 44
SESSION_TURNS = 100
PAUSE_SHARE = 0.05


def timeline(turns: int, pauses: bool, seed: int = SEED) -> list[float]:
    """Each turn's request time in seconds from the start."""
    rng = random.Random(seed)
    at, times = 0.0, []
    for turn in range(turns):
        if pauses and turn and turn % SESSION_TURNS == 0:
            at += rng.uniform(3 * 3600, 8 * 3600)
        elif pauses and rng.random() < PAUSE_SHARE:
            at += rng.uniform(6 * 60, 30 * 60)
        else:
            at += rng.uniform(20, 120)
        times.append(at)
    return times


def prompts(conv: Any, turns: int, times: list[float] | None,
            **options: Any) -> list[tuple[list[Any], int]]:
    """A ContextWindow's prompts over the conversation (``now=`` from ``times`` when
    given), each with its ``head_count``."""
    from chathistory import History, Message
    from chathistory.window import ContextWindow

    history = History(counter=peers.ENCODING)
    history.add(Message.system(conv.system))
    planner = ContextWindow(window.BUDGET, peers.ENCODING, **options)
    out = []
    for turn, (user, reply) in enumerate(conv.pairs[:turns]):
        history.add(Message.user(user, id=f"u{turn}"))
        plan = planner.plan(history, now=times[turn]) if times else planner.plan(history)
        planner.commit()
        out.append((list(plan.messages), plan.head_count))
        history.add(Message.assistant(reply, id=f"a{turn}"))
    return out


def predict(laid_out: list[tuple[list[Any], int]], provider: str, model: str,
            times: list[float] | None, ttl: str | None) -> dict[str, float]:
    from chathistory import plan_cache

    previous = None
    read = total = 0
    cost = 0.0
    for turn, (prompt, head) in enumerate(laid_out):
        previous = plan_cache(prompt, provider=provider, model=model, previous=previous,
                              counter=peers.ENCODING, pinned=head, ttl=ttl,
                              now=times[turn] if times else None)
        read += previous.tokens_read
        total += previous.total_tokens
        cost += previous.cost
    return {"cached": read / max(1, total), "cost": cost / max(1, total)}


def run(quick: bool = False, out: Callable[[str], None] = print) -> dict[str, Any]:
    from chathistory.cache import cache_rules

    started = time.perf_counter()
    turns = window.QUICK_TURNS if quick else window.TURNS
    conv = window.conversation(turns)
    out(f"prompt-cache benchmark with time: {turns:,} ShareGPT turns at {window.BUDGET:,} "
        f"tokens; a turn every 20-120 s, {PAUSE_SHARE:.0%} after a 6-30 minute pause, a "
        f"session 3-8 h later every {SESSION_TURNS} turns (seed {SEED})")
    results: dict[str, Any] = {"turns": turns, "rows": []}
    body = []
    for pauses in (True, False):
        times = timeline(turns, pauses)
        for provider, model in PROVIDERS:
            rules = cache_rules(provider, model)
            chosen_ttl = None if provider == "anthropic" else rules.ttls[0]
            for policy, options in (("default", {}), ("cost-aware", {"cache": rules})):
                blind = prompts(conv, turns, None, **options)
                timed = prompts(conv, turns, times, **options) if options else blind
                row = {"pauses": pauses, "provider": provider, "policy": policy,
                       "no clock": predict(blind, provider, model, None, rules.ttls[0]),
                       "clock, 5m": predict(blind, provider, model, times, rules.ttls[0]),
                       "clock, chosen TTL": predict(timed, provider, model, times,
                                                    chosen_ttl)}
                results["rows"].append(row)
                body.append([("pauses" if pauses else "no pauses"), provider, policy,
                             *(f"{row[k]['cached']:.1%} / {row[k]['cost']:.3f}"
                               for k in ("no clock", "clock, 5m", "clock, chosen TTL"))])
    out("")
    print_table(["timing", "provider", "policy", "no clock: cached / cost",
                 "clock, default TTL", "clock, chosen TTL"], body, out)
    results["seconds"] = time.perf_counter() - started
    out(f"took {results['seconds']:.0f} s")
    return results
