"""History: list behaviour, dedup, selectors and their pair safety, examples."""

from __future__ import annotations

from collections.abc import MutableSequence

import msgspec
import pytest

from chathistory import (
    DuplicateMessage,
    History,
    InvalidMessage,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from chathistory.groups import Groups
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
    assert h.last_user() == h[2] and h.last_assistant() == h[3]


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


def test_selected_messages_are_safe_to_transform(png_bytes: bytes) -> None:
    from chathistory import Attachment

    h = tool_history()
    h.add(Message.user("see", Attachment.from_bytes(png_bytes), metadata={"tag": ["a"]}))
    h[1] = msgspec.structs.replace(h[1], provider_metadata={"openai": {"id": "msg_1"}})
    h.by_tokens(10_000)  # counts cached in the stored messages
    before = h.to_json()
    selections = [h.recent(len(h)), h.range(4, 1), h.by_tokens(10_000),
                  h.by_tokens(10_000, keep_system=True), [h.last_user()], [h.last_assistant()]]
    for selection in selections:
        for message in selection:
            assert message is not None and h.get(message.id) == message  # equal, not shared
            message.role = "agent"
            message.name = "renamed"
            if "tag" in message.metadata:
                message.metadata["tag"].append("nested")
            message.metadata["tag"] = "changed"
            message.provider_metadata.setdefault("openai", {})["id"] = "other"
            message.parts.append(TextPart(text="appended"))
            message.parts[0] = TextPart(text="replaced")
            if message.token_counts is not None:
                message.token_counts[APPROX.name] = 0
            message.kv_start = 999
    assert h.to_json() == before
    assert h.by_tokens(10_000) == History.from_json(before, counter=APPROX).by_tokens(10_000)


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
    assert sel[0] == h[0] and len(sel) > 1
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


# ---------------------------------------------------------------- list edits


def agrees_with_fresh(h: History) -> None:
    """Every index and selector of ``h`` equals a History built from its messages."""
    fresh = History(list(h), counter=APPROX)
    for i, m in enumerate(h):
        assert h.index_of(m.id) == i and h.get(m.id) is m and m.id in h
    assert h.token_count() == fresh.token_count()
    for budget in (0, 15, 40, 10_000):
        for keep in (False, True):
            assert h.by_tokens(budget, keep_system=keep) == fresh.by_tokens(
                budget, keep_system=keep)
    for n in range(len(h) + 2):
        assert h.recent(n) == fresh.recent(n)
    assert h.last_user() == fresh.last_user()
    assert h.last_assistant() == fresh.last_assistant()


def test_history_is_a_mutable_sequence() -> None:
    msgs = chat(8)
    h = History(msgs, counter=APPROX)
    h.by_tokens(30)  # running totals exist before the edits
    assert isinstance(h, MutableSequence)
    del h[2]
    assert list(h) == msgs[:2] + msgs[3:] and msgs[2].id not in h
    agrees_with_fresh(h)
    h.insert(2, msgs[2])  # a removed id may come back
    assert list(h) == msgs
    h.insert(-100, Message.system("first"))  # clamped like list.insert
    assert h[0].role == "system" and h.index_of(msgs[0].id) == 1
    agrees_with_fresh(h)
    edited = msgspec.structs.replace(h[3], parts=[TextPart(text="edited")])
    h[3] = edited  # a new version of a message keeps its id and place
    assert h[3] is edited and h.get(edited.id) is edited
    agrees_with_fresh(h)
    h[1:3] = [Message.developer("dev"), Message.user("a"), Message.assistant("b")]
    assert [m.role for m in h][:5] == ["system", "developer", "user", "assistant", "user"]
    agrees_with_fresh(h)
    del h[1:4]
    del h[::3]
    agrees_with_fresh(h)
    h[::2] = [Message.user(f"swap {i}") for i in range(len(h[::2]))]
    agrees_with_fresh(h)
    h.reverse()
    agrees_with_fresh(h)
    h.remove(h[1])
    h.append(Message.assistant("last"))
    h += [Message.user("more")]
    agrees_with_fresh(h)
    with pytest.raises(ValueError, match="extended slice"):
        h[::2] = [Message.user("x")] * (len(h[::2]) + 1)
    with pytest.raises(IndexError):
        h[len(h)] = Message.user("x")
    with pytest.raises(ValueError):
        h.index(Message.user("not here"))


def test_putting_in_a_present_id_raises_and_changes_nothing() -> None:
    msgs = chat(6)
    h = History(msgs, counter=APPROX)
    h.by_tokens(10_000)  # counts cached before the snapshot
    before = (list(h), h.to_json(), h.by_tokens(10_000))
    twin = Message.user("same id, new text", id=msgs[1].id)
    attempts = [
        (lambda: h.insert(0, msgs[4]), "$.id"),
        (lambda: h.append(twin), "$.id"),
        (lambda: h.__setitem__(0, twin), "$.id"),  # its id is at position 1
        (lambda: h.__setitem__(slice(0, 1), [Message.user("new"), msgs[3]]), "$[1].id"),
        (lambda: h.__setitem__(slice(0, 0), [msgs[5]]), "$[0].id"),
        (lambda: h.__setitem__(slice(0, 2), [msgs[0], msgs[0]]), "$[1].id"),  # repeated
        (lambda: h.__setitem__(slice(None, None, 2), [msgs[1], *msgs[2:6:2]]), "$[0].id"),
    ]
    for attempt, path in attempts:
        with pytest.raises(DuplicateMessage) as info:
            attempt()
        assert info.value.path == path and info.value.message_id in h
        assert isinstance(info.value, InvalidMessage)
        assert (list(h), h.to_json(), h.by_tokens(10_000)) == before
    # replacing the positions that hold those ids is fine: a swap, an edit
    h[0:2] = [msgs[1], msgs[0]]
    h[0] = twin
    assert [m.id for m in h][:2] == [msgs[1].id, msgs[0].id] and h[0] is twin
    # add and extend stay retries: a present id is a no-op, not an error
    assert h.add(msgs[3]) is False and h.extend(msgs) == 0


def test_list_edits_validate_with_paths() -> None:
    h = History(chat(3))
    bad = Message(role="tool", parts=[ToolResult(call_id="")])
    with pytest.raises(InvalidMessage) as info:
        h[1:1] = [Message.user("fine"), bad]
    assert info.value.path == "$[1].parts[0].call_id" and len(h) == 3
    with pytest.raises(InvalidMessage) as info:
        h.insert(0, bad)
    assert info.value.path == "$.parts[0].call_id"
    with pytest.raises(InvalidMessage):
        h[0] = "not a message"  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        h[0:1] = Message.user("one message is not an iterable of them")


def test_middle_edits_keep_pair_safety() -> None:
    h = tool_history()
    call = h[3]
    del h[3]  # the results lose their call: orphans, never selected
    assert all(not m.tool_results for m in h.recent(len(h)))
    assert all(not m.tool_results for m in h.by_tokens(10_000))
    agrees_with_fresh(h)
    h.insert(3, call)  # back: the group is whole again
    assert [m.role for m in h.recent(2)] == ["assistant", "assistant", "tool", "tool",
                                             "assistant"]
    agrees_with_fresh(h)
    h[4:6] = [Message.tool_result("b", "noon"), Message.tool_result("a", "sunny")]
    assert len(h.recent(2)) == 5  # results in another order: still one group
    agrees_with_fresh(h)


def test_groups_are_rebuilt_once_after_a_middle_edit_and_appends_stay_incremental(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    of = Groups.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Groups], messages: list[Message]) -> Groups:
        built.append(len(messages))
        return of(cls, messages)  # type: ignore[no-any-return]

    h = History(chat(50), counter=APPROX)
    monkeypatch.setattr(Groups, "of", classmethod(counting))
    for _ in range(5):
        h.add_user("q")
        h.append(Message.assistant("a"))
        h.by_tokens(100)
        h.recent(3)
    assert built == []  # appends keep the groups up to date: no rebuild
    del h[10]
    h.insert(5, Message.user("edit"))
    assert built == []  # edits only mark them stale
    h.by_tokens(100)
    h.recent(3)
    h.add_user("after")
    h.recent(3)
    assert built == [60]  # one rebuild, at the first selection after the edits
