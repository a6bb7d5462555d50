"""Forged cursors and page parameters (issue 43, item 11), on every backend: every
opaque token the API decodes (the search and sessions cursors, the messages' page
positions, the Conversations items' ``after``) answers a forgery with a 400 (or the
422 of an ``after`` that names no item), never a 500: a position beyond 64 bits was
an ``OverflowError`` in SQLite and PostgreSQL, 20,000 nested ``[`` a
``RecursionError``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from serverkit import EVERY_BACKEND, Served, messages, serving


@pytest.fixture(scope="module", params=EVERY_BACKEND)
def every(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Served]:
    yield from serving(request, tmp_path_factory)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def forgeries(shape: Any) -> dict[str, str]:
    """Cursors no server made; ``shape(position, id)`` is the JSON of a genuine one."""
    def of(value: Any) -> str:
        return b64(json.dumps(value).encode())

    return {
        "position past 64 bits": of(shape(2**70, "s")),
        "position past 63 bits": of(shape(2**63, "s")),
        "negative position": of(shape(-5, "s")),
        "20,000 nested [": b64(b"[" * 20_000),
        "nested after a value": b64(b"[1," + b"[" * 20_000),
        "an object": of({"a": 1}),
        "a string": of("cursor"),
        "too short": of(shape(1, "s")[:2]),
        "wrong types": of([True, 1, "x"]),
        "an infinite score": b64(b'[1e400, "s", 1]'),
        "an id with NUL": of(shape(1, "a\x00b")),
        "an id of 30,000 characters": of(shape(1, "x" * 30_000)),
        "an empty id": of(shape(1, "")),
        "not base64": "!!!***",
        "base64 with junk": of(shape(1, "s")) + "%%",
        "50,000 characters": "A" * 50_000,
        "not ASCII": "ünïcode",
    }


@pytest.fixture(scope="module")
def session(every: Served) -> str:
    with every.client("A") as a:
        sid = every.new_session(a)
        response = a.post(f"/v1/sessions/{sid}/messages",
                          json={"messages": messages("hello world", "hello again", "hello")})
        assert response.status_code == 200, response.text
    return sid


def test_a_forged_search_cursor_is_a_400(every: Served, session: str) -> None:
    with every.client("A") as a:
        first = a.get("/v1/search", params={"q": "hello", "limit": 1})
        assert first.status_code == 200 and first.json()["next_cursor"], first.text
        genuine = a.get("/v1/search", params={"q": "hello", "limit": 1,
                                              "cursor": first.json()["next_cursor"]})
        assert genuine.status_code == 200, genuine.text
        for name, cursor in forgeries(lambda seq, sid: [1.5, sid, seq]).items():
            got = a.get("/v1/search", params={"q": "hello", "cursor": cursor})
            assert got.status_code == 400, (every.kind, name, got.status_code, got.text[:200])
            assert "cursor" in got.json()["error"]["message"], (name, got.text[:200])


@pytest.mark.parametrize("order", ["created", "recent"])
def test_a_forged_sessions_cursor_is_a_400(every: Served, session: str, order: str) -> None:
    with every.client("A") as a:
        every.new_session(a)
        first = a.get("/v1/sessions", params={"limit": 1, "order": order})
        assert first.status_code == 200 and first.json()["next_cursor"], first.text
        assert a.get("/v1/sessions", params={"limit": 1, "order": order, "cursor":
                                             first.json()["next_cursor"]}).status_code == 200
        shapes = {"a key past 64 bits": lambda n, sid: [order, str(n), sid],
                  "a time": lambda n, sid: [order, "2026-01-01T00:00:00+00:00", sid]}
        for what, shape in shapes.items():
            for name, cursor in forgeries(shape).items():
                if what == "a time" and name in ("position past 64 bits", "position past 63 "
                                                 "bits", "negative position"):
                    continue  # the key is a genuine time: the cursor is a real position
                got = a.get("/v1/sessions", params={"order": order, "cursor": cursor})
                assert got.status_code == 400, (every.kind, what, name, got.status_code,
                                                 got.text[:200])
                assert "cursor" in got.json()["error"]["message"], (name, got.text[:200])


def test_forged_message_positions_are_400s(every: Served, session: str) -> None:
    with every.client("A") as a:
        url = f"/v1/sessions/{session}/messages"
        for value in ("99999999999999999999999", str(2**63), "-1", "1e3", "1.0", "[", "0x10",
                      "9" * 5_000, ""):
            for params in ({"start": value}, {"start": 0, "stop": value}, {"tail": value},
                           {"max_tokens": value}):
                if value == "" and "start" not in params:
                    continue  # (an empty tail / max_tokens is "not given")
                got = a.get(url, params=params)
                assert got.status_code == 400 or (value == "" and got.status_code == 200), (
                    every.kind, params, got.status_code, got.text[:200])


def test_a_forged_items_after_is_refused(every: Served, session: str) -> None:
    with every.client("A") as a:
        url = f"/openai/v1/conversations/{session}/items"
        assert a.get(url).status_code == 200
        for name, after in {**forgeries(lambda n, sid: [n, sid]), "NUL": "msg\x00x",
                            "long": "m" * 30_000}.items():
            got = a.get(url, params={"after": after})
            assert got.status_code in (400, 422), (every.kind, name, got.status_code,
                                                   got.text[:200])
