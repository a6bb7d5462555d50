"""Access log lines: the direct path (``configure()``'s set-up) writes the line that
the logging module would write, and gives way whenever anything else is set up."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from chathistory.server import logging as server_logging

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
    assert server_logging._direct_handler() is not None
    server_logging.access_log("r1", "GET", "/v1/x/{id}", "/v1/x/\u00e9\"", 200, 0.0012345)
    access.addFilter(lambda record: True)  # any filter: the logging module's own path
    try:
        assert server_logging._direct_handler() is None
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
