"""Processes the checks start and kill: `chathistory serve` over a store, a private
redis-server, a scratch PostgreSQL schema; and how to read a process's memory.

Every process started here gets SIGTERM when the harness dies (Linux
`PR_SET_PDEATHSIG`), so a failed run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def die_with_parent() -> None:
    """Linux: the child gets SIGTERM when the harness dies, never outlives it."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_env() -> dict[str, str]:
    """The environment of a Python child: this working tree importable."""
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def wait_until(check: object, what: str, timeout: float = 30.0,
               alive: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():  # type: ignore[operator]
                return
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{what} exited with {alive.returncode}")
        time.sleep(0.02)
    raise RuntimeError(f"{what} not ready after {timeout:g} s")


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL: no shutdown, no flush, no final fsync."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


class ServerProcess:
    """`chathistory.server.run` (uvicorn, one process) over ``store_url`` on a
    free loopback port, without API keys (tenant ``default``, loopback only)."""

    def __init__(self, store_url: str, workdir: Path, port: int | None = None) -> None:
        self.store_url = store_url
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        assets = workdir / "assets"
        script = ("from chathistory.server import run; "
                  f"run({store_url!r}, '127.0.0.1', {self.port}, {str(assets)!r}, "
                  "log_level='warning', access_log=False)")
        self.proc = subprocess.Popen([sys.executable, "-c", script], env=child_env(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)
        self.started = time.monotonic()

    def wait_ready(self, timeout: float = 60.0) -> ServerProcess:
        wait_until(lambda: httpx.get(self.url + "/readyz", timeout=2).status_code == 200,
                   f"chathistory server on {self.port}", timeout, self.proc)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        kill9(self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                kill9(self.proc)


class RedisServer:
    """A private redis-server on a free loopback port, its files in ``workdir``."""

    def __init__(self, workdir: Path, *options: str) -> None:
        if REDIS_SERVER is None or REDIS_CLI is None:
            raise RuntimeError("redis-server / redis-cli not installed")
        self.workdir = workdir
        self.options = options
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.workdir), "--save", "", "--logfile", "redis.log", *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.starts += 1
        wait_until(lambda: self.cli("ping").strip() == "PONG", f"redis-server on {self.port}",
                   alive=self.proc)
        # loading an AOF answers LOADING until done
        wait_until(lambda: self.cli("dbsize").strip().isdigit(), "redis AOF load",
                   alive=self.proc)
        return self

    def cli(self, *args: str) -> str:
        assert REDIS_CLI is not None
        return subprocess.run([REDIS_CLI, "-p", str(self.port), *args], capture_output=True,
                              text=True, timeout=30).stdout

    def log(self) -> str:
        path = self.workdir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        if self.proc is not None:
            kill9(self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.cli("shutdown", "nosave")
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                kill9(self.proc)


def postgres_reachable() -> str | None:
    """None when PostgreSQL at ``PG_URL`` answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except Exception as exc:
        return f"PostgreSQL unreachable at {PG_URL}: {exc}"


def redis_available() -> str | None:
    """None when redis-server can be started here, else why not."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        return "redis-server / redis-cli not installed"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py not installed (pip install 'chathistory[redis]')"
    return None


@contextlib.contextmanager
def scratch_schema(prefix: str) -> Iterator[str]:
    """A store URL on a fresh PostgreSQL schema, dropped afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{separator}schema={schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
