"""A branch (``fork``, ``edit``) starts without the parent's bookkeeping about its
messages (``chathistory.window``, a ``HistoryProvider``'s ``chathistory``), keeps the
application's state, and plans its own window: on every backend and on the
``http`` store (a ``RemoteStore`` through the service)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storekit import BACKENDS

from chathistory import ContextWindow, HistoryProvider, Message
from chathistory.stores import MemoryStore, Store
from chathistory.stores.lifecycle import branch_state
from chathistory.tokens import ApproxCounter

APPROX = ApproxCounter()


@pytest.fixture(params=[*sorted(BACKENDS), "http"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every backend, and ``http``: a RemoteStore talking to a live server over memory."""
    if request.param != "http":
        backend = BACKENDS[request.param](tmp_path)
        yield backend
        backend.close()
        return
    pytest.importorskip("uvicorn")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
    from serverkit import LiveServer

    from chathistory.server import auth
    from chathistory.server.app import create_app
    from chathistory.stores.remote import RemoteStore

    backend = MemoryStore(counter="approx")
    _, key = auth.create_key(backend, "default")
    live = LiveServer(create_app(backend, keys_required=True,
                                 asset_dir=tmp_path / "assets")).start()
    remote = RemoteStore(live.url, key)
    try:
        yield remote
    finally:
        remote.close()
        live.stop()


def _parent(store: Store) -> tuple[str, list[Message]]:
    """A session of six messages whose state holds both kinds of keys."""
    messages = [(Message.user if i % 2 == 0 else Message.assistant)(f"m{i}")
                for i in range(6)]
    state: dict[str, Any] = {
        "chathistory.window": {"max_tokens": 100, "entries": [m.id for m in messages],
                               "last_turn": {"total_tokens": 99}},
        "chathistory": {"live": 6, "head": 0, "unmarked": [messages[5].id]},
        "chathistory.other": {"ids": [messages[4].id]},
        "app": {"user_tier": "gold"},
        "chathistory_app": 1,  # not under the "chathistory." namespace: the app's
    }
    session = store.create_session(metadata={"title": "t"}, state=state)
    store.append(session.id, messages)
    return session.id, messages


APP_STATE = {"app": {"user_tier": "gold"}, "chathistory_app": 1}


def test_a_fork_keeps_the_apps_state_and_drops_the_bookkeeping(any_store: Store) -> None:
    sid, messages = _parent(any_store)
    fork = any_store.fork(sid, messages[2].id)
    assert fork.state == APP_STATE
    assert any_store.get_session(fork.id).state == APP_STATE
    assert fork.metadata == {"title": "t"}
    whole = any_store.fork(sid)  # at the end too: the fork's turns are its own
    assert any_store.get_session(whole.id).state == APP_STATE
    parent = any_store.get_session(sid)
    assert set(parent.state) == {"chathistory.window", "chathistory", "chathistory.other",
                                 "app", "chathistory_app"}


def test_an_edit_keeps_the_apps_state_and_drops_the_bookkeeping(any_store: Store) -> None:
    sid, messages = _parent(any_store)
    branch = any_store.edit(sid, messages[3].id, Message.assistant("m3, edited"))
    assert branch.state == APP_STATE
    assert [m.text for m in any_store.range(branch.id)] == ["m0", "m1", "m2", "m3, edited"]
    assert "chathistory.window" in any_store.get_session(sid).state


def test_branch_state_is_a_new_dict() -> None:
    state = {"chathistory": {"live": 1}, "app": {"x": [1]}}
    copy = branch_state(state)
    assert copy == {"app": {"x": [1]}}
    copy["more"] = 2
    assert "more" not in state and "chathistory" in state


def test_a_provider_on_a_fork_loads_the_forks_messages(any_store: Store) -> None:
    """A provider's turn on a fork made mid-conversation sends the fork's messages and
    plans its own window: its state on the fork starts empty, then is the fork's."""
    provider = HistoryProvider(any_store, policy=ContextWindow(400, counter=APPROX))
    session = provider.new_session()
    for i in range(5):
        prompt = provider.before_run(session, [Message.user(f"question {i}")])
        provider.after_run(session, prompt, [Message.assistant(f"answer {i}")])
    stored = any_store.range(session.id)
    assert "chathistory" in any_store.get_session(session.id).state
    fork = any_store.fork(session.id, stored[3].id)  # after "answer 1"
    assert "chathistory" not in fork.state
    prompt = provider.before_run(fork, [Message.user("question on the fork")])
    assert [m.text for m in prompt] == ["question 0", "answer 0", "question 1", "answer 1",
                                        "question on the fork"]
    provider.after_run(fork, prompt, [Message.assistant("answer on the fork")])
    fork = any_store.get_session(fork.id)
    prompt = provider.before_run(fork, [Message.user("next")])
    assert [m.text for m in prompt][3:] == ["answer 1", "question on the fork",
                                            "answer on the fork", "next"]
    parent = any_store.get_session(session.id)
    prompt = provider.before_run(parent, [Message.user("next")])
    assert [m.text for m in prompt][-3:] == ["question 4", "answer 4", "next"]
