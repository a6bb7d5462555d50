"""Output: rich tables and a progress bar on a terminal, plain text when piped
and when rich is not installed (it is an extra, not a core dependency)."""

from __future__ import annotations

import io
import sys

import pytest
from clikit import FIXTURES

from chathistory.cli import _output
from chathistory.cli._output import Column, Progress, print_table


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


COLUMNS = [Column("id"), Column("title", wrap=True), Column("messages", numeric=True)]
ROWS = [["s1", "A [bold]title[/bold] with markup-like text", "1,234"], ["s2", "short", "7"]]


def test_plain_when_not_a_terminal() -> None:
    out = io.StringIO()
    print_table(COLUMNS, ROWS, caption="2 sessions", stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["id", "title", "messages"]
    assert lines[1].startswith("s1  A [bold]title[/bold] with markup-like text")
    assert lines[1].endswith("1,234") and lines[2].endswith("    7")  # numbers right-aligned
    assert lines[-1] == "2 sessions"


def test_rich_table_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    monkeypatch.delenv("CHATHISTORY_PLAIN", raising=False)
    monkeypatch.setenv("COLUMNS", "60")
    out = Terminal()
    print_table(COLUMNS, ROWS, caption="2 sessions", stream=out)
    text = out.getvalue()
    assert "─" in text  # rich's header rule
    assert "[bold]" in text  # user text is never read as markup
    assert all(len(line) <= 60 for line in _strip_ansi(text).splitlines())  # fits the width


def test_narrow_terminal_drops_optional_columns_not_ids(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    pytest.importorskip("rich")
    monkeypatch.delenv("CHATHISTORY_PLAIN", raising=False)
    session_id = "7236cb51-aff8-5edf-9d66-dad6a1b98f42"
    columns = [Column("id"), Column("title", wrap=True), Column("messages", numeric=True),
               Column("updated", optional=True), Column("fork of", optional=True)]
    rows = [[session_id, "Plotting sine", "6", "2026-11-23 10:43", session_id]]
    for width, headers in ((80, ["id", "title", "messages"]),
                           (140, ["id", "title", "messages", "updated", "fork", "of"])):
        monkeypatch.setenv("COLUMNS", str(width))
        out = Terminal()
        print_table(columns, rows, stream=out)
        lines = [line for line in _strip_ansi(out.getvalue()).splitlines() if line.strip()]
        assert lines[0].split() == headers
        assert session_id in lines[2]  # whole, never cut with an ellipsis


def test_plain_on_a_terminal_without_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # `import rich...` raises ImportError
    monkeypatch.setitem(sys.modules, "rich.console", None)
    assert _output.console_for(Terminal()) is None
    out = Terminal()
    print_table(COLUMNS, ROWS, stream=out)
    assert out.getvalue().splitlines()[0].split() == ["id", "title", "messages"]
    with Progress("x", stream=Terminal()).shown() as progress:
        progress.update(1, 2, "note")  # shows nothing, fails nothing


def test_plain_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATHISTORY_PLAIN", "1")
    assert _output.console_for(Terminal()) is None


def test_import_shows_progress_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                             store_url: str) -> None:
    pytest.importorskip("rich")
    from chathistory.cli import main

    monkeypatch.delenv("CHATHISTORY_PLAIN", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["import", str(FIXTURES / "sharegpt_truncated.json"), "--store",
                 store_url]) == 0
    shown = _strip_ansi(err.getvalue())
    assert "importing" in shown and "5 conversations" in shown and "100%" in shown


def test_cli_works_without_rich(monkeypatch: pytest.MonkeyPatch, store_url: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from chathistory.cli import main

    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["import", str(FIXTURES / "openai_tools.jsonl"), "--store", store_url]) == 0
    assert main(["sessions", "--store", store_url]) == 0
    assert "3 sessions" in capsys.readouterr().out


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
