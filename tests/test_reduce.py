"""Reducers: truncation, count, token budget, summarization; composition; History.reduce."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from chathistory import History, KVStatus, Message
from chathistory.reduce import (
    MessageCountReducer,
    OpenAICompatibleSummarizer,
    Pipeline,
    SummarizationFailed,
    SummarizationReducer,
    TokenBudgetReducer,
    TruncationReducer,
    is_summary,
    summary_of,
)
from chathistory.tokens import ApproxCounter, cached_count

APPROX = ApproxCounter()


def turns(n: int, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + n):
        out.append(Message.user(f"question {i}") if i % 2 == 0
                   else Message.assistant(f"answer {i}"))
    return out


def with_tools() -> list[Message]:
    return [
        Message.system("sys"),
        Message.user("u0"),
        Message.assistant("", [{"id": "a", "name": "f", "arguments": {}},
                               {"id": "b", "name": "g", "arguments": {}}]),
        Message.tool_result("a", "ra"),
        Message.tool_result("b", "rb"),
        Message.assistant("a1"),
        Message.user("u1"),
        Message.assistant("a2"),
    ]


def test_truncation_threshold_and_target() -> None:
    msgs = [Message.system("s"), *turns(10)]
    r = TruncationReducer(target_count=4, threshold_count=2)
    assert r.reduce(msgs[:7]) is not None  # 7 messages, the system one included: over 4 + 2
    assert r.reduce(msgs[:6]) is None
    out = r.reduce(msgs)
    assert out is not None
    assert out[0] is msgs[0]
    assert out[1].role == "user"  # prefers to start at a user message
    assert 4 <= len(out) <= 6  # the system message counts within the target
    assert out[1:] == msgs[-(len(out) - 1):]
    assert r.reduce(out) is None  # idempotent once under the threshold


def test_truncation_counts_kept_messages_as_semantic_kernel_does() -> None:
    """Semantic Kernel's ChatHistoryTruncationReducer(targetCount: 2) over a system
    message and a chat ending with the user keeps [system, last user]: its
    LocateSafeReductionIndex takes one off targetCount for the system message."""
    system, u1, a1, u2 = (Message.system("s"), Message.user("u1"), Message.assistant("a1"),
                          Message.user("u2"))
    assert TruncationReducer(2).reduce([system, u1, a1, u2]) == [system, u2]
    a2 = Message.assistant("a2")
    assert TruncationReducer(2).reduce([system, u1, a1, u2, a2]) == [system, a2]
    # threshold 1: the cut moves back to the user message within it (cohesion)
    assert TruncationReducer(2, 1).reduce([system, u1, a1, u2, a2]) == [system, u2, a2]
    assert TruncationReducer(2, 1).reduce([system, u1, a1]) is None  # 3 <= 2 + 1
    # every kept message counts (system and developer), wherever it stands
    dev = Message.developer("d")
    assert TruncationReducer(3).reduce([system, u1, dev, a1, u2, a2]) == [system, dev, a2]
    # kept messages alone reach the target: the others all go (none is a user in
    # the threshold); keep_system=False counts nothing as kept
    assert TruncationReducer(1).reduce([system, u1, a1]) == [system]
    assert TruncationReducer(1, 1).reduce([system, u1, a1, u2]) == [system, u2]
    assert TruncationReducer(2, keep_system=False).reduce([system, u1, a1, u2]) == [a1, u2]


def test_truncation_never_splits_a_tool_group() -> None:
    msgs = with_tools()
    for target in range(1, 7):
        out = TruncationReducer(target).reduce(msgs)
        if out is None:
            continue
        roles = [m.role for m in out]
        assert roles[0] == "system"
        if "tool" in roles:
            assert out[roles.index("tool") - 1].tool_calls  # the call precedes its results
            assert roles.count("tool") == 2


def test_docs_semantic_kernel_example_runs() -> None:
    text = (Path(__file__).parent.parent / "docs" / "reduce.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                if "TruncationReducer(target_count=2)" in b]
    exec(compile(block, "docs/reduce.md", "exec"), {})


def test_keep_system_false() -> None:
    msgs = [Message.system("s"), *turns(6)]
    out = MessageCountReducer(2, keep_system=False).reduce(msgs)
    assert out == msgs[-2:]


def test_message_count() -> None:
    msgs = with_tools()
    assert MessageCountReducer(10).reduce(msgs) is None
    out = MessageCountReducer(3).reduce(msgs)
    assert out is not None and [m.text for m in out] == ["sys", "a1", "u1", "a2"]
    out = MessageCountReducer(5).reduce(msgs)  # the cut would split the group: narrows
    assert out is not None and [m.text for m in out] == ["sys", "a1", "u1", "a2"]


def test_token_budget_hysteresis() -> None:
    msgs = [Message.system("system prompt"), *turns(40)]
    total = sum(cached_count(m, APPROX) for m in msgs) + APPROX.priming_tokens
    r = TokenBudgetReducer(total - 1, low_water_tokens=total // 2, counter=APPROX)
    out = r.reduce(msgs)
    assert out is not None and out[0] is msgs[0]
    kept = sum(cached_count(m, APPROX) for m in out) + APPROX.priming_tokens
    assert kept <= total // 2
    assert r.reduce(out) is None  # under max: nothing until it grows past max again
    assert TokenBudgetReducer(total, counter=APPROX).reduce(msgs) is None
    with pytest.raises(ValueError):
        TokenBudgetReducer(100, low_water_tokens=200)


def test_pipeline_and_plain_lists() -> None:
    msgs = turns(20)
    p = Pipeline([MessageCountReducer(10), MessageCountReducer(4)])
    out = p.reduce(msgs)
    assert out == msgs[-4:]
    h = History(msgs, reducer=[MessageCountReducer(10), MessageCountReducer(4)])
    assert h.reduce() is True and list(h) == msgs[-4:]
    assert h.reduce() is False
    assert p.reduce(msgs[-4:]) is None


def test_history_reduce_marks_what_leaves() -> None:
    msgs = turns(6)
    h = History(msgs)
    assert h.reduce(MessageCountReducer(2)) is True
    assert [m.kv_status for m in msgs[:4]] == [KVStatus.MARKED] * 4
    assert all(m.kv_status == KVStatus.LOADED for m in h)


def test_auto_reduce_on_add() -> None:
    h = History(reducer=MessageCountReducer(4), auto_reduce=True)
    for m in turns(10):
        h.add(m)
        assert len(h) <= 4
    h.add_user("one more")
    assert len(h) <= 4 and h[-1].text == "one more"


def test_no_reducer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no reducer"):
        History().reduce()


# ---------------------------------------------------------------- summarization


def fake_summarizer(calls: list[list[Message]]):  # type: ignore[no-untyped-def]
    def summarize(messages: list[Message]) -> str:
        calls.append(messages)
        return "S(" + ",".join(m.text.replace("Summary of the earlier conversation:\n", "")
                               for m in messages) + ")"
    return summarize


def test_summary_placed_after_system_with_replaced_ids() -> None:
    calls: list[list[Message]] = []
    msgs = [Message.system("sys"), *turns(8)]
    r = SummarizationReducer(fake_summarizer(calls), target_count=4)
    out = r.reduce(msgs)
    assert out is not None
    assert out[0] is msgs[0] and is_summary(out[1])
    assert out[1].role == "user"
    # the system message counts within target_count (the summary does not)
    assert summary_of(out[1]) == [m.id for m in msgs[1:6]]
    assert out[2:] == msgs[6:]
    assert calls == [msgs[1:6]]


def test_earlier_summary_is_folded_not_stacked() -> None:
    calls: list[list[Message]] = []
    r = SummarizationReducer(fake_summarizer(calls), target_count=2)
    first = r.reduce([Message.system("sys"), *turns(6)])
    assert first is not None
    second = r.reduce([*first, *turns(4, start=6)])
    assert second is not None
    summaries = [m for m in second if is_summary(m)]
    assert len(summaries) == 1
    assert calls[1][0] is first[1]  # the earlier summary went to the summarizer
    replaced = summary_of(summaries[0])
    assert set(summary_of(first[1])) <= set(replaced)
    assert len(replaced) == len(set(replaced))


def test_failing_summarizer_changes_nothing() -> None:
    msgs = [Message.system("sys"), *with_tools()[1:], *turns(6)]
    h = History(msgs)
    before = h.to_json()

    def broken(messages: list[Message]) -> str:
        raise RuntimeError("model unavailable: 503")

    with pytest.raises(SummarizationFailed, match="503"):
        h.reduce(SummarizationReducer(broken, target_count=2))
    assert h.to_json() == before  # byte for byte
    with pytest.raises(SummarizationFailed, match="no text"):
        h.reduce(SummarizationReducer(lambda ms: "   ", target_count=2))
    assert h.to_json() == before


def test_summarizer_timeout() -> None:
    def slow(messages: list[Message]) -> str:
        time.sleep(0.5)
        return "late"

    h = History(turns(10))
    before = h.to_json()
    with pytest.raises(SummarizationFailed, match="timed out"):
        h.reduce(SummarizationReducer(slow, target_count=2, timeout=0.05))
    assert h.to_json() == before


def test_async_summarizer() -> None:
    async def summarize(messages: list[Message]) -> str:
        await asyncio.sleep(0)
        return f"{len(messages)} messages"

    h = History([Message.system("s"), *turns(8)])
    assert asyncio.run(h.areduce(SummarizationReducer(summarize, target_count=4))) is True
    assert is_summary(h[1]) and h[1].text.endswith("5 messages")

    async def hangs(messages: list[Message]) -> str:
        await asyncio.sleep(5)
        return "never"

    before = h.to_json()
    h.extend(turns(8, start=100))
    before = h.to_json()
    with pytest.raises(SummarizationFailed, match="timed out"):
        asyncio.run(h.areduce(SummarizationReducer(hangs, target_count=2, timeout=0.05)))
    assert h.to_json() == before
    # an async summarizer also works from the sync reduce()
    assert h.reduce(SummarizationReducer(summarize, target_count=2)) is True


class _Handler(BaseHTTPRequestHandler):
    bodies: list[dict] = []  # type: ignore[type-arg]
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                  **body})
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "overloaded"}}')
            return
        payload = {"choices": [{"message": {"role": "assistant",
                                            "content": "They talked about questions."}}]}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.bodies, _Handler.status = [], 200
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_compatible_summarizer(endpoint: str) -> None:
    summarizer = OpenAICompatibleSummarizer(base_url=endpoint, model="tiny", api_key="k")
    h = History([Message.system("s"), *turns(6)])
    assert h.reduce(SummarizationReducer(summarizer, target_count=2)) is True
    assert h[1].text.endswith("They talked about questions.")
    sent = _Handler.bodies[0]
    assert sent["path"] == "/v1/chat/completions" and sent["model"] == "tiny"
    assert sent["auth"] == "Bearer k"
    assert "User: question 0" in sent["messages"][1]["content"]


def test_openai_compatible_summarizer_error_changes_nothing(endpoint: str) -> None:
    _Handler.status = 503
    h = History(turns(6))
    before = h.to_json()
    with pytest.raises(SummarizationFailed, match="503"):
        h.reduce(SummarizationReducer(OpenAICompatibleSummarizer(base_url=endpoint),
                                      target_count=2))
    assert h.to_json() == before


def test_failed_auto_reduce_undoes_the_add() -> None:
    def broken(messages: list[Message]) -> str:
        raise RuntimeError("down")

    h = History(turns(5), reducer=SummarizationReducer(broken, target_count=2))
    h.auto_reduce = True
    before = h.to_json()
    m = Message.user("new")
    with pytest.raises(SummarizationFailed):
        h.add(m)
    assert h.to_json() == before and m.id not in h
    with pytest.raises(SummarizationFailed):
        h.add(m)  # a retry tries again: the failed add left nothing behind
    with pytest.raises(SummarizationFailed):
        h.extend([Message.user("a"), Message.user("b")])
    assert h.to_json() == before
