"""Regressions found by reliability/fuzz.py (schemathesis and the hand-written
hostile requests): each input got a 500, a dropped connection, or a 4xx after
something was stored; now each is a clear 4xx that stores nothing, or a 201 that
the client can follow."""

from __future__ import annotations

import base64
from datetime import timedelta
from urllib.parse import quote

import httpx
import pytest
from serverkit import Served, messages

from chathistory import Attachment, InvalidMessage, Message
from chathistory.stores import MemoryStore


def _exported(served: Served, tenant: str = "A") -> bytes:
    return b"".join(served.store.export(tenant=tenant))


def test_405_lists_every_method_of_the_path(served_sqlite: Served) -> None:
    with served_sqlite.client("A") as a:
        response = a.request("TRACE", "/v1/sessions")
        assert response.status_code == 405
        assert response.headers["allow"] == "GET, HEAD, POST"
        assert response.json()["error"]["type"] == "method_not_allowed"
        sid = served_sqlite.new_session(a)
        messages_url = a.request("PUT", f"/v1/sessions/{sid}/messages")
        assert messages_url.headers["allow"] == "DELETE, GET, HEAD, POST"


@pytest.mark.parametrize("session_id", ["a\x7fb", "line\nbreak", "tab\tand\rreturn", "é€",
                                        "space and ?#%"])
def test_ids_a_header_cannot_hold(served_sqlite: Served, session_id: str) -> None:
    """Was: the session was stored, then the Location header failed (a dropped
    connection for control characters, a 400 for non-Latin-1)."""
    with served_sqlite.client("A") as a:
        session_id = f"{session_id}-{id(a)}"
        response = a.post("/v1/sessions", json={"id": session_id})
        assert response.status_code == 201, response.text
        location = response.headers["location"]
        assert location == "/v1/sessions/" + quote(session_id, safe="")
        followed = a.get(location)
        assert followed.status_code == 200 and followed.json()["id"] == session_id


@pytest.mark.parametrize("session_id", [".", "..", "a/b", "/"])
def test_ids_no_url_can_reach_are_refused(served_sqlite: Served, session_id: str) -> None:
    """Was: 201, and then no request could reach the session ("." even read the list)."""
    with served_sqlite.client("A") as a:
        before = _exported(served_sqlite)
        created = a.post("/v1/sessions", json={"id": session_id})
        assert created.status_code == 422 and created.json()["error"]["path"] == "$.id"
        sid = served_sqlite.new_session(a)
        forked = a.post(f"/v1/sessions/{sid}/fork", json={"new_session_id": session_id})
        assert forked.status_code == 422
        assert forked.json()["error"]["path"] == "$.new_session_id"
        a.delete(f"/v1/sessions/{sid}")
        assert _exported(served_sqlite) == before


def test_a_ttl_past_the_year_9999(served_sqlite: Served) -> None:
    """Was: 500 (OverflowError) on create and on update."""
    with served_sqlite.client("A") as a:
        before = _exported(served_sqlite)
        for ttl in (1e308, 1e12):
            created = a.post("/v1/sessions", json={"ttl_seconds": ttl})
            assert created.status_code == 422, created.text
            assert created.json()["error"]["path"] == "$.ttl_seconds"
        assert _exported(served_sqlite) == before
        sid = served_sqlite.new_session(a)
        updated = a.patch(f"/v1/sessions/{sid}", json={"ttl_seconds": 1e12})
        assert updated.status_code == 422 and "version" not in a.get(
            f"/v1/sessions/{sid}").json()
        assert a.post("/v1/sessions", json={"ttl_seconds": 3e9}).status_code == 201


def test_the_store_refuses_a_ttl_it_cannot_date() -> None:
    store = MemoryStore()
    for ttl in (1e308, timedelta(days=10**8), float("nan")):
        with pytest.raises(ValueError, match="ttl"):
            store.create_session("s", ttl=ttl)
    with pytest.raises(ValueError, match="ttl"):
        store.update_session(store.create_session("t").id, ttl=1e300)


def test_an_attachment_whose_digest_is_not_its_bytes(served_sqlite: Served,
                                                     png_bytes: bytes) -> None:
    """Was: stored under the claimed digest, and served in place of the real file
    to every later message of the tenant that carried the real one."""
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        real = Message.user("", Attachment.from_bytes(png_bytes, name="r.png"))
        attachment = real.to_dict()["parts"][0]["attachment"]
        forged = {**attachment, "data": base64.b64encode(png_bytes[:-1] + b"!").decode()}
        before = _exported(served_sqlite)
        answer = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {"role": "user", "parts": [{"type": "image", "attachment": forged}]}]})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == {
            **answer.json()["error"], "message": "sha256 does not match the attached bytes",
            "path": "$.messages[0].parts[0].attachment.sha256"}
        traversal = {**attachment, "sha256": ("../" * 22)[:64]}
        traversal.pop("data")
        answer = a.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {"role": "user", "parts": [{"type": "image", "attachment": traversal}]}]})
        assert answer.status_code == 422 and "hex" in answer.json()["error"]["message"]
        assert _exported(served_sqlite) == before
        assert a.post(f"/v1/sessions/{sid}/messages",
                      json={"messages": [real.to_dict()]}).status_code == 200
        assert a.get(f"/v1/assets/{attachment['sha256']}").content == png_bytes


def test_the_model_checks_the_digest(png_bytes: bytes) -> None:
    attachment = Attachment.from_bytes(png_bytes)
    assert Message.user("", attachment).validate()
    for digest in ("0" * 64, attachment.sha256.upper()):
        forged = Attachment(name="x.png", size=attachment.size, modality="image",
                            mime_type="image/png", sha256=digest, data=png_bytes)
        with pytest.raises(InvalidMessage, match="sha256") as caught:
            Message.user("", forged).validate()
        assert caught.value.path == "$.parts[0].attachment.sha256"


def test_query_parameters_given_twice_or_empty(served_sqlite: Served) -> None:
    """Was: the last of two values won, and "?tail=" meant no selector at all."""
    with served_sqlite.client("A") as a:
        sid = served_sqlite.new_session(a)
        a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("x", "y")})
        url = f"/v1/sessions/{sid}/messages"
        twice = a.get(url, params=[("tail", "1"), ("tail", "2")])
        assert twice.status_code == 400 and "given 2 times" in twice.json()["error"]["message"]
        for params in ({"tail": ""}, {"tail": "", "start": "0"}, {"start": "0", "stop": ""}):
            answer = a.get(url, params=params)
            assert answer.status_code == 400, (params, answer.text)
        context = a.get(f"/v1/sessions/{sid}/context", params={"head": "", "tail": ""})
        assert context.status_code == 400
        # was: text parameters read with .get(), so one of two values won silently
        repeated = [("/v1/sessions", [("order", "recent"), ("order", "created")]),
                    ("/v1/sessions", [("q", "x"), ("q", "y")]),
                    ("/v1/sessions", [("user", "u"), ("user", "v")]),
                    ("/v1/sessions", [("metadata.k", "1"), ("metadata.k", "2")]),
                    (url, [("tail", "1"), ("format", "gemini"), ("format", "anthropic")]),
                    (url, [("max_tokens", "50"), ("counter", "approx"),
                           ("counter", "o200k_base")])]
        for path, params in repeated:
            answer = a.get(path, params=params)
            name = params[-1][0]
            assert answer.status_code == 400, (path, params, answer.text)
            assert f"{name} is given 2 times" in answer.json()["error"]["message"]
        upload = a.post("/v1/assets", params=[("name", "a.txt"), ("name", "b.txt")],
                        content=b"hello", headers={"Content-Type": "text/plain"})
        assert upload.status_code == 400 and "name is given 2 times" in upload.text
        assert a.get("/v1/sessions", params={"order": "recent", "q": "x"}).status_code == 200
        assert a.get(url, params={"tail": "1"}).status_code == 200


def test_asset_downloads_are_documented_as_any_type(served_sqlite: Served) -> None:
    document = httpx.get(served_sqlite.url + "/openapi.json").json()
    download = document["paths"]["/v1/assets/{sha256}"]["get"]["responses"]["200"]
    assert list(download["content"]) == ["*/*"]
    imported = document["paths"]["/v1/import"]["post"]["requestBody"]
    assert imported["required"] is False  # an empty stream is an empty import


def test_nul_anywhere_is_a_4xx_on_every_backend(served: Served) -> None:
    """Was (PostgreSQL, whose text columns refuse NUL): a 500 for a NUL in a role, a
    user, a tool call id, or any id looked up; and SQLite imported a session id with
    NUL that create_session refuses."""
    with served.client("A") as a:
        sid = served.new_session(a)
        url = f"/v1/sessions/{sid}/messages"
        before = _exported(served)
        writes = [
            ("POST", url, {"messages": [{"role": "us\u0000er", "parts": [
                {"type": "text", "text": "x"}]}]}, "$.messages[0].role"),
            ("POST", url, {"messages": [{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c\u0000", "name": "f", "arguments": {}}]}]},
             "$.messages[0].parts[0].id"),
            ("POST", url, {"messages": [{"role": "tool", "parts": [
                {"type": "tool_result", "call_id": "c\u0000", "content": "x"}]}]},
             "$.messages[0].parts[0].call_id"),
            ("POST", "/v1/sessions", {"user": "a\u0000b"}, "$.user"),
        ]
        for method, path, body, field in writes:
            answer = a.request(method, path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["error"]["path"] == field
        imported = a.post("/v1/import", content=b'{"kind": "session", "session": '
                          b'{"id": "x\\u0000y"}}\n',
                          headers={"Content-Type": "application/x-ndjson"})
        assert imported.status_code == 422, imported.text
        reads = [
            a.get("/v1/sessions/a%00b"),
            a.get("/v1/sessions/a%00b/messages", params={"tail": 1}),
            a.get("/v1/export", params={"session_id": "a\u0000b"}),
            a.get("/v1/sessions", params={"user": "a\u0000b"}),
            a.post(f"/v1/sessions/{sid}/mark", json={"ids": ["a\u0000b"], "status": 0}),
            a.post(f"/v1/sessions/{sid}/fork", json={"at_message_id": "a\u0000b"}),
            a.post("/v1/erase", json={"user": "a\u0000b"}),
        ]
        for answer in reads:
            assert answer.status_code < 500, (answer.request.url, answer.text)
        assert _exported(served) == before
