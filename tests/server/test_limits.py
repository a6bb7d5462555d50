"""Hostile bodies get a 4xx, never a 500, and nothing of them is stored."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from serverkit import Served, messages

from chathistory.server import wire

MB = 1024 * 1024


def _assert_nothing_stored(a: httpx.Client, sid: str) -> None:
    session = a.get(f"/v1/sessions/{sid}").json()
    assert "message_count" not in session and "version" not in session


def test_oversized_json_is_413(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        big = b'{"messages": [{"role": "user", "parts": [{"type": "text", "text": "' + \
            b"x" * (11 * MB) + b'"}]}]}'
        declared = a.post(f"/v1/sessions/{sid}/messages", content=big,
                          headers={"Content-Type": "application/json"})
        assert declared.status_code == 413

        def chunked() -> Iterator[bytes]:
            for i in range(0, len(big), MB):
                yield big[i:i + MB]

        streamed = a.post(f"/v1/sessions/{sid}/messages", content=chunked(),
                          headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
        assert streamed.json()["error"]["type"] == "payload_too_large"
        _assert_nothing_stored(a, sid)


def test_deep_nesting_and_bad_bytes_are_400(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        url = f"/v1/sessions/{sid}/messages"
        deep = b"[" * 10_000 + b"]" * 10_000
        nested_in_metadata = (b'{"messages": [{"role": "user", "parts": [{"type": "text", '
                              b'"text": "x"}], "metadata": {"a": ' + deep + b"}}]}")
        for body in (deep, nested_in_metadata, b'{"state": {"a": ' + deep + b"}}",
                     b'{"messages": [{"role": "user", "parts": [{"type": "text", "text": "\xff'
                     b'\xfe"}]}]}', b"\xff\xfe\xfd", b"{not json", b"", b"null"):
            response = a.post(url, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code in (400, 422), (body[:40], response.text)
            assert response.json()["error"]["type"] in ("invalid_json", "invalid_message")
        sessions = a.post("/v1/sessions", content=b'{"metadata": {"a": ' + deep + b"}}",
                          headers={"Content-Type": "application/json"})
        assert sessions.status_code == 400
        _assert_nothing_stored(a, sid)
        assert a.get("/healthz").status_code == 200


def test_counts_and_media_types(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        url = f"/v1/sessions/{sid}/messages"
        one = messages("x")[0]
        too_many = a.post(url, json={"messages": [one] * 10_001})
        assert too_many.status_code == 422
        assert too_many.json()["error"]["path"] == "$.messages"
        parts = {"role": "user", "parts": [{"type": "text", "text": "p"}] * 1001}
        wide = a.post(url, json={"messages": [one, parts]})
        assert wide.status_code == 422 and wide.json()["error"]["path"] == "$.messages[1].parts"
        form = a.post(url, content=b"messages=1",
                      headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415
        bad_if_match = a.post(url, json={"messages": [one]}, headers={"If-Match": "yesterday"})
        assert bad_if_match.status_code == 400
        _assert_nothing_stored(a, sid)


# ---------------------------------------------------------------- bodies as they arrive


def _raw_append(served: Served, sid: str, parts: list[bytes], pause: float,
                total: int | None = None) -> bytes:
    """POST an append on its own connection, the body in ``parts`` sent ``pause`` s
    apart (``Content-Length: total``, default the parts' length); what comes back."""
    body_length = sum(len(p) for p in parts) if total is None else total
    head = (f"POST /v1/sessions/{sid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {served.keys['A']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {body_length}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=10) as sock:
        sock.sendall(head)
        for part in parts:
            time.sleep(pause)
            sock.sendall(part)
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
    return data


def test_a_body_in_pieces_within_the_idle_time_is_read_whole(served_sqlite: Served) -> None:
    body = json.dumps({"messages": messages("one", "two")}).encode()
    pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        got = _raw_append(served_sqlite, sid, pieces, 0.01)
        assert got.startswith(b"HTTP/1.1 200 "), got
        texts = [m["parts"][0]["text"] for m in a.get(f"/v1/sessions/{sid}/messages",
                                                        params={"tail": 10}).json()["messages"]]
        assert texts == ["one", "two"]


def test_a_body_already_whole_is_read_without_the_idle_timer(
        served_sqlite: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection marks a request whose whole body came with it, and reading that
    body sets no timer; a body still arriving is read under the timer, chunk by chunk."""
    real = wire.asyncio.timeout
    timers: list[float | None] = []

    def counting(delay: float | None) -> object:
        if delay == wire.BODY_IDLE_SECONDS:
            timers.append(delay)
        return real(delay)

    monkeypatch.setattr(wire.asyncio, "timeout", counting)
    body = json.dumps({"messages": messages("whole")}).encode()
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        head = (f"POST /v1/sessions/{sid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {served_sqlite.keys['A']}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", served_sqlite.server.port),
                                      timeout=10) as sock:
            timers.clear()  # (the session's creation, by httpx, may have used one)
            sock.sendall(head + body)  # as http.client sends a small body: in one write
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 "), got
        assert timers == []
        later = json.dumps({"messages": messages("in pieces")}).encode()
        got = _raw_append(served_sqlite, sid, [later[:10], later[10:]], 0.2)
        assert got.startswith(b"HTTP/1.1 200 "), got
        assert timers, "a body still arriving is read under the idle timer"
        texts = [m["parts"][0]["text"] for m in a.get(f"/v1/sessions/{sid}/messages",
                                                        params={"tail": 10}).json()["messages"]]
        assert texts == ["whole", "in pieces"]


def test_a_body_that_stops_is_408_and_nothing_is_stored(
        served_sqlite: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "BODY_IDLE_SECONDS", 0.3)
    body = json.dumps({"messages": messages("never whole")}).encode()
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        # the first piece comes at once, the rest never: the wait for the second times out
        started = time.monotonic()
        got = _raw_append(served_sqlite, sid, [body[:10]], 0, total=len(body))
        assert got.startswith(b"HTTP/1.1 408 "), got
        assert b'"request_timeout"' in got
        assert time.monotonic() - started < 15  # a bound for a hang, at load 12 too
        # and a body that never starts
        got = _raw_append(served_sqlite, sid, [], 0, total=len(body))
        assert got.startswith(b"HTTP/1.1 408 "), got
        _assert_nothing_stored(a, sid)


def test_a_client_gone_mid_body_stores_nothing(served_sqlite: Served) -> None:
    body = json.dumps({"messages": messages("half")}).encode()
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        head = (f"POST /v1/sessions/{sid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {served_sqlite.keys['A']}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        with socket.create_connection(("127.0.0.1", served_sqlite.server.port)) as sock:
            sock.sendall(head.encode() + body[:10])
            time.sleep(0.1)
        time.sleep(0.2)
        _assert_nothing_stored(a, sid)
        assert a.post(f"/v1/sessions/{sid}/messages",
                      json={"messages": messages("after")}).status_code == 200
