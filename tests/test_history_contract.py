"""History where the selection properties do not look (issue 23: mutants that a mutmut
run left alive): list semantics at the edges, what the ``add_*`` shortcuts pass on, the
counter arguments, a failed auto-reduce, the error messages and paths, and the
transcript lines of ``render_text``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from chathistory import (
    Attachment,
    FilePart,
    History,
    ImagePart,
    InvalidMessage,
    Message,
    Reasoning,
    TextPart,
    ToolResult,
)
from chathistory.history import render_text
from chathistory.reduce import MessageCountReducer


def chat(n: int) -> list[Message]:
    return [(Message.user if i % 2 == 0 else Message.assistant)(f"message {i} " * (i % 4 + 1))
            for i in range(n)]


def _index(seq: Any, value: Any, start: int, stop: int | None) -> int | None:
    try:
        return seq.index(value, start, *(() if stop is None else (stop,)))
    except ValueError:
        return None


def test_insert_and_index_agree_with_a_list() -> None:
    base = chat(4)
    for at in range(-7, 8):
        history, plain = History(base), list(base)
        new = Message.user("new")
        history.insert(at, new)
        plain.insert(at, new)
        assert history.messages == plain, at
        assert history.index_of(new.id) == plain.index(new)
    history = History(base)
    for value in [*base, Message.user("absent"), Message.user("copy", id=base[1].id)]:
        for start in range(-6, 7):
            for stop in (None, *range(-6, 7)):
                assert _index(history, value, start, stop) == _index(base, value, start, stop), (
                    start, stop)
    with pytest.raises(ValueError, match="is not in the history"):
        history.index(base[0].id)  # an id is not a message


def test_extended_slices_agree_with_a_list() -> None:
    base = chat(7)
    for where in (slice(None, None, 2), slice(None, None, -2), slice(5, 0, -3), slice(1, 6, 2)):
        history, plain = History(base), list(base)
        del history[where]
        del plain[where]
        assert history.messages == plain, where
        history, plain = History(base), list(base)
        fresh = [Message.user(f"new {k}") for k in range(len(plain[where]))]
        history[where] = fresh
        plain[where] = fresh
        assert history.messages == plain, where
        assert [history.index_of(m.id) for m in plain] == list(range(len(plain)))


def test_shortcuts_pass_everything_on(png_bytes: bytes) -> None:
    history = History()
    picture = Attachment.from_bytes(png_bytes, name="p.png")
    user = history.add_user("", picture, name="ann")
    assert (user.text, user.name, [a.name for a in user.attachments]) == ("", "ann", ["p.png"])
    assert history.add_user("hi").name is None
    called = history.add_assistant(tool_calls=[{"id": "c1", "name": "f"}], name="bot",
                                   reasoning="because")
    assert (called.text, called.name, [c.id for c in called.tool_calls]) == ("", "bot", ["c1"])
    assert [p.text for p in called.parts if isinstance(p, Reasoning)] == ["because"]
    plain = history.add_assistant("ok")
    assert plain.name is None and not any(isinstance(p, Reasoning) for p in plain.parts)
    result = history.add_tool_result("c1", "fine")
    part = result.parts[0]
    assert isinstance(part, ToolResult) and (part.is_error, part.name) == (False, None)
    failed = history.add_tool_result("c1", "boom", True, name="f")
    part = failed.parts[0]
    assert isinstance(part, ToolResult) and (part.is_error, part.name) == (True, "f")
    with pytest.raises(InvalidMessage):
        history.add_user()  # nothing in it
    assert History(metadata={"app": 1}).metadata == {"app": 1}
    assert History().metadata == {}


class _Failing:
    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        raise RuntimeError("the summarizer is down")


def test_a_failed_auto_reduce_undoes_only_the_add() -> None:
    base = chat(3)
    history = History(base, reducer=_Failing())
    history.auto_reduce = True
    for add in (lambda: history.add_user("one more"), lambda: history.append(chat(1)[0]),
                lambda: history.add(Message.user("again")),
                lambda: history.extend([Message.user("a"), Message.user("b")])):
        with pytest.raises(RuntimeError, match="down"):
            add()
        assert history.messages == base


def test_edits_count_every_change_but_an_append() -> None:
    """``edits`` (what a ContextWindow trusts to read only the appended tail) goes up by
    one for each edit, insert, removal or replacement, and never for an append."""
    history = History(chat(6))
    assert history.edits == 0
    history.add_user("appended")
    history.extend([Message.user("more")])
    history.append(Message.user("and more"))
    assert history.edits == 0
    changes: list[Callable[[], object]] = [
        lambda: history.__setitem__(0, Message.user("edited")),
        lambda: history.insert(1, Message.user("inserted")),
        lambda: history.__delitem__(2),
        lambda: history.__delitem__(slice(None, None, 3)),
        lambda: history.__setitem__(slice(0, 2), [Message.user("a"), Message.user("b")]),
        lambda: history.__setitem__(slice(None, None, 2),
                                    [Message.user(f"s{k}") for k in range(len(history[::2]))]),
        lambda: history.replace(chat(3)),
        lambda: history.pop(0),
    ]
    for k, change in enumerate(changes, 1):
        change()
        assert history.edits == k


class _PlainReducer:  # only the sync method: areduce calls it
    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        return list(messages[-2:])


def test_areduce_applies_the_reducer() -> None:
    base = chat(10)
    history = History(base)
    twin = History([Message.from_json(m.to_json()) for m in base])
    assert asyncio.run(history.areduce(MessageCountReducer(4))) is True
    twin.reduce(MessageCountReducer(4))
    assert [m.id for m in history] == [m.id for m in twin][-len(history):] and len(history) < 10
    own = History([Message.from_json(m.to_json()) for m in base],
                  reducer=MessageCountReducer(4))
    assert asyncio.run(own.areduce()) is True and len(own) == len(history)
    plain = History(base[:5])
    assert asyncio.run(plain.areduce(_PlainReducer())) is True
    assert [m.id for m in plain] == [m.id for m in base[3:5]]


def test_counters_given_per_call_are_used() -> None:
    msgs = chat(30)
    approx, exact = History(msgs, counter="approx"), History(msgs, counter="o200k_base")
    assert approx.token_count() != exact.token_count()
    assert approx.token_count("o200k_base") == exact.token_count()
    assert exact.token_count("approx") == approx.token_count()
    budgets = range(0, exact.token_count() + 10, 7)
    assert any(approx.by_tokens(b) != exact.by_tokens(b) for b in budgets)
    for budget in budgets:
        assert approx.by_tokens(budget, counter="o200k_base") == exact.by_tokens(budget)
    restored = History.from_dict(exact.to_dict(), counter="approx")
    assert restored.counter.name == approx.counter.name
    assert restored.token_count() == approx.token_count()
    assert exact.range(3) == exact.range(3, 0) == exact.recent(3) == msgs[-3:]


def _error(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def test_errors_say_what_and_where() -> None:
    history = History(chat(3))
    for call, path, reason in (
        (lambda: history.add("x"), "$", "expected a Message, got str"),
        (lambda: history.extend([Message.user("a"), 5]), "$[1]", "expected a Message, got int"),
        (lambda: history.append("x"), "$", "expected a Message, got str"),
        (lambda: history.insert(0, None), "$", "expected a Message, got NoneType"),
        (lambda: history.__setitem__(0, "x"), "$", "expected a Message, got str"),
        (lambda: history.__setitem__(slice(0, 1), ["x"]), "$[0]", "expected a Message, got str"),
    ):
        error = _error(call)
        assert isinstance(error, InvalidMessage) and (error.path, error.reason) == (path, reason)
    absent = Message.user("absent")
    for call, kind, text in (
        (lambda: history.__setitem__(slice(0, 1), absent), TypeError,
         "can only assign an iterable of messages to a slice"),
        (lambda: history.__setitem__(7, absent), IndexError, "history index out of range"),
        (lambda: history.__delitem__(-4), IndexError, "history index out of range"),
        (lambda: history.index(absent), ValueError, f"{absent!r} is not in the history"),
        (lambda: history.reduce(), ValueError,
         "no reducer: pass one, or create the History with reducer=..."),
        (lambda: asyncio.run(history.areduce()), ValueError,
         "no reducer: pass one, or create the History with reducer=..."),
        (lambda: history.range("2"), TypeError, "range() takes integer positions"),
        (lambda: history.range(2, "0"), TypeError, "range() takes integer positions"),
        (lambda: history.recent(-1), ValueError, "recent(n=-1): n must be >= 0"),
        (lambda: history.by_tokens(-1), ValueError, "by_tokens(max_tokens=-1): must be >= 0"),
    ):
        error = _error(call)
        assert type(error) is kind and str(error) == text, (kind, text)
    assert history.messages == chat(3) or len(history) == 3


def test_render_text_lines() -> None:
    call = Message.assistant("let me look", [{"id": "c1", "name": "lookup",
                                              "arguments": {"city": "Zürich"}}], name="bot")
    assert render_text(call) == ["Assistant (bot): let me look",
                                 'Assistant (bot) called lookup({"city": "Zürich"}) [call c1]']
    failed = Message.tool_result("c1", "no such city", True)
    assert render_text(failed) == ["Tool error from tool [call c1]: no such city"]
    assert render_text(failed, {"c1": "lookup"}) == [
        "Tool error from lookup [call c1]: no such city"]
    named = Message.tool_result("c1", "sunny", name="weather")
    assert render_text(named, {"c1": "lookup"}) == [
        "Tool result from weather [call c1]: sunny"]
    media = Message.tool_result("c1", [
        TextPart(text="two files"), ImagePart(url="https://example.com/a.png"),
        ImagePart(url="data:image/png;base64,AAAA"),
        FilePart(url="https://example.com/r.pdf", name="report.pdf")])
    assert render_text(media) == ["Tool result from tool [call c1]: two files",
                                  "Image: https://example.com/a.png", "Image (inline)",
                                  "File: report.pdf"]
    thinking = Message(role="assistant", parts=[Reasoning(text="hmm")])
    assert render_text(thinking) == ["Assistant: (reasoning)"]
    assert render_text(Message.user("just text")) == ["User: just text"]
