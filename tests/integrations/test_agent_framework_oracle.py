"""Agent Framework's own ``InMemoryHistoryProvider`` is the oracle: what
``ChatHistoryAgentProvider.get_messages`` returns on every store backend (and with
no store, the messages in the session state) equals what it returns after its
session's JSON round trip, ``to_dict()`` for ``to_dict()``: messages saved in one
batch or one at a time, and turns of a real ``Agent`` run."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    Content,
    ContextProvider,
    HistoryProvider,
    InMemoryHistoryProvider,
)
from agent_framework import Message as AFMessage

from chathistory.integrations.agent_framework import (
    ChatHistoryAgentProvider,
    from_agent_framework,
)
from chathistory.stores import BaseStore

logging.getLogger("agent_framework").setLevel(logging.ERROR)  # "no function invoking" notice


from store_backends import BACKENDS  # noqa: E402  (every store backend)


@pytest.fixture(params=[*sorted(BACKENDS), "session-state"])
def provider(request: pytest.FixtureRequest, tmp_path: Path
             ) -> Iterator[ChatHistoryAgentProvider]:
    """Ours over each store backend, and over none (messages in the session state)."""
    if request.param == "session-state":
        yield ChatHistoryAgentProvider()
        return
    store = BACKENDS[request.param](tmp_path)
    try:
        yield ChatHistoryAgentProvider(store)
    finally:
        store.close()


def dumps(messages: Sequence[AFMessage]) -> list[dict[str, Any]]:
    """``to_dict()`` of each message, without the attribution a run adds to loaded ones."""
    out = [m.to_dict() for m in messages]
    for m in out:
        m.get("additional_properties", {}).pop("_attribution", None)
    return out


def round_tripped(session: AgentSession) -> AgentSession:
    """The session as the framework restores it from JSON."""
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


async def saved(provider: HistoryProvider, batches: list[list[AFMessage]]
                ) -> list[dict[str, Any]]:
    """Save the batches through ``provider`` directly, then read them back."""
    session = AgentSession(session_id="s")
    state = session.state.setdefault(provider.source_id, {})
    for batch in batches:
        await provider.save_messages(session.session_id, batch, state=state)
    restored = round_tripped(session)
    return dumps(await provider.get_messages(
        "s", state=restored.state.get(provider.source_id, {})))


def both(provider: ChatHistoryAgentProvider, batches: list[list[AFMessage]]
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return await saved(InMemoryHistoryProvider(), batches), await saved(provider, batches)

    return asyncio.run(go())


def corpus(png: bytes) -> dict[str, list[AFMessage]]:
    data_uri = "data:image/png;base64," + base64.b64encode(png).decode()
    return {
        "text": [AFMessage("system", ["Be kind."], message_id="s"),
                 AFMessage("user", ["hi"], message_id="u"),
                 AFMessage("assistant", ["hello"], message_id="a")],
        "no_ids": [AFMessage("user", ["hi"]), AFMessage("assistant", ["hello"])],
        "function_ids": [
            AFMessage("assistant", [Content.from_function_call(
                "call-1", "lookup", arguments='{"q": "cats"}', id="fc_1")], message_id="a"),
            AFMessage("tool", [Content.from_function_result("call-1", result="3 cats",
                                                            id="fr_1")], message_id="t")],
        "function_fields": [
            AFMessage("assistant", [Content.from_function_call(
                "call-1", "lookup", arguments={"q": 1}, status="completed",
                informational_only=True, additional_properties={"k": 1})], message_id="a"),
            AFMessage("tool", [Content.from_function_result(
                "call-1", result={"n": 3}, exception="boom", status="failed")],
                message_id="t")],
        "function_without_arguments": [
            AFMessage("assistant", [Content.from_function_call("c1", "now")], message_id="a"),
            AFMessage("tool", [Content.from_function_result("c1", result="noon")],
                      message_id="t")],
        "function_result_items": [
            AFMessage("assistant", [Content.from_function_call("c1", "snap")], message_id="a"),
            AFMessage("tool", [Content.from_function_result("c1", result=[
                Content.from_text("a photo"), Content.from_data(png, "image/png")])],
                message_id="t")],
        "reasoning": [AFMessage("assistant", [
            Content.from_text_reasoning(id="r1", text="thinking", protected_data="opaque",
                                        status="done"),
            Content.from_text("answer")], message_id="a")],
        "media": [AFMessage("user", [
            "look", Content.from_uri(data_uri, media_type="image/png"),
            Content.from_uri("https://example.com/a.png", media_type="image/png", name="a.png"),
            Content.from_data(png, "image/png")], message_id="u")],
        "properties": [AFMessage("user", [Content.from_text("hi", additional_properties={
            "k": 1})], message_id="u", author_name="ada", additional_properties={"m": 2})],
        "empty_assistant": [AFMessage("assistant", [""], message_id="a1"),
                            AFMessage("assistant", [], message_id="a2")],
        "usage_only": [AFMessage("assistant", [
            Content.from_usage(usage_details={"input_token_count": 3})], message_id="a")],
        "usage_beside_text": [AFMessage("assistant", [
            "hi", Content.from_usage(usage_details={"input_token_count": 3})],
            message_id="a")],
    }


CASES = sorted(corpus(b"").keys())


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, png_bytes: bytes) -> list[AFMessage]:
    return corpus(png_bytes)[request.param]


# ---------------------------------------------------------------- the corpus


def test_batch_matches_in_memory_provider(case: list[AFMessage],
                                          provider: ChatHistoryAgentProvider) -> None:
    expected, got = both(provider, [case])
    assert got == expected


def test_one_at_a_time_matches_in_memory_provider(case: list[AFMessage],
                                                  provider: ChatHistoryAgentProvider) -> None:
    expected, got = both(provider, [[m] for m in case])
    assert got == expected


def test_saving_never_changes_the_callers_messages(case: list[AFMessage],
                                                   provider: ChatHistoryAgentProvider) -> None:
    before = copy.deepcopy(dumps(case))
    both(provider, [case])
    assert dumps(case) == before


# ---------------------------------------------------------------- the reported case


def test_function_content_ids_survive_save_and_load(provider: ChatHistoryAgentProvider
                                                    ) -> None:
    call = Content.from_function_call("call-1", "lookup", arguments={"q": 1}, id="fc_1")
    result = Content.from_function_result("call-1", result="ok", id="fr_1")
    expected, got = both(provider, [[AFMessage("assistant", [call], message_id="a"),
                                     AFMessage("tool", [result], message_id="t")]])
    assert got == expected
    assert [m["contents"][0]["id"] for m in got] == ["fc_1", "fr_1"]


def test_empty_non_assistant_messages_are_left_out(provider: ChatHistoryAgentProvider
                                                   ) -> None:
    """The documented difference: a message needs content, and the placeholder that
    keeps an empty assistant message cannot stand in another role."""
    given = [AFMessage("user", [""], message_id="u"), AFMessage("assistant", ["ok"],
                                                                message_id="a")]
    assert [m.role for m in from_agent_framework(given)] == ["assistant"]
    expected, got = both(provider, [given])
    assert got == expected[1:]


# ---------------------------------------------------------------- agent runs


class ScriptedClient(BaseChatClient):
    """Answers each call with the next scripted list of messages."""

    def __init__(self, *replies: list[AFMessage]) -> None:
        super().__init__()
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []

    def _inner_get_response(self, *, messages: Sequence[AFMessage], stream: bool,
                            options: Any, **kwargs: Any) -> Awaitable[ChatResponse]:
        self.seen.append(dumps(messages))
        reply = self.replies.pop(0)

        async def answer() -> ChatResponse:
            return ChatResponse(messages=reply, response_id="resp-1")

        return answer()


def script() -> list[list[AFMessage]]:
    return [
        [AFMessage("assistant", [Content.from_function_call(
            "call-1", "lookup", arguments='{"q": "cats"}', id="fc_1")], message_id="m-1"),
         AFMessage("tool", [Content.from_function_result("call-1", result="3", id="fr_1")]),
         AFMessage("assistant", ["Three cats."])],
        [AFMessage("assistant", [""])],
        [AFMessage("assistant", [Content.from_text_reasoning(text="hm", id="r1"), "Bye."],
                   message_id="m-9")],
    ]


def test_agent_runs_match_in_memory_provider(provider: ChatHistoryAgentProvider) -> None:
    async def run(history: HistoryProvider) -> tuple[list[Any], list[dict[str, Any]]]:
        client = ScriptedClient(*script())
        agent = Agent(client, context_providers=[history])
        session = agent.create_session()
        for question in ("How many cats?", "Sure?", "Thanks"):
            await agent.run(question, session=session)
            session = round_tripped(session)
        stored = await history.get_messages(session.session_id,
                                            state=session.state.get(history.source_id, {}))
        return client.seen, dumps(stored)

    async def go() -> None:
        seen, stored = await run(InMemoryHistoryProvider())
        our_seen, our_stored = await run(provider)
        assert our_seen == seen  # what the model was sent, turn by turn
        assert our_stored == stored

    asyncio.run(go())


# ---------------------------------------------------------------- an audit beside a primary


class Notes(ContextProvider):
    """A context provider that adds a system note every run (``numbered``: a new one)."""

    def __init__(self, numbered: bool) -> None:
        super().__init__("notes")
        self.numbered, self.runs = numbered, 0

    async def before_run(self, *, agent: Any, session: AgentSession, context: Any,
                         state: dict[str, Any]) -> None:
        self.runs += 1
        text = f"note {self.runs}" if self.numbered else "today is Monday"
        context.extend_messages(self, [AFMessage("system", [text])])


@pytest.fixture(params=[*sorted(BACKENDS), "session-state"])
def audit_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore | None]:
    if request.param == "session-state":
        yield None
        return
    store = BACKENDS[request.param](tmp_path)
    try:
        yield store
    finally:
        store.close()


QUESTIONS, ANSWERS = ("hi", "again", "more"), ("one", "two", "three")


async def audited(audit: HistoryProvider, primary: str, numbered: bool, runs: int
                  ) -> tuple[list[Any], list[dict[str, Any]]]:
    """What the model saw and what ``audit`` holds after ``runs`` runs of an agent with a
    primary history provider, a context provider (``Notes``) and ``audit``."""
    memory: HistoryProvider = (InMemoryHistoryProvider(source_id="memory")
                               if primary == "in_memory"
                               else ChatHistoryAgentProvider(source_id="memory"))
    client = ScriptedClient(*([AFMessage("assistant", [answer])] for answer in ANSWERS))
    agent = Agent(client, context_providers=[memory, Notes(numbered), audit])
    session = agent.create_session()
    for question in QUESTIONS[:runs]:
        await agent.run(question, session=session)
        session = round_tripped(session)
    stored = await audit.get_messages(session.session_id,
                                      state=session.state.get(audit.source_id, {}))
    return client.seen, dumps(stored)


def context_audit(store: BaseStore | None) -> ChatHistoryAgentProvider:
    return ChatHistoryAgentProvider(store, source_id="audit", load_messages=False,
                                    store_context_messages=True)


def expected_texts(numbered: bool, runs: int) -> list[str]:
    """Each run's note, question and answer, once."""
    notes = [f"note {n}" if numbered else "today is Monday" for n in range(1, runs + 1)]
    return [text for turn in zip(notes, QUESTIONS[:runs], ANSWERS[:runs], strict=True)
            for text in turn]


@pytest.mark.parametrize("numbered", [False, True], ids=["same-note", "new-note"])
@pytest.mark.parametrize("primary", ["in_memory", "chathistory"])
def test_audit_of_context_stores_what_in_memory_provider_stores(
        audit_store: BaseStore | None, primary: str, numbered: bool) -> None:
    """The reported setup: an audit provider (loads nothing, stores context too) beside
    a primary history provider and a context provider. The second run stored the
    primary's loaded history again as context; the framework's own provider, in the
    same place, stores the note and the run's input and output."""
    async def go() -> None:
        seen, expected = await audited(InMemoryHistoryProvider(
            source_id="audit", load_messages=False, store_context_messages=True),
            primary, numbered, runs=2)
        our_seen, got = await audited(context_audit(audit_store), primary, numbered, runs=2)
        assert our_seen == seen
        assert got == expected
        assert [m["contents"][0]["text"] for m in got] == expected_texts(numbered, 2)

    asyncio.run(go())


@pytest.mark.parametrize("numbered", [False, True], ids=["same-note", "new-note"])
@pytest.mark.parametrize("primary", ["in_memory", "chathistory"])
def test_audit_of_context_leaves_history_providers_out_on_every_run(
        audit_store: BaseStore | None, primary: str, numbered: bool) -> None:
    """From the third run on, the framework's provider with ``store_context_messages``
    stores the primary's history again too (the overlap it looks for no longer lines
    up); ours leaves every history provider's context out, as the framework's does
    told to store only the context provider's (``store_context_from={"notes"}``)."""
    async def go() -> None:
        seen, expected = await audited(InMemoryHistoryProvider(
            source_id="audit", load_messages=False, store_context_from={"notes"},
            store_context_messages=True), primary, numbered, runs=3)
        our_seen, got = await audited(context_audit(audit_store), primary, numbered, runs=3)
        assert our_seen == seen
        assert got == expected
        assert [m["contents"][0]["text"] for m in got] == expected_texts(numbered, 3)

    asyncio.run(go())

