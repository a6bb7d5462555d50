"""Structured logs: one JSON object per line, one access line per request with
its request id, route template, status and duration."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

import msgspec

__all__ = ["BufferedHandler", "JSONFormatter", "access_log", "configure", "logger"]

logger = logging.getLogger("chathistory.server")
access = logging.getLogger("chathistory.access")
_encoder = msgspec.json.Encoder()
_STANDARD = frozenset([*vars(logging.makeLogRecord({})), "message", "asctime"])


class JSONFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", ...extra fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return _encoder.encode(out).decode()


class BufferedHandler(logging.Handler):
    """Writes lines in batches: every ``interval`` seconds from a background
    thread, and at once for a warning or worse and at exit. One write per batch
    instead of one per request (a system call each, at thousands a second)."""

    def __init__(self, stream: TextIO, interval: float = 0.2) -> None:
        super().__init__()
        self.stream = stream
        self.interval = interval
        self._pending: list[str] = []
        self._pending_lock = threading.Lock()
        threading.Thread(target=self._flush_forever, name="chathistory-log", daemon=True).start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.write(line)
        if record.levelno >= logging.WARNING:
            self.flush()

    def write(self, line: str) -> None:
        """Queue one formatted line (written within ``interval``)."""
        with self._pending_lock:
            self._pending.append(line)

    def flush(self) -> None:
        with self._pending_lock:
            lines, self._pending = self._pending, []
        if lines:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a closed stream at exit: nothing more to do

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()


def configure(level: str = "info", *, access_log: bool = True) -> None:
    """JSON lines on stderr for the ``chathistory`` loggers."""
    handler = BufferedHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger("chathistory")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    access.disabled = not access_log


def _direct_handler() -> BufferedHandler | None:
    """The handler an access line may be written to directly: when the loggers are
    as ``configure()`` left them (the access logger without handlers or filters of its
    own, passing on to ``chathistory``'s one ``BufferedHandler`` with our formatter),
    the line that logging would write is written without its record, formatter and
    locks (a tenth of an HTTP request's CPU). Anything else set up: None, and logging
    does it all."""
    parent = access.parent
    if access.handlers or access.filters or not access.propagate or parent is None:
        return None
    handlers = parent.handlers
    if len(handlers) != 1 or parent.filters or parent.propagate:
        return None
    handler = handlers[0]
    if (type(handler) is not BufferedHandler or type(handler.formatter) is not JSONFormatter
            or handler.filters or handler.level > logging.INFO):
        return None
    return handler


_second = -1
_stamp = ""


def access_log(request_id: str, method: str, route: str, path: str, status: int,
               seconds: float) -> None:
    global _second, _stamp
    if not access.isEnabledFor(logging.INFO):
        return
    fields = {"request_id": request_id, "method": method, "route": route, "path": path,
              "status": status, "ms": round(seconds * 1000, 2)}
    handler = _direct_handler()
    if handler is None:
        access.info("request", extra=fields)
        return
    now = time.time()
    second = int(now)
    if second != _second:  # the same text as JSONFormatter's "ts", one strftime a second
        _second, _stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    line = {"ts": f"{_stamp}.{int((now - second) * 1000):03d}Z", "level": "info",
            "logger": access.name, "message": "request", **fields}
    handler.write(_encoder.encode(line).decode())
