"""One message id twice in one POST (issue 23): the append is idempotent by id inside a
batch too, the second copy dropped, over every backend (a SQLite or PostgreSQL store
that wrote both would fail on its unique key: a 500)."""

from __future__ import annotations

import httpx
from serverkit import Served, messages

from chathistory import Message


def _ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


def test_one_id_twice_in_one_post(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    url = f"/v1/sessions/{sid}/messages"
    first, other = messages("first copy", "other")
    copy = Message.user("second copy", id=first["id"]).to_dict()
    response = a.post(url, json={"messages": [first, other, copy, other]})
    assert response.status_code == 200, response.text
    assert response.json() == {"version": 1}
    stored = a.get(url, params={"start": 0})
    assert _ids(stored) == [first["id"], other["id"]]
    assert [m["parts"][0]["text"] for m in stored.json()["messages"]] == ["first copy", "other"]
    assert a.get(f"/v1/sessions/{sid}").json()["message_count"] == 2
    again = a.post(url, json={"messages": [copy, copy]})  # a retry: what is stored
    assert again.status_code == 200 and again.json() == {"version": 1}
    fresh = messages("new")[0]
    more = a.post(url, json={"messages": [fresh, fresh, first]})
    assert more.status_code == 200 and more.json() == {"version": 2}
    assert _ids(a.get(url, params={"start": 0})) == [first["id"], other["id"], fresh["id"]]
