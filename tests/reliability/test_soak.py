"""Soak, short: seconds of paced load on a server over SQLite (`python -m
reliability --only soak` runs 600 s per backend), and the verdict's arithmetic."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
soak = importlib.import_module("reliability.soak")


def test_a_short_soak_holds_memory_and_latency() -> None:
    """Every request answered, memory flat; the latency's verdict (its p99 at the end
    within 3x its p99 after warm-up) holds here within ``common.GENEROUS`` times (a
    test runs on machines at load 10-12, whose load moves a p99 of a few seconds)."""
    results = soak.run(quick=True, seconds=6, rate=60)
    assert [r.check for r in results] == ["soak: requests", "soak: memory", "soak: latency"]
    for r in results:
        print(f"{r.check}: {r.detail}")
        assert r.held, r


def samples(rss: list[int], p99: float = 0.005, last_p99: float = 0.005) -> list[object]:
    out = []
    for i, r in enumerate(rss):
        latency = last_p99 if i >= len(rss) - 2 else p99
        out.append(soak.Sample(i + 1.0, r, 100, 0, latency, latency, [latency] * 100))
    return out


def test_the_verdict_fails_growing_memory_and_latency() -> None:
    flat = soak.judge(samples([100 << 20] * 10), "t", 10)
    assert all(r.passed for r in flat)
    leaking = soak.judge(samples([(100 + 10 * i) << 20 for i in range(10)]), "t", 10)
    assert not leaking[1].passed and leaking[2].passed
    slower = soak.judge(samples([100 << 20] * 10, last_p99=0.2), "t", 10)
    assert slower[1].passed and not slower[2].passed and slower[2].held
    hung = soak.judge(samples([100 << 20] * 10, last_p99=5.0), "t", 10)
    assert not hung[2].passed and not hung[2].held
