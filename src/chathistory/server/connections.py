"""HTTP connections: uvicorn's httptools protocol with the bounds it lacks.

uvicorn (0.54) reads a request head with httptools without any limit on its size
or its time (a 100 MB header was read to the end: 10 s of the loop, +96 MB), and
keeps a connection that never completes a request forever (its only timer starts
after a response), so 1,100 half-open connections use up 1,024 file descriptors
and every other client fails. ``Connection`` adds, per connection:

- a head limit (``max_head_bytes``, 64 KiB): past it, 431 and the connection closed,
  measured as the head streams in (a head that never ends is cut at once) and on
  the parsed head;
- a head timeout (``head_timeout``, 5 s): a connection idle that long since it
  opened or since its last response, or whose request head has been arriving that
  long since its first byte, is closed (408 when part of a head came). Idle
  keep-alive connections close after ``keep_alive`` (5 s, uvicorn's timer), or
  the head timeout if sooner;
- a body timeout (``body_timeout``, ``wire.BODY_IDLE_SECONDS``: 15 s): a request
  body that sends nothing that long is answered 408 by the route reading it, and the
  connection closed (the connection gives the route its time in the scope);
- a send timeout (``send_timeout``, 30 s): a response whose writing has waited that
  long on a client that reads nothing (the socket's buffers full, asyncio's flow
  control paused) is dropped with the connection; a timer only while paused;

and per server a connection cap (``max_connections``; by default the soft limit
on open files less a quarter, 768 of 1,024): a connection past it closes the one
that has waited longest for a request (never one in a request; one that never sent
a whole head before one idle after a response), and only when every connection is
in a request is the new one answered 503. Half-open
connections therefore cost an attacker their turnover, not other clients their
service. The first time in 10 s that the cap is hit, a warning says so.

httptools is kept (not uvicorn's h11, which has a head limit): it costs 52 us of
CPU per request against h11's 92 us (``GET /healthz``, one keep-alive client).
The protocol is ``Connection``; ``server_options()`` gives uvicorn the options
that select it (``http``, no websockets, the keep-alive time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import resource
import socket
import struct
import time
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import msgspec
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from .wire import BODY_COMPLETE, BODY_TIMEOUT

__all__ = ["LIMITS", "Connection", "ConnectionLimits", "configure", "default_max_connections",
           "server_options"]

logger = logging.getLogger("chathistory.server")

LOG_EVERY = 10.0
"""Seconds between two warnings that the connection cap was hit."""
_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds of the HTTP connections of one server."""

    max_head_bytes: int = 64 * 1024
    """A request line and headers together (431 past it)."""
    head_timeout: float = 5.0
    """Seconds a connection may stay idle outside a request, and then take to send a
    request's head (408 when part of one came, else closed)."""
    keep_alive: int = 5
    """Seconds an idle keep-alive connection is kept (uvicorn's ``timeout_keep_alive``)."""
    body_timeout: float | None = None
    """Seconds a request body may send nothing (408, then closed); None:
    ``wire.BODY_IDLE_SECONDS``."""
    send_timeout: float = 30.0
    """Seconds a response may wait on a client that reads nothing (its buffers full)
    before the connection is dropped."""
    max_connections: int | None = None
    """Open connections per process; None: ``default_max_connections()``."""


LIMITS = ConnectionLimits()
"""The limits of ``Connection`` unless its class says otherwise (``configure``)."""


def configure(limits: ConnectionLimits) -> None:
    """Make ``limits`` this process's default (``run`` does it in each worker)."""
    global LIMITS
    LIMITS = limits


def default_max_connections() -> int:
    """The soft limit on open files less a quarter (at least 64 kept for the store's
    connections, files and pipes): accepting never fails with "too many open files"."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft - max(soft // 4, 64))


def server_options(limits: ConnectionLimits | None = None) -> dict[str, Any]:
    """Options of ``uvicorn.run`` / ``uvicorn.Config`` that serve with ``Connection``
    under ``limits`` (default: the process's, ``LIMITS``)."""
    protocol = Connection if limits is None else Connection.using(limits)
    keep_alive = (limits or LIMITS).keep_alive
    return {"http": protocol, "ws": "none", "timeout_keep_alive": keep_alive}


class _Server:
    """One server's connections that are not in a request, longest waiting first, in
    two lines: those that never sent a whole head (``fresh``: a slowloris's) and those
    idle after a response (``idle``: clients served before, closed at the cap only
    when no fresh one is left); and the sweep that closes those past the head timeout
    (one timer per server, not two per request: arming timers cost 10 us of the 38 us
    a request took)."""

    def __init__(self, bounds: ConnectionLimits, loop: asyncio.AbstractEventLoop) -> None:
        self.cap = bounds.max_connections or default_max_connections()
        self.timeout = bounds.head_timeout
        self.every = min(1.0, bounds.head_timeout / 4)
        self.loop = loop
        self.fresh: dict[Connection, float] = {}  # -> since (loop time), oldest first
        self.idle: dict[Connection, float] = {}
        self.sweeping: asyncio.TimerHandle | None = None
        self.closing = 0  # closed by us, connection_lost not yet seen
        self.evicted = 0
        self.refused = 0
        self.logged = -math.inf

    def wait(self, connection: Connection) -> None:
        line = self.idle if connection.served else self.fresh
        line.pop(connection, None)
        line[connection] = self.loop.time()
        if self.sweeping is None:
            self.sweeping = self.loop.call_later(self.every, self.sweep)

    def unwait(self, connection: Connection) -> None:
        self.fresh.pop(connection, None)
        self.idle.pop(connection, None)

    def sweep(self) -> None:
        self.sweeping = None
        deadline = self.loop.time() - self.timeout
        for line in (self.fresh, self.idle):
            while line:
                connection, since = next(iter(line.items()))
                if since > deadline:
                    break
                del line[connection]
                connection.head_timeout()
        if self.fresh or self.idle:
            self.sweeping = self.loop.call_later(self.every, self.sweep)

    def _victim(self, new: Connection) -> Connection | None:
        for line in (self.fresh, self.idle):
            for connection in line:
                if connection is not new:
                    return connection
        return None

    def admit(self, new: Connection) -> None:
        """Make room for ``new`` when it is past the cap (see the module docstring)."""
        open_now = len(new.connections) - self.closing
        if open_now <= self.cap:
            return
        for _ in range(open_now - self.cap):
            victim = self._victim(new)
            if victim is None:
                self.refused += 1
                new.refuse(503, "busy", "the server has as many connections as it takes, "
                           "each in a request; try again", {"Retry-After": "1"})
                break
            self.evicted += 1
            victim.close()
        now = time.monotonic()
        if now - self.logged >= LOG_EVERY:
            logger.warning(
                "connection cap reached: %d connections open, max_connections %d; closed %d "
                "that waited longest for a request and refused %d new ones since the last "
                "warning. Raise the open-files limit (ulimit -n) or --max-connections if "
                "these are real clients.", open_now, self.cap, self.evicted, self.refused,
                extra={"max_connections": self.cap, "evicted": self.evicted,
                       "refused": self.refused})
            self.logged = now
            self.evicted = self.refused = 0


_servers: weakref.WeakKeyDictionary[ServerState, _Server] = weakref.WeakKeyDictionary()


def _answer(status: int, reason: str, kind: str, message: str,
            headers: dict[str, str] | None = None) -> bytes:
    body = msgspec.json.encode({"error": {"type": kind, "message": message,
                                          "request_id": "-"}})
    lines = [f"HTTP/1.1 {status} {reason}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close",
             *(f"{name}: {value}" for name, value in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


class Connection(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head limit, a head timeout and a
    connection cap (see the module's docstring)."""

    limits: ClassVar[ConnectionLimits | None] = None
    """This class's limits; None: the process's (``LIMITS``)."""

    @classmethod
    def using(cls, limits: ConnectionLimits) -> type[Connection]:
        """A subclass under ``limits`` (for servers in one process with different
        limits, e.g. tests; ``run`` uses ``configure`` so that workers inherit them)."""
        return type("Connection", (cls,), {"limits": limits})

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.bounds = self.limits or LIMITS
        server = _servers.get(server_state)
        if server is None:
            server = _servers[server_state] = _Server(self.bounds, self.loop)
        self.server_bounds = server
        # bytes received while a head is incomplete, not counting the data it began in
        # (at most what the head holds), and counting it (at least what it holds)
        self.head_bytes = self.head_seen = 0
        self.data_bytes = 0  # of the data parsed now
        self.in_head = False  # a request's first byte came, its head is not complete
        self.began = False  # ... and it began in the data parsed now
        self.served = False  # a whole head came once
        self.refused = False
        self.closed_by_us = False
        self.discarded = 0
        self.send_stalled: asyncio.TimerHandle | None = None
        # requests of this connection not yet done (pipelined ones too): dropped with it
        self.cycles: weakref.WeakSet[RequestResponseCycle] = weakref.WeakSet()

    # ------------------------------------------------------------ states

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def close(self) -> None:
        """Close now (the cap, a timeout)."""
        self.server_bounds.unwait(self)
        if not self.closed_by_us and not self.transport.is_closing():
            self.closed_by_us = True
            self.server_bounds.closing += 1
        self.transport.close()

    def refuse(self, status: int, kind: str, message: str,
               headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` and close, reading (and dropping) what the client still
        sends for a moment so that it gets the answer rather than a reset."""
        if self.refused or self.transport.is_closing():
            return
        self.refused = True
        self.server_bounds.unwait(self)
        if not self.closed_by_us:  # done: no longer counted against the cap
            self.closed_by_us = True
            self.server_bounds.closing += 1
        self.transport.write(_answer(status, _REASONS[status], kind, message, headers))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)

    def head_timeout(self) -> None:
        """Outside a request for ``head_timeout`` seconds (called by the sweep)."""
        if self.transport.is_closing() or self._in_request():
            return
        if self.in_head:
            self.refuse(408, "request_timeout", "the request head did not arrive within "
                        f"{self.bounds.head_timeout:g} s")
        else:
            self.close()

    def _send_stalled(self) -> None:
        """The client read nothing for ``send_timeout``: drop the connection with a reset
        (closed, the kernel would go on offering it the buffered response for minutes),
        the route's further sends dropped as after a lost connection."""
        self.send_stalled = None
        self.server_bounds.unwait(self)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for cycle in self.cycles:  # (uvicorn marks only the newest: a pipelined
            cycle.disconnected = True  # one would write to the closed transport)
        self.transport.abort()

    # ------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.server_bounds.wait(self)
        self.server_bounds.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_bounds.unwait(self)
        if self.send_stalled is not None:
            self.send_stalled.cancel()
            self.send_stalled = None
        if self.closed_by_us:
            self.closed_by_us = False
            self.server_bounds.closing -= 1
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_stalled is None:
            self.send_stalled = self.loop.call_later(self.bounds.send_timeout,
                                                     self._send_stalled)

    def resume_writing(self) -> None:
        if self.send_stalled is not None:
            self.send_stalled.cancel()
            self.send_stalled = None
        super().resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            self.discarded += len(data)
            if self.discarded > _LINGER_BYTES:
                self.transport.close()
            return
        self.began = False
        self.data_bytes = len(data)
        super().data_received(data)
        if self.in_head and not self.refused:
            self.head_seen += len(data)
            if not self.began:
                self.head_bytes += len(data)
                if self.head_bytes > self.bounds.max_head_bytes:
                    self._too_large()

    def _too_large(self) -> None:
        self.refuse(431, "request_header_fields_too_large", "the request line and headers "
                    f"are over {self.bounds.max_head_bytes} bytes")

    # ------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        if self.refused:  # (a refused connection parses what follows and drops it)
            return
        super().on_message_begin()
        if self.bounds.body_timeout is not None:  # (the scope is a dict ASGI extends)
            cast(dict[str, Any], self.scope)[BODY_TIMEOUT] = self.bounds.body_timeout
        self.began = self.in_head = True
        self.head_bytes = self.head_seen = 0
        if not self._in_request():  # (a pipelined head waits for the response before it)
            self.server_bounds.wait(self)

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.in_head = False
        self.served = True
        self.server_bounds.unwait(self)
        if self.head_seen + self.data_bytes > self.bounds.max_head_bytes:  # else: under
            size = len(self.url) + sum(len(name) + len(value) + 4
                                       for name, value in self.headers)
            if size > self.bounds.max_head_bytes:
                self._too_large()  # (the rest of the data is parsed and dropped)
                return
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycles.add(self.cycle)

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.refused:
            super().on_message_complete()
            # (read_body no longer needs its timer; the scope is a dict ASGI extends)
            cast(dict[str, Any], self.scope)[BODY_COMPLETE] = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle now (no pipelined request)
            self.server_bounds.wait(self)
