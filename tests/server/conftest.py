"""Servers for the service tests: real uvicorn on loopback ports over real stores
(MemoryStore, a SQLite file, PostgreSQL when reachable), with API keys of two
tenants, ``A`` and ``B``.

One server per backend serves the whole test session; tests keep apart by
creating their own sessions (random ids).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from serverkit import Served, serve, serving

served = pytest.fixture(scope="session", params=["memory", "sqlite", "postgres"],
                        name="served")(serving)


@pytest.fixture(scope="session")
def served_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server over SQLite, for tests that need not run on every backend."""
    it = serve("sqlite", tmp_path_factory.mktemp("sqlite-one"))
    yield it
    it.server.stop()
    it.store.close()


@pytest.fixture
def a(served: Served) -> Iterator[httpx.Client]:
    with served.client("A") as client:
        yield client


@pytest.fixture
def b(served: Served) -> Iterator[httpx.Client]:
    with served.client("B") as client:
        yield client
