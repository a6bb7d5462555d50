"""Hostile, short: every attack of `reliability/hostile.py` on a real server while
another tenant measures it (issue 17). `python -m reliability --only hostile` runs
the longer version. Attacks that need root (mounts) or a database binary skip with
the reason, except under `CI=true`, where a skipped attack is a failure."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
hostile = importlib.import_module("reliability.hostile")

IN_CI = os.environ.get("CI", "").lower() == "true"


def _slow_only(result: Any) -> bool:
    """Whether the probe's p99 is all that failed an attack (no failed request, no
    other problem)."""
    problems = result.detail.split("\n", 1)[1].strip().split("; ") if "\n" in result.detail else []
    return bool(problems) and all(p.startswith("probe p99 ") for p in problems)


def test_every_attack_leaves_the_other_tenant_served() -> None:
    """An attack whose only fault is the probe's p99 over the limit is measured once
    more, on a new server: the quick version's p99 is the second-slowest of about 110
    reads, and one pause of this shared 2-core machine (other processes of the suite
    still winding down) can hold two of them; a service that a tenant stalls is slow in
    both. Every other fault fails at once."""
    results = hostile.run(quick=True)
    assert {r.check for r in results} >= {
        "hostile: trickling imports", "hostile: 9 MB appends", "hostile: search scans",
        "hostile: amplification, counter names",
        "hostile: store down", "hostile: disk full, unwritable", "hostile: stalled disk"}
    skipped = [r for r in results if r.informational]
    failed = [r for r in results if not r.informational and not r.passed]
    if failed and all(_slow_only(r) for r in failed):
        again = {(r.check, r.target): r for r in hostile.run(
            quick=True, only={(r.check, r.target) for r in failed})}
        failed = [again[(r.check, r.target)] for r in failed
                  if not again[(r.check, r.target)].passed]
    assert not failed, "\n".join(f"{r.check} [{r.target}]: {r.detail}" for r in failed)
    if skipped:
        reasons = "; ".join(f"{r.check} [{r.target}]: {r.detail}" for r in skipped)
        if IN_CI:
            pytest.fail(f"attacks skipped under CI=true: {reasons}")
        pytest.skip(reasons)
