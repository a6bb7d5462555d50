"""Access log lines: the direct path (``log_access_directly``, with ``configure()``'s
set-up) writes the lines the logging module would write, for the same requests, and
gives way whenever anything else is set up."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from chathistory.server import logging as server_logging
from chathistory.server.app import create_app
from chathistory.stores import MemoryStore

_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger("chathistory")
    access = server_logging.access
    saved = (root.handlers[:], root.level, root.propagate, access.disabled)
    try:
        yield io.StringIO()
    finally:
        root.handlers[:], root.level, root.propagate, access.disabled = saved


def _configure(out: io.StringIO, access_log: bool = True) -> None:
    """As the server does it, in the test's body (pytest adds its capture handlers
    around each phase), writing to ``out``."""
    server_logging.configure("info", access_log=access_log)
    logging.getLogger("chathistory").handlers[0].stream = out  # type: ignore[attr-defined]


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    logging.getLogger("chathistory").handlers[0].flush()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_direct_line_is_the_line_logging_writes(stream: io.StringIO) -> None:
    _configure(stream)
    access = server_logging.access
    assert server_logging.direct_access_handler() is not None
    server_logging.access_log("r1", "GET", "/v1/x/{id}", "/v1/x/\u00e9\"", 200, 0.0012345)
    access.addFilter(lambda record: True)  # any filter: the logging module's own path
    try:
        assert server_logging.direct_access_handler() is None
        server_logging.access_log("r1", "GET", "/v1/x/{id}", "/v1/x/\u00e9\"", 200, 0.0012345)
    finally:
        access.filters.clear()
    direct, logged = _lines(stream)
    assert _TS.fullmatch(str(direct.pop("ts"))) and _TS.fullmatch(str(logged.pop("ts")))
    assert list(direct.items()) == list(logged.items())  # same fields, same order
    assert direct["path"] == "/v1/x/\u00e9\"" and direct["ms"] == 1.23


def test_another_handler_gets_every_access_line(stream: io.StringIO) -> None:
    _configure(stream)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    server_logging.access.addHandler(keep)
    try:
        server_logging.access_log("r2", "POST", "/v1/sessions", "/v1/sessions", 201, 0.002)
    finally:
        server_logging.access.removeHandler(keep)
    assert [r.request_id for r in seen] == ["r2"]  # type: ignore[attr-defined]
    assert [line["request_id"] for line in _lines(stream)] == ["r2"]  # and ours too


def test_no_access_line_when_the_access_log_is_off(stream: io.StringIO) -> None:
    _configure(stream, access_log=False)
    server_logging.access_log("r3", "GET", "/healthz", "/healthz", 200, 0.001)
    assert _lines(stream) == []


def _requests(client: TestClient) -> None:
    """Requests of every kind of answer, each with its own X-Request-ID."""
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/healthz", {}), ("HEAD", "/healthz", {}), ("POST", "/v1/sessions",
                                                           {"json": {"id": "s \u00e9"}}),
        ("GET", "/v1/sessions/s \u00e9", {}), ("GET", '/v1/sessions/s"q/messages?tail=1', {}),
        ("POST", "/v1/sessions/s \u00e9/messages", {"json": {"messages": [
            {"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}}),
        ("GET", "/v1/sessions/s \u00e9/messages?max_tokens=50", {}),
        ("PUT", "/v1/sessions", {}), ("GET", "/v2/nothing", {}), ("GET", "/v1/sessions/", {}),
        ("GET", "/", {}), ("GET", "/v1/sessions/s \u00e9/messages?tail=x", {}),
        ("DELETE", "/v1/sessions/s \u00e9", {}), ("GET", "/v1/sessions/s \u00e9", {})]
    for i, (method, path, options) in enumerate(requests):
        client.request(method, path, headers={"X-Request-ID": f"req-{i}"}, **options)


def test_the_same_requests_log_the_same_lines_either_way(stream: io.StringIO,
                                                         tmp_path: Path) -> None:
    _configure(stream)
    seen: list[list[dict[str, object]]] = []
    for direct in (True, False):
        app = create_app(MemoryStore(), asset_dir=tmp_path / str(direct))
        client = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1),
                            follow_redirects=False)
        if not direct:  # any filter: the logging module's own path
            server_logging.access.addFilter(lambda record: True)
        try:
            assert (server_logging.direct_access_handler() is not None) is direct
            _requests(client)
        finally:
            server_logging.access.filters.clear()
        lines = _lines(stream)[sum(len(s) for s in seen):]
        for line in lines:
            assert _TS.fullmatch(str(line.pop("ts")))
            assert isinstance(line.pop("ms"), float)
        seen.append(lines)
    direct_lines, logged_lines = seen
    assert len(direct_lines) == 14
    assert [list(line.items()) for line in direct_lines] == [
        list(line.items()) for line in logged_lines]  # same fields, same order, same values
    statuses = [line["status"] for line in direct_lines]
    assert {200, 201, 204, 400, 404, 405, 307} <= set(statuses)
