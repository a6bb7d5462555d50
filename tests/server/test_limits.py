"""Hostile bodies get a 4xx, never a 500, and nothing of them is stored."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
from serverkit import Served, messages

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
