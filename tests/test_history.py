"""History: list behaviour, dedup, selectors and their pair safety, examples."""

from __future__ import annotations

import pytest

from chathistory import History, InvalidMessage, Message, Reasoning, TextPart, ToolCall, ToolResult
from chathistory.tokens import ApproxCounter, cached_count

APPROX = ApproxCounter()


def chat(n: int) -> list[Message]:
    return [Message.user(f"question {i}") if i % 2 == 0 else Message.assistant(f"answer {i}")
            for i in range(n)]


def test_list_like() -> None:
    msgs = chat(5)
    h = History(msgs)
    assert len(h) == 5 and list(h) == msgs and h[0] is msgs[0] and h[-2:] == msgs[-2:]
    assert msgs[1] in h and msgs[1].id in h and Message.user("x") not in h
    assert h.get(msgs[2].id) is msgs[2] and h.index_of(msgs[3].id) == 3
    assert h.get("nope") is None


def test_add_ignores_known_ids() -> None:
    h = History()
    m = Message.user("hi")
    assert h.add(m) is True
    assert h.add(m) is False
    retry = Message.from_json(m.to_json())  # the same message again after a timeout
    assert h.add(retry) is False
    assert len(h) == 1
    assert h.extend([m, Message.user("a", id="x"), Message.user("b", id="x")]) == 1
    assert len(h) == 2 and h[-1].text == "a"


def test_add_validates_and_stores_nothing_when_invalid() -> None:
    h = History(chat(2))
    with pytest.raises(InvalidMessage):
        h.add(Message(role="user", parts=[]))
    with pytest.raises(InvalidMessage) as info:
        h.extend([Message.user("fine"), Message(role="tool", parts=[ToolResult(call_id="")])])
    assert info.value.path == "$[1].parts[0].call_id"
    assert len(h) == 2
    with pytest.raises(InvalidMessage):
        h.add("not a message")  # type: ignore[arg-type]


def test_shortcuts() -> None:
    h = History()
    h.add_system("s")
    h.add_developer("d")
    h.add_user("u", name="bob")
    call = h.add_assistant("", [{"id": "c1", "name": "f", "arguments": {}}])
    h.add_tool_result("c1", "r")
    assert [m.role for m in h] == ["system", "developer", "user", "assistant", "tool"]
    assert call.tool_calls[0].id == "c1"


def test_last_user_and_assistant() -> None:
    h = History()
    assert h.last_user() is None and h.last_assistant() is None
    h.extend(chat(4))
    assert h.last_user() is h[2] and h.last_assistant() is h[3]


def test_range_and_recent() -> None:
    msgs = chat(10)
    h = History(msgs)
    assert h.range(5, 2) == msgs[5:8]
    assert h.recent(3) == msgs[-3:] == h.range(3, 0)
    assert h.recent(0) == []
    assert h.recent(100) == msgs
    for bad in ((2, 2), (1, 3), (3, -1)):
        with pytest.raises(ValueError, match="from_end > to_end >= 0"):
            h.range(*bad)
    with pytest.raises(ValueError):
        h.recent(-1)


def test_selectors_return_new_lists() -> None:
    h = History(chat(4))
    sel = h.recent(2)
    sel.clear()
    h.by_tokens(10_000).append(Message.user("x"))
    assert len(h) == 4


def tool_history() -> History:
    return History([
        Message.system("sys"),
        Message.user("weather and time?"),
        Message(role="assistant", parts=[Reasoning(text="need two tools")]),
        Message.assistant("", [{"id": "a", "name": "weather", "arguments": {}},
                               {"id": "b", "name": "time", "arguments": {}}]),
        Message.tool_result("a", "sunny"),
        Message.tool_result("b", "noon"),
        Message.assistant("sunny at noon"),
    ], counter=APPROX)


def test_recent_widens_to_keep_calls_with_results() -> None:
    h = tool_history()
    # the newest 2 are [tool b, assistant]: widened back to the reasoning before the call
    assert [m.role for m in h.recent(2)] == ["assistant", "assistant", "tool", "tool", "assistant"]
    assert h.recent(2)[0].parts[0] == Reasoning(text="need two tools")
    # a right edge inside a group widens forward
    assert [m.role for m in h.range(4, 2)] == ["assistant", "assistant", "tool", "tool"]


def test_by_tokens_narrows_and_never_splits() -> None:
    h = tool_history()
    full = [cached_count(m, APPROX) for m in h]
    last = full[-1] + APPROX.priming_tokens
    assert h.by_tokens(last) == [h[-1]]
    # one token short of the whole tool group: only the final answer fits
    group = sum(full[2:6])
    assert h.by_tokens(last + group - 1) == [h[-1]]
    assert h.by_tokens(last + group) == h[2:]
    assert h.by_tokens(APPROX.priming_tokens - 1) == []


def test_by_tokens_keep_system() -> None:
    h = History([Message.system("be brief"), *chat(20)], counter=APPROX)
    sel = h.by_tokens(60, keep_system=True)
    assert sel[0] is h[0] and len(sel) > 1
    total = sum(cached_count(m, APPROX) for m in sel) + APPROX.priming_tokens
    assert total <= 60
    plain = h.by_tokens(60)
    assert h[0] not in plain and len(plain) >= len(sel) - 1
    assert h.by_tokens(cached_count(h[0], APPROX), keep_system=True) == []
    assert h.by_tokens(10_000, keep_system=True) == list(h)  # no duplicate system message


def test_orphan_results_are_left_out() -> None:
    h = History([Message.user("hi"), Message.tool_result("ghost", "boo"), Message.assistant("yo")],
                counter=APPROX)
    assert [m.text for m in h.recent(3)] == ["hi", "yo"]
    assert [m.text for m in h.by_tokens(10_000)] == ["hi", "yo"]


def test_pending_call_at_the_end_is_fine() -> None:
    h = History([Message.user("go"), Message.assistant("", [{"id": "c", "name": "f"}])],
                counter=APPROX)
    assert h.recent(1) == [h[-1]]


def test_anthropic_style_results_in_one_message() -> None:
    h = History([
        Message.user("q"),
        Message(role="assistant", parts=[ToolCall(id="x", name="f"), ToolCall(id="y", name="g")]),
        Message(role="user", parts=[ToolResult(call_id="x", content="1"),
                                    ToolResult(call_id="y", content="2")]),
        Message.user("thanks"),
    ])
    assert h.recent(2) == h[1:]


def test_pop_clear_replace() -> None:
    msgs = chat(6)
    h = History(msgs, counter=APPROX)
    before = h.by_tokens(30)
    assert h.pop() is msgs[-1]
    assert h.by_tokens(30) == History(msgs[:-1], counter=APPROX).by_tokens(30)
    assert h.pop(0) is msgs[0] and h[0] is msgs[1]
    assert msgs[0].id not in h
    h.add(msgs[0])  # re-adding a removed id is allowed
    assert h[-1] is msgs[0]
    h.replace(msgs)
    assert h.by_tokens(30) == before
    with pytest.raises(InvalidMessage):
        h.replace([Message(role="", parts=[TextPart(text="x")])])
    assert list(h) == msgs  # a failed replace changes nothing
    h.clear()
    assert len(h) == 0 and h.by_tokens(100) == []


def test_recent_text() -> None:
    h = History([
        Message.system("rules"),
        Message.user("see file", name="ann"),
        Message.assistant("", [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]),
        Message.tool_result("c1", "found it"),
        Message.assistant("done"),
    ])
    text = h.recent_text(4)
    assert text.splitlines() == [
        "User (ann): see file",
        'Assistant called lookup({"q": "x"}) [call c1]',
        "Tool result from lookup [call c1]: found it",
        "Assistant: done",
    ]


def test_recent_text_file_placeholders(png_bytes: bytes, pdf_bytes: bytes) -> None:
    from chathistory import Attachment

    h = History([Message.user("two files", Attachment.from_bytes(pdf_bytes, name="report.pdf"),
                              Attachment.from_bytes(png_bytes, name="chart.png"))])
    assert h.recent_text(1).splitlines() == [
        "User: two files", "File: report.pdf", "File: chart.png"]


def test_prefilled_few_shot() -> None:
    shots = [Message.user("2+2?"), Message.assistant("4")]
    h = History(shots)
    h.add_user("3+3?")
    assert h.recent(3)[:2] == shots
