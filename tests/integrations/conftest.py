"""The ``store`` fixture for the framework adapters: the reference store and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
