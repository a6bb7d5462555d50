"""The viewer's browser tests: a real server on loopback over a seeded SQLite
file, and Debian's headless Chromium driven by Playwright (no browser download;
without Chromium the tests skip, except with CI=true, where that fails)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "server"))

from pages import Page, Site
from seed import plan_window, seed_store
from serverkit import LiveServer

from chathistory.server.app import create_app
from chathistory.stores.sqlite import SQLiteStore

IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = os.environ.get("CHATHISTORY_CHROMIUM", "/usr/bin/chromium")
# The flags a sandboxed, offline machine needs (no background connections).
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: the viewer must be tested in a browser)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("viewer")
    store = SQLiteStore(folder / "viewer.db", counter="o200k_base")
    seeded = seed_store(store)
    server = LiveServer(create_app(store, keys_required=True, asset_dir=folder / "assets",
                                   key_cache_seconds=0.2)).start()
    try:
        plan_window(server.url, seeded.keys["acme"])
        yield Site(server.url, seeded, store)
    finally:
        server.stop()
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        _unavailable(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
        raise
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def open_page(browser: Any, site: Site) -> Iterator[Any]:
    pages: list[Page] = []

    def make(tenant: str | None = "acme", width: int = 1280, height: int = 900) -> Page:
        page = Page(browser, site.url, None if tenant is None else site.key(tenant), width,
                    height)
        pages.append(page)
        return page

    yield make
    for page in pages:
        errors = page.errors
        page.context.close()
        assert not errors, f"script errors on the page: {errors}"
