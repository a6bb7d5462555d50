"""Hostile, short: every attack of `reliability/hostile.py` on a real server while
another tenant measures it (issue 17). `python -m reliability --only hostile` runs
the longer version. Attacks that need root (mounts) or a database binary skip with
the reason, except under `CI=true`, where a skipped attack is a failure.

The harness's time bounds (the other tenant's p99 under 50 ms...) are its verdict,
measured on a machine doing nothing else; here they fail an attack only when missed
`common.GENEROUS` times over (a request held up behind another tenant's work, a
hang), since a test runs on machines at load 10-12 (issue 43). What does not depend
on the machine's speed fails at once: the other tenant served, nothing lost."""

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
UNBROKEN = ("hostile: 8 MiB without a space", "sqlite")


def _judge(results: list[Any]) -> None:
    skipped = [r for r in results if r.informational]
    failed = [r for r in results if not r.informational and not r.held]
    for r in results:  # the figures, and the harness's bounds missed on this machine
        print(f"{r.check} [{r.target}]: {r.detail}")
    assert not failed, "\n".join(f"{r.check} [{r.target}]: {r.detail}" for r in failed)
    if skipped:
        reasons = "; ".join(f"{r.check} [{r.target}]: {r.detail}" for r in skipped)
        if IN_CI:
            pytest.fail(f"attacks skipped under CI=true: {reasons}")
        pytest.skip(reasons)


def test_every_attack_leaves_the_other_tenant_served() -> None:
    results = hostile.run(quick=True, skip={UNBROKEN})
    assert {r.check for r in results} >= {
        "hostile: trickling imports", "hostile: 9 MB appends", "hostile: search scans",
        "hostile: amplification, counter names",
        "hostile: store down", "hostile: disk full, unwritable", "hostile: stalled disk"}
    _judge(results)


def test_a_long_text_without_a_space_does_not_queue_the_other_tenants_appends() -> None:
    """Issue 43, item 10: one tenant posts 8 MiB of ``x`` back to back (two clients);
    the other tenant's 300 KB appends (counted in the same counting process) are all
    answered and stored, none waiting ``GENEROUS`` times the harness's bound (they
    waited 10-22 s, queued behind each whole count)."""
    results = hostile.run(quick=True, only={UNBROKEN})
    assert [(r.check, r.target) for r in results] == [UNBROKEN]
    _judge(results)
