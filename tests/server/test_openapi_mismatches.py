"""Where the OpenAPI document was looser than the server (issue 43, item 14), each
settled one way: the document says what the server takes, or the server takes what
the document says. docs/api.md lists them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serverkit import serve
from starlette.requests import Request

from chathistory.server.conversations_items import INCLUDABLE
from chathistory.server.errors import BadRequest
from chathistory.server.openapi import document
from chathistory.server.routes import app_routes
from chathistory.server.schema import ReduceBody
from chathistory.server.wire import IF_MATCH_PATTERN, decode_json, if_match
from chathistory.tokens import COUNTER_NAME_PATTERN, get_counter

DOC = document(app_routes("/openai/v1"))
SCHEMAS = DOC["components"]["schemas"]


def _param(path: str, method: str, name: str) -> dict[str, Any]:
    params = DOC["paths"][path][method]["parameters"]
    return next(p for p in params if p["name"] == name)


def _request(value: str) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "query_string": b"",
                    "headers": [(b"if-match", value.encode("latin-1"))]})


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.from_regex(IF_MATCH_PATTERN, fullmatch=True),
                 st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=24)))
def test_if_match_is_served_exactly_when_the_pattern_matches(value: str) -> None:
    value = value.strip(" \t")  # a header value arrives without them
    matches = re.fullmatch(IF_MATCH_PATTERN, value) is not None
    try:
        if_match(_request(value))
        served = True
    except BadRequest:
        served = False
    assert served == matches, value


def test_the_document_gives_if_match_its_pattern() -> None:
    schema = _param("/v1/sessions/{session_id}/messages", "post", "If-Match")["schema"]
    assert schema["pattern"] == IF_MATCH_PATTERN


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.from_regex(COUNTER_NAME_PATTERN, fullmatch=True),
                 st.text(max_size=30),
                 st.sampled_from(["approx:0.49", "approx:100.01", "approx:1e1", "approx: 4",
                                  "approx:4_0", "gpt-4omini", "ft:o3-mini", "x" * 101])))
def test_a_counter_name_is_known_exactly_when_the_pattern_matches(name: str) -> None:
    try:
        get_counter(name)
        known = True
    except ValueError:
        known = False
    assert known == (re.search(COUNTER_NAME_PATTERN, name) is not None), name


def test_the_document_gives_counters_includes_dates_and_erase_their_rules() -> None:
    preview = "/v1/sessions/{session_id}/window"
    assert _param(preview, "get", "max_tokens")["required"] is True
    assert COUNTER_NAME_PATTERN in _param(preview, "get", "counter")["schema"]["pattern"]
    assert SCHEMAS["WindowBody"]["properties"]["counter"]["anyOf"][0]["pattern"] \
        == COUNTER_NAME_PATTERN
    include = _param("/openai/v1/conversations/{conversation_id}/items", "get", "include")
    assert set(include["schema"]["items"]["enum"]) == INCLUDABLE
    assert SCHEMAS["Message"]["properties"]["created_at"]["format"] == "date-time"
    assert SCHEMAS["Session"]["properties"]["created_at"]["format"] == "date-time"
    assert SCHEMAS["EraseBody"]["anyOf"]
    create = DOC["paths"]["/openai/v1/conversations"]["post"]["requestBody"]
    assert create["required"] is False  # served as {}, as OpenAI's API takes it


def test_an_integral_float_is_an_integer() -> None:
    body = decode_json(b'{"type": "count", "max_messages": 3.0, "threshold_count": 1.0}',
                       ReduceBody)
    assert body.max_messages == 3 and body.threshold_count == 1
    with pytest.raises(Exception, match="got `float`"):
        decode_json(b'{"type": "count", "max_messages": 3.5}', ReduceBody)


def test_live_requests_the_document_allows_are_served(tmp_path: Path) -> None:
    served = serve("sqlite", tmp_path)
    try:
        http = served.client()
        sid = served.new_session(http)
        text = [{"type": "text", "text": "hi"}]
        for stamp in ("2024-01-02T03:04:05Z", "2024-01-02t03:04:05.5z",
                      "2024-01-02T03:04:05.123456+05:30", "0001-01-01T00:00:00Z"):
            answer = http.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                {"role": "user", "parts": text, "created_at": stamp, "kv_size": 2.0}]})
            assert answer.status_code == 200, (stamp, answer.text)
        for value in ('"2"', 'W/"3"', "4", "*"):
            answer = http.post(f"/v1/sessions/{sid}/window", json={"max_tokens": 1000.0},
                               headers={"If-Match": value})
            assert answer.status_code in (200, 412), (value, answer.text)
        assert http.post("/v1/erase", json={}).status_code == 400
        assert http.get(f"/v1/sessions/{sid}/window").status_code == 400
        conversation = http.post("/openai/v1/conversations")
        assert conversation.status_code == 200, conversation.text
        items = f"/openai/v1/conversations/{conversation.json()['id']}/items"
        assert http.get(items, params={"include": sorted(INCLUDABLE)}).status_code == 200
    finally:
        served.server.stop()
