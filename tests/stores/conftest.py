"""The ``store`` fixture: every backend through one conformance suite (the backends
are ``storekit.BACKENDS``).

Server backends (PostgreSQL, Redis) skip with the reason when their service is
unreachable, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storekit import BACKENDS, REDIS_URL, unavailable

from chathistory.stores import BaseStore


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    s = BACKENDS[request.param](tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def redis_client() -> Iterator[Any]:
    """redis-py's client of the test server (``CHATHISTORY_TEST_REDIS``)."""
    redis = pytest.importorskip("redis")
    try:
        r = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
        r.ping()
    except Exception as exc:
        unavailable("Redis", exc)
    try:
        yield r
    finally:
        r.close()
