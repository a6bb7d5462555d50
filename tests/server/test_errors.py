"""Which errors are the client's: only the library's own classes and the HTTP
layer's (``BadRequest``...) answer 4xx; a bare ``ValueError``, ``TypeError`` or
``KeyError`` from a store is a bug on this side: a 500 with the generic body and
the traceback in the log. Client input that a store refuses with ``ValueError``
(a cursor it did not make, a ``start`` past the end) is a 400 by its route."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import Served, messages
from starlette.testclient import TestClient

from chathistory.assets import AssetTooLarge
from chathistory.errors import Conflict, InvalidMessage, NotFound, StoreUnavailable
from chathistory.server.app import create_app
from chathistory.server.errors import BadRequest, HTTPError, status_of
from chathistory.stores import DEFAULT_TENANT, MemoryStore, Page, Session


def test_only_the_clients_errors_are_4xx() -> None:
    assert status_of(BadRequest("x")) == (400, "bad_request")
    assert status_of(HTTPError(415, "unsupported_media_type", "x")) == (
        415, "unsupported_media_type")
    assert status_of(InvalidMessage("x", "$.id")) == (422, "invalid_message")
    assert status_of(NotFound("x")) == (404, "not_found")
    assert status_of(Conflict("x")) == (409, "conflict")
    assert status_of(AssetTooLarge("x")) == (413, "payload_too_large")
    assert status_of(StoreUnavailable("x")) == (503, "store_unavailable")
    for bug in (ValueError("boom"), TypeError("boom"), KeyError("boom"), RuntimeError("x")):
        assert status_of(bug) == (500, "internal"), bug


class BuggyStore(MemoryStore):
    """A store with a bug: its reads of tenant ``default`` (open mode's) raise
    ``error`` once ``armed`` (those of the keys' records work)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        self.armed = False

    def _fail(self, kwargs: dict[str, Any]) -> None:
        if self.armed and kwargs.get("tenant", DEFAULT_TENANT) == DEFAULT_TENANT:
            raise self.error

    def get_session(self, session_id: str, **kwargs: Any) -> Session:
        self._fail(kwargs)
        return super().get_session(session_id, **kwargs)

    def list_sessions(self, **kwargs: Any) -> Page[Session]:
        self._fail(kwargs)
        return super().list_sessions(**kwargs)

    def tail_json(self, *args: Any, **kwargs: Any) -> bytes:
        self._fail(kwargs)
        return super().tail_json(*args, **kwargs)

    def range_json(self, *args: Any, **kwargs: Any) -> bytes:
        self._fail(kwargs)
        return super().range_json(*args, **kwargs)

    def window_json(self, *args: Any, **kwargs: Any) -> bytes:
        self._fail(kwargs)
        return super().window_json(*args, **kwargs)


@pytest.mark.parametrize("error", [ValueError("boom: secret"), TypeError("boom: secret"),
                                   KeyError("boom: secret")], ids=type)
def test_a_store_bug_is_a_500_that_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                error: BaseException) -> None:
    store = BuggyStore(error)
    app = create_app(store, asset_dir=tmp_path)
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False,
                        client=("127.0.0.1", 1))
    store.create_session("s")
    store.armed = True
    url = "/v1/sessions/s/messages"
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/sessions/s", {}), ("/v1/sessions", {}), ("/v1/sessions", {"cursor": "whatever"}),
        (url, {"tail": 1}), (url, {"start": 0}), (url, {"start": 0, "stop": 1}),
        (url, {"max_tokens": 10})]
    caplog.set_level(logging.ERROR, logger="chathistory.server")
    for path, params in requests:
        caplog.clear()
        response = client.get(path, params=params, headers={"X-Request-ID": "req-7"})
        assert response.status_code == 500, (path, params, response.text)
        assert response.json() == {"error": {
            "type": "internal", "request_id": "req-7",
            "message": "internal error; quote request id req-7"}}
        assert "boom" not in response.text and "secret" not in response.text
        failed = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(failed) == 1 and failed[0].exc_info is not None
        assert failed[0].exc_info[1] is error  # the traceback is in the log
        assert failed[0].request_id == "req-7"  # type: ignore[attr-defined]


def _bad_request(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "bad_request"
    assert all(word in error["message"] for word in words), error


def test_what_the_store_refuses_of_the_clients_input_is_a_400(served: Served,
                                                              a: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("a", "b", "c")})
    url = f"/v1/sessions/{sid}/messages"
    _bad_request(a.get(url, params={"start": 2, "stop": 1}), "before start")
    _bad_request(a.get(url, params={"start": 5}), "past the session's end")
    _bad_request(a.get(url, params={"start": 4, "stop": 9}), "past the session's end")
    assert a.get(url, params={"start": 3}).json() == {"messages": []}  # the end itself
    assert len(a.get(url, params={"start": 1, "stop": 9}).json()["messages"]) == 2
    _bad_request(a.get("/v1/sessions", params={"cursor": "not a cursor"}), "cursor")
    served.new_session(a)
    served.new_session(a)
    recent = a.get("/v1/sessions", params={"order": "recent", "limit": 1}).json()
    _bad_request(a.get("/v1/sessions", params={"cursor": recent["next_cursor"]}), "order")
    assert a.get("/v1/sessions", params={"cursor": recent["next_cursor"],
                                         "order": "recent"}).status_code == 200


def test_a_body_the_library_would_refuse_is_a_400(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("a", "b", "c")})
    reduce = f"/v1/sessions/{sid}/reduce"
    _bad_request(a.post(reduce, json={"type": "token_budget", "max_tokens": 10,
                                      "low_water_tokens": 11}), "low_water_tokens")
    _bad_request(a.post(reduce, json={"type": "count"}), "max_messages")
    _bad_request(a.post(reduce, json={"type": "token_budget"}), "max_tokens")
    window = f"/v1/sessions/{sid}/window"
    _bad_request(a.post(window, json={"max_tokens": 100, "low_water_tokens": 101}),
                 "low_water_tokens")
    assert a.post(window, json={"max_tokens": 100, "low_water_tokens": 100}).status_code == 200
    assert a.get(f"/v1/sessions/{sid}/messages", params={"tail": 3}).status_code == 200


def test_a_window_layout_the_client_broke_is_its_error(served: Served, a: httpx.Client) -> None:
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("a", "b", "c")})
    body = {"max_tokens": 100}
    assert a.post(f"/v1/sessions/{sid}/window", json=body).status_code == 200
    state = a.get(f"/v1/sessions/{sid}").json()["state"]
    state["chathistory.window"]["layout"] = [["x", "not a number"]]
    assert a.patch(f"/v1/sessions/{sid}", json={"state": state}).status_code == 200
    broken = a.post(f"/v1/sessions/{sid}/window", json=body)
    assert broken.status_code == 422, broken.text
    assert broken.json()["error"]["path"] == "$.state['chathistory.window']"
