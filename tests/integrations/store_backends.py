"""The store suite's backend factories (``tests/stores/storekit.py``) for the adapters'
oracle tests: memory, SQLite, PostgreSQL and Redis, the server backends skipping when
unreachable (a failure under ``CI=true``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from chathistory.stores import BaseStore


def _load() -> dict[str, Callable[[Path], BaseStore]]:
    path = Path(__file__).resolve().parent.parent / "stores" / "storekit.py"
    spec = importlib.util.spec_from_file_location("_storekit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    backends: dict[str, Callable[[Path], BaseStore]] = module.BACKENDS
    return backends


BACKENDS = _load()
