"""HistoryProvider over every store (and over none: state kept in the session)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from chathistory import (
    ContextWindow,
    HistoryProvider,
    InvalidMessage,
    KVStatus,
    Message,
    ProviderConflict,
    Session,
)
from chathistory.provider import SOURCE_KEY, from_history
from chathistory.reduce import MessageCountReducer, SummarizationReducer, is_summary
from chathistory.stores import BaseStore
from chathistory.tokens import ApproxCounter

APPROX = ApproxCounter()
ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(params=["store", "in-session"])
def make(request: pytest.FixtureRequest, store: BaseStore):  # type: ignore[no-untyped-def]
    """A factory of providers over the parametrized store, or over no store."""
    def build(**options: object) -> HistoryProvider:
        return HistoryProvider(store if request.param == "store" else None, **options)  # type: ignore[arg-type]
    return build


def run_turn(provider: HistoryProvider, session: Session, i: int) -> list[Message]:
    prompt = provider.before_run(session, [Message.user(f"question {i}")])
    provider.after_run(session, prompt, [Message.assistant(f"answer {i}")])
    return prompt


def stored_ids(provider: HistoryProvider, session: Session) -> list[str]:
    if provider.store is not None:
        return [m.id for m in provider.store.range(session.id, tenant=provider.tenant)]
    return [d["id"] for d in session.state[provider.key]["messages"]]


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
