"""Data-level abuses of issue 17, against a real server: a response that would inline
one upload many times over, counter names made up to fill a cache."""

from __future__ import annotations

import os
import tracemalloc
import uuid
from collections.abc import Iterator

import httpx
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
