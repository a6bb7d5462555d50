"""Concurrency, short: processes appending to one PostgreSQL session through two
servers and through the library, with retries and If-Match conflicts
(`python -m reliability --only concurrency` runs 16 processes)."""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
concurrency = importlib.import_module("reliability.concurrency")
procs = importlib.import_module("reliability.procs")

IN_CI = os.environ.get("CI", "").lower() == "true"


def test_one_session_many_processes_no_duplicates_conflicts_reported() -> None:
    reason = procs.postgres_reachable()
    if reason:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: server backends must be tested)")
        pytest.skip(reason)
    results = concurrency.run(processes=4, batches=8)
    assert len(results) == 2
    for r in results:
        assert r.passed, r
        # the check saw conflicts (stale versions are sent on purpose) and stored none
        conflicts = re.search(r"(\d+) conflicts reported \((\d+) stale", r.detail)
        assert conflicts and int(conflicts[2]) > 0, r.detail
        assert "none stored" in r.detail
