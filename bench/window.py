"""Context-window benchmark: prefix reuse and prompt fill over a long conversation.

Targets (from the context-window issue): a 2,000-turn conversation in an
8,000-token window, `ContextWindow(8000)` with default settings keeps a mean
prefix reuse per turn (tokens of the prompt's head identical to the previous
turn's prompt / prompt tokens) of at least 85% while the mean prompt stays
above 70% of the budget, with no turn over the budget; beside LangChain
`trim_messages` (sliding), LlamaIndex `ChatMemoryBuffer`, Semantic Kernel
`ChatHistoryTruncationReducer` and Agent Framework `TruncationStrategy`; and
the 2,000 turns (select + append) take at least 50x less time than LangChain's
and LlamaIndex's with the same tokenizer.

Every library's prompts are measured the same way, here, from which
conversation messages it put in the prompt (by position in the conversation,
not by text: ShareGPT repeats texts such as "continue"), with one counter:
chathistory's (bpe-openai o200k_base, 3 per message + the role, 3 priming).
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import data, peers
from .foundation import _verdict, environment, print_table

BUDGET = 8000
TURNS = 2_000
QUICK_TURNS = 400
MAX_MESSAGE_TOKENS = 3_000  # longer messages are skipped (with their pair) so a turn fits
SYSTEM_PROMPT = "You are a helpful assistant."

REUSE_TARGET = 0.85  # chathistory default: mean prefix reuse, at least
FILL_TARGET = 0.70  # chathistory default: mean prompt / budget, above
PEER_SPEEDUP_TARGET = 50.0  # LangChain's and LlamaIndex's total time / chathistory's, at least
# Reference figures quoted by the issue, printed beside what this run measures.
ISSUE_SLIDING_REUSE = 0.36
ISSUE_CHUNKED_8000_6000_REUSE = 0.80

# Count-based and token-based truncation peers get the same hysteresis as
# chathistory's default: trim to 62.5% of the limit once it is passed. It is
# also Agent Framework's own default ratio (ContextWindowCompactionStrategy
# truncates at 80% of the input budget down to 50%: 0.5 / 0.8 = 0.625).
PEER_LOW_WATER_RATIO = 0.625

Pair = tuple[str, str]


# --- the conversation -------------------------------------------------------------


@dataclass
class Conversation:
    system: str
    pairs: list[Pair]  # (user text, assistant text), one per turn
    sizes: list[int]  # tokens of conversation message k: 0 = system, 2t+1 user t, 2t+2 reply t
    messages_read: int = 0
    skipped_long: int = 0  # messages over MAX_MESSAGE_TOKENS
    skipped_with_long: int = 0  # their pair partners, skipped with them
    skipped_order: int = 0  # skipped to keep user/assistant alternation

    def user_index(self, turn: int) -> int:
        return 2 * turn + 1


def conversation(turns: int) -> Conversation:
    """`turns` (user, assistant) pairs from the ShareGPT stream, in order: a user
    message followed by an assistant message is a turn; anything else (two
    messages of one side in a row, a conversation opening with the model) is
    skipped, and so is a pair holding a message over MAX_MESSAGE_TOKENS."""
    wanted = int(turns * 2.6) + 100
    while True:
        messages = data.messages(wanted)
        conv = Conversation(SYSTEM_PROMPT, [], [peers.chat_message_tokens("system", SYSTEM_PROMPT)])
        i = 0
        while i + 1 < len(messages) and len(conv.pairs) < turns:
            (role, text), (next_role, next_text) = messages[i], messages[i + 1]
            if role != "user" or next_role != "assistant":
                conv.skipped_order += 1
                i += 1
                continue
            user_tokens = peers.chat_message_tokens("user", text)
            reply_tokens = peers.chat_message_tokens("assistant", next_text)
            i += 2
            long = (user_tokens > MAX_MESSAGE_TOKENS) + (reply_tokens > MAX_MESSAGE_TOKENS)
            if long:
                conv.skipped_long += long
                conv.skipped_with_long += 2 - long
                continue
            conv.pairs.append((text, next_text))
            conv.sizes += [user_tokens, reply_tokens]
        conv.messages_read = i
        if len(conv.pairs) == turns:
            return conv
        wanted *= 2  # not enough pairs in what was read: read more


# --- measuring one library ---------------------------------------------------------


@dataclass
class Run:
    """What driving one library over the conversation produced."""

    prompts: list[list[int]]  # per turn, the conversation positions in the prompt
    turn_seconds: list[float]  # per turn, first repeat
    seconds_all: list[float]  # total per repeat (the turns run)


def drive(
    make_peer: Callable[[], peers.WindowPeer],
    conv: Conversation,
    turns: int,
    repeats: int = 1,
    cap_seconds: float | None = None,
    on_turn: Callable[[peers.WindowPeer, int], None] | None = None,
) -> Run:
    """Run `turns` turns (user message in, prompt out, reply appended) `repeats`
    times; the time of a turn is the library's user() + assistant(). With a cap,
    the first repeat stops after the turn that passes it (and there are no more)."""
    prompts: list[list[int]] = []
    turn_seconds: list[float] = []
    seconds_all: list[float] = []
    perf = time.perf_counter
    for repeat in range(repeats):
        peer = make_peer()
        peer.start(conv.system)
        gc.collect()
        elapsed = 0.0
        for turn, (user_text, reply_text) in enumerate(conv.pairs[:turns]):
            started = perf()
            prompt = peer.user(user_text)
            peer.assistant(reply_text)
            took = perf() - started
            elapsed += took
            if repeat == 0:
                prompts.append([peer.source(m) for m in prompt])
                turn_seconds.append(took)
                if on_turn is not None:
                    on_turn(peer, turn)
                if cap_seconds is not None and elapsed > cap_seconds:
                    seconds_all.append(elapsed)
                    return Run(prompts, turn_seconds, seconds_all)
        seconds_all.append(elapsed)
        del peer
        gc.collect()
    return Run(prompts, turn_seconds, seconds_all)


@dataclass
class WindowRow:
    library: str
    distribution: str = ""
    status: str = "ok"  # ok | partial (fewer turns, time extrapolated) | skipped | failed
    reason: str = ""
    turns: int = 0  # turns the time is for
    turns_run: int = 0  # turns run (reuse and fill are over these)
    repeats: int = 1
    mean_reuse: float | None = None  # turns 2.. (the first turn has nothing to reuse)
    mean_fill: float | None = None  # mean prompt tokens / budget, every turn
    max_prompt: int | None = None
    over_budget: int | None = None  # turns whose prompt is over the budget
    mean_new_tokens: float | None = None  # prompt tokens after the reused prefix, per turn
    system_kept: float | None = None  # share of turns whose prompt holds the system prompt
    ends_on_user: bool | None = None  # every prompt ends with this turn's user message
    seconds: float | None = None  # total time of `turns` turns (measured or estimated)
    seconds_measured: float | None = None  # time of the turns run (best repeat)
    seconds_all: list[float] = field(default_factory=list)
    time_kind: str = "measured"  # measured | sampled | extrapolated
    note: str = ""
    prompt_tokens: list[int] = field(default_factory=list)
    reused_tokens: list[int] = field(default_factory=list)


def prefix_tokens(previous: Sequence[int], current: Sequence[int], sizes: Sequence[int]) -> int:
    """Tokens of the longest common head of two prompts, whole messages compared
    by their position in the conversation."""
    total = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        total += sizes[a]
    return total


def measure(row: WindowRow, run: Run, conv: Conversation) -> None:
    """Fill the row's reuse, fill and budget figures from the prompts of a run."""
    sizes = conv.sizes
    prompts = run.prompts
    tokens = [peers.PRIMING_TOKENS + sum(sizes[k] for k in p) for p in prompts]
    reused = [0] + [prefix_tokens(a, b, sizes) for a, b in itertools.pairwise(prompts)]
    row.turns_run = len(prompts)
    row.prompt_tokens, row.reused_tokens = tokens, reused
    row.mean_reuse = (
        statistics.fmean(r / t for r, t in zip(reused[1:], tokens[1:], strict=True))
        if len(prompts) > 1
        else None
    )
    row.mean_fill = statistics.fmean(tokens) / BUDGET
    row.max_prompt = max(tokens)
    row.over_budget = sum(t > BUDGET for t in tokens)
    row.mean_new_tokens = statistics.fmean(t - r for t, r in zip(tokens, reused, strict=True))
    row.system_kept = statistics.fmean(bool(p) and p[0] == 0 for p in prompts)
    row.ends_on_user = all(p and p[-1] == conv.user_index(turn) for turn, p in enumerate(prompts))


EXTRAPOLATION_EXPONENT = 2.0


def extrapolate(run: Run, turns: int) -> float:
    """Estimated total of `turns` turns from a run stopped early: the measured
    turns, plus per-turn time = c * n^2 for the rest (n = messages in the history),
    c fitted (geometric mean) over the second half of the turns run. Quadratic
    because that is how the stopped peers grow per turn: LlamaIndex's get()
    re-counts the joined remaining text once per message it drops; Agent
    Framework's truncation re-sums the included tokens once per group it walks,
    from the oldest, excluded ones included. Where the measured growth is steeper
    (while the kept part is still a large share of the history) this underestimates."""
    measured = sum(run.turn_seconds)
    done = len(run.turn_seconds)
    logs = [
        math.log(s) - EXTRAPOLATION_EXPONENT * math.log(2 * t + 2)
        for t, s in enumerate(run.turn_seconds)
        if t >= done // 2 and s > 0
    ]
    c = math.exp(statistics.fmean(logs))
    return measured + sum(c * (2 * t + 2) ** EXTRAPOLATION_EXPONENT for t in range(done, turns))


def run_row(
    row: WindowRow,
    make_peer: Callable[[], peers.WindowPeer],
    conv: Conversation,
    turns: int,
    repeats: int = 1,
    cap_seconds: float | None = None,
    on_turn: Callable[[peers.WindowPeer, int], None] | None = None,
) -> Run | None:
    row.turns, row.repeats = turns, repeats
    try:
        run = drive(make_peer, conv, turns, repeats, cap_seconds, on_turn)
    except peers.Unavailable as error:
        row.status, row.reason = "skipped", str(error)
        return None
    except Exception as error:  # report a broken peer, keep the run going
        row.status, row.reason = "failed", repr(error)
        return None
    measure(row, run, conv)
    row.seconds_all = run.seconds_all
    row.seconds_measured = min(run.seconds_all)
    if row.turns_run < turns:
        row.status = "partial"
        row.repeats = 1
        row.seconds = extrapolate(run, turns)
        row.time_kind = "extrapolated"
        row.note = (
            f"stopped after {row.turns_run:,} turns ({row.seconds_measured:,.0f} s, cap "
            f"{cap_seconds:.0f} s); reuse and fill are over those turns; the time of "
            f"{turns:,} turns is extrapolated (per-turn time ~ history^2, fitted on the "
            "second half of the turns run)"
        )
    else:
        row.seconds = row.seconds_measured
    return run


# --- LangChain: selection from the memoized run, time from sampled turns --------------


def time_langchain_sampled(
    row: WindowRow, conv: Conversation, turns: int, every: int, reference: list[list[int]] | None
) -> None:
    """trim_messages with the plain counter re-tokenizes the whole conversation on
    every call (~90 µs per message here), so 2,000 turns would take minutes: time
    every `every`-th turn (the conversation brought that far untimed), and scale
    the mean to all turns. Each sampled prompt is checked against the memoized run."""
    peer = peers.LangchainWindowPeer(BUDGET)
    try:
        peer.start(conv.system)
    except peers.Unavailable as error:
        row.status, row.reason = "skipped", str(error)
        return
    sampled = list(range(every // 2, turns, every))
    times: list[float] = []
    mismatches = 0
    done = 0
    perf = time.perf_counter
    for turn in sampled:
        peer.preload(conv.pairs[done:turn])
        user_text, reply_text = conv.pairs[turn]
        gc.collect()
        started = perf()
        prompt = peer.user(user_text)
        peer.assistant(reply_text)
        times.append(perf() - started)
        done = turn + 1
        if reference is not None and [peer.source(m) for m in prompt] != reference[turn]:
            mismatches += 1
    row.turns, row.repeats = turns, 1
    row.seconds_measured = sum(times)
    row.seconds_all = times
    row.seconds = statistics.fmean(times) * turns
    row.time_kind = "sampled"
    row.note = (
        f"time: {len(sampled)} turns timed (every {every}th, conversation brought there "
        f"untimed), mean x {turns:,}; prompts: the memoized run's, identical on the "
        f"sampled turns ({len(sampled) - mismatches}/{len(sampled)} match)"
    )
    if mismatches:
        row.note += " -- MISMATCH: selections differ"


# --- the suite -------------------------------------------------------------------------


@dataclass
class Settings:
    turns: int
    repeats: int  # for the fast rows
    langchain_every: int
    # LlamaIndex runs until its measured time alone is LLAMAINDEX_MARGIN x the
    # speed target x chathistory's total (so the measured part settles the
    # target), within [llamaindex_min, llamaindex_cap] seconds.
    llamaindex_min: float
    llamaindex_cap: float
    agent_framework_cap: float


def settings(quick: bool) -> Settings:
    if quick:
        return Settings(
            QUICK_TURNS,
            1,
            langchain_every=20,
            llamaindex_min=5.0,
            llamaindex_cap=10.0,
            agent_framework_cap=20.0,
        )
    return Settings(
        TURNS,
        3,
        langchain_every=40,
        llamaindex_min=20.0,
        llamaindex_cap=60.0,
        agent_framework_cap=90.0,
    )


LLAMAINDEX_MARGIN = 1.2


def semantic_kernel_counts(conv: Conversation, turns: int) -> tuple[int, int, int]:
    """Message counts for the count-based reducer: as many messages as the budget
    holds at this conversation's mean message size, trimmed to 62.5% of that.
    Returns (target_count, threshold_count, mean message tokens rounded)."""
    mean = statistics.fmean(conv.sizes[1 : 2 * turns + 1])
    capacity = int((BUDGET - peers.PRIMING_TOKENS) // mean)  # messages, the system one included
    target = round(capacity * PEER_LOW_WATER_RATIO)
    return target, capacity - target, round(mean)


def run(quick: bool = False, out: Callable[[str], None] = print) -> dict[str, Any]:
    warnings.simplefilter("ignore")  # peers warn about experimental and deprecated classes
    started = time.perf_counter()
    plan = settings(quick)
    env = environment()
    out("chathistory context-window benchmark" + (" (quick)" if quick else ""))
    out(f"python {env['python']} on {env['platform']}, {env['cpus']} cpus")
    out(
        "tokenizer (all libraries): bpe-openai o200k_base count() + 3/message + the role "
        "(chathistory's count), 3 priming per prompt"
    )
    out("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))

    loading = time.perf_counter()
    conv = conversation(plan.turns)
    turns = plan.turns
    out(
        f"data: {turns:,} turns (user + assistant) from the first {conv.messages_read:,} "
        f"ShareGPT messages, read and counted in {time.perf_counter() - loading:.1f} s; "
        f"skipped {conv.skipped_long} messages over {MAX_MESSAGE_TOKENS:,} tokens "
        f"(and {conv.skipped_with_long} replies/questions paired with them), "
        f"{conv.skipped_order} to keep user/assistant alternation; "
        f"system prompt {conv.sizes[0]} tokens; messages "
        f"{statistics.fmean(conv.sizes[1:]):.0f} tokens on average "
        f"(median {statistics.median(conv.sizes[1:]):.0f}, max {max(conv.sizes[1:]):,})"
    )

    rows: list[WindowRow] = []
    checks: dict[str, Any] = {}

    def add(row: WindowRow) -> WindowRow:
        rows.append(row)
        return row

    # chathistory -------------------------------------------------------------------
    low_water = 6000
    default = add(WindowRow("chathistory ContextWindow(8000) default", "chathistory"))
    plans_seen: list[Any] = []

    def keep_plan(peer: peers.WindowPeer, turn: int) -> None:
        plans_seen.append(peer.plans[-1])  # type: ignore[attr-defined]

    default_run = run_row(
        default,
        lambda: peers.ChathistoryWindowPeer(BUDGET),
        conv,
        turns,
        plan.repeats,
        on_turn=keep_plan,
    )
    if default_run is not None:
        from chathistory.window import ContextWindow

        window = ContextWindow(BUDGET)
        default.note = (
            f"low water {window.low_water_tokens:,}, pinned head {window.pin_tokens:,}, "
            f"counter {window.counter.name}"
        )
        # chathistory's own plan figures against the common measure.
        checks["chathistory_plan_total_mismatches"] = sum(
            p.total_tokens != t for p, t in zip(plans_seen, default.prompt_tokens, strict=True)
        )
        checks["chathistory_plan_reuse_mismatches"] = sum(
            p.reused_prefix_tokens != r
            for p, r in zip(plans_seen[1:], default.reused_tokens[1:], strict=True)
        )
        # The common counter against chathistory's cached counts, message by message.
        counted = {}
        for p in plans_seen:
            for m in p.messages:
                counted[m.id] = m.token_counts[peers.ENCODING]
        checks["counted_messages_compared"] = len(counted)
        checks["counter_mismatches"] = sum(
            1
            for p, positions in zip(plans_seen, default_run.prompts, strict=True)
            for m, k in zip(p.messages, positions, strict=True)
            if m.token_counts[peers.ENCODING] != conv.sizes[k]
        )
    plans_seen.clear()

    run_row(
        add(WindowRow(f"chathistory ContextWindow 8000->{low_water}, pin 0", "chathistory")),
        lambda: peers.ChathistoryWindowPeer(BUDGET, low_water_tokens=low_water, pin_tokens=0),
        conv,
        turns,
        plan.repeats,
    )
    run_row(
        add(WindowRow("chathistory by_tokens(8000, keep_system) sliding", "chathistory")),
        lambda: peers.ChathistorySlidingPeer(BUDGET),
        conv,
        turns,
        plan.repeats,
    )

    # LangChain ------------------------------------------------------------------------
    memo_row = WindowRow("LangChain trim_messages + app-memoized counts", "langchain-core")
    memo_run = run_row(
        memo_row, lambda: peers.LangchainWindowPeer(BUDGET, memoize=True), conv, turns
    )
    memo_row.note = "for information: an app memoizing counts per message object by hand"
    langchain = add(WindowRow("LangChain trim_messages (sliding)", "langchain-core"))
    if memo_run is not None:
        measure(langchain, memo_run, conv)
    time_langchain_sampled(
        langchain, conv, turns, plan.langchain_every, memo_run.prompts if memo_run else None
    )
    add(memo_row)

    # Semantic Kernel -------------------------------------------------------------------
    target, threshold, mean_tokens = semantic_kernel_counts(conv, turns)
    sk = add(
        WindowRow(
            f"Semantic Kernel ChatHistoryTruncationReducer({target}, {threshold})",
            "semantic-kernel",
        )
    )
    run_row(
        sk,
        lambda: peers.SemanticKernelWindowPeer(BUDGET, target, threshold),
        conv,
        turns,
        plan.repeats,
    )
    sk.note = (
        f"count-based: at most {target + threshold} messages (the system one included), "
        f"{BUDGET - peers.PRIMING_TOKENS:,} tokens / {mean_tokens} (this conversation's mean "
        f"message), reduced to {target} ({PEER_LOW_WATER_RATIO:.1%})"
    )
    # For information: the largest count limit with no turn over the budget, found
    # in hindsight on this very conversation (an app cannot know it in advance).
    if sk.status == "ok" and sk.over_budget:
        capacity = target + threshold
        while capacity > 2:
            capacity -= 1
            tuned_target = max(1, round(capacity * PEER_LOW_WATER_RATIO))
            tuned = WindowRow(
                f"Semantic Kernel ChatHistoryTruncationReducer({tuned_target}, "
                f"{capacity - tuned_target}) tuned in hindsight",
                "semantic-kernel",
            )
            run_row(
                tuned,
                lambda t=tuned_target, c=capacity: peers.SemanticKernelWindowPeer(  # type: ignore[misc]
                    BUDGET, t, c - t
                ),
                conv,
                turns,
            )
            if tuned.status != "ok" or not tuned.over_budget:
                tuned.note = (
                    "for information: the largest count limit (same 62.5% ratio) with no turn "
                    "over the budget on this conversation, found by trying smaller limits"
                )
                add(tuned)
                break

    # Agent Framework ----------------------------------------------------------------
    compact_to = int((BUDGET - peers.PRIMING_TOKENS) * PEER_LOW_WATER_RATIO)
    af = add(
        WindowRow(
            f"Agent Framework TruncationStrategy({BUDGET - peers.PRIMING_TOKENS} -> {compact_to})",
            "agent-framework-core",
        )
    )
    run_row(
        af,
        lambda: peers.AgentFrameworkWindowPeer(BUDGET, compact_to),
        conv,
        turns,
        cap_seconds=plan.agent_framework_cap,
    )
    if af.status == "ok":
        af.note = (
            "tokens, hysteresis at its own default ratio (0.5/0.8 of the budget); "
            "apply_compaction each turn; one run"
        )

    # LlamaIndex ------------------------------------------------------------------------
    llama = add(WindowRow("LlamaIndex ChatMemoryBuffer(token_limit=8000)", "llama-index-core"))
    llamaindex_cap = plan.llamaindex_cap
    if default.seconds is not None:
        wanted = LLAMAINDEX_MARGIN * PEER_SPEEDUP_TARGET * default.seconds
        llamaindex_cap = min(plan.llamaindex_cap, max(plan.llamaindex_min, wanted))
    run_row(
        llama,
        lambda: peers.LlamaindexWindowPeer(BUDGET),
        conv,
        turns,
        cap_seconds=llamaindex_cap,
    )
    llama.note = (
        "system prompt as a prefix outside the buffer, get(initial_token_count=...) as its "
        "chat engines do; counts joined texts without per-message overhead. " + llama.note
    ).strip()

    results = report(rows, conv, turns, plan, checks, out)
    results["growth"] = growth(conv, quick, out)
    results.update(environment=env, quick=quick)
    results["seconds"] = time.perf_counter() - started
    out("")
    out(f"window benchmark took {results['seconds']:.0f} s")
    return results


# --- the window's cost as the conversation grows ---------------------------------------

GROWTH_SIZES = (1_000, 4_000, 16_000, 64_000)
GROWTH_TARGET = 1.5
"""``ContextWindow.plan()`` per turn at 64,000 messages within this factor of 1,000."""


GROWTH_ROUNDS = 5
"""The sizes take turns this many times; each size's time per turn is the median of its
rounds (one timing per size read up to 1.8x at one size or another in one run of three,
the ``by_tokens`` column flat beside it: the machine's hiccups, 2026-11-26)."""


def growth(conv: Conversation, quick: bool, out: Callable[[str], None]) -> dict[str, Any]:
    """Per turn (add one message, plan, commit) in an 8,000-token window over histories of
    1k-64k ShareGPT messages (the conversation's messages, cycled), against
    ``History.by_tokens`` per turn on the same histories: the plan's cost must follow the
    window, not the conversation (issue 18). Every history is built first; then the sizes
    take turns, ``GROWTH_ROUNDS`` rounds of ``turns / GROWTH_ROUNDS`` turns each, and a
    size's time is the median of its rounds."""

    texts = [t for pair in conv.pairs for t in pair]
    turns = 100 if quick else 300
    per_round = max(1, turns // GROWTH_ROUNDS)
    runs = {(size, window): _growth_run(size, texts, window=window)
            for size in GROWTH_SIZES for window in (False, True)}
    timed: dict[tuple[int, bool], list[float]] = {key: [] for key in runs}
    # what was built stays: out of the collector's young generations, as in a
    # long-running process (else each collection would walk all of it)
    gc.collect()
    gc.freeze()
    try:
        for k in range(GROWTH_ROUNDS):
            for key, run in runs.items():
                timed[key].append(run(k * per_round, per_round))
    finally:
        gc.unfreeze()
    per_turn = {size: statistics.median(timed[size, True]) for size in GROWTH_SIZES}
    rows = [[f"{size:,}", f"{per_turn[size] * 1e6:,.0f} us",
             f"{statistics.median(timed[size, False]) * 1e6:,.0f} us",
             f"{per_turn[size] / per_turn[GROWTH_SIZES[0]]:.2f}x"] for size in GROWTH_SIZES]
    ratio = per_turn[GROWTH_SIZES[-1]] / per_turn[GROWTH_SIZES[0]]
    out("")
    out(f"ContextWindow({BUDGET}) per turn as the conversation grows "
        f"(add + plan + commit, {per_round * GROWTH_ROUNDS} turns, the sizes taking turns "
        f"{GROWTH_ROUNDS} times, medians; ShareGPT messages)")
    print_table(["messages", "plan per turn", "by_tokens per turn", "vs 1,000"], rows, out)
    passed = ratio <= GROWTH_TARGET
    out(f"target: 64,000 within {GROWTH_TARGET:g}x of 1,000: {ratio:.2f}x {_verdict(passed)}")
    return {"per_turn_seconds": {str(k): v for k, v in per_turn.items()},
            "ratio_64k_1k": ratio, "target": GROWTH_TARGET, "passed": passed}


def _growth_run(size: int, texts: list[str], *, window: bool
                ) -> Callable[[int, int], float]:
    """A history of ``size`` messages of its own, and ``run(first, n)``: seconds per turn
    over ``n`` turns (add one message, the ``first``-th new one on, then plan + commit
    (``window``) or ``by_tokens``). The history is aligned from the end (every size has
    the same newest messages and the same new turns, so the windows hold the same
    messages and only the history's length differs)."""
    from chathistory import ContextWindow, History, Message

    messages = [(Message.user if i % 2 == 0 else Message.assistant)(
        texts[(i - size) % len(texts)]) for i in range(size)]
    history = History([Message.system(SYSTEM_PROMPT), *messages], counter="o200k_base")
    planner = ContextWindow(BUDGET, "o200k_base")
    if window:  # the first plan (selection) counts and reads the whole history once
        planner.plan(history)
        planner.commit()
    else:
        history.by_tokens(BUDGET, keep_system=True)

    def run(first: int, n: int) -> float:
        news = [Message.user(texts[i % len(texts)]) for i in range(first, first + n)]
        started = time.perf_counter()
        for message in news:
            history.add(message)
            if window:
                planner.plan(history)
                planner.commit()
            else:
                history.by_tokens(BUDGET, keep_system=True)
        return (time.perf_counter() - started) / n

    return run


# --- reporting -------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _int(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _fmt_seconds(value: float | None, kind: str = "measured") -> str:
    if value is None:
        return "-"
    mark = {"measured": "", "sampled": " est.", "extrapolated": " extrap."}[kind]
    if value >= 3600:
        return f"{value / 3600:,.1f} h{mark}"
    if value >= 1:
        return f"{value:,.2f} s{mark}"
    return f"{value * 1e3:,.1f} ms{mark}"


def _fmt_ratio(ratio: float | None, prefix: str = "") -> str:
    if ratio is None:
        return "-"
    return f"{prefix}{ratio:,.0f}x" if ratio >= 100 else f"{prefix}{ratio:.2f}x"


def report(
    rows: list[WindowRow],
    conv: Conversation,
    turns: int,
    plan: Settings,
    checks: dict[str, Any],
    out: Callable[[str], None],
) -> dict[str, Any]:
    default = rows[0]
    reference = default.seconds if default.status == "ok" else None
    out("")
    out(
        f"context window of {BUDGET:,} tokens over a {turns:,}-turn conversation "
        "(reuse: mean over turns 2.. of the prompt's head identical to the previous prompt; "
        "fill: mean prompt / budget; time: all turns, select + append, "
        f"best of {plan.repeats} for the fast rows)"
    )
    table = []
    notes = []
    for row in rows:
        if row.status in ("skipped", "failed"):
            table.append([row.library, row.status, *[""] * 7])
            notes.append(f"{row.library}: {row.status}: {row.reason}")
            continue
        ratio = None if reference is None or row.seconds is None else row.seconds / reference
        table.append(
            [
                row.library,
                f"{row.turns_run:,}",
                _pct(row.mean_reuse),
                _pct(row.mean_fill),
                _int(row.max_prompt),
                _int(row.over_budget),
                _int(row.mean_new_tokens),
                _fmt_seconds(row.seconds, row.time_kind),
                _fmt_ratio(ratio),
            ]
        )
        if row.note:
            notes.append(f"{row.library}: {row.note}")
        if row.system_kept is not None and row.system_kept < 1:
            notes.append(
                f"{row.library}: system prompt missing from "
                f"{1 - row.system_kept:.0%} of the prompts"
            )
        if row.ends_on_user is False:
            notes.append(f"{row.library}: some prompts do not end on the turn's user message")
    print_table(
        [
            "library",
            "turns",
            "reuse",
            "prompt/budget",
            "max prompt",
            "over budget",
            "new tok/turn",
            f"time, {turns:,} turns",
            "vs chathistory",
        ],
        table,
        out,
    )
    for note in notes:
        out(f"  note: {note}")
    if checks:
        out(
            "  check: chathistory's own WindowPlan figures vs the common measure: "
            f"{checks['chathistory_plan_total_mismatches']} total / "
            f"{checks['chathistory_plan_reuse_mismatches']} reuse mismatches; the common "
            f"counter vs chathistory's cached counts: {checks['counter_mismatches']} mismatches "
            f"over {checks['counted_messages_compared']:,} messages"
        )
    by_name = {row.library: row for row in rows}
    sliding = by_name.get("chathistory by_tokens(8000, keep_system) sliding")
    chunked = next(
        (r for r in rows if r.library.startswith("chathistory ContextWindow 8000->")), None
    )
    if sliding and chunked and sliding.mean_reuse is not None and chunked.mean_reuse is not None:
        out(
            f"  reference (issue): sliding about {ISSUE_SLIDING_REUSE:.0%} reuse, here "
            f"{sliding.mean_reuse:.1%}; chunked 8000->6000 about "
            f"{ISSUE_CHUNKED_8000_6000_REUSE:.0%}, here {chunked.mean_reuse:.1%}"
        )

    # Targets ------------------------------------------------------------------------
    targets: list[dict[str, Any]] = []

    def target(what: str, value: str, passed: bool | None) -> None:
        targets.append({"target": what, "value": value, "passed": passed})

    ok = default.status == "ok"
    target(
        f"{default.library}: mean prefix reuse >= {REUSE_TARGET:.0%}",
        _pct(default.mean_reuse),
        ok and default.mean_reuse is not None and default.mean_reuse >= REUSE_TARGET,
    )
    target(
        f"{default.library}: mean prompt > {FILL_TARGET:.0%} of the budget",
        _pct(default.mean_fill),
        ok and default.mean_fill is not None and default.mean_fill > FILL_TARGET,
    )
    target(
        f"{default.library}: no turn over the budget",
        f"{default.over_budget} over, max {default.max_prompt:,}" if ok else "-",
        ok and default.over_budget == 0,
    )
    for name in (
        "LangChain trim_messages (sliding)",
        "LlamaIndex ChatMemoryBuffer(token_limit=8000)",
    ):
        row = by_name.get(name)
        if row is None or row.seconds is None or reference is None:
            target(f"{name}: time >= {PEER_SPEEDUP_TARGET:g}x chathistory's", "-", None)
            continue
        ratio = row.seconds / reference
        if row.time_kind == "extrapolated":
            # What was measured is already a lower bound: judge on it when it suffices.
            floor = (row.seconds_measured or 0.0) / reference
            value = (
                f"{_fmt_ratio(floor, '>')} measured ({row.turns_run:,} of {turns:,} turns), "
                f"{_fmt_ratio(ratio)} extrapolated"
            )
            passed = floor >= PEER_SPEEDUP_TARGET or ratio >= PEER_SPEEDUP_TARGET
        else:
            value = _fmt_ratio(ratio) + (
                " (sampled turns, scaled)" if row.time_kind == "sampled" else ""
            )
            passed = ratio >= PEER_SPEEDUP_TARGET
        target(f"{name}: time >= {PEER_SPEEDUP_TARGET:g}x chathistory's", value, passed)
    out("")
    out("targets")
    print_table(
        ["target", "value", ""],
        [[t["target"], t["value"], _verdict(t["passed"])] for t in targets],
        out,
    )

    rows_json = []
    for row in rows:
        item = dict(row.__dict__)
        # Per-turn figures stay out of the file (they would make it ~0.5 MB).
        del item["prompt_tokens"], item["reused_tokens"]
        item["ratio_vs_chathistory"] = (
            None if reference is None or row.seconds is None else row.seconds / reference
        )
        rows_json.append(item)
    return {
        "settings": {
            "budget": BUDGET,
            "turns": turns,
            "repeats": plan.repeats,
            "langchain_sample_every": plan.langchain_every,
            "llamaindex_min_seconds": plan.llamaindex_min,
            "llamaindex_cap_seconds": plan.llamaindex_cap,
            "agent_framework_cap_seconds": plan.agent_framework_cap,
            "max_message_tokens": MAX_MESSAGE_TOKENS,
            "system_prompt": SYSTEM_PROMPT,
            "reuse": "mean over turns 2..N; first turn excluded (nothing to reuse)",
            "fill": "mean over all turns of prompt tokens (with 3 priming) / budget",
        },
        "conversation": {
            "turns": turns,
            "messages_read": conv.messages_read,
            "skipped_long": conv.skipped_long,
            "skipped_with_long": conv.skipped_with_long,
            "skipped_order": conv.skipped_order,
            "system_tokens": conv.sizes[0],
            "mean_message_tokens": statistics.fmean(conv.sizes[1:]),
        },
        "checks": checks,
        "rows": rows_json,
        "targets": targets,
    }
