"""Data-level abuses of issue 17, against a real server: a response that would inline
one upload many times over, counter names made up to fill a cache, imports of broken
trees and ids, and expired sessions that still blocked their id."""

from __future__ import annotations

import os
import tracemalloc
import uuid
from collections.abc import Iterator

import httpx
import msgspec
import pytest
from serverkit import Served, messages, serve

from chathistory import Message, tokens
from chathistory.server.app import Limits

MB = 1024 * 1024


def _reference(attachment: dict[str, object], text: str = "see") -> dict[str, object]:
    message = Message.user(text).to_dict()
    message["parts"].append({"type": "image", "attachment": attachment})
    return message


@pytest.fixture(scope="module")
def tiny_inline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose formatted reads inline at most 3,000 bytes."""
    it = serve("memory", tmp_path_factory.mktemp("inline"), limits=Limits(inline_bytes=3000))
    yield it
    it.server.stop()
    it.store.close()


# ---------------------------------------------------------------- item 1: amplification


def test_one_upload_referenced_100_times_is_refused_not_amplified(
        served: Served, a: httpx.Client, png_bytes: bytes) -> None:
    """Was: 5 MB uploaded once, 100 references (21 KB of request), then a 666 MB answer
    and 1.4 GB of server memory. Now a 422 saying how to get references instead, decided
    before any asset is read; the references themselves are a small answer."""
    big = png_bytes + os.urandom(5 * MB)
    uploaded = a.post("/v1/assets", params={"mime_type": "image/png"}, content=big)
    assert uploaded.status_code == 201, uploaded.text
    attachment = uploaded.json()
    sid = served.new_session(a)
    appended = a.post(f"/v1/sessions/{sid}/messages",
                      json={"messages": [_reference(attachment, f"n{i}") for i in range(100)]})
    assert appended.status_code == 200, appended.text
    url = f"/v1/sessions/{sid}/messages"
    tracemalloc.start()  # the server runs in this process: its allocations count too
    try:
        refused = a.get(url, params={"start": 0, "format": "openai_chat"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.status_code == 422, refused.text[:300]
    error = refused.json()["error"]
    assert error["type"] == "inline_limit" and "assets=url" in error["message"]
    assert "$[1].parts[1].attachment" in error["message"]  # the second reference
    assert peak < 20 * MB  # was 1.4 GB; no asset was even read
    for fmt in ("anthropic", "gemini", "openai_responses"):
        assert a.get(url, params={"tail": 2, "format": fmt}).status_code == 422
    as_urls = a.get(url, params={"start": 0, "format": "openai_chat", "assets": "url"})
    assert as_urls.status_code == 200
    assert len(as_urls.content) < 100_000
    link = as_urls.json()["messages"][99]["content"][1]["image_url"]["url"]
    assert link == f"{served.url}/v1/assets/{attachment['sha256']}"
    assert a.get(link).content == big  # the client fetches each asset once, with its key
    once = a.get(url, params={"tail": 1, "format": "openai_chat"})  # one reference: inlined
    assert once.status_code == 200
    inlined = once.json()["messages"][0]["content"][1]["image_url"]["url"]
    assert inlined.startswith("data:image/png;base64,") and len(inlined) > 5 * MB


def test_inline_total_is_bounded(tiny_inline: Served, png_bytes: bytes) -> None:
    served = tiny_inline
    with served.client("A") as a:
        uploads = []
        for i in range(4):  # distinct assets, about 1 KB each: 4 KB in all, over 3,000
            body = png_bytes + bytes([i]) * 1000
            response = a.post("/v1/assets", params={"mime_type": "image/png"}, content=body)
            assert response.status_code == 201
            uploads.append(response.json())
        sid = served.new_session(a)
        a.post(f"/v1/sessions/{sid}/messages",
               json={"messages": [_reference(u, f"n{i}") for i, u in enumerate(uploads)]})
        url = f"/v1/sessions/{sid}/messages"
        over = a.get(url, params={"start": 0, "format": "anthropic"})
        assert over.status_code == 422
        assert over.json()["error"]["type"] == "inline_limit"
        assert "3000 bytes" in over.json()["error"]["message"]
        within = a.get(url, params={"tail": 2, "format": "anthropic"})
        assert within.status_code == 200
        assert a.get(url, params={"start": 0, "format": "anthropic",
                                  "assets": "url"}).status_code == 200
        for params in ({"tail": 1, "assets": "url"}, {"tail": 1, "format": "gemini",
                                                      "assets": "bytes"}):
            assert a.get(url, params=params).status_code in (400, 422)


# ---------------------------------------------------------------- item 2: counter names


def test_made_up_counter_names_are_422_and_cache_nothing(served: Served,
                                                         a: httpx.Client) -> None:
    """Was: every fresh ``gpt-4o-<uuid>`` name (4 MB each) was cached for good."""
    sid = served.new_session(a)
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("hi", "hello")})
    cached = dict(tokens._counters)
    huge = f"gpt-4o-{uuid.uuid4()}" + "x" * (4 * MB)
    window = a.post(f"/v1/sessions/{sid}/window", json={"max_tokens": 1000, "counter": huge})
    assert window.status_code == 422
    assert window.json()["error"]["path"] == "$.counter"
    assert len(window.content) < 2000  # the name is not echoed whole
    reduce = a.post(f"/v1/sessions/{sid}/reduce",
                    json={"type": "token_budget", "max_tokens": 100, "counter": "gpt-4o!"})
    assert reduce.status_code == 422 and reduce.json()["error"]["path"] == "$.counter"
    for name in ("gpt-4o-" + "x" * 200, "llama-3", "gpt-4o/../x"):
        read = a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 100, "counter": name})
        assert read.status_code == 422 and read.json()["error"]["path"] == "counter", name
    for _ in range(20):  # fresh model-shaped names work and resolve to their encoding
        name = f"gpt-4o-{uuid.uuid4()}"
        ok = a.get(f"/v1/sessions/{sid}/messages", params={"max_tokens": 100, "counter": name})
        assert ok.status_code == 200
    assert set(tokens._counters) <= set(cached) | {"o200k_base", "cl100k_base", "approx"}


# ---------------------------------------------------------------- items 6, 13: imports


def _session_line(sid: str, **fields: object) -> bytes:
    return msgspec.json.encode({"kind": "session", "session": {"id": sid, **fields}}) + b"\n"


def _message_line(sid: str, text: str) -> bytes:
    return msgspec.json.encode({"kind": "message", "session_id": sid,
                                "message": Message.user(text).to_dict()}) + b"\n"


def _import(client: httpx.Client, *lines: bytes) -> httpx.Response:
    return client.post("/v1/import", content=b"".join(lines),
                       headers={"Content-Type": "application/x-ndjson"})


def test_import_refuses_broken_trees_and_ids_storing_nothing(served: Served,
                                                             a: httpx.Client) -> None:
    """Was: cycles and unknown parents accepted (then DELETE ?cascade, erase and purge
    answered 500), a fork past its parent a 500 after earlier lines were committed, and
    ids ``a/b`` and ``..`` stored out of reach."""
    tag = uuid.uuid4().hex[:8]
    first = f"ok-{tag}"
    ok_lines = [_session_line(first), _message_line(first, "m0"), _message_line(first, "m1")]
    cases = {
        "self": ([_session_line(f"x-{tag}", parent_id=f"x-{tag}")], "parent_id"),
        "cycle": ([_session_line(f"x1-{tag}", parent_id=f"x2-{tag}"),
                   _session_line(f"x2-{tag}", parent_id=f"x1-{tag}")], "parent_id"),
        "unknown parent": ([_session_line(f"o-{tag}", parent_id="nobody", fork_seq=1)],
                           "parent_id"),
        "fork_seq -1": ([_session_line(f"f-{tag}", parent_id=first, fork_seq=-1)], "fork_seq"),
        "fork_seq past": ([_session_line(f"f-{tag}", parent_id=first, fork_seq=3)],
                          "fork_seq"),
        "slash": ([_session_line("a/b")], "id"),
        "dot dot": ([_session_line("..")], "id"),
    }
    for name, (bad, field) in cases.items():
        response = _import(a, *ok_lines, *bad)
        assert response.status_code == 422, (name, response.text)
        assert response.json()["error"]["path"].endswith(field), (name, response.text)
        assert a.get(f"/v1/sessions/{first}").status_code == 404, name  # nothing stored
    fine = _import(a, *ok_lines, _session_line(f"f-{tag}", parent_id=first, fork_seq=2),
                   _message_line(f"f-{tag}", "own"))
    assert fine.status_code == 200 and fine.json()["added"] == 3
    lineage = a.get(f"/v1/sessions/{first}/lineage").json()
    assert {s["id"] for s in lineage} == {first, f"f-{tag}"}
    assert a.delete(f"/v1/sessions/{first}", params={"cascade": "true"}).status_code == 204


# ---------------------------------------------------------------- item 15: expired sessions


def test_an_expired_session_is_gone_for_every_route(served: Served, a: httpx.Client) -> None:
    """Was: 404 to GET but 409 "exists" to create."""
    import time

    sid = f"e-{uuid.uuid4().hex[:8]}"
    assert a.post("/v1/sessions", json={"id": sid, "ttl_seconds": 1}).status_code == 201
    a.post(f"/v1/sessions/{sid}/messages", json={"messages": messages("old")})
    time.sleep(1.2)
    assert a.get(f"/v1/sessions/{sid}").status_code == 404
    assert a.get(f"/v1/sessions/{sid}/messages", params={"tail": 5}).status_code == 404
    listed = a.get("/v1/sessions", params={"q": sid, "limit": 1000}).json()["items"]
    assert sid not in {s["id"] for s in listed}
    assert sid not in a.get("/v1/export").text
    again = a.post("/v1/sessions", json={"id": sid})
    assert again.status_code == 201, again.text
    assert a.get(f"/v1/sessions/{sid}/messages", params={"tail": 5}).json()["messages"] == []
    assert a.post("/v1/sessions", json={"id": sid}).status_code == 409  # a live one: taken
