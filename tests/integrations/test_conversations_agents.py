"""The Agents SDK as the oracle for chathistory's OpenAI Conversations API (issue 20).

The SDK's ``OpenAIConversationsSession``, given an ``AsyncOpenAI`` client whose base URL
is a live chathistory server's ``/openai/v1`` (over SQLite, PostgreSQL and Redis), and
the SDK's own in-memory ``SQLiteSession`` run one script through ``Runner``: three user
turns answered by a scripted model, with reasoning (encrypted content and a summary)
before a call and before a message, one function call, two parallel calls and a plain
answer. The model must be given the same input on every call, and both sessions must
end with the same items; ``get_items(limit=k)`` for every ``k``, ``pop_item()`` until
empty and ``clear_session()`` must then answer alike, and the conversation must read
back through chathistory's own API as messages with each tool call paired.

What legitimately differs, and is normalised here (nothing else is):

- **Item ids other than reasoning's.** For a Conversations session the SDK itself drops
  the ``id`` of every item but a reasoning item before it writes
  (``agents.run_internal.session_persistence._sanitize_openai_conversation_item``), and
  the Conversations API gives every item an id (``pop_item`` deletes by it). So the
  SQLite side is compared as the SDK writes it to a conversation, and the ids the
  server made are checked (present, distinct) and then left out. Reasoning ids are
  sent, so they must come back as sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import openai
from agents import (
    Agent,
    OpenAIConversationsSession,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseOutputItem
from agents.memory import Session
from agents.run_internal.session_persistence import _sanitize_openai_conversation_item
from scripted_agents_model import ScriptedModel, call, say, think

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from conversationkit import client, serve_any
from serverkit import Served

set_tracing_disabled(True)
Item = dict[str, Any]


@pytest.fixture(scope="module", params=["sqlite", "postgres", "redis"])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A live server over each store; tests keep apart by their own conversations."""
    it = serve_any(request.param, tmp_path_factory.mktemp(request.param))
    yield it
    it.server.stop()
    it.store.close()


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return {"Paris": "18C, sunny", "Rome": "21C, clear"}[city]


@function_tool
def local_time(city: str) -> str:
    """The time now in a city."""
    return {"Oslo": "14:05"}[city]


QUESTIONS = ["What's the weather in Paris?", "And in Rome? What time is it in Oslo?", "Thanks!"]


def script(token: str) -> list[list[TResponseOutputItem]]:
    """The model's answers, call by call, for ``QUESTIONS`` (ids made unique by ``token``,
    as a real model's are)."""
    return [
        # turn 1: reasoning, then one call; reasoning, then the answer
        [think(f"rs_{token}_1", "Look the weather up.", f"gAAAA-{token}-1"),
         call("weather", '{"city": "Paris"}', f"call_{token}_1", f"fc_{token}_1")],
        [think(f"rs_{token}_2", "Say it.", f"gAAAA-{token}-2"),
         say("18C and sunny in Paris.", f"msg_{token}_1")],
        # turn 2: reasoning, then two calls in one response (spacing of arguments kept)
        [think(f"rs_{token}_3", "Two lookups at once.", f"gAAAA-{token}-3"),
         call("weather", '{"city":"Rome"}', f"call_{token}_2", f"fc_{token}_2"),
         call("local_time", '{"city": "Oslo"}', f"call_{token}_3", f"fc_{token}_3")],
        [say("Rome: 21C and clear. Oslo: 14:05.", f"msg_{token}_2")],
        # turn 3: a plain answer
        [say("You're welcome.", f"msg_{token}_3")],
    ]


MODEL_CALLS = 5


async def run_script(session: Session, token: str, method: str = "run") -> ScriptedModel:
    """Every question of ``QUESTIONS`` as its own ``Runner`` run on ``session``."""
    model = ScriptedModel(script(token))
    agent = Agent(name="assistant", model=model, tools=[weather, local_time])
    finals = []
    for question in QUESTIONS:
        if method == "run":
            result: Any = await Runner.run(agent, question, session=session)
        else:
            result = Runner.run_streamed(agent, question, session=session)
            async for _event in result.stream_events():
                pass
        finals.append(result.final_output)
    assert finals == ["18C and sunny in Paris.", "Rome: 21C and clear. Oslo: 14:05.",
                      "You're welcome."]
    assert len(model.inputs) == MODEL_CALLS and not model.outputs
    return model


def as_written(item: Any) -> Item:
    """An item as the SDK writes it to a Conversations session (its own function)."""
    return cast(Item, _sanitize_openai_conversation_item(cast(TResponseInputItem, dict(item))))


def without_server_ids(got: list[Any], expected: list[Item]) -> list[Item]:
    """``got`` (a conversation's items) without the ids the server made: those of the
    items ``expected`` has no id for. Every item must have an id, each its own."""
    ids = [item.get("id") for item in got]
    assert all(isinstance(i, str) and i for i in ids), f"an item without an id: {got}"
    assert len(set(ids)) == len(ids), f"two items share an id: {ids}"
    assert len(got) == len(expected), (got, expected)
    return [{k: v for k, v in item.items() if k != "id" or "id" in want}
            for item, want in zip(got, expected, strict=True)]


def same_items(got: list[Any], oracle: list[Any]) -> None:
    expected = [as_written(item) for item in oracle]
    assert without_server_ids(got, expected) == expected


def same_inputs(got: ScriptedModel, oracle: ScriptedModel) -> None:
    """The model was given the same input on every call (items as the SDK writes them)."""
    assert len(got.inputs) == len(oracle.inputs)
    for call_index, (ours, theirs) in enumerate(zip(got.inputs, oracle.inputs, strict=True)):
        assert isinstance(ours, list) and isinstance(theirs, list)
        assert [as_written(item) for item in ours] == [as_written(item) for item in theirs], (
            f"model call {call_index}:\n{json.dumps(ours, indent=1)}\n"
            f"!=\n{json.dumps(theirs, indent=1)}")


@dataclass
class Runs:
    """The script run on a Conversations session over the server and on SQLiteSession."""

    session: OpenAIConversationsSession
    oracle: SQLiteSession
    sdk: openai.AsyncOpenAI
    ours: ScriptedModel
    theirs: ScriptedModel


@asynccontextmanager
async def both_run(served: Served, method: str = "run") -> AsyncIterator[Runs]:
    token = uuid.uuid4().hex[:8]
    oracle = SQLiteSession("oracle")
    sdk = cast(openai.AsyncOpenAI, client(served, "async"))
    try:
        session = OpenAIConversationsSession(openai_client=sdk)
        theirs = await run_script(oracle, token, method)
        ours = await run_script(session, token, method)
        yield Runs(session, oracle, sdk, ours, theirs)
    finally:
        oracle.close()
        await sdk.close()


@pytest.mark.parametrize("method", ["run", "run_streamed"])
def test_the_model_sees_the_same_input_and_the_sessions_end_alike(served: Served,
                                                                  method: str) -> None:
    async def go() -> None:
        async with both_run(served, method) as runs:
            same_inputs(runs.ours, runs.theirs)
            expected = await runs.oracle.get_items()
            same_items(await runs.session.get_items(), expected)
            # a second session over the same conversation id reads the same items
            again = OpenAIConversationsSession(conversation_id=runs.session.session_id,
                                               openai_client=runs.sdk)
            same_items(await again.get_items(), expected)

    asyncio.run(go())


def test_limits_and_pops_answer_like_sqlite(served: Served) -> None:
    async def go() -> None:
        async with both_run(served) as runs:
            session, oracle = runs.session, runs.oracle
            count = len(await oracle.get_items())
            for limit in range(count + 2):
                same_items(await session.get_items(limit=limit),
                           await oracle.get_items(limit=limit))
            for _ in range(count):
                popped, expected = await session.pop_item(), await oracle.pop_item()
                assert popped is not None and expected is not None
                same_items([popped], [expected])
                same_items(await session.get_items(), await oracle.get_items())
            assert await session.pop_item() is None and await oracle.pop_item() is None
            assert await session.get_items() == [] == await oracle.get_items()

    asyncio.run(go())


def test_clear_session_answers_like_sqlite(served: Served) -> None:
    async def go() -> None:
        async with both_run(served) as runs:
            session, oracle = runs.session, runs.oracle
            cleared = session.session_id
            await session.clear_session()
            await oracle.clear_session()
            # the conversation is deleted: through the OpenAI routes and chathistory's own
            with pytest.raises(openai.NotFoundError):
                await runs.sdk.conversations.retrieve(cleared)
            with served.client("A") as api:
                assert api.get(f"/v1/sessions/{cleared}").status_code == 404
            assert await session.get_items() == [] == await oracle.get_items()
            assert session.session_id != cleared  # reading started a new conversation
            # and the sessions go on alike
            token = uuid.uuid4().hex[:8]
            same_inputs(await run_script(session, token), await run_script(oracle, token))
            same_items(await session.get_items(), await oracle.get_items())

    asyncio.run(go())


def test_the_conversation_reads_back_as_messages_with_paired_tool_calls(
        served: Served) -> None:
    async def go() -> tuple[str, list[Any]]:
        async with both_run(served) as runs:
            return runs.session.session_id, await runs.session.get_items()

    conversation_id, items = asyncio.run(go())
    with served.client("A") as api:
        answer = api.get(f"/v1/sessions/{conversation_id}/messages", params={"start": 0})
        assert answer.status_code == 200, answer.text
        messages = answer.json()["messages"]
        # another tenant sees none of it
        with served.client("B") as other:
            assert other.get(f"/v1/sessions/{conversation_id}/messages",
                             params={"start": 0}).status_code == 404
    assert len(messages) == len(items), "one message per item"
    kinds = [item.get("type", "message") for item in items]
    assert [m["role"] for m in messages] == [
        item["role"] if kind == "message" else "tool" if kind.endswith("_output")
        else "assistant" for item, kind in zip(items, kinds, strict=True)]
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for message, item in zip(messages, items, strict=True):
        parts = message["parts"]
        if item.get("type") == "function_call":
            assert [p["type"] for p in parts] == ["tool_call"], message
            assert parts[0]["id"] == item["call_id"] and parts[0]["name"] == item["name"]
            assert parts[0]["arguments"] == json.loads(item["arguments"])
            assert parts[0]["id"] not in results, "a call stored after its result"
            calls[parts[0]["id"]] = parts[0]
        elif item.get("type") == "function_call_output":
            assert [p["type"] for p in parts] == ["tool_result"], message
            assert parts[0]["call_id"] in calls, "a result before its call"
            assert parts[0]["content"] == item["output"]
            results[parts[0]["call_id"]] = parts[0]
        elif item.get("type") == "reasoning":
            assert [p["type"] for p in parts] == ["reasoning"], message
            assert parts[0]["text"] == item["summary"][0]["text"]
        else:
            assert "".join(p["text"] for p in parts if p["type"] == "text") == text_of(item)
    assert calls.keys() == results.keys() and len(calls) == 3


def text_of(item: Item) -> str:
    content = item["content"]
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content)
