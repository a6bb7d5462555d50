"""HistoryProvider over every store, over none (state kept in the session) and over
a custom backend (a subclass overriding provide_chat_history / store_chat_history)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from chathistory import (
    ContextWindow,
    HistoryProvider,
    InvalidMessage,
    KVStatus,
    Message,
    ProviderConflict,
    ProviderSessionState,
    Session,
)
from chathistory.model import new_id
from chathistory.provider import SOURCE_KEY, from_history
from chathistory.reduce import MessageCountReducer, SummarizationReducer, is_summary
from chathistory.stores import BaseStore
from chathistory.tokens import ApproxCounter

APPROX = ApproxCounter()
ROOT = Path(__file__).parent.parent.parent


class RowsBackend(HistoryProvider):
    """A custom backend: each conversation's messages as JSON rows in a dict (a
    stand-in for the application's own database), found by a conversation key the
    provider keeps in the session with ``ProviderSessionState``."""

    def __init__(self, **options: object) -> None:
        super().__init__(None, **options)  # type: ignore[arg-type]
        self.rows: dict[str, list[bytes]] = {}
        self.calls: list[str] = []
        self.conversation = ProviderSessionState(lambda session: {"key": new_id()},
                                                 state_key=f"{self.key}.rows")

    def _key(self, session: Session) -> str:
        key: str = self.conversation.get_or_initialize_state(session)["key"]
        return key

    def provide_chat_history(self, session: Session) -> list[Message]:
        self.calls.append("provide")
        return [Message.from_json(row) for row in self.rows.get(self._key(session), [])]

    def store_chat_history(self, session: Session, messages: Sequence[Message]) -> None:
        self.calls.append("store")
        self.rows.setdefault(self._key(session), []).extend(m.to_json() for m in messages)


@pytest.fixture(params=["store", "in-session", "custom"])
def make(request: pytest.FixtureRequest, store: BaseStore):  # type: ignore[no-untyped-def]
    """A factory of providers over the parametrized store, over no store, or over a
    custom backend."""
    def build(**options: object) -> HistoryProvider:
        if request.param == "custom":
            return RowsBackend(**options)
        return HistoryProvider(store if request.param == "store" else None, **options)  # type: ignore[arg-type]
    return build


def run_turn(provider: HistoryProvider, session: Session, i: int) -> list[Message]:
    prompt = provider.before_run(session, [Message.user(f"question {i}")])
    provider.after_run(session, prompt, [Message.assistant(f"answer {i}")])
    return prompt


def stored_ids(provider: HistoryProvider, session: Session) -> list[str]:
    return [m.id for m in provider.get_messages(session)]


def test_history_is_never_stored_twice(make) -> None:  # type: ignore[no-untyped-def]
    provider = make()
    session = provider.new_session()
    for i in range(100):
        prompt = run_turn(provider, session, i)
        assert [m.text for m in prompt if from_history(m)] == \
            [t for k in range(i) for t in (f"question {k}", f"answer {k}")]
    ids = stored_ids(provider, session)
    assert len(ids) == 200 == len(set(ids))


def test_nothing_stored_on_error_or_incomplete(make) -> None:  # type: ignore[no-untyped-def]
    provider = make(policy=ContextWindow(60, counter=APPROX, pin_tokens=0))
    session = provider.new_session()
    for i in range(5):
        run_turn(provider, session, i)
    before = (stored_ids(provider, session), dict(session.state))
    prompt = provider.before_run(session, [Message.user("this one fails")])
    provider.after_run(session, prompt, [Message.assistant("half")], RuntimeError("boom"))
    prompt = provider.before_run(session, [Message.user("this one is cut")])
    provider.after_run(session, prompt, [Message.assistant("trunc")], complete=False)
    assert stored_ids(provider, session) == before[0]
    assert session.state == before[1]


def test_after_run_records_the_responses_usage(make) -> None:  # type: ignore[no-untyped-def]
    """The usage a provider reported (here the OpenAI SDK's own response object) is
    kept on the turn's last assistant message, read back by every storage; the async
    twin takes it too, and a message that carries usage already keeps its own."""
    from openai.types.chat import ChatCompletion

    from chathistory import Usage

    provider = make()
    session = provider.new_session()
    completion = ChatCompletion.model_validate({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 40, "total_tokens": 2040,
                  "prompt_tokens_details": {"cached_tokens": 1536}}})
    prompt = provider.before_run(session, [Message.user("q")])
    call = Message.assistant("", [{"id": "c", "name": "f", "arguments": {}}])
    provider.after_run(session, prompt, [call, Message.tool_result("c", "r"),
                                         Message.assistant("ok")],
                       usage=completion, latency_ms=420.0)
    stored = provider.get_messages(session)
    assert [m.usage is not None for m in stored] == [False, False, False, True]
    assert stored[-1].usage == Usage(input_tokens=2000, output_tokens=40,
                                     cache_read_tokens=1536, model="gpt-4.1",
                                     provider="openai", latency_ms=420.0)
    own = Usage(input_tokens=7, output_tokens=1)
    answer = Message.assistant("two")
    answer.usage = own
    prompt = provider.before_run(session, [Message.user("q2")])
    asyncio.run(provider.aafter_run(session, prompt, [answer], usage=completion))
    assert provider.get_messages(session)[-1].usage == own


def test_filters(make) -> None:  # type: ignore[no-untyped-def]
    provider = make(load_filter=lambda m: m.role != "assistant",
                    store_filter=lambda m: "secret" not in m.text)
    session = provider.new_session()
    prompt = provider.before_run(session, [Message.user("hello"), Message.user("secret x")])
    provider.after_run(session, prompt, [Message.assistant("hi")])
    prompt = provider.before_run(session, [Message.user("again")])
    assert [m.text for m in prompt] == ["hello", "again"]


def test_audit_provider_stores_everything_and_provides_nothing(store: BaseStore) -> None:
    loader = HistoryProvider(store, key="main")
    audit = HistoryProvider(store, key="audit", load_messages=False, store_context_messages=True)
    main = loader.new_session()
    log = audit.new_session()
    run_turn(loader, main, 0)
    prompt = loader.before_run(main, [Message.user("q1")])
    assert audit.before_run(log, prompt) == prompt  # provides nothing of its own
    reply = [Message.assistant("a1")]
    loader.after_run(main, prompt, reply)
    audit.after_run(log, prompt, reply)
    logged = store.range(log.id)
    assert [m.text for m in logged] == ["question 0", "answer 0", "q1", "a1"]
    assert not any(SOURCE_KEY in m.metadata for m in logged)


def test_two_loading_providers_are_refused(make) -> None:  # type: ignore[no-untyped-def]
    first, second = make(key="one"), make(key="two")
    session = first.new_session()
    run_turn(first, session, 0)
    prompt = first.before_run(session, [Message.user("x")])
    with pytest.raises(ProviderConflict, match="only one provider"):
        second.before_run(session, prompt)


def test_tool_results_must_answer_a_known_call(make) -> None:  # type: ignore[no-untyped-def]
    provider = make()
    session = provider.new_session()
    prompt = provider.before_run(session, [Message.user("go")])
    call = Message.assistant("", [{"id": "c1", "name": "f", "arguments": {}}])
    provider.after_run(session, prompt, [call, Message.tool_result("c1", "ok")])
    prompt = provider.before_run(session, [Message.user("more")])
    before = stored_ids(provider, session)
    with pytest.raises(InvalidMessage, match="'simulated'"):
        provider.after_run(session, prompt, [Message.tool_result("simulated", "fake")])
    assert stored_ids(provider, session) == before
    prompt = provider.before_run(session, [Message.user("late result ok")])
    provider.after_run(session, prompt, [Message.tool_result("c1", "second answer")])


def test_window_policy_marks_evicted_and_restores(make) -> None:  # type: ignore[no-untyped-def]
    provider = make(policy=ContextWindow(120, counter=APPROX, pin_tokens=20))
    session = provider.new_session()
    provider.after_run(session, [Message.system("sys")], [])
    reuse = []
    previous: list[str] = []
    for i in range(40):
        prompt = provider.before_run(session, [Message.user(f"question {i}")])
        ids = [m.id for m in prompt]
        common = 0
        while common < min(len(ids), len(previous)) and ids[common] == previous[common]:
            common += 1
        reuse.append(common)
        previous = ids
        assert prompt[0].text == "sys"
        assert sum(APPROX.count_message(m) for m in prompt) + 3 <= 120
        provider.after_run(session, prompt, [Message.assistant(f"answer {i}")])
    assert sum(1 for r in reuse if r == 0) < 10  # the prefix survives most turns
    saved = session.to_dict()
    restored = Session.from_dict(saved)
    a = provider.before_run(restored, [Message.user("next")])
    b = provider.before_run(session, [Message.user("next")])
    assert [m.id for m in a[:-1]] == [m.id for m in b[:-1]]
    if provider.store is not None:
        marked = [m for m in provider.store.range(session.id) if m.kv_status == KVStatus.MARKED]
        assert marked


def test_reducer_policy_with_summary(make) -> None:  # type: ignore[no-untyped-def]
    provider = make(policy=[SummarizationReducer(lambda ms: f"{len(ms)} earlier messages",
                                                 target_count=6)])
    session = provider.new_session()
    for i in range(12):
        prompt = run_turn(provider, session, i)
    summaries = [m for m in prompt if is_summary(m)]
    assert len(summaries) == 1 and from_history(summaries[0])
    assert len([m for m in prompt if not is_summary(m)]) <= 8
    ids = stored_ids(provider, session)
    assert len(ids) == 24  # nothing deleted, the summary is not stored as a message


def test_count_policy(make) -> None:  # type: ignore[no-untyped-def]
    expected = {4: ["question 7", "answer 7", "question 8", "answer 8", "question 9"],
                # a reducer counts the new input too
                0: ["answer 7", "question 8", "answer 8", "question 9"]}
    for key, policy in ((4, 4), (0, [MessageCountReducer(4)])):
        provider = make(policy=policy)
        session = provider.new_session()
        for i in range(10):
            prompt = run_turn(provider, session, i)
        assert [m.text for m in prompt] == expected[key]


def test_async_twins(store: BaseStore) -> None:
    provider = HistoryProvider(store)

    async def run() -> list[Message]:
        session = provider.new_session()
        prompt = await provider.abefore_run(session, [Message.user("a")])
        await provider.aafter_run(session, prompt, [Message.assistant("b")])
        return await provider.abefore_run(session, [Message.user("c")])

    assert [m.text for m in asyncio.run(run())] == ["a", "b", "c"]


def test_example_agent_loop(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("agent_loop", ROOT / "examples" / "agent_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(str(tmp_path / "chat.db"))
    assert result["answers"][-1] == "The weather is sunny, 18C."
    assert len(result["answers"]) == 7
    assert result["marked"] > 0 and result["live"] < result["stored"]


# ---------------------------------------------------------------- Agent Framework parity


def test_get_messages_returns_everything_stored(make) -> None:  # type: ignore[no-untyped-def]
    provider = make(policy=ContextWindow(60, counter=APPROX, pin_tokens=0))
    session = provider.new_session()
    assert provider.get_messages(session) == []
    for i in range(8):
        run_turn(provider, session, i)
    got = provider.get_messages(session)
    assert [m.text for m in got] == [t for k in range(8) for t in (f"question {k}",
                                                                   f"answer {k}")]
    assert not any(from_history(m) for m in got)
    if not isinstance(provider, RowsBackend):  # evicted messages are marked, not gone
        assert any(m.kv_status == KVStatus.MARKED for m in got)
    assert [m.id for m in asyncio.run(provider.aget_messages(session))] == [m.id for m in got]


def test_a_custom_backend_serves_the_turn(store: BaseStore) -> None:
    provider = RowsBackend(load_filter=lambda m: "secret" not in m.text,
                           store_filter=lambda m: m.role != "developer")
    session = provider.new_session()
    for i in range(3):
        run_turn(provider, session, i)
    prompt = provider.before_run(session, [Message.developer("dev"), Message.user("next")])
    provider.after_run(session, prompt, [Message.assistant("secret reply")])
    assert provider.calls == ["provide", "store"] * 4
    assert "messages" not in session.state[provider.key]  # only bookkeeping in the state
    [rows] = provider.rows.values()
    assert [Message.from_json(r).text for r in rows] == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2",
        "next", "secret reply"]  # history never stored twice, store_filter applied
    prompt = provider.before_run(Session.from_dict(session.to_dict()), [Message.user("last")])
    assert [m.text for m in prompt][-3:] == ["answer 2", "next", "last"]  # load_filter
    assert all(from_history(m) for m in prompt[:-1])


def test_a_custom_backend_stores_nothing_for_a_failed_or_bad_turn() -> None:
    provider = RowsBackend()
    session = provider.new_session()
    run_turn(provider, session, 0)
    prompt = provider.before_run(session, [Message.user("fails")])
    provider.after_run(session, prompt, [Message.assistant("half")], RuntimeError("boom"))
    prompt = provider.before_run(session, [Message.user("orphan")])
    with pytest.raises(InvalidMessage, match="'nowhere'"):
        provider.after_run(session, prompt, [Message.tool_result("nowhere", "x")])
    assert provider.calls.count("store") == 1
    assert [m.text for m in provider.get_messages(session)] == ["question 0", "answer 0"]


def test_a_custom_backend_checks_results_against_its_whole_history() -> None:
    provider = RowsBackend(policy=2)  # the call leaves the prompt; its result comes later
    session = provider.new_session()
    prompt = provider.before_run(session, [Message.user("go")])
    provider.after_run(session, prompt, [
        Message.assistant("", [{"id": "c1", "name": "slow", "arguments": {}}])])
    for i in range(3):
        run_turn(provider, session, i)
    prompt = provider.before_run(session, [Message.user("and the result?")])
    assert not any(m.tool_calls for m in prompt)
    provider.after_run(session, prompt, [Message.tool_result("c1", "done at last")])
    assert provider.get_messages(session)[-1].tool_results[0].call_id == "c1"


def test_a_custom_backend_overrides_both_methods() -> None:
    class OnlyReads(HistoryProvider):
        def provide_chat_history(self, session: Session) -> list[Message]:
            return []

    with pytest.raises(TypeError, match="both provide_chat_history and store_chat_history"):
        OnlyReads()


def test_a_custom_backend_may_wrap_the_defaults(store: BaseStore) -> None:
    class Redacting(HistoryProvider):
        """Stores through the default (the store), with digits redacted."""

        def provide_chat_history(self, session: Session) -> list[Message]:
            return super().provide_chat_history(session)

        def store_chat_history(self, session: Session, messages: Sequence[Message]) -> None:
            super().store_chat_history(session, [
                Message(id=m.id, role=m.role, parts=[*Message.user(
                    "".join("#" if c.isdigit() else c for c in m.text)).parts])
                for m in messages])

    provider = Redacting(store)
    session = Session(id="wrapped")  # the default creates it in the store on first use
    run_turn(provider, session, 7)
    run_turn(provider, session, 8)
    assert [m.text for m in store.range("wrapped")] == [
        "question #", "answer #", "question #", "answer #"]
    assert "messages" not in session.state.get(provider.key, {})


@dataclasses.dataclass
class Cursor:
    conversation: str
    turns: int = 0


def test_provider_session_state_initializes_once_and_saves() -> None:
    made: list[Session | None] = []

    def initializer(session: Session | None) -> dict[str, int]:
        made.append(session)
        return {"turns": 0}

    state = ProviderSessionState(initializer, state_key="counter")
    session = Session(id="s")
    first = state.get_or_initialize_state(session)
    assert first == {"turns": 0} and session.state["counter"] == {"turns": 0}
    first["turns"] = 5  # a read is a copy: nothing changes until saved
    assert state.get_or_initialize_state(session) == {"turns": 0}
    state.save_state(session, first)
    assert state.get_or_initialize_state(session) == {"turns": 5}
    assert made == [session]  # initialized once
    assert state.get_or_initialize_state(None) == {"turns": 0}  # no session: nothing kept
    state.save_state(None, {"turns": 9})
    assert Session.from_dict(session.to_dict()).state["counter"] == {"turns": 5}


def test_provider_session_state_of_a_type_is_saved_as_json(store: BaseStore) -> None:
    cursors = ProviderSessionState(lambda s: Cursor(conversation="c-1"), state_key="cursor",
                                   state_type=Cursor)
    provider = HistoryProvider(store)
    session = provider.new_session()
    cursor = cursors.get_or_initialize_state(session)
    cursor.turns += 1
    cursors.save_state(session, cursor)
    assert session.state["cursor"] == {"conversation": "c-1", "turns": 1}
    run_turn(provider, session, 0)  # the provider writes the session's state with the turn
    kept = store.get_session(session.id).state
    assert cursors.get_or_initialize_state(Session(id=session.id, state=kept)) == Cursor(
        conversation="c-1", turns=1)


def test_provider_session_state_needs_a_key() -> None:
    with pytest.raises(ValueError, match="state_key"):
        ProviderSessionState(lambda s: {}, state_key="")


# ---------------------------------------------------------------- after_run's writes


class Crash(BaseException):
    """The process dying right there (nothing after it runs)."""


class DiesBeforeMarking:
    """``store`` whose first ``mark`` never happens: the process dies between
    ``after_run``'s two writes (the turn's append, then the marks)."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store
        self.died = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def mark(self, *args: object, **kwargs: object) -> int:
        if not self.died:
            self.died = True
            raise Crash
        return self.store.mark(*args, **kwargs)  # type: ignore[arg-type]


def test_a_crash_between_the_two_writes_leaves_the_marks_late_not_lost(store: BaseStore
                                                                        ) -> None:
    """As after_run's docstring says: the turn is stored with its state, the evicted
    messages are left unmarked, and the next before_run marks them before it reads:
    its prompt and every message's status are what they would have been."""
    def statuses(session: Session) -> list[tuple[str, KVStatus]]:
        return [(m.text, m.kv_status) for m in store.range(session.id)]

    def window() -> ContextWindow:
        return ContextWindow(60, counter=APPROX, pin_tokens=0)

    dying = DiesBeforeMarking(store)
    provider = HistoryProvider(dying, policy=window())  # type: ignore[arg-type]
    twin = HistoryProvider(store, policy=window())
    session, reference = provider.new_session(), twin.new_session()
    for i in range(30):
        run_turn(twin, reference, i)
        try:
            run_turn(provider, session, i)
        except Crash:
            break
    else:
        pytest.fail("the window never evicted anything")
    session = store.get_session(session.id)  # a new process: what the store kept
    unmarked = session.state[provider.key]["unmarked"]
    assert unmarked and statuses(session) != statuses(reference)
    assert [t for t, _ in statuses(session)] == [t for t, _ in statuses(reference)]
    assert all(m.kv_status == KVStatus.LOADED for m in store.range(session.id)
               if m.id in unmarked)  # the second write never happened
    restarted = HistoryProvider(store, policy=window())
    prompt = restarted.before_run(session, [Message.user("next")])
    expected = twin.before_run(reference, [Message.user("next")])
    assert [m.text for m in prompt] == [m.text for m in expected]
    assert statuses(session) == statuses(reference)  # marked, one turn late
    restarted.after_run(session, prompt, [Message.assistant("done")])
    twin.after_run(reference, expected, [Message.assistant("done")])
    assert statuses(session) == statuses(reference)
    assert [m.text for m in restarted.before_run(session, [Message.user("more")])] == \
        [m.text for m in twin.before_run(reference, [Message.user("more")])]


def test_a_turn_with_nothing_to_store_still_writes_the_state(store: BaseStore) -> None:
    provider = HistoryProvider(store, store_filter=lambda m: False)
    turns = ProviderSessionState(lambda s: {"turns": 0}, state_key="turns")
    session = provider.new_session()
    turns.save_state(session, {"turns": 1})
    prompt = provider.before_run(session, [Message.user("not kept")])
    version = provider.after_run(session, prompt, [Message.assistant("nor this")])
    kept = store.get_session(session.id)
    assert kept.state["turns"] == {"turns": 1} and version == kept.version == session.version
    assert store.range(session.id) == []


def test_the_async_twins_run_in_the_dispatch(store: BaseStore) -> None:
    from chathistory.dispatch import Dispatch
    from chathistory.stores.aio import AsyncStoreAdapter

    seen: list[str] = []

    class Watching(HistoryProvider):
        def provide_chat_history(self, session: Session) -> list[Message]:
            seen.append(threading.current_thread().name)
            return super().provide_chat_history(session)

        def store_chat_history(self, session: Session, messages: Sequence[Message]) -> None:
            seen.append(threading.current_thread().name)
            super().store_chat_history(session, messages)

    dispatch = Dispatch(threads=2, name="provider-test")
    over_store = Watching(AsyncStoreAdapter(store, dispatch=dispatch))
    in_state = Watching()

    async def run(provider: HistoryProvider) -> list[str]:
        session = provider.new_session()
        prompt = await provider.abefore_run(session, [Message.user("a")])
        await provider.aafter_run(session, prompt, [Message.assistant("b")])
        return [m.text for m in await provider.aget_messages(session)]

    assert asyncio.run(run(over_store)) == ["a", "b"] == asyncio.run(run(in_state))
    assert len(seen) == 6
    assert all(n.startswith("provider-test") for n in seen[:3])  # the adapter's dispatch
    assert all(n.startswith("chathistory-dispatch") for n in seen[3:])  # the default one
    dispatch.shutdown()
