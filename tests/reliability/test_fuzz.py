"""Fuzzing and bad input, short: schemathesis over every operation of the OpenAPI
document with a few examples each, the hand-written hostile requests, and the
checks themselves, which must catch a server error and a partial write."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("schemathesis")

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
fuzz = importlib.import_module("reliability.fuzz")

from chathistory.errors import InvalidMessage  # noqa: E402


def test_fuzz_quick() -> None:
    results = fuzz.run(quick=True)
    assert [r.check for r in results] == ["fuzz openapi (schemathesis)",
                                          "bad input (hand-written)"]
    for result in results:
        assert result.passed, f"{result.check}: {result.detail}"
    assert results[0].tried >= 100  # every operation, a few examples each
    assert results[1].tried >= 50


def test_a_partial_write_is_caught() -> None:
    """A store that writes the valid head of a batch before refusing the rest fails."""
    with fuzz.served(limits=fuzz._LIMITS) as world:
        store = world.store
        original = store.append

        def half(session_id: str, messages: Any, **kwargs: Any) -> int:
            messages = list(messages)
            try:
                for message in messages:
                    message.validate()
            except InvalidMessage:
                original(session_id, messages[:1], tenant=kwargs["tenant"])  # the bug
                raise
            return original(session_id, messages, **kwargs)

        store.append = half  # type: ignore[method-assign]
        result = fuzz.bad_input(world, quick=True, limits=fuzz._LIMITS)
    assert not result.passed
    assert "the store changed" in result.detail


def test_a_server_error_is_caught() -> None:
    """A route that answers 500 fails the schemathesis check."""
    with fuzz.served(limits=fuzz._LIMITS) as world:

        def broken(session_id: str, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        world.store.lineage = broken  # type: ignore[method-assign]
        result = fuzz.fuzz_openapi(world, quick=True)
    assert not result.passed
    assert "not_a_server_error on GET /v1/sessions/{session_id}/lineage" in result.detail
