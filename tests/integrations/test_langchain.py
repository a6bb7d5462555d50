"""LangChain: conversion both ways and ``ChatHistoryMessageHistory`` over every store,
tested with langchain-core's own classes."""

from __future__ import annotations

import asyncio
import base64
import warnings
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
)

from chathistory import IdReused, InvalidMessage, Message, Usage
from chathistory.integrations.langchain import (
    ChatHistoryMessageHistory,
    from_langchain,
    to_langchain,
    usage_of,
)
from chathistory.model import AudioPart, FilePart, ImagePart, Reasoning, TextPart, ToolCall
from chathistory.stores import BaseStore, MemoryStore
from chathistory.stores.aio import AsyncStoreAdapter


def dumps(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def conversation(png: bytes) -> list[BaseMessage]:
    b64 = base64.b64encode(png).decode()
    return [
        SystemMessage("You are terse.", id="m-sys"),
        SystemMessage("Use metric units.", id="m-dev",
                      additional_kwargs={"__openai_role__": "developer"}),
        HumanMessage(id="m-user", name="ada", content=[
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}",
                                                "detail": "low"}},
            {"type": "image", "base64": b64, "mime_type": "image/png"},
            {"type": "image", "url": "https://example.com/cat.png"},
        ]),
        AIMessage(
            id="run-1",
            content=[{"type": "thinking", "thinking": "Look first.", "signature": "sig-1"},
                     {"type": "text", "text": "Let me check."}],
            tool_calls=[{"id": "call-1", "name": "lookup", "args": {"q": "cat"}},
                        {"id": "call-2", "name": "lookup", "args": {"q": "dog"}}],
            response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
            additional_kwargs={"refusal": None},
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        ),
        ToolMessage("a cat", tool_call_id="call-1", name="lookup", id="m-t1"),
        ToolMessage("lookup failed", tool_call_id="call-2", status="error", id="m-t2"),
        AIMessage("A red square.", id="run-2"),
        ChatMessage(role="critic", content="Too short.", id="m-critic"),
        HumanMessage(["plain string block", {"type": "mystery", "x": 1}], id="m-odd"),
    ]


# ---------------------------------------------------------------- conversion


def test_round_trip_gives_equal_messages(png_bytes: bytes) -> None:
    original = conversation(png_bytes)
    assert dumps(to_langchain(from_langchain(original))) == dumps(original)


def test_mapping_to_roles_and_parts(png_bytes: bytes) -> None:
    ours = from_langchain(conversation(png_bytes))
    assert [m.role for m in ours] == ["system", "developer", "user", "assistant", "tool",
                                      "tool", "assistant", "critic", "user"]
    assert [m.id for m in ours][:4] == ["m-sys", "m-dev", "m-user", "run-1"]
    user = ours[2]
    assert user.name == "ada"
    assert [type(p) for p in user.parts] == [TextPart, ImagePart, ImagePart, ImagePart]
    inline, standard, remote = user.parts[1:]
    assert isinstance(inline, ImagePart) and inline.detail == "low"
    assert inline.attachment is not None and inline.attachment.data == png_bytes
    assert isinstance(standard, ImagePart) and standard.attachment is not None
    assert standard.attachment.sha256 == inline.attachment.sha256  # one asset
    assert isinstance(remote, ImagePart) and remote.url == "https://example.com/cat.png"
    assistant = ours[3]
    reasoning, text, *calls = assistant.parts
    assert reasoning == Reasoning(text="Look first.", signature="sig-1",
                                  provider_metadata={"langchain": {"form": "thinking"}})
    assert isinstance(text, TextPart) and text.text == "Let me check."
    assert calls == [ToolCall(id="call-1", name="lookup", arguments={"q": "cat"}),
                     ToolCall(id="call-2", name="lookup", arguments={"q": "dog"})]
    kept = assistant.provider_metadata["langchain"]
    assert kept["response_metadata"]["model_name"] == "gpt-test"
    assert kept["usage_metadata"]["total_tokens"] == 15
    ok, failed = ours[4].tool_results[0], ours[5].tool_results[0]
    assert (ok.call_id, ok.content, ok.is_error, ok.name) == ("call-1", "a cat", False, "lookup")
    assert (failed.call_id, failed.is_error) == ("call-2", True)
    assert ours[8].provider_metadata["langchain"]["content"][1] == {"type": "mystery", "x": 1}


def test_standard_audio_and_file_blocks(wav_bytes: bytes, pdf_bytes: bytes) -> None:
    message = HumanMessage(id="h", content=[
        {"type": "audio", "base64": base64.b64encode(wav_bytes).decode(),
         "mime_type": "audio/wav"},
        {"type": "file", "url": "https://example.com/report.pdf", "mime_type": "application/pdf"},
    ])
    [ours] = from_langchain([message])
    assert [type(p) for p in ours.parts] == [AudioPart, FilePart]
    assert dumps(to_langchain([ours])) == dumps([message])


def test_messages_of_other_libraries_become_langchain_messages() -> None:
    ours = [Message.system("s"), Message.developer("d"), Message.user("hi"),
            Message.assistant("", [{"id": "c1", "name": "f", "arguments": {"a": 1}}],
                              reasoning="thinking"),
            Message(role="tool", parts=[
                *Message.tool_result("c1", "one").parts,
                *Message.tool_result("c2", "two", is_error=True).parts])]
    lc = to_langchain(ours)
    assert [type(m) for m in lc] == [SystemMessage, SystemMessage, HumanMessage, AIMessage,
                                     ToolMessage, ToolMessage]
    assert lc[1].additional_kwargs == {"__openai_role__": "developer"}
    assert isinstance(lc[3], AIMessage)
    assert lc[3].tool_calls[0]["args"] == {"a": 1}
    assert lc[3].content == [{"type": "reasoning", "reasoning": "thinking"}]
    assert isinstance(lc[5], ToolMessage) and lc[5].status == "error"
    assert lc[4].id == ours[4].id and lc[5].id == f"{ours[4].id}-1"


def test_empty_messages_and_unknown_types() -> None:
    [empty_ai] = from_langchain([AIMessage("")])  # kept, with a placeholder
    assert empty_ai.role == "assistant" and dumps(to_langchain([empty_ai])) == dumps(
        [AIMessage("")])
    assert from_langchain([HumanMessage("")]) == []  # no content, no placeholder outside
    assert len(from_langchain([AIMessage("", tool_calls=[{"id": "c", "name": "f",
                                                           "args": {}}])])) == 1
    with pytest.raises(InvalidMessage) as caught:
        from_langchain([HumanMessage("ok"), FunctionMessage(content="x", name="f")])
    assert caught.value.path == "$[1].type"
    with pytest.raises(InvalidMessage) as caught:
        from_langchain([HumanMessage([{"type": "image_url",
                                       "image_url": {"url": "data:image/png;base64,!!"}}])])
    assert caught.value.path.startswith("$[0].content[0]")


def test_unloaded_attachment_is_a_clear_error(png_bytes: bytes) -> None:
    [ours] = from_langchain([HumanMessage([{"type": "image", "mime_type": "image/png",
                                            "base64": base64.b64encode(png_bytes).decode()}])])
    part = ours.parts[0]
    assert isinstance(part, ImagePart) and part.attachment is not None
    ours.parts = [ImagePart(attachment=part.attachment.without_data())]
    with pytest.raises(InvalidMessage) as caught:
        to_langchain([ours])
    assert caught.value.path == "$[0].parts[0].attachment"


# ---------------------------------------------------------------- the history


def test_is_a_langchain_chat_history(store: BaseStore) -> None:
    history = ChatHistoryMessageHistory(store, "s1")
    assert isinstance(history, BaseChatMessageHistory)
    assert history.messages == []  # the session does not exist yet
    history.clear()  # nor does clearing it fail


def test_add_and_read_back_every_kind(store: BaseStore, png_bytes: bytes) -> None:
    original = conversation(png_bytes)
    history = ChatHistoryMessageHistory(store, "s1")
    history.add_messages(original)
    assert dumps(history.messages) == dumps(original)
    stored = store.range("s1")
    assert [m.role for m in stored][:4] == ["system", "developer", "user", "assistant"]
    sha = stored[2].attachments[0].sha256
    assert store.get_asset(sha) == png_bytes  # the image bytes live in the asset storage


def test_usage_metadata_is_kept_as_the_messages_usage(store: BaseStore) -> None:
    """An ``AIMessage``'s ``usage_metadata`` (as langchain-anthropic fills it: the
    whole prompt in ``input_tokens``) is the stored message's ``Usage``; the message
    reads back as LangChain gave it."""
    from langchain_core.messages.ai import UsageMetadata

    usage = UsageMetadata(input_tokens=1312, output_tokens=30, total_tokens=1342,
                          input_token_details={"cache_read": 1000, "cache_creation": 300})
    answer = AIMessage("hello", id="run-8", usage_metadata=usage, response_metadata={
        "model_name": "claude-sonnet-4-5", "model_provider": "anthropic"})
    expected = Usage(input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                     cache_write_tokens=300, model="claude-sonnet-4-5", provider="anthropic")
    assert usage_of(answer) == expected
    assert usage_of(AIMessage("no usage")) is None
    history = ChatHistoryMessageHistory(store, "s1")
    history.add_messages([HumanMessage("hi"), answer])
    assert store.get("s1", "run-8").usage == expected
    assert dumps(history.messages[-1:]) == dumps([answer])
    with pytest.raises(InvalidMessage) as err:
        from_langchain([AIMessage("x", usage_metadata=UsageMetadata(
            input_tokens=-1, output_tokens=0, total_tokens=0))])
    assert err.value.path == "$[0].usage_metadata.input_tokens"


def test_adding_the_same_messages_again_stores_nothing(store: BaseStore) -> None:
    history = ChatHistoryMessageHistory(store, "s1")
    question = HumanMessage("hi", id="q-1")
    answer = AIMessage("hello", id="run-7")
    history.add_messages([question, answer])
    history.add_messages([question, answer])  # a retry
    history.add_message(AIMessage("hello", id="run-7"))
    assert [m.content for m in history.messages] == ["hi", "hello"]
    assert [m.id for m in history.messages] == ["q-1", "run-7"]


def test_a_call_without_id_added_again_stores_nothing(store: BaseStore) -> None:
    """A tool call LangChain holds without an id gets one named after its message, the
    same each time: adding the message again is a retry, not other content under its
    id (which the store refuses); another message under that id is refused."""
    history = ChatHistoryMessageHistory(store, "s1")
    call = AIMessage("", id="run-8", tool_calls=[{"name": "f", "args": {"a": 1}, "id": None}])
    history.add_messages([call])
    history.add_messages([call])
    assert len(store.range("s1")) == 1
    assert store.range("s1")[0].tool_calls[0].id == "run-8.call0"
    with pytest.raises(IdReused):
        history.add_message(AIMessage("other", id="run-8"))


def test_langchain_convenience_methods(store: BaseStore) -> None:
    history = ChatHistoryMessageHistory(store, "s1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        history.add_user_message("hello")
        history.add_ai_message("hi there")
        history.add_user_message(HumanMessage("bye"))
        history.add_message(AIMessage("see you"))
    assert [type(m) for m in history.messages] == [HumanMessage, AIMessage, HumanMessage,
                                                   AIMessage]
    assert str(history) == get_buffer_string(history.messages)
    history.clear()
    assert history.messages == []
    assert store.get_session("s1").message_count == 0  # the session stays, empty


def tool_turns() -> list[BaseMessage]:
    return [
        SystemMessage("sys", id="sys"),
        HumanMessage("q1", id="q1"),
        AIMessage("a1", id="a1"),
        HumanMessage("q2", id="q2"),
        AIMessage("", id="call", tool_calls=[{"id": "c1", "name": "f", "args": {}},
                                             {"id": "c2", "name": "f", "args": {}}]),
        ToolMessage("r1", tool_call_id="c1", id="r1"),
        ToolMessage("r2", tool_call_id="c2", id="r2"),
        AIMessage("a2", id="a2"),
    ]


def test_last_n_keeps_groups_whole_and_the_system_prompt(store: BaseStore) -> None:
    ChatHistoryMessageHistory(store, "s1").add_messages(tool_turns())

    def ids(**options: Any) -> list[str | None]:
        return [m.id for m in ChatHistoryMessageHistory(store, "s1", **options).messages]

    # the 2nd newest is a tool result: its call and the other result come with it
    assert ids(last_n=2) == ["sys", "call", "r1", "r2", "a2"]
    assert ids(last_n=2, keep_system=False) == ["call", "r1", "r2", "a2"]
    assert ids(last_n=1) == ["sys", "a2"]
    assert ids(last_n=0, keep_system=False) == []
    assert ids() == [m.id for m in tool_turns()]


def test_max_tokens_selects_the_newest_that_fit(store: BaseStore) -> None:
    ChatHistoryMessageHistory(store, "s1").add_messages(tool_turns())
    everything = store.range("s1")
    costs = {m.id: store.counter.count_message(m) for m in everything}
    budget = store.counter.priming_tokens + costs["sys"] + costs["a2"]
    chosen = ChatHistoryMessageHistory(store, "s1", max_tokens=budget).messages
    assert [m.id for m in chosen] == ["sys", "a2"]
    loose = ChatHistoryMessageHistory(store, "s1", max_tokens=10_000, last_n=1).messages
    assert [m.id for m in loose] == ["sys", "a2"]
    none = ChatHistoryMessageHistory(store, "s1", max_tokens=0).messages
    assert none == []


def test_sessions_are_kept_apart_by_tenant(store: BaseStore) -> None:
    ChatHistoryMessageHistory(store, "s1", tenant="a").add_messages([HumanMessage("for a")])
    ChatHistoryMessageHistory(store, "s1", tenant="b").add_messages([HumanMessage("for b")])
    assert [m.content for m in ChatHistoryMessageHistory(store, "s1", tenant="a").messages] == [
        "for a"]
    assert [m.content for m in ChatHistoryMessageHistory(store, "s1", tenant="b").messages] == [
        "for b"]


def test_async_methods_match_the_sync_ones(store: BaseStore) -> None:
    async def run() -> None:
        for given in (store, AsyncStoreAdapter(store)):
            history = ChatHistoryMessageHistory(given, "async")
            await history.aadd_messages([HumanMessage("one", id="1"), AIMessage("two", id="2")])
            await history.aadd_messages([HumanMessage("one", id="1")])
            assert dumps(await history.aget_messages()) == dumps(history.messages)
            assert [m.content for m in await history.aget_messages()] == ["one", "two"]
            await history.aclear()
            assert await history.aget_messages() == []

    asyncio.run(run())


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        ChatHistoryMessageHistory(MemoryStore(), "s", last_n=-1)
    with pytest.raises(ValueError):
        ChatHistoryMessageHistory(MemoryStore(), "s", max_tokens=-1)


def test_runnable_with_message_history(store: BaseStore) -> None:
    try:
        from langchain_core.runnables.history import RunnableWithMessageHistory
    except ImportError:  # pragma: no cover - depends on the langchain-core version
        pytest.skip("RunnableWithMessageHistory is not in this langchain-core")
    from langchain_core.prompt_values import PromptValue
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables import RunnableLambda

    seen: list[list[BaseMessage]] = []

    def model(prompt: PromptValue) -> AIMessage:
        messages = prompt.to_messages()
        seen.append(messages)
        return AIMessage(f"reply {len(seen)}", id=f"run-{len(seen)}")

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        chain = RunnableWithMessageHistory(
            prompt | RunnableLambda(model),
            lambda session_id: ChatHistoryMessageHistory(store, session_id),
            input_messages_key="question", history_messages_key="history")
        config: Any = {"configurable": {"session_id": "chat-1"}}
        first = chain.invoke({"question": "Hello?"}, config=config)
        second = chain.invoke({"question": "And again?"}, config=config)
    assert (first.content, second.content) == ("reply 1", "reply 2")
    assert [m.content for m in seen[1]] == ["Be brief.", "Hello?", "reply 1", "And again?"]
    stored = store.range("chat-1")
    assert [(m.role, m.text) for m in stored] == [
        ("user", "Hello?"), ("assistant", "reply 1"),
        ("user", "And again?"), ("assistant", "reply 2")]
    assert [m.id for m in stored if m.role == "assistant"] == ["run-1", "run-2"]
