"""OpenAI Agents SDK: ``ChatHistorySession`` over MemoryStore and SQLiteStore.

The first part ports the behaviours of the SDK's own ``SQLiteSession`` tests
(``tests/memory/test_session.py`` in openai-agents-python): runner integration
(run, run_sync, run_streamed), separate sessions, direct add / get / clear, pop
order, limits, unicode and SQL-looking content, concurrent writers, and
``SessionSettings``. The rest covers what this adapter adds: any item type
round-trips, the mapping to messages, and pair-safe limits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from chathistory import InvalidMessage
from chathistory.integrations.openai_agents import ChatHistorySession, message_of
from chathistory.model import Reasoning, TextPart, ToolCall, ToolResult
from chathistory.stores import BaseStore
from chathistory.stores.aio import AsyncStoreAdapter

set_tracing_disabled(True)
RUNNER_METHODS = ["run", "run_sync", "run_streamed"]


class FakeModel(Model):
    """Answers with scripted output items and records the input of every turn."""

    def __init__(self) -> None:
        self.outputs: list[list[Any]] = []
        self.last_turn_args: dict[str, Any] = {}

    def set_next_output(self, output: list[Any]) -> None:
        self.outputs.append(output)

    def _next(self, input: Any) -> list[Any]:
        self.last_turn_args = {"input": input}
        return self.outputs.pop(0) if self.outputs else []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any, conversation_id: Any,
                           prompt: Any) -> ModelResponse:
        return ModelResponse(output=self._next(input), usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions: Any, input: Any, model_settings: Any,
                              tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                              previous_response_id: Any = None, conversation_id: Any = None,
                              prompt: Any = None) -> AsyncIterator[Any]:
        response = Response.model_construct(
            id="resp-1", created_at=0, model="fake", object="response", output=self._next(input),
            tool_choice="none", tools=[], top_p=None, parallel_tool_calls=False, usage=None)
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)


def text_message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-1", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


async def run_agent(method: str, agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    if method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if method == "run_sync":
        def in_thread() -> Any:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                return Runner.run_sync(agent, input_data, **kwargs)
            finally:
                loop.close()

        return await asyncio.to_thread(in_thread)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


@pytest.fixture
def session(store: BaseStore) -> Iterator[ChatHistorySession]:
    yield ChatHistorySession("test_session", store)


def contents(items: list[TResponseInputItem]) -> list[Any]:
    return [item.get("content") for item in items]  # type: ignore[union-attr]


# ======================================================== ported from SQLiteSession's tests


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_basic_functionality(method: str, session: ChatHistorySession) -> None:
    async def go() -> None:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        model.set_next_output([text_message("San Francisco")])
        first = await run_agent(method, agent, "What city is the Golden Gate Bridge in?",
                                session=session)
        assert first.final_output == "San Francisco"
        model.set_next_output([text_message("California")])
        second = await run_agent(method, agent, "What state is it in?", session=session)
        assert second.final_output == "California"
        last_input = model.last_turn_args["input"]
        assert len(last_input) > 1
        assert contents(last_input)[0] == "What city is the Golden Gate Bridge in?"

    asyncio.run(go())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_disabled(method: str) -> None:
    async def go() -> None:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        model.set_next_output([text_message("Hello")])
        await run_agent(method, agent, "Hi there")
        model.set_next_output([text_message("I don't remember")])
        await run_agent(method, agent, "Do you remember what I said?")
        assert len(model.last_turn_args["input"]) == 1

    asyncio.run(go())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_different_sessions(method: str, store: BaseStore) -> None:
    async def go() -> None:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        cats, dogs = ChatHistorySession("session_1", store), ChatHistorySession("session_2", store)
        model.set_next_output([text_message("I like cats")])
        await run_agent(method, agent, "I like cats", session=cats)
        model.set_next_output([text_message("I like dogs")])
        await run_agent(method, agent, "I like dogs", session=dogs)
        model.set_next_output([text_message("Yes, you mentioned cats")])
        await run_agent(method, agent, "What did I say I like?", session=cats)
        seen = contents(model.last_turn_args["input"])
        assert "I like cats" in seen and "I like dogs" not in seen

    asyncio.run(go())


def test_session_memory_direct(session: ChatHistorySession) -> None:
    async def go() -> None:
        items: list[TResponseInputItem] = [{"role": "user", "content": "Hello"},
                                           {"role": "assistant", "content": "Hi there!"}]
        await session.add_items(items)
        retrieved = await session.get_items()
        assert retrieved == items
        await session.clear_session()
        assert await session.get_items() == []

    asyncio.run(go())


def test_session_memory_pop_item(session: ChatHistorySession) -> None:
    async def go() -> None:
        assert await session.pop_item() is None
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
        await session.add_items(items)
        assert len(await session.get_items()) == 3
        assert await session.pop_item() == items[2]
        after = await session.get_items()
        assert len(after) == 2 and contents(after)[-1] == "Hi there!"
        assert await session.pop_item() == items[1]
        assert await session.pop_item() == items[0]
        assert await session.pop_item() is None
        assert await session.get_items() == []

    asyncio.run(go())


def test_session_memory_pop_different_sessions(store: BaseStore) -> None:
    async def go() -> None:
        one, two = ChatHistorySession("session_1", store), ChatHistorySession("session_2", store)
        await one.add_items([{"role": "user", "content": "Session 1 message"}])
        await two.add_items([{"role": "user", "content": "Session 2 message 1"},
                             {"role": "user", "content": "Session 2 message 2"}])
        popped = await two.pop_item()
        assert popped is not None and popped.get("content") == "Session 2 message 2"
        assert contents(await one.get_items()) == ["Session 1 message"]
        assert contents(await two.get_items()) == ["Session 2 message 1"]

    asyncio.run(go())


def test_session_get_items_with_limit(session: ChatHistorySession) -> None:
    async def go() -> None:
        items: list[TResponseInputItem] = [
            {"role": "user" if i % 2 == 0 else "assistant",
             "content": f"{'Message' if i % 2 == 0 else 'Response'} {i // 2 + 1}"}
            for i in range(6)]
        await session.add_items(items)
        assert await session.get_items() == items
        assert contents(await session.get_items(limit=2)) == ["Message 3", "Response 3"]
        assert contents(await session.get_items(limit=4)) == [
            "Message 2", "Response 2", "Message 3", "Response 3"]
        assert await session.get_items(limit=10) == items
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=-1) == items  # SQLite's LIMIT -1: no limit

    asyncio.run(go())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_appends_list_input_by_default(method: str,
                                                      session: ChatHistorySession) -> None:
    async def go() -> None:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        initial: list[TResponseInputItem] = [{"role": "user", "content": "Earlier message"},
                                             {"role": "assistant", "content": "Saved reply"}]
        await session.add_items(initial)
        list_input: list[TResponseInputItem] = [{"role": "user", "content": "Test message"}]
        model.set_next_output([text_message("This should run")])
        await run_agent(method, agent, list_input, session=session)
        assert model.last_turn_args["input"] == initial + list_input

    asyncio.run(go())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_callback_prepared_input(method: str, session: ChatHistorySession) -> None:
    async def go() -> None:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        initial: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello there."},
            {"role": "assistant", "content": "Hi, I'm here to assist you."}]
        await session.add_items(initial)

        def only_user(history: list[Any], new_input: list[Any]) -> list[Any]:
            return [item for item in history if item["role"] == "user"] + new_input

        new_turn: list[TResponseInputItem] = [{"role": "user", "content": "What your name?"}]
        model.set_next_output([text_message("I'm gpt-4o")])
        await run_agent(method, agent, new_turn, session=session,
                        run_config=RunConfig(session_input_callback=only_user))
        assert model.last_turn_args["input"] == [initial[0], new_turn[0]]

    asyncio.run(go())


def test_session_unicode_content(session: ChatHistorySession) -> None:
    async def go() -> None:
        items: list[TResponseInputItem] = [{"role": "user", "content": "こんにちは"},
                                           {"role": "assistant", "content": "😊👍"},
                                           {"role": "user", "content": "Привет"}]
        await session.add_items(items)
        assert contents(await session.get_items()) == ["こんにちは", "😊👍", "Привет"]

    asyncio.run(go())


def test_session_special_characters_and_sql_injection(session: ChatHistorySession) -> None:
    async def go() -> None:
        texts = ["O'Reilly", "DROP TABLE sessions;", '"SELECT * FROM users WHERE name = "admin";"',
                 "Robert'); DROP TABLE students;--", "Normal message"]
        items: list[TResponseInputItem] = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(texts)]
        await session.add_items(items)
        assert contents(await session.get_items()) == texts

    asyncio.run(go())


def test_session_concurrent_access(session: ChatHistorySession) -> None:
    items: list[TResponseInputItem] = [{"role": "user", "content": f"Message {i}"}
                                       for i in range(10)]

    def add_item(item: TResponseInputItem) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(session.add_items([item]))
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        list(executor.map(add_item, items))
    retrieved = asyncio.run(session.get_items())
    assert set(contents(retrieved)) == {f"Message {i}" for i in range(10)}
    assert len(retrieved) == 10


def test_session_settings_default_and_constructor(store: BaseStore) -> None:
    default = ChatHistorySession("default_settings", store)
    assert isinstance(default.session_settings, SessionSettings)
    assert default.session_settings.limit is None
    limited = ChatHistorySession("limited", store, session_settings=SessionSettings(limit=5))
    assert limited.session_settings is not None and limited.session_settings.limit == 5


def test_get_items_uses_session_settings_limit(store: BaseStore) -> None:
    async def go() -> None:
        session = ChatHistorySession("uses_limit", store, session_settings=SessionSettings(limit=3))
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
        assert contents(await session.get_items()) == ["Message 2", "Message 3", "Message 4"]
        assert contents(await session.get_items(limit=2)) == ["Message 3", "Message 4"]

    asyncio.run(go())


def test_runner_with_session_settings_override(store: BaseStore) -> None:
    async def go() -> None:
        session = ChatHistorySession("override", store,
                                     session_settings=SessionSettings(limit=100))
        await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
        model = FakeModel()
        model.set_next_output([text_message("Got it")])
        await Runner.run(Agent(name="test", model=model), "New question", session=session,
                         run_config=RunConfig(session_settings=SessionSettings(limit=2)))
        history = [c for c in contents(model.last_turn_args["input"]) if c != "New question"]
        assert history == ["Turn 8", "Turn 9"]

    asyncio.run(go())


# ======================================================== what this adapter adds


ITEMS: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}',
     "id": "fc_1", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "x"}},
    {"type": "computer_call", "call_id": "cc", "id": "cu_1", "action": {"type": "click"},
     "pending_safety_checks": [], "status": "completed"},
    {"type": "computer_call_output", "call_id": "cc",
     "output": {"type": "computer_screenshot", "image_url": "https://example.com/s.png"}},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Done.", "annotations": []}]},
    {"role": "user", "content": ""},
]


def test_implements_the_sdk_session_protocol(session: ChatHistorySession) -> None:
    assert isinstance(session, Session)


def test_every_item_comes_back_equal(store: BaseStore) -> None:
    async def go() -> None:
        for given in (store, AsyncStoreAdapter(store)):
            session = ChatHistorySession(f"items-{type(given).__name__}", given)
            await session.add_items(ITEMS)  # type: ignore[arg-type]
            await session.add_items(ITEMS[:1])  # an equal item again is a new item
            assert await session.get_items() == [*ITEMS, ITEMS[0]]

    asyncio.run(go())


def test_items_are_stored_as_real_messages(store: BaseStore) -> None:
    asyncio.run(ChatHistorySession("m", store).add_items(ITEMS))  # type: ignore[arg-type]
    stored = store.range("m")
    assert [m.role for m in stored] == ["system", "user", "assistant", "assistant", "tool",
                                        "assistant", "assistant", "tool", "assistant", "user"]
    assert isinstance(stored[2].parts[0], Reasoning)
    # the SDK's arguments string is kept byte for byte (it is spaced: not compact JSON)
    assert stored[3].parts == [ToolCall(id="c1", name="lookup", arguments={"q": "x"},
                                        raw_arguments='{"q": "x"}',
                                        provider_metadata=stored[3].parts[0].provider_metadata)]
    result = stored[4].parts[0]
    assert isinstance(result, ToolResult) and (result.call_id, result.content) == ("c1", "42")
    computer = stored[6].parts[0]
    assert isinstance(computer, ToolCall) and computer.name == "computer_call"
    assert computer.arguments["action"] == {"type": "click"}
    assert isinstance(stored[7].parts[0], ToolResult)
    assert isinstance(stored[5].parts[0], TextPart)  # a hosted call, kept as its JSON
    assert stored[8].text == "Done."


def test_limit_never_splits_a_call_from_its_result(store: BaseStore) -> None:
    async def go() -> None:
        session = ChatHistorySession("pairs", store)
        await session.add_items(ITEMS[:5])  # type: ignore[arg-type]
        # the newest item is a result: its call, and the reasoning before it, come along
        assert await session.get_items(limit=1) == ITEMS[2:5]
        exact = ChatHistorySession("pairs", store, pair_safe=False)
        assert await exact.get_items(limit=1) == ITEMS[4:5]
        assert await exact.get_items(limit=3) == ITEMS[2:5]

    asyncio.run(go())


@pytest.mark.parametrize("method", ["run", "run_streamed"])
def test_tool_calls_round_trip_through_the_runner(method: str, store: BaseStore) -> None:
    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    async def go() -> None:
        session = ChatHistorySession("tools", store)
        model = FakeModel()
        agent = Agent(name="test", model=model, tools=[lookup])
        model.set_next_output([ResponseFunctionToolCall(
            type="function_call", call_id="call-1", name="lookup", arguments='{"q": "cats"}',
            id="fc-1", status="completed")])
        model.set_next_output([text_message("Cats found.")])
        result = await run_agent(method, agent, "Find cats", session=session)
        assert result.final_output == "Cats found."
        items = await session.get_items()
        kinds = [item.get("type", "message") for item in items]
        assert kinds == ["message", "function_call", "function_call_output", "message"]
        assert items[2]["output"] == "found cats"  # type: ignore[typeddict-item]
        model.set_next_output([text_message("Still cats.")])
        await run_agent(method, agent, "And now?", session=session)
        assert model.last_turn_args["input"][:4] == items
        calls = [m for m in store.range("tools") if m.tool_calls or m.tool_results]
        assert [m.role for m in calls] == ["assistant", "tool"]

    asyncio.run(go())


class MeteredModel(FakeModel):
    """``FakeModel`` whose responses report usage, as a real model's do."""

    def __init__(self, usages: list[Usage]) -> None:
        super().__init__()
        self.usages = usages

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        response = await super().get_response(*args, **kwargs)
        return ModelResponse(output=response.output, usage=self.usages.pop(0),
                             response_id=None)


def test_usage_hooks_keep_each_responses_usage(store: BaseStore) -> None:
    """Through the SDK's own runner, each model response's ``ModelResponse.usage`` is
    the usage of the message of its last item: the call, then the answer."""
    from agents.usage import InputTokensDetails, OutputTokensDetails

    from chathistory import Usage as Observed

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    def reported(prompt: int, cached: int, out: int) -> Usage:
        return Usage(requests=1, input_tokens=prompt, output_tokens=out,
                     total_tokens=prompt + out,
                     input_tokens_details=InputTokensDetails(cached_tokens=cached,
                                                               cache_write_tokens=0),
                     output_tokens_details=OutputTokensDetails(reasoning_tokens=0))

    async def go() -> None:
        session = ChatHistorySession("metered", store)
        model = MeteredModel([reported(1200, 1024, 20), reported(1300, 1152, 8)])
        agent = Agent(name="test", model=model, tools=[lookup])
        model.set_next_output([ResponseFunctionToolCall(
            type="function_call", call_id="call-1", name="lookup", arguments='{"q": "cats"}',
            id="fc-1", status="completed")])
        model.set_next_output([text_message("Cats found.")])
        await Runner.run(agent, "Find cats", session=session, hooks=session.usage_hooks())
        stored = store.range("metered")
        assert [m.usage for m in stored] == [
            None,
            Observed(input_tokens=1200, output_tokens=20, cache_read_tokens=1024,
                     provider="openai"),
            None,
            Observed(input_tokens=1300, output_tokens=8, cache_read_tokens=1152,
                     provider="openai")]
        assert session._observed == {}  # nothing left waiting

    asyncio.run(go())


def test_bad_items_store_nothing(session: ChatHistorySession, store: BaseStore) -> None:
    async def go() -> None:
        with pytest.raises(InvalidMessage) as caught:
            await session.add_items([{"role": "user", "content": "ok"},
                                     {"role": "user", "content": object()}])  # type: ignore
        assert caught.value.path == "$[1]"
        assert await session.get_items() == []
        await session.add_items([])
        await session.clear_session()  # a session never written: nothing to clear
        assert await session.pop_item() is None

    asyncio.run(go())


def test_sessions_are_kept_apart_by_tenant(store: BaseStore) -> None:
    async def go() -> None:
        a = ChatHistorySession("same", store, tenant="a")
        b = ChatHistorySession("same", store, tenant="b")
        await a.add_items([{"role": "user", "content": "for a"}])
        await b.add_items([{"role": "user", "content": "for b"}])
        assert contents(await a.get_items()) == ["for a"]
        await a.clear_session()
        assert contents(await b.get_items()) == ["for b"]

    asyncio.run(go())


def test_messages_written_by_others_are_returned_as_items(store: BaseStore) -> None:
    from chathistory import Message

    store.create_session("shared")
    store.append("shared", [Message.user("from the provider"), Message.assistant("ok")])
    items = asyncio.run(ChatHistorySession("shared", store).get_items())
    assert items == [{"type": "message", "role": "user", "content": "from the provider"},
                     {"type": "message", "role": "assistant", "content": "ok"}]


def test_message_of_names_the_bad_field() -> None:
    with pytest.raises(InvalidMessage):
        message_of([1, 2])  # type: ignore[arg-type]
