"""``chathistory search``: hits with their session, position, role and a marked
snippet, paging by cursor, the filters, --json, errors, and the same command through
an http(s) store whose key keeps it to its tenant."""

from __future__ import annotations

import io
from typing import Any

import pytest
from clikit import Run

from chathistory import Message
from chathistory.cli import search as search_command
from chathistory.stores import open_store
from chathistory.stores.search import SearchHit


def _lines(out: str) -> list[str]:
    """The output's lines, the caption without what a store without an index adds
    (" among the newest N messages ...")."""
    lines = out.splitlines()
    return [*lines[:-1], lines[-1].split(" among the newest ")[0]]


@pytest.fixture
def filled(store_url: str) -> str:
    with open_store(store_url) as store:
        store.create_session("trip", user="ana", metadata={"kind": "travel"})
        store.append("trip", [Message.user("What is the capital of France?"),
                              Message.assistant("Paris is the capital."),
                              Message.user("And of Italy?")])
        store.create_session("work", user="bob")
        store.append("work", [Message.user("The capital budget is due")])
        store.create_session("hidden", tenant="other")
        store.append("hidden", [Message.user("capital of another tenant")], tenant="other")
    return store_url


def test_hits_show_session_position_role_and_marked_snippet(cli: Run, filled: str) -> None:
    result = cli("search", '"capital of" fran*', "--store", filled)
    assert result.code == 0, result.err
    assert _lines(result.out) == [
        "trip  #0  user", "  What is the [capital] [of] [France]?", "1 hit"]


def test_pages_by_cursor_and_filters(cli: Run, filled: str) -> None:
    first = cli("search", "capital", "--limit", "2", "--store", filled)
    assert first.code == 0, first.err
    caption = first.out.splitlines()[-1]
    assert caption.startswith("2 hits") and "; more with --cursor '" in caption
    cursor = caption.split("'")[1]
    rest = cli("search", "capital", "--limit", "2", "--cursor", cursor, "--store", filled)
    assert _lines(rest.out)[-1] == "1 hit"
    heads = [line for r in (first, rest) for line in r.out.splitlines() if "  #" in line]
    assert sorted(heads) == ["trip  #0  user", "trip  #1  assistant", "work  #0  user"]
    assert cli("search", "capital", "--user", "bob", "--store", filled).out.splitlines()[0] == (
        "work  #0  user")
    only = cli("search", "capital", "--session", "trip", "--metadata", "kind=travel",
               "--store", filled)
    assert _lines(only.out)[-1] == "2 hits"
    other = cli("search", "capital", "--tenant", "other", "--store", filled)
    assert _lines(other.out) == ["hidden  #0  user", "  [capital] of another tenant", "1 hit"]


def test_json_is_the_page(cli: Run, filled: str) -> None:
    result = cli("search", "italy", "--json", "--store", filled)
    page: dict[str, Any] = result.json()
    [hit] = page["items"]
    assert (hit["session_id"], hit["seq"], hit["message"]["role"]) == ("trip", 2, "user")
    assert hit["snippet"] == "And of Italy?" and hit["marks"] == [[7, 12]]
    assert page["next_cursor"] is None


def test_errors(cli: Run, filled: str) -> None:
    bad = cli("search", "?!", "--store", filled)
    assert bad.code == 2 and "q: a search needs at least one word" in bad.err
    missing = cli("search", "capital", "--session", "nope", "--store", filled)
    assert missing.code == 1 and "nope" in missing.err
    assert cli("search", "x", "--limit", "0", "--store", filled).code == 2


def test_marks_on_a_terminal_are_styled(monkeypatch: pytest.MonkeyPatch) -> None:
    rich_console = pytest.importorskip("rich.console")
    buffer = io.StringIO()
    console = rich_console.Console(file=buffer, force_terminal=True, color_system="standard",
                                   width=80)
    monkeypatch.setattr(search_command, "console_for", lambda stream: console)
    hit = SearchHit(session_id="s[bold]x[/bold]", seq=3, message=Message.user("a [red]b"),
                    score=1.0, snippet="find the word here", marks=[(9, 13)])
    search_command._print_hits([hit], "1 hit", buffer)
    out = buffer.getvalue()
    assert "s[bold]x[/bold]" in out  # user data is never rich markup
    assert "\x1b[" in out.split("the ")[1].split("word")[0]  # a style starts at the match
    assert "word" in out and "[word]" not in out


def test_plain_marks_are_clipped() -> None:
    assert search_command.plain_marked("abcdef", [(4, 9), (0, 2), (1, 3)]) == "[ab][c]d[ef]"


def test_through_a_server_the_key_keeps_to_its_tenant(cli: Run, keyed_server: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    served = keyed_server
    served.store.create_session("mine", tenant="A")
    served.store.append("mine", [Message.user("a kumquat for A")], tenant="A")
    monkeypatch.setenv("CHATHISTORY_API_KEY", served.keys["A"])
    found = cli("search", "kumquat", "--store", served.url)
    assert found.code == 0, found.err
    assert _lines(found.out) == ["mine  #0  user", "  a [kumquat] for A", "1 hit"]
    monkeypatch.setenv("CHATHISTORY_API_KEY", served.keys["B"])
    assert _lines(cli("search", "kumquat", "--store", served.url).out) == ["0 hits"]
    assert cli("search", "kumquat", "--tenant", "A", "--store", served.url).code == 2
