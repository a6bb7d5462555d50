"""Provider compactions through every framework adapter (issue 21).

A ``Compaction`` part, as the provider formats decode an OpenAI Responses
``compaction`` item or an Anthropic ``compaction`` block, goes to each framework and
comes back equal (provider, text, data, signature, provider_metadata). Where the
framework has a representation of its own, the oracle is the framework's own code:
what pydantic-ai's models build from the provider's item or block, what LangChain's
provider integrations keep in ``AIMessage.content`` (and ``content_blocks`` for v1),
the items the Agents SDK's ``OpenAIResponsesCompactionSession`` writes; the
frameworks' in-memory histories run beside ours on every store backend.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent_framework import AgentSession, InMemoryHistoryProvider
from agent_framework import Message as AFMessage
from agents import SQLiteSession
from agents.memory import OpenAIResponsesCompactionSession
from anthropic.types.beta import BetaCompactionBlock
from langchain_core.messages import AIMessage, HumanMessage
from openai.types.responses import ResponseCompactionItem
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)
from pydantic_ai.messages import TextPart as PAText
from pydantic_ai.models.anthropic._response import compaction_provider_details
from pydantic_ai.models.openai._response_fields import map_compaction_item

from chathistory import InvalidMessage, Message
from chathistory.formats import from_anthropic, from_openai_responses, to_openai_responses
from chathistory.integrations.agent_framework import (
    ChatHistoryAgentProvider,
    from_agent_framework,
    to_agent_framework,
)
from chathistory.integrations.langchain import (
    ChatHistoryMessageHistory,
    from_langchain,
    to_langchain,
)
from chathistory.integrations.openai_agents import ChatHistorySession, item_of, message_of
from chathistory.integrations.pydantic_ai import from_pydantic_ai, to_pydantic_ai
from chathistory.model import Compaction, TextPart
from chathistory.stores import BaseStore

OPENAI_ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-opaque",
               "created_by": "resp_7"}
ANTHROPIC_BLOCK = {"type": "compaction", "content": "Summary: the user wants a haiku.",
                   "encrypted_content": "ENC", "signature": "sig-1",
                   "tool_changes": [{"type": "tool_removal",
                                     "tool": {"type": "tool_reference", "name": "search"}}]}
PROVIDERS = ["openai", "anthropic"]


def decoded(provider: str) -> Message:
    """An assistant message holding the compaction as the provider's format decodes it."""
    if provider == "openai":
        [message] = from_openai_responses([OPENAI_ITEM])
    else:
        [message] = from_anthropic(None, [{"role": "assistant", "content": [ANTHROPIC_BLOCK]}])
    assert [type(p) for p in message.parts] == [Compaction]
    return message


def conversation(provider: str) -> list[Message]:
    """A user turn, the compaction, and the reply the provider gave after it."""
    return [Message.user("Write a haiku."), decoded(provider),
            Message.assistant("Leaves fall, code compiles.")]


def odd_compactions() -> list[Compaction]:
    """Compactions no framework form gives back whole: another provider's, an OpenAI
    one with fields its item has no place for."""
    return [Compaction(provider="gemini", text="earlier turns", data="d", signature="s",
                       provider_metadata={"gemini": {"k": 1}}),
            Compaction(provider="openai_responses", data="x", text="a readable note",
                       provider_metadata={"openai_responses": {"id": "cmp_2"},
                                          "elsewhere": {"k": [1, 2]}})]


def compactions(messages: list[Message]) -> list[Compaction]:
    return [p for m in messages for p in m.parts if isinstance(p, Compaction)]


# ---------------------------------------------------------------- LangChain


def langchain_block(provider: str) -> dict[str, Any]:
    """The block langchain-openai / langchain-anthropic keep in ``AIMessage.content``:
    ``output.model_dump(exclude_none=True, mode="json")`` of the Responses item; the
    Anthropic block's ``model_dump()`` with a null ``encrypted_content`` removed."""
    if provider == "openai":
        return ResponseCompactionItem.model_validate(OPENAI_ITEM).model_dump(
            exclude_none=True, mode="json")
    block = BetaCompactionBlock.model_validate(ANTHROPIC_BLOCK).model_dump(mode="json")
    return {k: v for k, v in block.items() if not (k == "encrypted_content" and v is None)}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_langchain_round_trip_keeps_the_compaction(provider: str) -> None:
    ours = conversation(provider)
    back = from_langchain(to_langchain(ours))
    assert compactions(back) == compactions(ours)
    assert [m.parts for m in back] == [m.parts for m in ours]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_langchain_carries_the_providers_own_block(provider: str) -> None:
    """Ours becomes the block LangChain's integration keeps (and sends back), and that
    block, as LangChain holds it, becomes the part the provider's format decodes."""
    [lc] = to_langchain([decoded(provider)])
    given = langchain_block(provider)
    assert lc.content == [{k: v for k, v in given.items() if v is not None}]
    from_lc = AIMessage([given, {"type": "text", "text": "ok"}], id="run-1")
    [ours] = from_langchain([from_lc])
    assert ours.parts[0] == decoded(provider).parts[0]
    assert to_langchain([ours])[0].model_dump() == from_lc.model_dump()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_langchain_v1_content_blocks_keep_the_compaction(provider: str) -> None:
    """``content_blocks`` (``output_version="v1"``) wraps the block in ``non_standard``."""
    native = AIMessage([langchain_block(provider)],
                       response_metadata={"model_provider": provider})
    v1 = AIMessage(native.content_blocks, id="run-1")  # type: ignore[arg-type]
    assert v1.content[0]["type"] == "non_standard"  # type: ignore[index]
    [ours] = from_langchain([v1])
    [part] = ours.parts
    assert isinstance(part, Compaction)
    assert part.provider_metadata["langchain"] == {"form": "non_standard"}
    mine = {k: v for k, v in part.provider_metadata.items() if k != "langchain"}
    without_form = Compaction(provider=part.provider, text=part.text, data=part.data,
                              signature=part.signature, provider_metadata=mine)
    assert without_form == decoded(provider).parts[0]
    assert to_langchain([ours])[0].model_dump() == v1.model_dump()


def test_langchain_keeps_what_no_block_carries_in_response_metadata() -> None:
    for part in odd_compactions():
        ours = Message(role="assistant",
                       parts=[TextPart(text="before"), part, TextPart(text="after")])
        [lc] = to_langchain([ours])
        assert "chathistory_compaction" in lc.response_metadata
        assert from_langchain([lc])[0].parts == ours.parts


def test_langchain_history_matches_in_memory_history(backend: BaseStore) -> None:
    from test_langchain_oracle import both

    messages = [HumanMessage("Write a haiku.", id="q"),
                *to_langchain([decoded("openai"), decoded("anthropic")]),
                AIMessage([langchain_block("anthropic"), {"type": "text", "text": "Leaves."}]),
                *to_langchain([Message(role="assistant", parts=odd_compactions())])]
    expected, got = both(backend, [messages])
    assert got == expected
    stored = ChatHistoryMessageHistory(backend, "s").store.range("s")
    assert len(compactions(stored)) == 5
    assert compactions(stored)[:2] == [decoded("openai").parts[0], decoded("anthropic").parts[0]]
    assert backend.since_compaction("s")[0].id == stored[-1].id


# ---------------------------------------------------------------- pydantic-ai


def pydantic_ai_part(provider: str) -> CompactionPart:
    """What pydantic-ai's own models build from the provider's item or block."""
    if provider == "openai":
        return map_compaction_item(ResponseCompactionItem.model_validate(OPENAI_ITEM), "openai")
    block = BetaCompactionBlock.model_validate(ANTHROPIC_BLOCK)
    return CompactionPart(content=block.content, provider_name="anthropic",
                          provider_details=compaction_provider_details(
                              block.encrypted_content, block.signature))


def oracle(history: list[ModelMessage]) -> list[ModelMessage]:
    loaded: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(history))
    return loaded


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pydantic_ai_round_trip_keeps_the_compaction(provider: str) -> None:
    ours = conversation(provider)
    back = from_pydantic_ai(oracle(to_pydantic_ai(ours)))
    assert [m.parts for m in back] == [m.parts for m in ours]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pydantic_ai_gets_the_part_its_own_model_builds(provider: str) -> None:
    [response] = to_pydantic_ai([decoded(provider)])
    assert isinstance(response, ModelResponse)
    [part] = response.parts
    expected = pydantic_ai_part(provider)
    if provider == "anthropic":  # pydantic-ai has no place for tool_changes: kept beside
        assert part == expected
        assert response.metadata is not None and "chathistory_compaction" in response.metadata
    else:
        assert part == expected and response.metadata is None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pydantic_ai_compaction_part_becomes_ours(provider: str) -> None:
    history = [ModelRequest(parts=[UserPromptPart("Write a haiku.")]),
               ModelResponse(parts=[pydantic_ai_part(provider), PAText("Leaves fall.")],
                             provider_name=provider)]
    ours = from_pydantic_ai(history)
    [part] = compactions(ours)
    want = decoded(provider).parts[0]
    if provider == "anthropic":
        want = Compaction(provider="anthropic", text=want.text, data=want.data,
                          signature=want.signature)  # pydantic-ai keeps no tool_changes
    assert part == want
    assert to_pydantic_ai(ours) == oracle(history)


def test_pydantic_ai_keeps_what_no_part_carries_in_response_metadata() -> None:
    ours = [Message(role="assistant", parts=[TextPart(text="before"), *odd_compactions()])]
    converted = oracle(to_pydantic_ai(ours))
    assert from_pydantic_ai(converted)[0].parts == ours[0].parts
    assert to_pydantic_ai(from_pydantic_ai(converted)) == converted


@pytest.mark.parametrize("role", ["user", "system"])
def test_pydantic_ai_refuses_a_compaction_outside_a_response(role: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        to_pydantic_ai([Message.user("hi"), Message(role=role, parts=[
            TextPart(text="x"), decoded("openai").parts[0]])])
    assert caught.value.path == "$[1].parts[1]"


def test_pydantic_ai_other_compactions_are_kept_as_given(backend: BaseStore) -> None:
    history = [ModelRequest(parts=[UserPromptPart("hi")]),
               ModelResponse(parts=[CompactionPart(content="x", provider_name="bedrock")]),
               ModelRequest(parts=[CompactionPart(content="an app's summary"),
                                   UserPromptPart("go on")])]
    assert compactions(from_pydantic_ai(history)) == []
    backend.create_session("s")
    backend.append("s", from_pydantic_ai(history))
    assert to_pydantic_ai(backend.range("s")) == oracle(history)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pydantic_ai_history_through_every_store(provider: str, backend: BaseStore) -> None:
    history = to_pydantic_ai(conversation(provider))
    backend.create_session("s")
    backend.append("s", from_pydantic_ai(history))
    stored = backend.range("s")
    assert compactions(stored) == compactions(conversation(provider))
    assert to_pydantic_ai(stored) == oracle(history)
    assert [m.text for m in backend.since_compaction("s")][-1] == "Leaves fall, code compiles."


# ---------------------------------------------------------------- Agent Framework


@pytest.mark.parametrize("provider", PROVIDERS)
def test_agent_framework_round_trip_keeps_the_compaction(provider: str) -> None:
    ours = conversation(provider)
    af = to_agent_framework(ours)
    assert af[1].contents == []  # no content type: nothing the framework would send
    assert "chathistory_compaction" in af[1].additional_properties
    restored = [AFMessage.from_dict(json.loads(json.dumps(m.to_dict()))) for m in af]
    back = from_agent_framework(restored)
    assert [m.parts for m in back] == [m.parts for m in ours]
    assert [m.to_dict() for m in to_agent_framework(back)] == [m.to_dict() for m in af]


def test_agent_framework_keeps_every_compaction_in_place() -> None:
    ours = Message(role="assistant", parts=[TextPart(text="a"), *odd_compactions(),
                                            TextPart(text="b"), decoded("anthropic").parts[0]])
    assert from_agent_framework(to_agent_framework([ours]))[0].parts == ours.parts


def test_agent_framework_refuses_a_broken_kept_list() -> None:
    af = AFMessage("assistant", ["hi"],
                   additional_properties={"chathistory_compaction": [["x", {}]]})
    with pytest.raises(InvalidMessage) as caught:
        from_agent_framework([AFMessage("user", ["q"]), af])
    assert caught.value.path == "$[1].additional_properties.chathistory_compaction"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_agent_framework_provider_matches_in_memory_provider(provider: str, tmp_path: Path,
                                                             backend: BaseStore) -> None:
    messages = to_agent_framework(conversation(provider))

    async def saved(history: Any) -> list[dict[str, Any]]:
        session = AgentSession(session_id="s")
        state = session.state.setdefault(history.source_id, {})
        await history.save_messages("s", messages, state=state)
        restored = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))
        got = await history.get_messages("s", state=restored.state.get(history.source_id, {}))
        return [m.to_dict() for m in got]

    ours = ChatHistoryAgentProvider(backend)
    expected = asyncio.run(saved(InMemoryHistoryProvider()))
    assert asyncio.run(saved(ours)) == expected
    assert asyncio.run(saved(ChatHistoryAgentProvider())) == expected  # in the session state
    assert compactions(backend.range("s")) == compactions(conversation(provider))


def test_agent_framework_run_over_a_compacted_history(store: BaseStore) -> None:
    """A run loads the stored compaction, the model is sent what the framework's own
    provider sends it (not the message holding only the compaction: nothing in it can
    be sent), and the compaction stays stored once, unchanged."""
    from agent_framework import Agent
    from test_agent_framework_oracle import ScriptedClient, dumps, round_tripped

    earlier = to_agent_framework(conversation("anthropic"))

    async def run(history: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        client = ScriptedClient([AFMessage("assistant", ["Noted."], message_id="m-1")])
        agent = Agent(client, context_providers=[history])
        session = agent.create_session(session_id="run")
        state = session.state.setdefault(history.source_id, {})
        await history.save_messages(session.session_id, earlier, state=state)
        session = round_tripped(session)
        await agent.run("Thanks", session=session)
        stored = await history.get_messages(session.session_id,
                                            state=session.state.get(history.source_id, {}))
        return client.seen, dumps(stored)

    async def go() -> None:
        seen, stored = await run(InMemoryHistoryProvider())
        our_seen, our_stored = await run(ChatHistoryAgentProvider(store))
        assert our_seen == seen
        assert len(seen[0]) == 3  # user, reply, the new question
        assert our_stored[:3] == stored[:3] == dumps(earlier)

    asyncio.run(go())
    assert compactions(store.range("run")) == decoded("anthropic").parts


# ---------------------------------------------------------------- OpenAI Agents SDK


class CompactingResponses:
    """``client.responses.compact`` answering as OpenAI does: the user messages kept,
    everything else replaced by one compaction item."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        users = [item for item in kwargs["input"] if item.get("role") == "user"]
        return SimpleNamespace(output=[*users, ResponseCompactionItem.model_validate(
            OPENAI_ITEM)], usage=None)


def test_agents_compaction_session_over_ours_matches_sqlite(store: BaseStore) -> None:
    items: list[Any] = [
        {"role": "user", "content": "Write a haiku."},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Leaves fall.", "annotations": []}]},
        {"role": "user", "content": "Another."},
        {"type": "message", "role": "assistant", "id": "msg_2", "status": "completed",
         "content": [{"type": "output_text", "text": "Code compiles.", "annotations": []}]},
    ]

    async def compacted(underlying: Any) -> list[Any]:
        client = SimpleNamespace(responses=CompactingResponses())
        session = OpenAIResponsesCompactionSession("s", underlying, client=client)  # type: ignore[arg-type]
        await session.add_items(items)
        await session.run_compaction({"force": True})
        await session.add_items([{"role": "user", "content": "And a third."}])
        return await session.get_items()

    sdk = SQLiteSession("s")
    expected = asyncio.run(compacted(sdk))
    sdk.close()
    assert asyncio.run(compacted(ChatHistorySession("s", store))) == expected
    assert OPENAI_ITEM in expected
    stored = store.range("s")
    assert compactions(stored) == decoded("openai").parts
    assert [m.text for m in store.since_compaction("s")] == ["", "And a third."]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_agents_items_of_compactions_another_writer_added(provider: str,
                                                          store: BaseStore) -> None:
    store.create_session("shared")
    store.append("shared", conversation(provider))
    items = asyncio.run(ChatHistorySession("shared", store).get_items())
    if provider == "openai":  # the Responses item, which the SDK sends back as it is
        assert items[1] == OPENAI_ITEM
        assert message_of(items[1]).parts == decoded("openai").parts
    else:  # the Responses API cannot read it: not an item, but still stored
        assert [item.get("role") for item in items] == ["user", "assistant"]
        assert compactions(store.range("shared")) == decoded("anthropic").parts


def test_agents_item_of_a_stored_compaction_item_is_the_item() -> None:
    message = message_of(OPENAI_ITEM)
    assert item_of(message) == [OPENAI_ITEM]
    assert to_openai_responses([message]) == [OPENAI_ITEM]
