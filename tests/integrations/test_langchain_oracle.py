"""LangChain's own ``InMemoryChatMessageHistory`` is the oracle: for every shape of
message, ``ChatHistoryMessageHistory.messages`` on every store backend (added in one
batch or one at a time) equals what it returns, ``model_dump()`` for ``model_dump()``.
The two documented differences have their own tests."""

from __future__ import annotations

import base64
import copy
import warnings
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from chathistory.integrations.langchain import ChatHistoryMessageHistory, from_langchain
from chathistory.stores import BaseStore


def reference() -> InMemoryChatMessageHistory:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in langchain-core 1.6
        return InMemoryChatMessageHistory()


def dumps(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def both(store: BaseStore, batches: list[list[BaseMessage]], session_id: str = "s",
         **options: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the reference and ours return after the same adds."""
    ref, ours = reference(), ChatHistoryMessageHistory(store, session_id, **options)
    for batch in batches:
        ref.add_messages(batch)
        ours.add_messages(batch)
    return dumps(ref.messages), dumps(ours.messages)


def corpus(png: bytes) -> dict[str, list[BaseMessage]]:
    b64 = base64.b64encode(png).decode()
    return {
        "plain": [SystemMessage("Be terse."), HumanMessage("hi"), AIMessage("hello")],
        "ids": [HumanMessage("hi", id="h-1"), AIMessage("hello", id="run-1")],
        "developer": [SystemMessage("Metric.", additional_kwargs={
            "__openai_role__": "developer"})],
        "named": [HumanMessage("hi", name="ada"), AIMessage("yo", name="bot")],
        "chat_role": [ChatMessage(role="critic", content="Too short.")],
        "invalid_tool_calls": [HumanMessage("go"), AIMessage(content="", invalid_tool_calls=[
            {"type": "invalid_tool_call", "id": "c1", "name": "f", "args": "{bad",
             "error": "bad JSON"}])],
        "empty_ai": [HumanMessage("hi"), AIMessage(""), AIMessage([])],
        "ai_unknown_blocks_only": [AIMessage([{"type": "mystery", "x": 1}])],
        "tool_turn": [HumanMessage("q"), AIMessage("", tool_calls=[
            {"id": "c1", "name": "f", "args": {"a": 1}},
            {"id": "c2", "name": "f", "args": {}}]),
            ToolMessage("r1", tool_call_id="c1", name="f"),
            ToolMessage("failed", tool_call_id="c2", status="error"),
            ToolMessage("", tool_call_id="c2", artifact={"rows": [1, 2]})],
        "blocks": [HumanMessage([
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}",
                                                "detail": "low"}},
            {"type": "image", "base64": b64, "mime_type": "image/png"},
            {"type": "image", "url": "https://example.com/cat.png"},
            "a plain string block", {"type": "mystery", "x": 1}])],
        "reasoning": [HumanMessage("q"), AIMessage([
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "answer"}])],
        "compaction": [HumanMessage("q"), AIMessage([  # as langchain-openai keeps the item
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA"},
            {"type": "text", "text": "ok"}], response_metadata={"model_provider": "openai"}),
            AIMessage([{"type": "compaction", "content": "Summary.", "signature": "sig",
                        "tool_changes": None}]),  # as langchain-anthropic keeps the block
            AIMessage([{"type": "non_standard", "value": {  # content_blocks (v1)
                "type": "compaction", "id": "cmp_2", "encrypted_content": "gAAB"}}])],
        "metadata": [AIMessage("x", response_metadata={"model_name": "m"},
                               usage_metadata={"input_tokens": 1, "output_tokens": 2,
                                               "total_tokens": 3},
                               additional_kwargs={"refusal": None})],
    }


CASES = sorted(corpus(b"").keys())


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, png_bytes: bytes) -> list[BaseMessage]:
    return corpus(png_bytes)[request.param]


# ---------------------------------------------------------------- the corpus


def test_batch_matches_in_memory_history(case: list[BaseMessage], backend: BaseStore) -> None:
    expected, got = both(backend, [case])
    assert got == expected


def test_one_at_a_time_matches_in_memory_history(case: list[BaseMessage],
                                                  backend: BaseStore) -> None:
    expected, got = both(backend, [[m] for m in case])
    assert got == expected


def test_without_idempotent_ids_matches_in_memory_history(case: list[BaseMessage],
                                                          backend: BaseStore) -> None:
    expected, got = both(backend, [case, case], idempotent_ids=False)
    assert got == expected


# ---------------------------------------------------------------- the reported cases


def test_ai_message_with_only_invalid_tool_calls_is_kept(backend: BaseStore) -> None:
    broken = AIMessage(content="", invalid_tool_calls=[
        {"type": "invalid_tool_call", "id": "c1", "name": "lookup", "args": "{not json",
         "error": "Function lookup arguments are not valid JSON"}], id="run-1")
    expected, got = both(backend, [[HumanMessage("find it", id="q"), broken]])
    assert got == expected
    assert got[1]["invalid_tool_calls"] == broken.invalid_tool_calls


def test_add_messages_never_changes_the_callers_messages(backend: BaseStore,
                                                         png_bytes: bytes) -> None:
    given = [m for ms in corpus(png_bytes).values() for m in ms]
    before = copy.deepcopy(dumps(given))
    history = ChatHistoryMessageHistory(backend, "s")
    history.add_messages(given)
    for message in given:
        history.add_message(message)
    assert dumps(given) == before  # no id set, no content touched


def test_the_same_message_without_an_id_added_twice_is_stored_twice(backend: BaseStore
                                                                    ) -> None:
    question = HumanMessage("hi")
    expected, got = both(backend, [[question], [question], [question, question]])
    assert got == expected
    assert [m["content"] for m in got] == ["hi"] * 4
    assert question.id is None
    assert len({m.id for m in backend.range("s")}) == 4


def test_an_explicit_id_is_idempotent_by_default(backend: BaseStore) -> None:
    """The deliberate difference: adding a message whose id is stored (a retry after
    a timeout) stores nothing; LangChain's in-memory history would store it again."""
    turn = [HumanMessage("hi", id="q-1"), AIMessage("hello", id="run-1")]
    history = ChatHistoryMessageHistory(backend, "s")
    history.add_messages(turn)
    history.add_messages(turn)
    assert dumps(history.messages) == dumps(turn)
    expected, got = both(backend, [turn, turn], "other", idempotent_ids=False)
    assert got == expected == dumps(turn + turn)


def test_an_id_repeated_within_one_batch_is_stored_twice(backend: BaseStore) -> None:
    batch: list[BaseMessage] = [HumanMessage("a", id="same"), HumanMessage("b", id="same")]
    expected, got = both(backend, [batch])
    assert got == expected
    assert [m["id"] for m in got] == ["same", "same"]


def test_empty_non_assistant_messages_are_left_out(backend: BaseStore) -> None:
    """The other difference: a message needs content, and the placeholder that keeps
    an empty AIMessage cannot stand in another role (provider formats refuse it)."""
    given = [HumanMessage(""), SystemMessage(""), AIMessage("ok")]
    assert [m.role for m in from_langchain(given)] == ["assistant"]
    expected, got = both(backend, [given])
    assert got == expected[2:]
