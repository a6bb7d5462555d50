"""Microsoft Agent Framework: ``ChatHistoryAgentProvider`` with the framework's real
``Agent``, ``AgentSession`` and a scripted subclass of its ``BaseChatClient``."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    Content,
    HistoryProvider,
)
from agent_framework import Message as AFMessage

from chathistory.integrations.agent_framework import (
    ChatHistoryAgentProvider,
    from_agent_framework,
    to_agent_framework,
    usage_of,
)
from chathistory.model import ImagePart, Reasoning, TextPart, ToolCall, ToolResult
from chathistory.stores import BaseStore

logging.getLogger("agent_framework").setLevel(logging.ERROR)  # "no function invoking" notice


class ScriptedClient(BaseChatClient):
    """Answers each call with the next scripted list of messages (or raises it)."""

    def __init__(self, *replies: list[AFMessage] | Exception) -> None:
        super().__init__()
        self.replies = list(replies)
        self.seen: list[list[AFMessage]] = []

    def _inner_get_response(self, *, messages: Sequence[AFMessage], stream: bool,
                            options: Any, **kwargs: Any) -> Awaitable[ChatResponse]:
        self.seen.append(list(messages))
        reply = self.replies.pop(0)

        async def answer() -> ChatResponse:
            if isinstance(reply, Exception):
                raise reply
            return ChatResponse(messages=reply, response_id="resp-1")

        return answer()


def say(text: str) -> list[AFMessage]:
    return [AFMessage("assistant", [text])]


def texts(messages: Sequence[AFMessage]) -> list[tuple[str, str]]:
    return [(str(m.role), m.text) for m in messages]


def test_is_the_frameworks_history_provider() -> None:
    provider = ChatHistoryAgentProvider()
    assert isinstance(provider, HistoryProvider)
    assert provider.source_id == "chathistory"


def test_history_is_loaded_and_each_turn_stored(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(say("one"), say("two"))
        agent = Agent(client, context_providers=[ChatHistoryAgentProvider(store)])
        session = agent.create_session()
        assert (await agent.run("hi", session=session)).text == "one"
        assert (await agent.run("again", session=session)).text == "two"
        assert texts(client.seen[1]) == [("user", "hi"), ("assistant", "one"),
                                         ("user", "again")]
        stored = store.range(session.session_id)
        assert [(m.role, m.text) for m in stored] == [
            ("user", "hi"), ("assistant", "one"), ("user", "again"), ("assistant", "two")]
        assert "messages" not in session.state["chathistory"]  # the store keeps them

    asyncio.run(go())


class MeteredClient(ScriptedClient):
    """``ScriptedClient`` whose responses report usage and their model, as the
    framework's chat clients do."""

    def _inner_get_response(self, *, messages: Sequence[AFMessage], stream: bool,
                            options: Any, **kwargs: Any) -> Awaitable[ChatResponse]:
        inner = super()._inner_get_response(messages=messages, stream=stream,
                                            options=options, **kwargs)

        async def answer() -> ChatResponse:
            response = await inner
            return ChatResponse(messages=response.messages, response_id="resp-1",
                                model="claude-x", usage_details={
                                    "input_token_count": 1312, "output_token_count": 30,
                                    "cache_read_input_token_count": 1000,
                                    "cache_creation_input_token_count": 300})

        return answer()


def test_a_runs_usage_details_are_the_answers_usage(store: BaseStore) -> None:
    """Through the framework's own ``Agent``: ``AgentResponse.usage_details`` is kept on
    the run's assistant message, with the model of the chat response it wraps."""
    from chathistory import Usage

    expected = Usage(input_tokens=1312, output_tokens=30, cache_read_tokens=1000,
                     cache_write_tokens=300, model="claude-x")

    async def go() -> None:
        agent = Agent(MeteredClient(say("one")),
                      context_providers=[ChatHistoryAgentProvider(store)])
        session = agent.create_session()
        response = await agent.run("hi", session=session)
        assert usage_of(response) == expected
        stored = store.range(session.session_id)
        assert [m.usage for m in stored] == [None, expected]

    asyncio.run(go())
    uncached_rest = ChatResponse(messages=say("x"), usage_details={
        "input_token_count": 12, "cache_read_input_token_count": 1000})
    assert usage_of(uncached_rest) == Usage(input_tokens=1012, cache_read_tokens=1000)
    assert usage_of(ChatResponse(messages=say("x"))) is None


def test_without_a_store_the_session_carries_the_conversation() -> None:
    async def go() -> None:
        client = ScriptedClient(say("a"), say("b"))
        agent = Agent(client, context_providers=[ChatHistoryAgentProvider()])
        session = agent.create_session()
        await agent.run("x", session=session)
        restored = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))
        await agent.run("y", session=restored)
        assert texts(client.seen[1]) == [("user", "x"), ("assistant", "a"), ("user", "y")]
        saved = restored.state["chathistory"]["messages"]
        assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]

    asyncio.run(go())


def test_a_failed_run_stores_nothing(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(say("fine"), RuntimeError("model down"), say("back"))
        agent = Agent(client, context_providers=[ChatHistoryAgentProvider(store)])
        session = agent.create_session()
        await agent.run("first", session=session)
        with pytest.raises(RuntimeError, match="model down"):
            await agent.run("lost", session=session)
        assert store.get_session(session.session_id).message_count == 2
        await agent.run("third", session=session)
        assert texts(client.seen[2]) == [("user", "first"), ("assistant", "fine"),
                                         ("user", "third")]
        assert [m.text for m in store.range(session.session_id)] == [
            "first", "fine", "third", "back"]

    asyncio.run(go())


def test_after_run_without_a_response_stores_nothing(store: BaseStore) -> None:
    from agent_framework import SessionContext

    async def go() -> None:
        provider = ChatHistoryAgentProvider(store)
        session = AgentSession()
        state: dict[str, Any] = {}
        context = SessionContext(session_id=session.session_id,
                                 input_messages=[AFMessage("user", ["hi"])])
        await provider.before_run(agent=None, session=session, context=context, state=state)
        assert "_pending" in state
        await provider.after_run(agent=None, session=session, context=context, state=state)
        assert store.get_session(session.session_id).message_count == 0
        assert "_pending" not in state

    asyncio.run(go())


def test_audit_mode_stores_everything_and_loads_nothing(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(say("one"), say("two"))
        audit = ChatHistoryAgentProvider(store, source_id="audit", load_messages=False)
        agent = Agent(client, context_providers=[audit])
        session = agent.create_session()
        await agent.run("hi", session=session)
        await agent.run("again", session=session)
        # With no loading provider the framework adds its own in-memory one: the history
        # the model sees comes from it, none from the audit provider.
        sources = {m.additional_properties.get("_attribution", {}).get("source_id")
                   for m in client.seen[1][:-1]}
        assert sources == {"in_memory"}
        assert [m.text for m in store.range(session.session_id)] == ["hi", "one", "again", "two"]
        assert session.state["audit"] == {}

    asyncio.run(go())


def test_audit_beside_a_loading_provider_stores_the_turn_once(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(say("one"), say("two"))
        memory = ChatHistoryAgentProvider(source_id="memory")
        audit = ChatHistoryAgentProvider(store, source_id="audit", load_messages=False)
        agent = Agent(client, context_providers=[memory, audit])
        session = agent.create_session()
        await agent.run("hi", session=session)
        await agent.run("again", session=session)
        assert texts(client.seen[1]) == [("user", "hi"), ("assistant", "one"),
                                         ("user", "again")]
        assert [m.text for m in store.range(session.session_id)] == ["hi", "one", "again", "two"]

    asyncio.run(go())


def test_policy_limits_what_is_loaded(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(say("one"), say("two"), say("three"))
        agent = Agent(client, context_providers=[ChatHistoryAgentProvider(store, policy=2)])
        session = agent.create_session()
        for question in ("q1", "q2", "q3"):
            await agent.run(question, session=session)
        assert texts(client.seen[2]) == [("user", "q2"), ("assistant", "two"), ("user", "q3")]
        assert store.get_session(session.session_id).message_count == 6

    asyncio.run(go())


def tool_turn() -> list[AFMessage]:
    return [
        AFMessage("assistant", [Content.from_function_call("call-1", "lookup",
                                                           arguments='{"q": "cats"}')]),
        AFMessage("tool", [Content.from_function_result("call-1", result="3 cats")]),
        AFMessage("assistant", ["There are 3 cats."]),
    ]


def test_tool_calls_are_stored_with_their_results(store: BaseStore) -> None:
    async def go() -> None:
        client = ScriptedClient(tool_turn(), say("ok"))
        agent = Agent(client, context_providers=[ChatHistoryAgentProvider(store)])
        session = agent.create_session()
        await agent.run("how many cats?", session=session)
        await agent.run("thanks", session=session)
        loaded = client.seen[1]
        assert [c.type for m in loaded for c in m.contents] == [
            "text", "function_call", "function_result", "text", "text"]
        stored = store.range(session.session_id)
        assert stored[1].tool_calls[0].arguments == {"q": "cats"}
        assert stored[2].tool_results[0].call_id == "call-1"

    asyncio.run(go())


def test_message_ids_are_kept_and_the_callers_messages_left_alone(store: BaseStore) -> None:
    async def go() -> None:
        reply = [AFMessage("assistant", ["hello"], message_id="msg-42")]
        client = ScriptedClient(reply)
        provider = ChatHistoryAgentProvider(store)
        agent = Agent(client, context_providers=[provider])
        session = agent.create_session()
        question = AFMessage("user", ["hi"])
        await agent.run(question, session=session)
        stored = store.range(session.session_id)
        assert stored[1].id == "msg-42"
        assert question.message_id is None and stored[0].id  # a UUID of ours, not set on it
        got = await provider.get_messages(session.session_id)
        assert [m.message_id for m in got] == [None, "msg-42"]  # read back as given

    asyncio.run(go())


def test_get_and_save_messages_directly(store: BaseStore) -> None:
    async def go() -> None:
        for provider, state in ((ChatHistoryAgentProvider(store), None),
                                (ChatHistoryAgentProvider(), {})):
            messages = [AFMessage("user", ["a"], message_id="1"),
                        AFMessage("assistant", ["b"], message_id="2")]
            await provider.save_messages("direct", messages, state=state)
            await provider.save_messages("direct", messages[:1], state=state)  # no-op
            got = await provider.get_messages("direct", state=state)
            assert texts(got) == [("user", "a"), ("assistant", "b")]
            assert [m.message_id for m in got] == ["1", "2"]

    asyncio.run(go())


def test_conversion_round_trip(png_bytes: bytes) -> None:
    data_uri = "data:image/png;base64," + base64.b64encode(png_bytes).decode()
    original = [
        AFMessage("system", ["Be kind."], message_id="s"),
        AFMessage("user", ["Look", Content.from_uri(data_uri, media_type="image/png"),
                           Content.from_uri("https://example.com/a.png", media_type="image/png")],
                  message_id="u", author_name="ada", additional_properties={"k": 1}),
        AFMessage("assistant", [
            Content.from_text_reasoning(text="thinking", protected_data="opaque", id="r1"),
            Content.from_function_call("c1", "f", arguments='{"a": 1}'),
            Content.from_usage(usage_details={"input_token_count": 3}),
        ], message_id="a"),
        AFMessage("tool", [Content.from_function_result("c1", result="done")], message_id="t"),
    ]
    ours = from_agent_framework(original)
    assert [m.role for m in ours] == ["system", "user", "assistant", "tool"]
    assert [type(p) for p in ours[1].parts] == [TextPart, ImagePart, ImagePart]
    image = ours[1].parts[1]
    assert isinstance(image, ImagePart) and image.attachment is not None
    assert image.attachment.data == png_bytes
    assert [type(p) for p in ours[2].parts] == [Reasoning, ToolCall]
    assert isinstance(ours[3].parts[0], ToolResult)
    back = to_agent_framework(ours)
    assert [m.to_dict() for m in back] == [m.to_dict() for m in original]


def test_a_message_with_nothing_of_ours() -> None:
    usage_only = AFMessage("assistant", [Content.from_usage(usage_details={})])
    [kept] = from_agent_framework([usage_only])  # an assistant one: kept with a placeholder
    assert [m.to_dict() for m in to_agent_framework([kept])] == [usage_only.to_dict()]
    assert from_agent_framework([AFMessage("user", [""])]) == []  # any other: left out
