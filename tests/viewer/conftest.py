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

from seed import Seeded, plan_window, seed_store
from serverkit import LiveServer

from chathistory.server.app import create_app
from chathistory.stores.sqlite import SQLiteStore

IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = os.environ.get("CHATHISTORY_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(os.environ.get("CHATHISTORY_SCREENSHOTS",
                                  Path(__file__).parent / "screenshots"))
# The flags a sandboxed, offline machine needs (no background connections).
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: the viewer must be tested in a browser)")
    pytest.skip(reason)


class Site:
    def __init__(self, url: str, seeded: Seeded, store: SQLiteStore) -> None:
        self.url, self.seeded, self.store = url, seeded, store

    def key(self, tenant: str = "acme") -> str:
        return self.seeded.keys[tenant]


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


class Page:
    """A page with the key of one tenant, collecting script errors."""

    def __init__(self, browser: Any, site: Site, tenant: str | None, width: int,
                 height: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        if tenant is not None:
            self.context.add_init_script(
                f"sessionStorage.setItem('chathistory.key', {site.key(tenant)!r})")
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.site = site

    def open(self, hash_path: str = "#/") -> Any:
        self.page.goto(f"{self.site.url}/{hash_path}")
        return self.page

    def shot(self, name: str, full_page: bool = True) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


@pytest.fixture
def open_page(browser: Any, site: Site) -> Iterator[Any]:
    pages: list[Page] = []

    def make(tenant: str | None = "acme", width: int = 1280, height: int = 900) -> Page:
        page = Page(browser, site, tenant, width, height)
        pages.append(page)
        return page

    yield make
    for page in pages:
        errors = page.errors
        page.context.close()
        assert not errors, f"script errors on the page: {errors}"
