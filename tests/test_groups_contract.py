"""Groups, where its docstrings promise more than the selections over whole lists need
(issue 23: mutants that the property tests let survive)."""

from __future__ import annotations

from chathistory import Message, Reasoning
from chathistory.groups import Groups, group_spans


def _call(call_id: str) -> Message:
    return Message.assistant("", [{"id": call_id, "name": "f"}])


def test_a_continued_sequence_may_be_cut_before_its_first_message() -> None:
    """``boundary_ok(0)`` always (the docstring), and ``start_of(0)`` is 0, even when
    message 0 continues a group stored before it (``starts_group(0)`` says that)."""
    after_reasoning = Groups(prev_reasoning_only=True)
    after_reasoning.append(Message.user("hi"))
    answering = Groups(earlier_calls={"c1": 4})
    answering.append(Message.tool_result("c1", "ok"))
    answering.append(Message.assistant("done"))
    for groups in (after_reasoning, answering):
        assert not groups.starts_group(0)
        assert groups.boundary_ok(0) and groups.boundary_ok(len(groups))
        assert groups.start_of(0) == 0
    assert answering.start_of(1) == 1 and answering.clear_from == 5


def test_results_of_earlier_calls_clear_from_the_oldest_call() -> None:
    """Calls stored at 4 and 5, answered newest first: everything after the call at 4
    joins it, so the stored flag at 5 must be cleared too."""
    groups = Groups(earlier_calls={"a": 4, "b": 5})
    groups.append(Message.tool_result("b", "rb"))
    assert groups.clear_from == 6
    groups.append(Message.tool_result("a", "ra"))
    assert groups.clear_from == 5
    groups.append(Message.tool_result("b", "again"))  # a later call does not move it back
    assert groups.clear_from == 5


def test_an_orphan_result_does_not_stop_the_next_result_in_its_message() -> None:
    """A message with an orphan result and then a real one still joins the call's
    group: the whole group is left out, never the call without its result."""
    both = Message(role="tool", parts=[*Message.tool_result("ghost", "?").parts,
                                       *Message.tool_result("c1", "ok").parts])
    msgs = [Message.user("go"), _call("c1"), both, Message.assistant("after")]
    assert group_spans(msgs) == [(0, 1, True), (1, 3, False), (3, 4, True)]
    thinking = Message(role="assistant", parts=[Reasoning(text="hmm")])
    assert group_spans([thinking, *msgs[1:3]]) == [(0, 3, False)]
