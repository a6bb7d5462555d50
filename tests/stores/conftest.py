"""The ``store`` fixture: every backend through one conformance suite (the backends
are ``storekit.BACKENDS``).

Server backends (PostgreSQL, Redis) skip with the reason when their service is
unreachable, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storekit import BACKENDS

from chathistory.stores import BaseStore


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    s = BACKENDS[request.param](tmp_path)
    try:
        yield s
    finally:
        s.close()
