"""Context benchmark (issue 44): timed replays judged by a provider-cache simulator.

Two seeded replays with a clock, each run through chathistory's context policies and the
peers' (``bench.cache_peers``) at 32k and 128k windows:

- **chat**: one conversation of real ShareGPT turns (``bench.window.conversation``) over
  several sessions hours apart; within a session a turn every 20 s to 2.5 min, and about
  5% of turns after a 6-30 minute pause (past Anthropic's and OpenAI's 5-minute TTL).
- **agent**: coding-agent sessions in the Responses item shapes: per task a user
  message, then model steps each with a reasoning item and 1-3 parallel tool calls whose
  outputs are 60-30,000 tokens of real text (source files of installed packages read
  from site-packages, and their listings), then an answer. Model steps take seconds,
  test runs minutes, the user pauses up to 25 minutes. Planted facts: a constraint in
  the first user message, values in tool outputs and in later user messages; later user
  messages ask for them, and the request after each records which message it needs.

Every prompt is put in the provider's order and block structure with
``chathistory.formats`` (Anthropic per block, with the cache plan's breakpoints and TTL;
OpenAI and Gemini per message) and sent, at its time, to ``bench.cache_sim`` (written from
the providers' documents, not from ``chathistory.cache``). Each policy's prompts get a
cache plan (``plan_cache(..., previous=..., pinned=head)``, the window's own with
``cache=``), whose predicted cost is set beside the simulator's.

Reported per replay x window x provider x policy: cached share and cost relative to no
caching (the simulator's, all requests), requests over the budget, invalid requests (a
result without its call, a call without its result, an Anthropic request the API
refuses), requests whose first message after system/developer is not a user message,
the share of requests holding the anchor (the first user message), planted facts
present when asked for, the plan's cached share, and the plan's cost relative to
no caching over the simulator's (1.00: the plan predicts the simulator's cost).
"""

from __future__ import annotations

import copy
import json
import random
import site
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import cache_peers, cache_sim, peers, window
from .foundation import environment, print_table

PROVIDERS = (("anthropic", "claude-sonnet-4-6"), ("openai", "gpt-4o"),
             ("gemini", "gemini-2.5-flash"))
"""The simulator's models; gpt-4o's cached input is 50% off, the discount chathistory's
OpenAI rules assume, so that the plan and the simulator differ by the clock only."""
BUDGETS = (32_000, 128_000)
CHAT_TURNS, QUICK_CHAT_TURNS = 1_000, 300
CHAT_SESSIONS = 5
AGENT_REQUESTS, QUICK_AGENT_REQUESTS = 260, 120
SEED = 44
TOOL_TOKENS = (60, 30_000)
GROUP_TOKENS = 30_000
"""A model step's parallel tool outputs together at most: the newest group must fit a
32k window beside the system prompt (an agent harness cuts longer outputs)."""
AGENT_SYSTEM = ("You are a coding agent working in the user's repository. Use the tools to "
                "read files, search and run the tests; keep to the user's constraints.")
USER_TASKS = (
    "Find why the import of the config module is slow and make it lazy.",
    "The test suite has a flaky test around timeouts: find it and fix it.",
    "Add type hints to the public functions of the parser module.",
    "Refactor the retry helper so it takes a clock; keep the behaviour.",
    "Look at how errors are mapped to HTTP status codes and list the gaps.",
    "Write a test that covers the empty-input path of the tokenizer.",
)


@dataclass
class Replay:
    """A replay: its messages (system first), the model requests (each: how many messages
    its prompt may draw on, and the time it is sent) and what later requests ask for."""

    name: str
    messages: list[Any]
    requests: list[int]
    times: list[float]
    anchor_id: str
    asks: list[tuple[int, str, str]] = field(default_factory=list)
    """(request index, id of the message holding the fact, the fact's label)."""
    tool_output_tokens: list[int] = field(default_factory=list)


# --- the chat replay ------------------------------------------------------------------


def chat_replay(turns: int, seed: int = SEED) -> Replay:
    """The window suite's ShareGPT conversation with a clock: ``CHAT_SESSIONS`` sessions
    3-12 hours apart; a turn every 20-150 s, 5% of them after a 6-30 minute pause."""
    from chathistory import Message

    rng = random.Random(seed)
    conv = window.conversation(turns)
    messages = [Message.system(conv.system)]
    requests, times = [], []
    clock = 0.0
    per_session = -(-turns // CHAT_SESSIONS)
    for i, (user, reply) in enumerate(conv.pairs):
        if i and i % per_session == 0:
            clock += rng.uniform(3, 12) * 3600
        elif i:
            clock += (rng.uniform(6, 30) * 60 if rng.random() < 0.05
                      else rng.uniform(20, 150))
        messages.append(Message.user(user))
        requests.append(len(messages))
        times.append(clock)
        messages.append(Message.assistant(reply))
    return Replay(f"chat {turns} turns", messages, requests, times, messages[1].id)


# --- the agent replay -----------------------------------------------------------------


class SourceText:
    """Real text for tool outputs: the .py files of installed packages (site-packages),
    in a seeded order, cut to a token count."""

    def __init__(self, rng: random.Random) -> None:
        roots = [Path(p) for p in site.getsitepackages()]
        files = sorted(str(p) for root in roots for p in root.glob("*/*.py"))
        rng.shuffle(files)
        self.files = files
        self.next = 0

    def take(self, tokens: int) -> str:
        parts, have = [], 0
        while have < tokens:
            path = self.files[self.next % len(self.files)]
            self.next += 1
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not text.strip():
                continue
            parts.append(f"==> {path.split('site-packages/')[-1]} <==\n{text}")
            have += len(text) // 6
        joined = "\n".join(parts)
        cut = joined[: tokens * 6]
        while peers.count_text(cut) > tokens and len(cut) > 16:
            cut = cut[: int(len(cut) * 0.95)]
        return cut

    def listing(self, count: int) -> str:
        start = self.next
        self.next += count
        return "\n".join(self.files[(start + i) % len(self.files)].split("site-packages/")[-1]
                         for i in range(count))


FACTS = (  # (label, where it is planted, the sentence)
    ("constraint", "first user message",
     "Constraint: keep Python 3.9 compatibility and never edit files under vendor/; "
     "the release code name is ORCHID-41."),
    ("retry limit", "tool output", "RETRY_LIMIT = 7  # agreed with ops, ticket OPS-3318"),
    ("port", "user message", "By the way, the staging database listens on port 6544."),
    ("timeout", "tool output", "DEFAULT_TIMEOUT_SECONDS = 37.5  # measured p99 x 3"),
    ("owner", "user message", "Note: the parser module's owner is Dana Whitfield; ask her "
     "before changing its public names."),
    ("seed", "tool output", "FLAKY_TEST_SEED = 90210  # reproduces the timeout failure"),
    ("budget", "user message", "Keep the change under 400 lines in total, reviewers asked."),
    ("checksum", "tool output", "EXPECTED_CHECKSUM = 'c0ffee42d00d'  # golden file"),
)


def agent_replay(requests_wanted: int, seed: int = SEED) -> Replay:
    """A seeded coding-agent session of about ``requests_wanted`` model requests (see the
    module docstring); facts are planted along the way and asked for 4-15 tasks
    later (the first user message's constraint 20-35 tasks in)."""
    from chathistory import Message
    from chathistory.formats import from_openai_responses

    rng = random.Random(seed)
    source = SourceText(rng)
    items: list[dict[str, Any]] = []
    item_times: list[float] = []  # per item: when it exists
    request_items: list[int] = []  # a model request before item i (an assistant item)
    request_times: list[float] = []
    planted: dict[int, int] = {}  # fact index -> item index holding it
    asks: list[tuple[int, int]] = []  # (request number, fact index)
    outputs: list[int] = []
    clock, n, task = 0.0, 0, 0
    pending_asks: list[tuple[int, int]] = []  # (task to ask at, fact)
    user_facts = [i for i, f in enumerate(FACTS) if f[1] == "user message"]
    tool_facts = [i for i, f in enumerate(FACTS) if f[1] == "tool output"]

    def add(item: dict[str, Any]) -> int:
        items.append(item)
        item_times.append(clock)
        return len(items) - 1

    def model_request() -> None:
        request_items.append(len(items))
        request_times.append(clock)

    while len(request_items) < requests_wanted:
        text = USER_TASKS[task % len(USER_TASKS)]
        facts_here = []
        if task == 0:
            text = f"{text}\n\n{FACTS[0][2]}"
            facts_here.append(0)
            pending_asks.append((rng.randint(20, 35), 0))
        if task in (3, 12, 22) and user_facts:
            fact = user_facts.pop(0)
            text = f"{FACTS[fact][2]}\n\n{text}"
            facts_here.append(fact)
            pending_asks.append((task + rng.randint(4, 15), fact))
        asked = [f for t, f in pending_asks if t == task]
        for fact in asked:
            text += f"\n\nBefore you go on: remind me of the {FACTS[fact][0]} I mentioned earlier."
        index = add({"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": text}]})
        for fact in facts_here:
            planted[fact] = index
        for fact in asked:
            asks.append((len(request_items), fact))
        clock += rng.uniform(0.5, 2)
        for _ in range(rng.randint(2, 8)):
            model_request()
            clock += rng.uniform(2, 20)  # the model thinks and calls tools
            n += 1
            add({"type": "reasoning", "id": f"rs_{n:05d}",
                 "summary": [{"type": "summary_text", "text": source.take(80)}]})
            calls = []
            for _ in range(rng.choice((1, 1, 2, 3))):
                n += 1
                name = rng.choice(("read_file", "read_file", "grep", "list_files", "run_tests"))
                calls.append((n, name))
                add({"type": "function_call", "id": f"fc_{n:05d}", "call_id": f"call_{n:05d}",
                     "name": name, "arguments": json.dumps({"path": source.listing(1)})})
            slowest, group = 0.0, 0
            for call, name in calls:
                tokens = round(TOOL_TOKENS[0] * (TOOL_TOKENS[1] / TOOL_TOKENS[0])
                               ** rng.random() ** 1.3)
                tokens = max(TOOL_TOKENS[0], min(tokens, GROUP_TOKENS - group))
                output = (source.listing(max(8, tokens // 10)) if name == "list_files"
                          else source.take(tokens))
                if name == "run_tests":
                    slowest = max(slowest, rng.uniform(60, 300))
                if tool_facts and name in ("read_file", "run_tests") and rng.random() < 0.05:
                    fact = tool_facts.pop(0)
                    cut = len(output) // 2
                    output = f"{output[:cut]}\n{FACTS[fact][2]}\n{output[cut:]}"
                    pending_asks.append((task + rng.randint(4, 15), fact))
                    planted[fact] = len(items)
                outputs.append(peers.count_text(output))
                group += outputs[-1]
                add({"type": "function_call_output", "call_id": f"call_{call:05d}",
                     "output": output})
            clock += max(slowest, rng.uniform(0.1, 3))
        model_request()
        clock += rng.uniform(3, 30)
        n += 1
        add({"type": "reasoning", "id": f"rs_{n:05d}",
             "summary": [{"type": "summary_text", "text": source.take(80)}]})
        add({"type": "message", "id": f"msg_{n:05d}", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": source.take(300), "annotations": []}]})
        clock += (rng.uniform(5, 25) * 60 if rng.random() < 0.25 else rng.uniform(20, 240))
        task += 1
    messages = [Message.system(AGENT_SYSTEM), *from_openai_responses(items)]
    # items -> messages: a run of assistant items is one message, any other item one
    owner, m = [], 0
    for i, item in enumerate(items):
        if not (_assistant_item(item) and i and _assistant_item(items[i - 1])):
            m += 1
        owner.append(m)
    assert m == len(messages) - 1, (m, len(messages))
    requests = [owner[i] for i in request_items]
    ask_list = [(r, messages[owner[planted[f]]].id, FACTS[f][0]) for r, f in asks
                if f in planted and r < len(requests)]
    return Replay(f"agent {len(requests)} requests", messages, requests, request_times,
                  messages[1].id, ask_list, outputs)


def _assistant_item(item: dict[str, Any]) -> bool:
    return item["type"] in ("reasoning", "function_call") or (
        item["type"] == "message" and item.get("role") == "assistant")


# --- the policies ---------------------------------------------------------------------


@dataclass
class Run:
    """A policy's prompts over a replay (chathistory messages), with the pinned head per
    prompt and, for the cost-aware window, its own cache plans (per provider)."""

    policy: str
    prompts: list[list[Any]] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    by_provider: dict[str, tuple[list[list[Any]], list[Any]]] = field(default_factory=dict)
    status: str = "ok"
    note: str = ""


def drive(replay: Replay, add: Callable[[Any], None],
          lay_out: Callable[[], list[Any]]) -> tuple[list[list[Any]], str]:
    """``add`` each message as it comes; before each request ``lay_out`` its prompt."""
    prompts: list[list[Any]] = []
    done = 0
    try:
        for end in replay.requests:
            for message in replay.messages[done:end]:
                add(message)
            done = end
            prompts.append(list(lay_out()))
    except Exception as error:  # a policy that cannot lay out a request: reported
        return prompts, f"{error!r} at request {len(prompts) + 1}"
    return prompts, ""


def chathistory_runs(replay: Replay, budget: int, cost_aware: bool = True) -> list[Run]:
    from chathistory import History
    from chathistory.cache.rules import cache_rules
    from chathistory.window import ContextWindow

    def windowed(name: str, **options: Any) -> tuple[Run, list[Any]]:
        messages = [copy.copy(m) for m in replay.messages]  # window state lives on them
        history = History(counter=peers.ENCODING)
        planner = ContextWindow(budget, peers.ENCODING, **options)
        run, plans = Run(name), []

        def lay_out() -> list[Any]:
            plan = planner.plan(history)
            planner.commit()
            run.heads.append(plan.head_count)
            plans.append(plan.cache_plan)
            return list(plan.messages)

        index = {id(c): original for c, original in zip(messages, replay.messages, strict=True)}
        saved = replay.messages
        replay.messages = messages
        prompts, error = drive(replay, history.add, lay_out)
        replay.messages = saved
        run.prompts = [[index.get(id(m), m) for m in p] for p in prompts]
        if error:
            run.status, run.note = "failed", error
        return run, plans

    runs = []
    history = History(counter=peers.ENCODING)
    sliding = Run(f"sliding: by_tokens({budget}, keep_system)")
    by_id = {m.id: m for m in replay.messages}
    prompts, error = drive(replay, history.add, lambda: [
        by_id[m.id] for m in history.by_tokens(budget, keep_system=True)])
    sliding.prompts = prompts
    if error:
        sliding.status, sliding.note = "failed", error
    runs.append(sliding)
    runs.append(windowed(f"default: ContextWindow({budget})")[0])
    if not cost_aware:
        return runs
    aware = Run(f"cost-aware: ContextWindow({budget}, cache=rules)")
    for provider, model in PROVIDERS:
        one, plans = windowed("cost-aware", cache=cache_rules(provider, model))
        aware.by_provider[provider] = (one.prompts, plans)
        if one.status != "ok":
            aware.status, aware.note = one.status, f"{provider}: {one.note}"
    runs.append(aware)
    return runs


def peer_runs(replay: Replay, budget: int) -> list[Run]:
    from chathistory.tokens import cached_count, get_counter

    counter = get_counter(peers.ENCODING)
    sizes = [cached_count(m, counter) for m in replay.messages[1:]]
    target, threshold = cache_peers.semantic_kernel_counts(sizes, budget)
    compact_to = int((budget - peers.PRIMING_TOKENS) * window.PEER_LOW_WATER_RATIO)
    makers: list[tuple[str, Callable[[], cache_peers.AgentPeer]]] = [
        ("LangChain trim_messages", lambda: cache_peers.LangchainAgentPeer(budget)),
        ("Agent Framework TruncationStrategy",
         lambda: cache_peers.agent_framework_truncation(budget, compact_to)),
        ("Agent Framework ContextWindowCompactionStrategy",
         lambda: cache_peers.agent_framework_context_window(budget)),
        ("Semantic Kernel ChatHistoryTruncationReducer",
         lambda: cache_peers.SemanticKernelAgentPeer(budget, target, threshold)),
        ("Agents SDK ToolOutputTrimmer", lambda: cache_peers.ToolOutputTrimmerPeer(budget)),
    ]
    runs = []
    for label, make in makers:
        try:
            peer = make()
        except ImportError as error:
            runs.append(Run(label, status="skipped", note=f"not importable: {error!r}"))
            continue
        prompts, error = drive(replay, peer.add, peer.prompt)
        run = Run(peer.name, prompts)
        if error:
            run.status, run.note = "failed", error
        if getattr(peer, "written", 0):
            run.note = f"wrote {peer.written} tool-result summaries of its own"
        runs.append(run)
    return runs


# --- encoding and checks --------------------------------------------------------------


class Encoder:
    """A prompt as the provider sees it, as simulator blocks: Anthropic's content blocks
    (``to_anthropic`` per message, the message's count spread over its blocks by their
    JSON size, the plan's breakpoints with its TTL), or one block per message (OpenAI's
    input items, Gemini's contents after the system instruction)."""

    def __init__(self) -> None:
        from chathistory.tokens import get_counter

        self.counter = get_counter(peers.ENCODING)
        self._anthropic: dict[str, list[tuple[str, int, bool]]] = {}

    def tokens(self, message: Any) -> int:
        from chathistory.tokens import cached_count

        return cached_count(message, self.counter)

    def anthropic_blocks(self, message: Any) -> list[tuple[str, int, bool]]:
        """(key, tokens, may hold cache_control) per block of ``message``."""
        found = self._anthropic.get(message.id)
        if found is None:
            from chathistory.formats import to_anthropic

            encoded = to_anthropic([message], drop_unsupported=True)
            if message.role in ("system", "developer"):
                system = encoded.get("system", [])
                raw = [{"type": "text", "text": system}] if isinstance(system, str) else system
            else:
                raw = [b for turn in encoded["messages"] for b in turn["content"]]
            sizes = [len(json.dumps(b)) for b in raw]
            total, blocks, given = self.tokens(message), [], 0
            for j, (block, size) in enumerate(zip(raw, sizes, strict=True)):
                share = (total - given if j == len(raw) - 1
                         else total * size // max(1, sum(sizes)))
                given += share
                blocks.append((f"{message.id}#{j}", share,
                               block["type"] not in ("thinking", "redacted_thinking")))
            found = self._anthropic[message.id] = blocks
        return found

    def request(self, provider: str, prompt: Sequence[Any], plan: Any,
                when: float) -> cache_sim.Request:
        ordered = (list(prompt) if provider == "openai" else
                   [m for m in prompt if m.role in ("system", "developer")]
                   + [m for m in prompt if m.role not in ("system", "developer")])
        blocks: list[cache_sim.Block] = []
        marks = set(plan.breakpoint_ids) if plan is not None else set()
        for m in ordered:
            if provider != "anthropic":
                blocks.append(cache_sim.Block(self.tokens(m), m.id))
                continue
            own = self.anthropic_blocks(m)
            last = max((j for j, (_, _, ok) in enumerate(own) if ok), default=None)
            for j, (key, tokens, _) in enumerate(own):
                ttl = plan.ttl if m.id in marks and j == last else None
                blocks.append(cache_sim.Block(tokens, key, ttl))
        return cache_sim.Request(when, tuple(blocks))


def user_first(prompt: Sequence[Any]) -> bool:
    """Whether the first message after the system/developer ones is a user message."""
    rest = [m for m in prompt if m.role not in ("system", "developer")]
    return bool(rest) and rest[0].role == "user"


def invalid(prompt: Sequence[Any], provider: str) -> str:
    """Why a provider refuses the prompt ('' when it does not): a tool result without its
    call before it, a call without its result; Anthropic also a tool_result block not
    answering the assistant turn right before it."""
    seen: set[str] = set()
    results = {r.call_id for m in prompt for r in m.tool_results}
    for m in prompt:
        for r in m.tool_results:
            if r.call_id not in seen:
                return "result without its call"
        for c in m.tool_calls:
            seen.add(c.id)
            if c.id not in results:
                return "call without its result"
    if provider == "anthropic":
        from chathistory.formats import to_anthropic

        try:
            turns = to_anthropic(list(prompt), drop_unsupported=True)["messages"]
        except Exception as error:
            return f"encoding: {error!r}"
        for before, turn in zip([None, *turns], turns, strict=False):
            asked = {b["id"] for b in (before or {}).get("content", []) if isinstance(b, dict)
                     and b.get("type") == "tool_use"}
            answered = {b["tool_use_id"] for b in turn["content"] if isinstance(b, dict)
                        and b.get("type") == "tool_result"}
            if not answered <= asked:
                return "tool_result not after its tool_use"
    return ""


# --- scoring --------------------------------------------------------------------------


@dataclass
class Row:
    policy: str
    status: str = "ok"
    note: str = ""
    requests: int = 0
    cached_share: float | None = None
    cost_ratio: float | None = None
    over_budget: int = 0
    invalid: int = 0
    not_user_first: int = 0
    anchor_share: float | None = None
    facts: str = "-"
    plan_cached_share: float | None = None
    plan_vs_sim: float | None = None


def score(replay: Replay, run: Run, provider: str, model: str, budget: int,
          encoder: Encoder) -> Row:
    from chathistory import plan_cache

    row = Row(run.policy, run.status, run.note)
    prompts, own_plans = run.by_provider.get(provider, (run.prompts, []))
    if not prompts:
        return row
    heads = run.heads if len(run.heads) == len(prompts) else [0] * len(prompts)
    sim = cache_sim.simulator(provider, model)
    previous = None
    sim_cost = sim_total = sim_read = 0.0
    plan_cost = plan_total = plan_read = 0.0
    anchored = 0
    reasons: dict[str, int] = {}
    for i, prompt in enumerate(prompts):
        plan = own_plans[i] if own_plans else plan_cache(
            prompt, provider=provider, model=model if provider != "openai" else None,
            previous=previous, session_id="bench-context", counter=peers.ENCODING,
            pinned=heads[i])
        previous = plan
        plan_cost += plan.cost
        plan_total += plan.total_tokens
        plan_read += plan.tokens_read
        try:
            usage = sim.send(encoder.request(provider, prompt, plan, replay.times[i]))
        except ValueError as error:
            reasons[f"simulator: {error}"] = reasons.get(f"simulator: {error}", 0) + 1
            continue
        sim_cost += usage.cost
        sim_total += usage.total
        sim_read += usage.cache_read
        tokens = sum(encoder.tokens(m) for m in prompt) + peers.PRIMING_TOKENS
        row.over_budget += tokens > budget
        why = invalid(prompt, provider)
        if why:
            reasons[why] = reasons.get(why, 0) + 1
        row.not_user_first += not user_first(prompt)
        anchored += any(m.id == replay.anchor_id for m in prompt)
    row.requests = len(prompts)
    row.invalid = sum(reasons.values())
    if reasons:
        row.note = "; ".join(f"{k} x{v}" for k, v in reasons.items()) + (
            f"; {row.note}" if row.note else "")
    row.cached_share = sim_read / max(1.0, sim_total)
    row.cost_ratio = sim_cost / max(1.0, sim_total)
    row.anchor_share = anchored / len(prompts)
    if replay.asks:
        present = sum(1 for r, fact_id, _ in replay.asks if r < len(prompts)
                      and any(m.id == fact_id for m in prompts[r]))
        row.facts = f"{present}/{len(replay.asks)}"
    row.plan_cached_share = plan_read / max(1.0, plan_total)
    plan_ratio = plan_cost / max(1.0, plan_total)
    row.plan_vs_sim = plan_ratio / row.cost_ratio if row.cost_ratio else None
    return row


def clockless_check(replay: Replay, budget: int, encoder: Encoder,
                    out: Callable[[str], None]) -> dict[str, float | None]:
    """The default window's prompts sent one second apart (no entry expires): the
    simulator should then agree with the plan (plan/sim 1.00), so that what differs in
    the timed replay is the clock."""
    timed = replay.times
    replay.times = [float(i) for i in range(len(timed))]
    try:
        run = chathistory_runs(replay, budget, cost_aware=False)[1]
        found = {p: score(replay, run, p, m, budget, encoder).plan_vs_sim
                 for p, m in PROVIDERS}
    finally:
        replay.times = timed
    out(f"  check, {replay.name} @ {budget} with no clock (requests 1 s apart), default "
        "window, plan/sim cost: " + ", ".join(
            f"{p} {v:.3f}" if v else f"{p} -" for p, v in found.items()))
    return found


def table(title: str, rows: list[Row], out: Callable[[str], None]) -> None:
    out("")
    out(title)
    body = []
    for r in rows:
        if r.cached_share is None:
            body.append([r.policy, r.status, *[""] * 9])
            continue
        body.append([r.policy, f"{r.cached_share:.1%}", f"{r.cost_ratio:.3f}",
                     f"{r.over_budget}", f"{r.invalid}", f"{r.not_user_first}",
                     f"{r.anchor_share:.0%}", r.facts, f"{r.plan_cached_share:.1%}",
                     f"{r.plan_vs_sim:.2f}" if r.plan_vs_sim else "-", f"{r.requests}"])
    print_table(["policy", "cached", "cost vs uncached", "over budget", "invalid",
                 "not user first", "anchor", "facts", "plan cached", "plan/sim cost",
                 "requests"], body, out)
    for r in rows:
        if r.note:
            out(f"  note: {r.policy}: {r.note}")


def run(quick: bool = False, out: Callable[[str], None] = print) -> dict[str, Any]:
    warnings.simplefilter("ignore")  # peers warn about experimental and deprecated classes
    started = time.perf_counter()
    results: dict[str, Any] = {"environment": environment(), "quick": quick, "replays": {}}
    out("chathistory context benchmark" + (" (quick)" if quick else ""))
    out("judge: bench/cache_sim.py (providers' documents): " + ", ".join(
        f"{p} {m}" for p, m in PROVIDERS) + "; counts o200k_base; cost in uncached-input "
        "units over all requests; plan/sim: the plan's cost ratio over the simulator's")
    replays = [chat_replay(QUICK_CHAT_TURNS if quick else CHAT_TURNS),
               agent_replay(QUICK_AGENT_REQUESTS if quick else AGENT_REQUESTS)]
    for replay in replays:
        span = replay.times[-1] - replay.times[0]
        gaps = [b - a for a, b in zip(replay.times, replay.times[1:], strict=False)]
        out(f"{replay.name}: {len(replay.messages):,} messages over {span / 3600:.1f} h; "
            f"{sum(g > 300 for g in gaps)} requests after a gap over 5 min, "
            f"{sum(g > 3600 for g in gaps)} over 1 h"
            + (f"; tool outputs {min(replay.tool_output_tokens):,}-"
               f"{max(replay.tool_output_tokens):,} tokens (mean "
               f"{statistics.fmean(replay.tool_output_tokens):,.0f}); "
               f"{len(replay.asks)} planted facts asked for" if replay.tool_output_tokens
               else ""))
    encoder = Encoder()
    results["clockless"] = {r.name: clockless_check(r, BUDGETS[0], encoder, out)
                            for r in replays}
    for replay in replays:
        for budget in BUDGETS:
            runs = chathistory_runs(replay, budget) + peer_runs(replay, budget)
            key = f"{replay.name} @ {budget}"
            results["replays"][key] = {}
            for provider, model in PROVIDERS:
                rows = [score(replay, r, provider, model, budget, encoder) for r in runs]
                table(f"{key}: {provider} ({model})", rows, out)
                results["replays"][key][provider] = [r.__dict__ for r in rows]
    results["seconds"] = time.perf_counter() - started
    out("")
    out(f"context benchmark took {results['seconds']:.0f} s")
    return results


