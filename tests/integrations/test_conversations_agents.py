"""The Agents SDK as the oracle for chathistory's OpenAI Conversations API (issue 20).

The SDK's ``OpenAIConversationsSession``, given an ``AsyncOpenAI`` client whose base URL
is a live chathistory server's ``/openai/v1`` (over SQLite, PostgreSQL and Redis), and
the SDK's own in-memory ``SQLiteSession`` run one script through ``Runner``: three user
turns answered by a scripted model, with reasoning (encrypted content and a summary)
before a call and before a message, one function call, two parallel calls and a plain
answer; run and streamed, with the whole history and with a session limit. The model
must be given the same input on every call, and both sessions must end with the same
items; ``get_items(limit=k)`` for every ``k``, ``pop_item()`` until empty and
``clear_session()`` must then answer alike, also over more items than a request writes
or a page holds (20). The conversation must read back through chathistory's own API
as messages with each tool call paired, and through chathistory's own Agents SDK
session (``ChatHistorySession`` over a ``RemoteStore``) as the same items.

What legitimately differs, and is normalised here (nothing else is):

- **Item ids other than reasoning's.** For a Conversations session the SDK itself drops
  the ``id`` of every item but a reasoning item before it writes
  (``agents.run_internal.session_persistence._sanitize_openai_conversation_item``), and
  the Conversations API gives every item an id (``pop_item`` deletes by it). So both
  sides are compared as the SDK writes them to a conversation, and the ids the server
  made are checked (present, distinct) and then left out. Reasoning ids are sent, so
  they must come back as sent.
- **A message's form.** The Conversations API keeps a message as the SDK's
  ``openai.types.conversations.Message`` declares it: ``type`` ``message`` and
  ``content`` a list, so ``{"role": "user", "content": "Hi"}`` comes back as
  ``{"type": "message", "role": "user", "content": [{"type": "input_text", "text":
  "Hi"}]}`` (an assistant's as ``output_text``), which the Responses API reads as the
  same input (``docs/api.md``: "An item is completed as OpenAI completes it").
  Messages are compared in that form on both sides.
- **``status``**, which the API populates on the items it returns: ``completed`` where
  the item was written without one (a message, a function call's output) is left out.
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
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem, TResponseOutputItem
from agents.memory import Session, SessionSettings
from agents.run_internal.session_persistence import _sanitize_openai_conversation_item
from scripted_agents_model import ScriptedModel, call, say, think

from chathistory import open_store
from chathistory.integrations.openai_agents import ChatHistorySession

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from conversationkit import client
from serverkit import Served, serve

set_tracing_disabled(True)
Item = dict[str, Any]


@pytest.fixture(scope="module", params=["sqlite", "postgres", "redis"])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A live server over each store; tests keep apart by their own conversations."""
    it = serve(request.param, tmp_path_factory.mktemp(request.param))
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


async def run_script(session: Session, token: str, method: str = "run",
                     limit: int | None = None) -> ScriptedModel:
    """Every question of ``QUESTIONS`` as its own ``Runner`` run on ``session`` (given
    the newest ``limit`` items of history, with a limit)."""
    model = ScriptedModel(script(token))
    agent = Agent(name="assistant", model=model, tools=[weather, local_time])
    config = RunConfig(session_settings=SessionSettings(limit=limit))
    finals = []
    for question in QUESTIONS:
        if method == "run":
            result: Any = await Runner.run(agent, question, session=session, run_config=config)
        else:
            result = Runner.run_streamed(agent, question, session=session, run_config=config)
            async for _event in result.stream_events():
                pass
        finals.append(result.final_output)
    assert finals == ["18C and sunny in Paris.", "Rome: 21C and clear. Oslo: 14:05.",
                      "You're welcome."]
    assert len(model.inputs) == MODEL_CALLS and not model.outputs
    return model


def as_written(item: Any) -> Item:
    """An item as the SDK writes it to a Conversations session (its own function), a
    message in the form the Conversations API keeps it: ``type`` ``message``, a string
    ``content`` as one ``input_text`` part (``output_text`` for the assistant)."""
    written = cast(Item, _sanitize_openai_conversation_item(cast(TResponseInputItem, dict(item))))
    if written.get("type", "message") != "message":
        return written
    written = {"type": "message", **written}
    text = written.get("content")
    if isinstance(text, str):
        written["content"] = [
            {"type": "output_text", "text": text, "annotations": []}
            if written.get("role") == "assistant" else {"type": "input_text", "text": text}]
    return written


def compared(got: list[Any], oracle: list[Any], *, server_ids: bool) -> None:
    """``got`` is ``oracle``, item for item, both ``as_written``, but for what the API
    adds to an item it returns: a ``status`` of ``completed`` where the item had none,
    and, with ``server_ids``, an id on every item (each its own) where it had none."""
    expected = [as_written(item) for item in oracle]
    ours = [as_written(item) for item in got]
    if server_ids:
        ids = [item.get("id") for item in got]
        assert all(isinstance(i, str) and i for i in ids), f"an item without an id: {got}"
        assert len(set(ids)) == len(ids), f"two items share an id: {ids}"
        # as_written dropped the ids of all but reasoning; a reasoning id is the model's
        assert all(o.get("id") == e.get("id") for o, e in zip(ours, expected, strict=False))
    ours = [{k: v for k, v in item.items()
             if not (k == "status" and v == "completed" and k not in want)}
            for item, want in zip(ours, expected, strict=False)]
    differ = [f"[{i}] {json.dumps(o)}\n != {json.dumps(e)}"
              for i, (o, e) in enumerate(zip(ours, expected, strict=False)) if o != e]
    assert len(ours) == len(expected) and not differ, "\n".join(
        [f"{len(ours)} items, {len(expected)} expected", *differ])


def same_items(got: list[Any], oracle: list[Any]) -> None:
    """A conversation's items are the SQLiteSession's."""
    compared(got, oracle, server_ids=True)


def same_inputs(got: ScriptedModel, oracle: ScriptedModel) -> None:
    """The model was given the same input on every call."""
    assert len(got.inputs) == len(oracle.inputs)
    for call_index, (ours, theirs) in enumerate(zip(got.inputs, oracle.inputs, strict=True)):
        assert isinstance(ours, list) and isinstance(theirs, list)
        try:
            compared(ours, theirs, server_ids=False)
        except AssertionError as failure:
            raise AssertionError(f"model call {call_index}: {failure}") from None


@dataclass
class Runs:
    """The script run on a Conversations session over the server and on SQLiteSession."""

    session: OpenAIConversationsSession
    oracle: SQLiteSession
    sdk: openai.AsyncOpenAI
    ours: ScriptedModel
    theirs: ScriptedModel


@asynccontextmanager
async def both_run(served: Served, method: str = "run",
                   limit: int | None = None) -> AsyncIterator[Runs]:
    token = uuid.uuid4().hex[:8]
    oracle = SQLiteSession("oracle")
    sdk = cast(openai.AsyncOpenAI, client(served, "async"))
    try:
        session = OpenAIConversationsSession(openai_client=sdk)
        theirs = await run_script(oracle, token, method, limit)
        ours = await run_script(session, token, method, limit)
        yield Runs(session, oracle, sdk, ours, theirs)
    finally:
        oracle.close()
        await sdk.close()


@pytest.mark.parametrize(("method", "limit"), [("run", None), ("run_streamed", None),
                                               ("run", 3), ("run", 6)])
def test_the_model_sees_the_same_input_and_the_sessions_end_alike(
        served: Served, method: str, limit: int | None) -> None:
    async def go() -> None:
        async with both_run(served, method, limit) as runs:
            same_inputs(runs.ours, runs.theirs)
            if limit is not None:  # the last call saw the newest items, and its question
                assert len(runs.theirs.inputs[-1]) <= limit + 1
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


def test_a_long_conversation_is_written_in_chunks_and_read_in_pages(served: Served) -> None:
    """Three runs' items (45) added at once: the SDK writes them 20 to a request, and
    reads them back over pages of the server's (20 items unless asked)."""
    async def go() -> None:
        oracle = SQLiteSession("oracle")
        sdk = cast(openai.AsyncOpenAI, client(served, "async"))
        try:
            for _ in range(3):
                await run_script(oracle, uuid.uuid4().hex[:8])
            items = await oracle.get_items()
            assert len(items) == 45
            session = OpenAIConversationsSession(openai_client=sdk)
            await session.add_items(items)
            same_items(await session.get_items(), items)
            for limit in (1, 19, 20, 21, 40, 44, 45, 46):
                same_items(await session.get_items(limit=limit),
                           await oracle.get_items(limit=limit))
            popped, expected = await session.pop_item(), await oracle.pop_item()
            assert popped is not None and expected is not None
            same_items([popped], [expected])
            same_items(await session.get_items(), await oracle.get_items())
        finally:
            oracle.close()
            await sdk.close()

    asyncio.run(go())


def test_chathistorys_own_agents_session_shares_the_conversation(served: Served) -> None:
    """``ChatHistorySession`` over a ``RemoteStore`` of the same server reads the
    conversation's items as SQLiteSession holds them, and what it adds is the
    conversation's next item."""
    async def go() -> None:
        async with both_run(served) as runs:
            remote = open_store(served.url, api_key=served.keys["A"])
            try:
                ours = ChatHistorySession(runs.session.session_id, remote, tenant="A")
                same_items(await ours.get_items(), await runs.oracle.get_items())
                added: TResponseInputItem = {"role": "user", "content": "One more thing."}
                await ours.add_items([added])
                await runs.oracle.add_items([added])
                same_items(await runs.session.get_items(), await runs.oracle.get_items())
            finally:
                remote.close()

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
