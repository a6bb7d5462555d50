"""Crash safety, short: a few SIGKILLs of the library writer and of the server per
backend (`python -m reliability --only crash` runs 60 per backend), and the
verifier itself, which must catch what it is there to catch."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from chathistory import Message
from chathistory.stores import MemoryStore

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
crash = importlib.import_module("reliability.crash")
verify = importlib.import_module("reliability.verify")

IN_CI = os.environ.get("CI", "").lower() == "true"


def need(backend: str) -> None:
    reason = crash.skip_reason(backend)
    if reason:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: server backends must be tested)")
        pytest.skip(reason)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"])
def test_acknowledged_appends_survive_sigkill(backend: str) -> None:
    need(backend)
    results = crash.run(kills=3, backends=(backend,), policies=())
    assert [r.check for r in results] == ["crash: kills", "crash: acked writes"] * 2
    for r in results:
        assert r.passed, r
    assert sum(r.tried for r in results if r.check == "crash: kills") == 3


def test_the_verifier_catches_lost_split_refused_and_misversioned_appends() -> None:
    store = MemoryStore(counter="approx")
    store.create_session("s", tenant=verify.TENANT)
    first = [Message.user("a"), Message.assistant("b")]
    second = [Message.user("c")]
    store.append("s", first, tenant=verify.TENANT)
    store.append("s", second, tenant=verify.TENANT)
    honest = [verify.Batch("s", tuple(m.id for m in first), acked=1),
              verify.Batch("s", tuple(m.id for m in second), acked=2)]
    assert verify.check_session(store, "s", honest).problems == []

    lost = verify.Batch("s", (Message.user("never stored").id,), acked=3)
    assert any("lost" in p for p in verify.check_session(store, "s", [*honest, lost]).problems)
    half = verify.Batch("s", (*honest[1].ids, Message.user("x").id), acked=2)
    assert any("half-written" in p
               for p in verify.check_session(store, "s", [honest[0], half]).problems)
    refused = verify.Batch("s", honest[1].ids, rejected=True)
    assert any("refused" in p
               for p in verify.check_session(store, "s", [honest[0], refused]).problems)
    wrong = verify.Batch("s", honest[1].ids, acked=2, answers=[1])
    assert any("answered version 1" in p
               for p in verify.check_session(store, "s", [honest[0], wrong]).problems)
    unknown = verify.check_session(store, "s", [honest[0]]).problems
    assert any("never sent" in p for p in unknown)
    swapped = verify.check_session(store, "s", honest, chains=[[1, 0]]).problems
    assert any("out of order" in p for p in swapped)
    assert verify.check_listing(store, {"s"}) == []
    assert "misses ['t']" in verify.check_listing(store, {"s", "t"})[0]


def test_the_writer_log_survives_a_kill_inside_a_write(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    m = Message.user("x")
    log.write_text(f'P {{"s": "s0", "m": [{{"id": "{m.id}"}}]}}\nA 1\nP {{"s": "s0", "m"')
    batches, retries = crash.read_log(log)
    assert [(b.ids, b.acked) for b in batches] == [((m.id,), 1)] and retries == 0
