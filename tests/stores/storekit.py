"""The store backends the tests run on, one constructor each (``BACKENDS``): server
backends (PostgreSQL, Redis) skip with the reason when their service is unreachable,
except under ``CI=true``, where that is a failure. A module of its own (not conftest)
so that a test imports it by a name no other test directory's conftest shadows."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from chathistory.stores import BaseStore, MemoryStore

IN_CI = os.environ.get("CI", "").lower() == "true"
PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")


def unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} unreachable: {exc}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: server backends must be tested)")
    pytest.skip(message)


def make_memory(tmp_path: Path) -> BaseStore:
    return MemoryStore(counter="approx")


def make_sqlite(tmp_path: Path) -> BaseStore:
    from chathistory.stores.sqlite import SQLiteStore

    return SQLiteStore(tmp_path / "test.db", counter="approx")


def _server_store(what: str, build: Callable[[], BaseStore]) -> BaseStore:
    """``build()``, skipped (failed under CI) with the reason when the server is
    unreachable; a missing driver (an extra) raises."""
    try:
        return build()
    except ImportError:
        raise
    except Exception as exc:
        unavailable(what, exc)
        raise


def make_postgres(tmp_path: Path) -> BaseStore:
    def build() -> BaseStore:
        from chathistory.stores.postgres import PostgresStore

        # a schema of its own per test: tests never see each other's rows
        return PostgresStore(PG_URL, counter="approx", schema=f"t_{uuid.uuid4().hex[:12]}",
                             drop_schema_on_close=True)

    return _server_store("PostgreSQL", build)


def make_redis(tmp_path: Path) -> BaseStore:
    def build() -> BaseStore:
        from chathistory.stores.redis import RedisStore

        return RedisStore(REDIS_URL, counter="approx", prefix=f"t{uuid.uuid4().hex[:12]}",
                          flush_prefix_on_close=True)

    return _server_store("Redis", build)


BACKENDS: dict[str, Callable[[Path], BaseStore]] = {"memory": make_memory}
for name, module in (("sqlite", "sqlite"), ("postgres", "postgres"), ("redis", "redis")):
    try:
        __import__(f"chathistory.stores.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"chathistory.stores.{module}":
            continue  # the backend is not written yet
    BACKENDS[name] = {"sqlite": make_sqlite, "postgres": make_postgres,
                      "redis": make_redis}[name]
