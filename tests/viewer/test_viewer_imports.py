"""The issue's "done when": a person imports a ChatGPT export or a ShareGPT file
with the CLI, opens the viewer, and reads every conversation, on a desktop and
a phone-sized window."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from seed import wait_until
from serverkit import LiveServer

from chathistory.server.app import create_app
from chathistory.stores.sqlite import SQLiteStore

FIXTURES = Path(__file__).parent.parent / "cli" / "fixtures"
WAIT = 10_000


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SQLiteStore]]:
    folder = tmp_path_factory.mktemp("imported")
    url = f"sqlite:///{folder / 'imported.db'}"
    for name in ("chatgpt_conversations.json", "sharegpt_truncated.json"):
        done = subprocess.run([sys.executable, "-m", "chathistory", "import",
                               str(FIXTURES / name), "--store", url, "--json"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["sessions_created"] > 0
    store = SQLiteStore(folder / "imported.db")
    # no key exists: the server is in open mode and answers loopback clients
    server = LiveServer(create_app(store, asset_dir=folder / "assets")).start()
    try:
        yield server.url, store
    finally:
        server.stop()
        store.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_every_imported_conversation_reads(browser: Any, imported: Any, width: int) -> None:
    url, store = imported
    sessions = store.list_sessions(limit=1000).items
    assert sessions
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{url}/#/")
        page.wait_for_selector(".session-row", timeout=WAIT)
        wait_until(page, "() => !document.querySelector('.list-status')"
                   ".textContent.includes('Loading')")
        assert page.locator(".session-row").count() == len(sessions)
        for session in sessions:
            page.goto(f"{url}/#/s/{session.id}")
            page.wait_for_selector(".msg", timeout=WAIT)
            wait_until(page, "() => document.querySelector('.list-status')"
                       ".textContent === ''")
            shown = page.locator(".msg").count()
            live = len(store.range(session.id, include_marked=True))
            assert shown == live, session.id
            title = session.metadata.get("title")
            if title:
                assert page.locator("h1.page-title").inner_text() == title
            assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth"), \
                f"{session.id} scrolls sideways at {width}px"
        assert not errors, errors
    finally:
        context.close()
