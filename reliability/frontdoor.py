"""frontdoor: attacks on the HTTP front door of a real server while another tenant
measures it (issue 17, items 5 and 9).

The server is `chathistory serve` (`server.run`, one process) over a SQLite file on a
loopback port, with keys for tenants `attacker` and `probe`, started with a soft and
hard limit of 1,024 open files, as many machines have by default. The probe is
`hostile.Probe` (the other tenant's reads and `/healthz` every 20 ms, from a process
of its own, over one keep-alive connection); since that connection was open before
an attack, a second prober opens a new connection for each `/healthz`.

- big header (5): one connection after another sends a 100 MB header. Wanted: each
  is cut within a second, before 16 MB were sent; the server's memory does not grow
  by more than 50 MB; the probe keeps p99 < 50 ms.
- slowloris (9): 1,100 connections that send part of a request head and then
  nothing, reopened as the server closes them. Wanted: every new connection of the
  second prober is served; the probe keeps p99 < 50 ms; the server logs that its
  connection cap was hit.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .common import Result, over_time
from .hostile import Probe, _row, prepare_tenants
from .procs import child_env, die_with_parent, free_port, rss_bytes, wait_until

OPEN_FILES = 1024
"""The server's limit on open files (soft and hard)."""
HALF_OPEN = 1100


@dataclass
class Limited:
    """A server process under ``OPEN_FILES``, its log, keys and the probe's session."""

    proc: subprocess.Popen[bytes]
    url: str
    port: int
    log: Path
    keys: dict[str, str]
    probe_session: str

    def probe(self) -> Probe:
        return Probe(self.url, self.keys["probe"], self.probe_session)


def _limit_open_files() -> None:
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@contextlib.contextmanager
def served(workdir: Path) -> Iterator[Limited]:
    store_url = f"sqlite:///{workdir}/frontdoor.db"
    keys, probe_session = prepare_tenants(store_url, "frontdoor")
    port = free_port()
    log = workdir / f"server-{port}.log"
    script = ("from chathistory.server import run; "
              f"run({store_url!r}, '127.0.0.1', {port}, {str(workdir / 'assets')!r}, "
              "log_level='warning', access_log=False)")
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", script], env=child_env(),
                                stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=_limit_open_files)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200,
                   f"chathistory server on {port}", 60, proc)
        yield Limited(proc, url, port, log, keys, probe_session)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)


@dataclass
class FreshProber:
    """`/healthz` on a new connection every 50 ms, in a thread: failures and answers."""

    url: str
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> FreshProber:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                status = httpx.get(self.url + "/healthz", timeout=5,
                                   headers={"Connection": "close"}).status_code
                if status == 200:
                    self.answered += 1
                else:
                    self.failures.append(f"fresh /healthz: {status}")
            except httpx.HTTPError as exc:
                self.failures.append(f"fresh /healthz: {type(exc).__name__}")
            self._stop.wait(0.05)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def big_header(s: Limited, seconds: float) -> Result:
    started = time.monotonic()
    problems: list[str] = []
    rss_before = rss_bytes(s.proc.pid)
    attempts: list[tuple[int, float]] = []
    chunk = b"a" * 65536
    with s.probe() as probe, FreshProber(s.url) as fresh:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sent, t0 = 0, time.perf_counter()
            with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock, \
                    contextlib.suppress(OSError):
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
                while sent < 100 * 1024 * 1024:
                    sock.sendall(chunk)
                    sent += len(chunk)
            attempts.append((sent, time.perf_counter() - t0))
            time.sleep(0.05)
    grew = (rss_bytes(s.proc.pid) - rss_before) / 2**20
    uncut = [a for a in attempts if a[0] >= 16 * 2**20]
    if uncut:
        problems.append(f"{len(uncut)} of {len(attempts)} headers not cut before 16 MB "
                        f"(worst {max(a[0] for a in uncut) / 2**20:.0f} MB)")
    late: list[str] = []
    over_time("the slowest header cut", max((a[1] for a in attempts), default=0.0), 1.0,
              problems, late)
    if grew > 50:
        problems.append(f"server memory grew {grew:.0f} MB")
    problems += sorted(set(fresh.failures))[:3]
    worst = max(attempts, default=(0, 0.0))
    return _row("frontdoor: 100 MB header", "sqlite", probe, problems, started,
                f"{len(attempts)} headers of 100 MB, each cut after at most "
                f"{worst[0] / 2**20:.1f} MB sent, {max((a[1] for a in attempts), default=0):.3f}"
                f" s; server memory {grew:+.0f} MB; {fresh.answered} fresh connections served",
                late)


def slowloris(s: Limited, hold: float) -> Result:
    started = time.monotonic()
    problems: list[str] = []
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\nX-Slow: ".encode()
    held: list[socket.socket] = []
    opened = 0
    stop = threading.Event()

    def attack() -> None:
        nonlocal opened
        while not stop.is_set():
            for sock in [sock for sock in held if not _open(sock)]:  # closed by the server
                held.remove(sock)
                sock.close()
            while len(held) < HALF_OPEN and not stop.is_set():
                try:
                    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
                    sock.sendall(head)
                except OSError:
                    break
                held.append(sock)
                opened += 1
            stop.wait(0.5)

    with s.probe() as probe:
        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        time.sleep(1.0)  # the 1,100 are open (the server keeps what its cap allows)
        with FreshProber(s.url) as fresh:
            time.sleep(hold)
        stop.set()
        attacker.join(30)
    for sock in held:
        sock.close()
    logged = "connection cap reached" in s.log.read_text(errors="replace")
    if not logged:
        problems.append("no 'connection cap reached' line in the server's log")
    if fresh.answered == 0:
        problems.append("no fresh connection was served")
    problems += sorted(set(fresh.failures))[:3]
    return _row("frontdoor: slowloris", "sqlite", probe, problems, started,
                f"{HALF_OPEN} half-open connections held ({opened} opened in all) at "
                f"{OPEN_FILES} open files; {fresh.answered} fresh connections served, "
                f"{len(fresh.failures)} failed; cap logged: {logged}")


def _open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def run(quick: bool = False) -> list[Result]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = HALF_OPEN + 200
    if soft < need:  # the harness holds the attacker's sockets
        if hard != resource.RLIM_INFINITY and hard < need:
            return [Result("frontdoor", "sqlite", 0, 0, 0, 0.0, f"skipped: the open-files "
                           f"limit ({hard}) is under {need}", informational=True)]
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    seconds = 3.0 if quick else 10.0
    with tempfile.TemporaryDirectory(prefix="frontdoor-") as tmp:
        workdir = Path(tmp)
        with served(workdir) as s:
            return [big_header(s, seconds), slowloris(s, seconds)]
