"""What the service tests share: a real uvicorn server on a loopback port (in a
thread of the test process), servers over real stores with keys of two tenants,
and message builders. (A module of its own: test modules importing ``conftest``
would find another directory's.)"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from chathistory import Message
from chathistory.server import auth
from chathistory.server.app import create_app
from chathistory.server.connections import ConnectionLimits, server_options
from chathistory.stores import BaseStore, MemoryStore


class LiveServer:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) until ``stop()``, with
    the protocol ``chathistory serve`` uses (``server.connections``) under
    ``connections`` (default: its defaults)."""

    def __init__(self, app: Any, *, limit_concurrency: int | None = None,
                 connections: ConnectionLimits | None = None) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                limit_concurrency=limit_concurrency,
                                **server_options(connections or ConnectionLimits()))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@contextlib.contextmanager
def serve_process(*options: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``chathistory serve OPTIONS`` in a process of its own on a free loopback port
    (open mode unless the store holds keys) until the block ends; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    src = str(Path(__file__).resolve().parents[2] / "src")
    child = {**os.environ, **(env or {})}
    child["PYTHONPATH"] = os.pathsep.join(p for p in (src, child.get("PYTHONPATH")) if p)
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "chathistory", "serve", "--port", str(port),
         "--log-level", "warning", *options],
        env=child, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"chathistory serve exited with {proc.returncode}: "
                                   f"{log.read().decode(errors='replace')[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("chathistory serve did not start within 60 s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


IN_CI = os.environ.get("CI", "").lower() == "true"
PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
KEY_CACHE_SECONDS = 0.2


REDIS_URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")


def make_store(kind: str, tmp: Path) -> BaseStore:
    """A store of ``kind`` (memory, sqlite, postgres, redis) for a server; a server
    backend that is unreachable skips the test visibly, and fails it under CI=true."""
    if kind == "memory":
        return MemoryStore(counter="approx")
    if kind == "sqlite":
        from chathistory.stores.sqlite import SQLiteStore

        return SQLiteStore(tmp / "server.db", counter="approx")
    name = "Redis" if kind == "redis" else "PostgreSQL"
    try:
        if kind == "redis":
            from chathistory.stores.redis import RedisStore

            return RedisStore(REDIS_URL, counter="approx", prefix=f"srv{uuid.uuid4().hex[:12]}",
                              flush_prefix_on_close=True)
        from chathistory.stores.postgres import PostgresStore

        return PostgresStore(PG_URL, counter="approx", schema=f"srv_{uuid.uuid4().hex[:12]}",
                             drop_schema_on_close=True)
    except ImportError:
        raise
    except Exception as exc:
        message = f"{name} unreachable: {exc}"
        if IN_CI:
            pytest.fail(f"{message} (CI=true: server backends must be tested)")
        pytest.skip(message)
        raise


@dataclass
class Served:
    """A running server and what tests need of it."""

    kind: str
    server: LiveServer
    store: BaseStore
    asset_dir: Path
    keys: dict[str, str]  # tenant -> secret
    key_ids: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, tenant: str | None = "A", **headers: str) -> httpx.Client:
        if tenant is not None:
            headers["Authorization"] = f"Bearer {self.keys[tenant]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def new_session(self, client: httpx.Client, **body: Any) -> str:
        sid = body.pop("id", None) or f"s-{uuid.uuid4().hex[:12]}"
        response = client.post("/v1/sessions", json={"id": sid, **body})
        assert response.status_code == 201, response.text
        return sid


def serve(kind: str, tmp: Path, **options: Any) -> Served:
    store = make_store(kind, tmp)
    keys: dict[str, str] = {}
    key_ids: dict[str, str] = {}
    for tenant in ("A", "B"):
        key_ids[tenant], keys[tenant] = auth.create_key(store, tenant, f"key of {tenant}")
    options.setdefault("keys_required", True)
    options.setdefault("key_cache_seconds", KEY_CACHE_SECONDS)
    app = create_app(store, asset_dir=tmp / "assets", **options)
    return Served(kind, LiveServer(app).start(), store, tmp / "assets", keys, key_ids)


EVERY_BACKEND = ["memory", "sqlite", "postgres", "redis"]


def serving(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Served]:
    """The body of a fixture parametrized by backend kind: a server over a store of
    ``request.param`` (``serve``), stopped and closed after."""
    it = serve(request.param, tmp_path_factory.mktemp(f"served-{request.param}"))
    yield it
    it.server.stop()
    it.store.close()


def keyed_page_client(tmp: Path) -> Any:
    """A Starlette ``TestClient`` of an app whose store holds a key (keys required):
    the API needs one, the pages (the viewer, /docs) must be served without."""
    from starlette.testclient import TestClient

    store = MemoryStore(counter="approx")
    auth.create_key(store, "t", "a key exists: the API needs it, the page does not")
    return TestClient(create_app(store, asset_dir=tmp / "assets", keys_required=True))


def messages(*texts: str) -> list[dict[str, Any]]:
    """User/assistant turns as API dicts."""
    return [(Message.user if i % 2 == 0 else Message.assistant)(t).to_dict()
            for i, t in enumerate(texts)]


def tool_turn(i: int) -> list[dict[str, Any]]:
    return [m.to_dict() for m in (
        Message.user(f"q{i}"),
        Message.assistant("", [{"id": f"c{i}", "name": "f", "arguments": {"i": i}}]),
        Message.tool_result(f"c{i}", f"r{i}"),
        Message.assistant(f"a{i}"),
    )]
