"""Running the ``chathistory`` command in-process against temporary SQLite stores."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clikit import Result, Run

from chathistory.cli import main


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``cli("sessions", "--json")``: the exit status and what was printed."""
    monkeypatch.delenv("CHATHISTORY_STORE", raising=False)

    def run(*args: str | Path) -> Result:
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def other_store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'other.db'}"


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[Any]:
    """A live server over SQLite that requires keys, with keys of tenants A and B
    (``serverkit.Served``; skipped without the server extra)."""
    pytest.importorskip("uvicorn")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
    from serverkit import serve

    server = serve("sqlite", tmp_path)
    try:
        yield server
    finally:
        server.server.stop()
        server.store.close()
