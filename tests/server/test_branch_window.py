"""A fork's (and an edit's) window panel is the fork's: ``POST /fork`` and ``POST /edit``
do not copy ``state["chathistory.window"]``, and the fork's first ``POST /window``
plans over its own live messages (what the parent marked before the fork stays
marked: statuses are shared), on every backend of the ``served`` fixture."""

from __future__ import annotations

import httpx
from serverkit import Served, messages

from chathistory import Message


def _windowed_session(served: Served, a: httpx.Client) -> tuple[str, list[str]]:
    sid = served.new_session(a, state={"app": 1})
    chat = messages(*(f"turn {i} " + "w " * 30 for i in range(8)))
    assert a.post(f"/v1/sessions/{sid}/messages", json={"messages": chat}).status_code == 200
    plan = a.post(f"/v1/sessions/{sid}/window", json={"max_tokens": 150}).json()
    assert plan["evicted_ids"]  # the parent's window has moved on
    return sid, [m["id"] for m in chat]


def test_a_fork_plans_its_own_window(served: Served, a: httpx.Client) -> None:
    sid, ids = _windowed_session(served, a)
    parent_layout = a.get(f"/v1/sessions/{sid}").json()["state"]["chathistory.window"]
    assert parent_layout["last_turn"]["evicted"] > 0
    fork = a.post(f"/v1/sessions/{sid}/fork", json={"at_message_id": ids[6]})
    assert fork.status_code == 201
    fid = fork.json()["id"]
    assert fork.json()["state"] == {"app": 1}
    assert a.get(f"/v1/sessions/{fid}").json()["state"] == {"app": 1}
    plan = a.post(f"/v1/sessions/{fid}/window", json={"max_tokens": 150}).json()
    sent = [m["id"] for m in plan["messages"]]
    live = [m["id"] for m in a.get(f"/v1/sessions/{fid}/messages",
                                   params={"tail": 100}).json()["messages"]]
    assert sent == live and live[-1] == ids[6]  # what the parent marked stays marked
    assert plan["reused_prefix_tokens"] == 0  # a first turn: nothing of the parent's
    layout = a.get(f"/v1/sessions/{fid}").json()["state"]["chathistory.window"]
    assert layout["last_turn"]["total_tokens"] == plan["total_tokens"]
    assert a.get(f"/v1/sessions/{sid}").json()["state"]["chathistory.window"] == parent_layout


def test_an_edit_plans_its_own_window(served: Served, a: httpx.Client) -> None:
    sid, ids = _windowed_session(served, a)
    edited = Message.user("turn 6, edited").to_dict()
    branch = a.post(f"/v1/sessions/{sid}/edit", json={"message_id": ids[6], "message": edited})
    assert branch.status_code == 201
    assert branch.json()["state"] == {"app": 1}
    bid = branch.json()["id"]
    plan = a.post(f"/v1/sessions/{bid}/window", json={"max_tokens": 1000}).json()
    # 1 to 4 stay marked (statuses are shared), the rest is the branch's own plan
    assert [m["id"] for m in plan["messages"]] == [ids[0], ids[5], edited["id"]]
    assert plan["reused_prefix_tokens"] == 0
