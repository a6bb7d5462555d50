"""Front door, short: a 100 MB header and 1,100 half-open connections against a real
server limited to 1,024 open files while another tenant measures it (issue 17,
items 5 and 9). `python -m reliability --only frontdoor` runs the longer version. Its
time bounds fail a row here only when missed `common.GENEROUS` times over (a test runs
on machines at load 10-12: the probe's p99 of 50 ms came out at 64 and 104 ms there;
issue 43); what does not depend on the machine's speed fails at once."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
frontdoor = importlib.import_module("reliability.frontdoor")

IN_CI = os.environ.get("CI", "").lower() == "true"


def test_front_door_attacks_leave_the_other_tenant_served() -> None:
    results = frontdoor.run(quick=True)
    skipped = [r for r in results if r.informational]
    if skipped:
        reasons = "; ".join(r.detail for r in skipped)
        if IN_CI:
            pytest.fail(f"skipped under CI=true: {reasons}")
        pytest.skip(reasons)
    assert {r.check for r in results} == {"frontdoor: 100 MB header", "frontdoor: slowloris"}
    for r in results:  # the figures, and the harness's bounds missed on this machine
        print(f"{r.check}: {r.detail}")
    failed = [r for r in results if not r.held]
    assert not failed, "\n".join(f"{r.check}: {r.detail}" for r in failed)
