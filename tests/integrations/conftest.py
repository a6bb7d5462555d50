"""Fixtures for the framework adapters: ``store`` (the reference store and SQLite) and
``backend`` (every store backend, for the oracle tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_backends import BACKENDS

from chathistory.stores import BaseStore, MemoryStore
from chathistory.stores.sqlite import SQLiteStore


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    made: BaseStore = (MemoryStore(counter="approx") if request.param == "memory"
                       else SQLiteStore(tmp_path / "integrations.db", counter="approx"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    made = BACKENDS[request.param](tmp_path)
    try:
        yield made
    finally:
        made.close()
