"""The command line: help for every command, and each command's documented example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chathistory import History, Message
from chathistory.cli import build_parser, main

ROOT = Path(__file__).parent.parent


def subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[arg-type]


def test_console_script_help() -> None:
    out = subprocess.run([sys.executable, "-m", "chathistory", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "chathistory keeps the conversation history" in out


@pytest.mark.parametrize("command", subcommands())
def test_every_command_has_help_and_a_documented_example(command: str,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    assert "example" in help_text
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert f"chathistory {command}" in docs, f"docs/cli.md has no example of `{command}`"


def test_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(History([Message.user("hello world"), Message.assistant("hi")]).to_json())
    assert main(["count", str(path)]) == 0
    assert capsys.readouterr().out.startswith("2 messages, ")
    path.write_text("{not json")
    assert main(["count", str(path)]) == 2
    assert "invalid JSON" in capsys.readouterr().err
