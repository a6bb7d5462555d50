"""The viewer's site and a page of it in the browser, for the viewer's tests (a
module of its own: test modules importing ``conftest`` would find another
directory's, depending on the order pytest collects them in)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from seed import Seeded, wait_until

from chathistory.stores.sqlite import SQLiteStore

SCREENSHOTS = Path(os.environ.get("CHATHISTORY_SCREENSHOTS",
                                  Path(__file__).parent / "screenshots"))


class Site:
    def __init__(self, url: str, seeded: Seeded, store: SQLiteStore) -> None:
        self.url, self.seeded, self.store = url, seeded, store

    def key(self, tenant: str = "acme") -> str:
        return self.seeded.keys[tenant]


class Page:
    """A page of the viewer at ``url``, with ``key`` (None: none), collecting script
    errors."""

    def __init__(self, browser: Any, url: str, key: str | None, width: int,
                 height: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        if key is not None:
            self.context.add_init_script(f"sessionStorage.setItem('chathistory.key', {key!r})")
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.url = url

    def open(self, hash_path: str = "#/") -> Any:
        self.page.goto(f"{self.url}/{hash_path}")
        return self.page

    def shot(self, name: str, full_page: bool = True) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


def api_paths(page: Any) -> list[str]:
    """The API requests the page makes from now on (paths, in order)."""
    paths: list[str] = []

    def seen(request: Any) -> None:
        path = urlsplit(request.url).path
        if path.startswith("/v1/"):
            paths.append(path)

    page.on("request", seen)
    return paths


def settled(page: Any, rows: str, count: int, busy: str) -> str:
    """Wait for ``count`` elements matching ``rows`` and a status line that no longer
    starts with ``busy``; the status line's text."""
    wait_until(page, "([rows, n, busy]) => document.querySelectorAll(rows).length === n"
               " && !document.querySelector('.list-status').textContent.startsWith(busy)",
               arg=[rows, count, busy])
    text: str = page.locator(".list-status").inner_text()
    return text
