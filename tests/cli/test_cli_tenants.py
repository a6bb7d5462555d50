"""Which tenant the CLI writes to and which keys see it (issue 19, item 1): ``keys
create`` says that servers now require keys and where existing data lives, with the
command for a key of that tenant; ``import`` says which tenant it wrote to. Checked
against a real server on the same store: the commands the notes give work."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clikit import FIXTURES, Run

pytest.importorskip("uvicorn")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from serverkit import LiveServer

from chathistory.server.app import create_app
from chathistory.stores.sqlite import SQLiteStore

CHATGPT = FIXTURES / "chatgpt_conversations.json"  # 3 sessions and 1 fork
OPENAI = FIXTURES / "openai_tools.jsonl"  # 3 sessions


def secret_of(result_out: str) -> str:
    return result_out.strip().splitlines()[-1]


def test_keys_create_says_keys_are_now_required_and_where_data_lives(cli: Run,
                                                                     store_url: str) -> None:
    assert cli("import", CHATGPT, "--store", store_url).code == 0
    first = cli("keys", "create", "acme", "--store", store_url)
    assert first.code == 0, first.err
    assert secret_of(first.out).startswith("chk_")  # stdout: the key and its secret only
    assert "note:" not in first.out
    assert "first key" in first.err and "requires an API key for every request" in first.err
    assert "this key sees tenant 'acme': 0 sessions so far" in first.err
    assert f"chathistory import FILE --tenant acme --store {store_url}" in first.err
    assert ("tenant 'default' holds 4 sessions that this key cannot see; a key for them: "
            f"chathistory keys create default --store {store_url}") in first.err

    assert cli("import", OPENAI, "--tenant", "acme", "--store", store_url).code == 0
    second = cli("keys", "create", "acme", "--json", "--store", store_url)
    assert second.json()["tenant"] == "acme"  # stdout stays JSON
    assert "first key" not in second.err  # keys were already required
    assert "this key sees tenant 'acme': 3 sessions" in second.err
    assert "tenant 'default' holds 4 sessions" in second.err

    of_default = cli("keys", "create", "default", "--store", store_url)
    assert "this key sees tenant 'default': 4 sessions" in of_default.err
    assert "tenant 'acme' holds 3 sessions that this key cannot see" in of_default.err
    assert "keys create acme" in of_default.err


def test_keys_create_names_no_other_tenant_when_nothing_is_hidden(cli: Run,
                                                                  store_url: str) -> None:
    result = cli("keys", "create", "acme", "--store", store_url)
    assert "first key" in result.err
    assert "cannot see" not in result.err


def test_import_says_which_tenant_it_wrote_to(cli: Run, store_url: str) -> None:
    plain = cli("import", OPENAI, "--store", store_url)
    assert "(openai) into tenant 'default': 4 conversations read" in plain.out
    assert plain.err == ""  # open mode shows tenant 'default': nothing to add

    elsewhere = cli("import", OPENAI, "--tenant", "acme", "--store", store_url, "--json")
    assert elsewhere.json()["tenant"] == "acme"
    assert elsewhere.json()["sessions_created"] == 3
    assert ("a server without keys shows tenant 'default' only: to see tenant 'acme' in "
            f"the viewer, make a key of it: chathistory keys create acme --store {store_url}"
            ) in elsewhere.err
    listed = cli("sessions", "--json", "--tenant", "acme", "--store", store_url).json()
    assert len(listed["items"]) == 3

    assert cli("keys", "create", "acme", "--store", store_url).code == 0
    hidden = cli("import", CHATGPT, "--store", store_url)
    assert "into tenant 'default'" in hidden.out
    assert ("no key of tenant 'default' exists: to see these sessions in the viewer, make "
            f"one: chathistory keys create default --store {store_url}") in hidden.err
    seen = cli("import", CHATGPT, "--tenant", "acme", "--store", store_url)
    assert "into tenant 'acme'" in seen.out and "note:" not in seen.err


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, LiveServer]]:
    """A server in open mode over a SQLite file, and that file's URL for the CLI."""
    path = tmp_path / "served.db"
    store = SQLiteStore(path, counter="approx")
    server = LiveServer(create_app(store, asset_dir=tmp_path / "assets")).start()
    try:
        yield f"sqlite:///{path}", server
    finally:
        server.stop()
        store.close()


def test_the_notes_commands_work_on_a_running_server(cli: Run,
                                                     served: tuple[str, LiveServer]) -> None:
    url, server = served
    assert cli("import", CHATGPT, "--store", url).code == 0
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert len(client.get("/v1/sessions").json()["items"]) == 4  # open mode: 'default'
        created = cli("keys", "create", "acme", "--store", url)
        assert "every server on this store (a running one too)" in created.err
        deadline = time.monotonic() + 10
        while client.get("/v1/sessions").status_code != 401:  # rechecked once a second
            assert time.monotonic() < deadline, "the running server still serves open"
            time.sleep(0.1)
        acme = {"Authorization": f"Bearer {secret_of(created.out)}"}
        assert client.get("/v1/sessions", headers=acme).json()["items"] == []
        # the note's command makes the key that sees the imported sessions
        assert f"chathistory keys create default --store {url}" in created.err
        made = cli("keys", "create", "default", "--store", url)
        default = {"Authorization": f"Bearer {secret_of(made.out)}"}
        assert len(client.get("/v1/sessions", headers=default).json()["items"]) == 4
