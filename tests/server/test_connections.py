"""Connections (issue 17, items 5 and 9; issue 43, item 13), against real servers on
loopback: request heads bounded in size and time, idle connections closed, and a
connection cap that closes the connection idle longest (``server.connections``);
``chathistory serve`` itself closes stalled connections after its timeouts."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import LiveServer, serve_process

from chathistory.server import auth
from chathistory.server.app import create_app
from chathistory.server.connections import ConnectionLimits
from chathistory.stores import MemoryStore

# ---------------------------------------------------------------- helpers


def connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def answer(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes (or a reset)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed ``sock`` within ``seconds``, and what it sent."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return True, data
    except TimeoutError:
        return False, data
    return True, data


def is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def server_log() -> Iterator[Captured]:
    handler = Captured()
    logger = logging.getLogger("chathistory.server")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def live(app: Any, **limits: Any) -> LiveServer:
    return LiveServer(app, connections=ConnectionLimits(**limits)).start()


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[LiveServer]:
    """Open mode: no key in the store."""
    server = live(create_app(MemoryStore(counter="approx"), asset_dir=tmp_path / "assets"))
    yield server
    server.stop()


# ---------------------------------------------------------------- item 5: request heads


def test_a_head_over_64_kib_is_answered_431(open_server: LiveServer) -> None:
    for size in (70_000, 1_000_000):
        with connect(open_server) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                         + b"a" * size + b"\r\n\r\n")
            got = answer(sock)
        assert got.startswith(b"HTTP/1.1 431 "), got[:100]
        assert b"request_header_fields_too_large" in got
    for first in (1_000, 60_000, 65_000):  # a head in two parts (two reads) at any split
        with connect(open_server) as sock:
            head = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000
                    + b"\r\n\r\n")
            sock.sendall(head[:first])
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                sock.sendall(head[first:])
            got = answer(sock)
        assert got.startswith(b"HTTP/1.1 431 "), (first, got[:100])
    with connect(open_server) as sock:  # 60 KB of headers are still served
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     + b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(60))
                     + b"\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 200 ")


def test_a_100_mb_header_is_cut_at_once_while_others_are_served(
        open_server: LiveServer) -> None:
    started = time.monotonic()
    sent = 0
    with connect(open_server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        chunk = b"a" * 65536
        with pytest.raises(OSError):  # broken pipe or reset: the server stopped reading
            while sent < 100 * 1024 * 1024:
                sock.sendall(chunk)
                sent += len(chunk)
    took = time.monotonic() - started
    # what was sent is the server's 64 KiB, 1 MiB read and dropped, and socket buffers
    # (the time is reliability/frontdoor.py's figure; here only a bound for a hang)
    assert sent < 16 * 1024 * 1024 and took < 30, (sent, took)
    assert httpx.get(open_server.url + "/healthz", timeout=5).status_code == 200


def test_a_head_that_takes_too_long_is_answered_408(tmp_path: Path) -> None:
    server = live(create_app(MemoryStore(), asset_dir=tmp_path), head_timeout=0.5)
    try:
        with connect(server) as sock:  # a head sent a byte every 0.1 s: cut at 0.5 s
            started = time.monotonic()
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            with pytest.raises(OSError):
                for _ in range(50):
                    sock.sendall(b"X")
                    time.sleep(0.1)
            got = answer(sock)
            assert got.startswith(b"HTTP/1.1 408 "), got
            # cut before the 50 bytes (5 s) were sent: the OSError above, on a machine of
            # any speed (sleeps only lengthen the sending)
            assert time.monotonic() - started >= 0.5
        with connect(server) as sock:  # a connection that never sends: closed, no answer
            assert closed_within(sock, 3) == (True, b"")
    finally:
        server.stop()


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    server = live(create_app(MemoryStore(), asset_dir=tmp_path), keep_alive=1)
    try:
        with connect(server) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            closed, _ = closed_within(sock, 15)  # a bound that holds at load 12
            assert closed and time.monotonic() - started > 0.5
    finally:
        server.stop()


# ---------------------------------------------------------------- item 9: connection cap


def test_past_the_cap_the_connection_idle_longest_is_closed(
        tmp_path: Path, server_log: Captured) -> None:
    server = live(create_app(MemoryStore(), asset_dir=tmp_path), max_connections=40,
                  head_timeout=60)
    held: list[socket.socket] = []
    try:
        for _ in range(60):  # half-open: part of a head, then nothing
            sock = connect(server)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(sock)
        time.sleep(0.3)
        for _ in range(20):  # every new client is served, at once
            response = httpx.get(server.url + "/healthz", timeout=2)
            assert response.status_code == 200
        time.sleep(0.3)
        still = [is_open(sock) for sock in held]
        assert not any(still[:20]) and all(still[-19:]), still  # the oldest went first
        assert any("connection cap reached" in line and "max_connections 40" in line
                   for line in server_log.lines), server_log.lines
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_at_the_cap_half_open_connections_go_before_served_idle_ones(tmp_path: Path) -> None:
    server = live(create_app(MemoryStore(), asset_dir=tmp_path), max_connections=20,
                  head_timeout=60, keep_alive=60)
    held: list[socket.socket] = []
    try:
        with httpx.Client(base_url=server.url, timeout=5) as client:
            assert client.get("/healthz").status_code == 200  # now idle, the oldest
            for _ in range(40):
                sock = connect(server)
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                held.append(sock)
            time.sleep(0.3)
            with connect(server) as sock:  # a new client: the server makes room
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Connection: close\r\n\r\n")
                assert answer(sock).startswith(b"HTTP/1.1 200 ")
            served = client.get("/healthz")  # on its kept connection
            assert served.status_code == 200
            assert client.get("/healthz").extensions["network_stream"] is \
                served.extensions["network_stream"]
        assert sum(is_open(sock) for sock in held) == 18  # 20, less the client and one
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_when_every_connection_is_in_a_request_a_new_one_gets_503(tmp_path: Path) -> None:
    store = MemoryStore()
    _, key = auth.create_key(store, "t")
    server = live(create_app(store, asset_dir=tmp_path, keys_required=True),
                  max_connections=3)
    held: list[socket.socket] = []
    try:
        for _ in range(3):  # each in a request: a body announced, half sent
            sock = connect(server)
            sock.sendall(f"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
                         f"Bearer {key}\r\nContent-Type: application/json\r\n"
                         "Content-Length: 100\r\n\r\n{".encode())
            held.append(sock)
        time.sleep(0.3)
        with connect(server) as sock:
            got = answer(sock, 5)
        assert got.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in got.lower(), got
        assert all(is_open(sock) for sock in held)
    finally:
        for sock in held:
            sock.close()
        server.stop()


def _ask_twice(url: str) -> int:
    """The status of GET ``url``, asked again once if the connection was closed before
    an answer (what a client does for an idempotent request)."""
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.RemoteProtocolError:
        return httpx.get(url, timeout=5).status_code


def test_the_cap_keeps_serving_under_a_stream_of_half_open_connections(
        tmp_path: Path) -> None:
    """An attacker opening half-open connections without end, 4 threads: a client
    that connects and asks is answered every time, at its first or second try. (A
    connection whose request the loaded server has not read yet is one waiting for a
    request like the attacker's, and may be the oldest of them when 30 newer ones
    arrive first: a full run at load 10 met one such close in 30 asks.)"""
    server = live(create_app(MemoryStore(), asset_dir=tmp_path), max_connections=30,
                  head_timeout=60)
    stop = threading.Event()

    def attack() -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            try:
                sock = connect(server)
                sock.sendall(b"GET / HTTP/1.1\r\n")
                held.append(sock)
            except OSError:
                pass
            if len(held) > 50:
                held.pop(0).close()
        for sock in held:
            sock.close()

    threads = [threading.Thread(target=attack, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        statuses = [_ask_twice(server.url + "/healthz") for _ in range(30)]
        assert statuses == [200] * 30
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        server.stop()


# ---------------------------------------------------------------- issue 43, item 13


STALLS = {
    "part of a request line": b"GET /heal",
    "part of the headers": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    "nothing": b"",
    "part of a body": (b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"),
}


def established(sock: socket.socket) -> bool:
    """Whether the server has neither closed nor reset ``sock`` (its TCP state, read
    without consuming anything the server sent)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == 1  # ESTABLISHED


def test_chathistory_serve_closes_stalled_and_idle_connections(tmp_path: Path) -> None:
    """``chathistory serve`` with 1 s timeouts: 400 connections that stall (part of a
    request line, of the headers, of a body, or nothing at all), 100 idle after a
    response and 50 that read none of their responses are all closed by the server,
    while another client is served. The wait for them is generous (30 s): what is
    asserted is that they are closed, not how fast."""
    with serve_process("--store", "memory://", "--asset-dir", str(tmp_path / "assets"),
                       "--head-timeout", "1", "--keep-alive", "1", "--body-timeout", "1",
                       "--send-timeout", "1") as url:
        port = int(url.rsplit(":", 1)[1])
        held: list[tuple[str, socket.socket]] = []
        try:
            for what, sent in STALLS.items():
                for _ in range(100):
                    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                    if sent:
                        sock.sendall(sent)
                    held.append((what, sock))
            for _ in range(100):  # served, then idle on a kept-alive connection
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
                held.append(("idle after a response", sock))
            for _ in range(50):  # 100 answers of 100 KB asked for, none read
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(10)
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 100)
                held.append(("reads nothing", sock))
            with httpx.Client(base_url=url, timeout=10) as other:  # served meanwhile
                assert [other.get("/healthz").status_code for _ in range(5)] == [200] * 5
            deadline = time.monotonic() + 30
            while any(established(sock) for _, sock in held) and time.monotonic() < deadline:
                time.sleep(0.2)
            still: dict[str, int] = {}
            for what, sock in held:
                if established(sock):
                    still[what] = still.get(what, 0) + 1
            assert still == {}, f"still open after 30 s: {still}"
            for what, sock in held:
                if what in ("part of the headers", "part of a body"):
                    got = answer(sock)
                    assert got.startswith(b"HTTP/1.1 408 "), (what, got[:200])
            assert httpx.get(url + "/healthz", timeout=10).status_code == 200
        finally:
            for _, sock in held:
                sock.close()
