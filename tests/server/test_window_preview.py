"""``GET /v1/sessions/{id}/window``: the window a budget gives, as the library's own
``History.by_tokens`` selects it, and nothing written; over every backend."""

from __future__ import annotations

import httpx
import pytest
from serverkit import Served

from chathistory import History, Message
from chathistory.server.routes_preview import gaps_of


def _post(client: httpx.Client, sid: str, messages: list[Message]) -> None:
    response = client.post(f"/v1/sessions/{sid}/messages",
                           json={"messages": [m.to_dict() for m in messages]})
    assert response.status_code == 200, response.text


def _conversation() -> list[Message]:
    """A system prompt, plain turns, tool turns with parallel calls, a second system
    message in the middle, an orphan result and a long reply."""
    out: list[Message] = [Message.system("You are terse. " * 5)]
    for i in range(12):
        out.append(Message.user(f"question {i} " + "word " * (i * 3 % 17)))
        if i % 3 == 1:
            out.append(Message.assistant("", [{"id": f"c{i}a", "name": "f", "arguments": {"i": i}},
                                              {"id": f"c{i}b", "name": "g", "arguments": {}}]))
            out.append(Message.tool_result(f"c{i}a", "result a " * i))
            out.append(Message.tool_result(f"c{i}b", "result b"))
        if i == 6:
            out.append(Message.developer("now answer in French"))
        out.append(Message.assistant(f"answer {i} " + "text " * (i * 5 % 23)))
    out.append(Message.tool_result("never-called", "an orphan"))
    out.append(Message.assistant("the end " * 40))
    return out


def _snapshot(client: httpx.Client, sid: str) -> tuple[int, list[tuple[str, int]]]:
    session = client.get(f"/v1/sessions/{sid}").json()
    stored = client.get(f"/v1/sessions/{sid}/messages", params={"start": 0}).json()["messages"]
    return session.get("version", 0), [(m["id"], m.get("kv_status", 1)) for m in stored]


def test_the_preview_is_what_history_by_tokens_selects(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    _post(a, sid, _conversation())
    # evict some messages (a planned window marks them): the preview still considers them
    planned = a.post(f"/v1/sessions/{sid}/window", json={"max_tokens": 150})
    assert planned.status_code == 200, planned.text
    assert planned.json()["evicted_ids"]
    before = _snapshot(a, sid)
    assert any(status != 1 for _, status in before[1])
    everything = served.store.range(sid, tenant="A", include_marked=True)
    history = History(everything, counter=served.store.counter)
    full = history.token_count() + served.store.counter.priming_tokens
    budgets = sorted({0, 1, 2, 30, 60, 90, 120, 150, 200, 260, 330, 400, full - 1, full,
                      full + 50})
    for keep_system in (True, False):
        for budget in budgets:
            params: dict[str, str | int] = {"max_tokens": budget}
            if not keep_system:
                params["keep_system"] = "false"
            response = a.get(f"/v1/sessions/{sid}/window", params=params)
            assert response.status_code == 200, response.text
            preview = response.json()
            expected = history.by_tokens(budget, keep_system=keep_system)
            assert preview["message_ids"] == [m.id for m in expected], (budget, keep_system)
            assert preview["messages"] == len(expected)
            assert preview["left_out"] == len(everything) - len(expected)
            assert preview["max_tokens"] == budget
            tokens = (History(expected, counter=served.store.counter).token_count()
                      + served.store.counter.priming_tokens) if expected else 0
            assert preview["tokens"] == tokens <= max(budget, 0)
            assert sum(g[2] for g in preview["gaps"]) == preview["left_out"]
    assert _snapshot(a, sid) == before  # nothing written: version and every status


def test_the_gaps_a_viewer_draws(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    turns = [Message.system("sys")] + [
        (Message.user if i % 2 == 0 else Message.assistant)(f"m{i} " + "w " * 10)
        for i in range(10)]
    _post(a, sid, turns)
    ids = [m.id for m in turns]
    window = History(turns, counter=served.store.counter).by_tokens(40, keep_system=True)
    shown = [m.id for m in window]
    assert shown[0] == ids[0] and 2 <= len(shown) < len(ids) - 1  # a gap after the system prompt
    preview = a.get(f"/v1/sessions/{sid}/window", params={"max_tokens": 40}).json()
    hidden = len(ids) - len(shown)
    assert preview["gaps"] == [[ids[0], shown[1], hidden]]
    nothing = a.get(f"/v1/sessions/{sid}/window", params={"max_tokens": 0}).json()
    assert nothing["gaps"] == [[None, None, len(ids)]] and nothing["message_ids"] == []
    assert nothing["tokens"] == 0 and nothing["left_out"] == len(ids)
    everything = a.get(f"/v1/sessions/{sid}/window", params={"max_tokens": 10**6}).json()
    assert everything["gaps"] == [] and everything["message_ids"] == ids
    empty = served.new_session(a)
    assert a.get(f"/v1/sessions/{empty}/window", params={"max_tokens": 10}).json() == {
        "max_tokens": 10, "tokens": 0, "messages": 0, "left_out": 0, "message_ids": [],
        "gaps": []}


def test_gaps_of() -> None:
    messages = [Message.user(f"m{i}", id=f"m{i}") for i in range(7)]
    assert gaps_of(messages, {"m0", "m3", "m4"}) == [
        ("m0", "m3", 2), ("m4", None, 2)]
    assert gaps_of(messages, {"m5"}) == [(None, "m5", 5), ("m5", None, 1)]
    assert gaps_of(messages, set()) == [(None, None, 7)]
    assert gaps_of(messages, {m.id for m in messages}) == []
    assert gaps_of([], set()) == []


@pytest.mark.parametrize(("params", "status", "names"), [
    ({}, 400, "max_tokens"),
    ({"max_tokens": "-1"}, 400, "max_tokens"),
    ({"max_tokens": "ten"}, 400, "max_tokens"),
    ({"max_tokens": "10", "keep_system": "maybe"}, 400, "keep_system"),
    ({"max_tokens": "10", "counter": "no-such-counter"}, 422, "counter"),
])
def test_bad_input_names_the_parameter(served: Served, a: httpx.Client,
                                       params: dict[str, str], status: int, names: str) -> None:
    sid = served.new_session(a)
    response = a.get(f"/v1/sessions/{sid}/window", params=params)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert names in error["message"] or error.get("path") == names


def test_unknown_and_other_tenants_sessions_are_404(served: Served, a: httpx.Client,
                                                    b: httpx.Client) -> None:
    sid = served.new_session(a)
    _post(a, sid, [Message.user("mine")])
    assert a.get("/v1/sessions/nope/window", params={"max_tokens": 5}).status_code == 404
    assert b.get(f"/v1/sessions/{sid}/window", params={"max_tokens": 5}).status_code == 404


def test_a_named_counter_counts(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    turns = [Message.user("tokens " * 30), Message.assistant("more tokens " * 30)]
    _post(a, sid, turns)
    preview = a.get(f"/v1/sessions/{sid}/window",
                    params={"max_tokens": 1000, "counter": "o200k_base"}).json()
    stored = served.store.range(sid, tenant="A")
    assert preview["tokens"] == History(stored, counter="o200k_base").token_count() + 3
