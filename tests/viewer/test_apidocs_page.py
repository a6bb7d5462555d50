"""``/docs`` in headless Chromium: Swagger UI renders every operation of the API
from this server's document, under the page's Content Security Policy (a refused
script or style would be a console error) and without one request to another
origin; and "Try it out" calls the API with the key given to "Authorize"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pages import Site

from chathistory.server.routes import app_routes


class DocsPage:
    """``/docs`` in a fresh browser context, with every console message and request
    it makes."""

    def __init__(self, browser: Any, site: Site) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda exc: self.console.append(f"pageerror: {exc}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.site = site
        self.page.goto(f"{site.url}/docs")
        self.page.wait_for_selector(".opblock", timeout=20_000)

    def operation(self, tag: str, operation_id: str) -> Any:
        block = self.page.locator(f"#operations-{tag}-{operation_id}")
        block.locator(".opblock-summary").click()
        block.locator("button.try-out__btn").click()
        return block

    def execute(self, block: Any) -> tuple[str, str]:
        """Press Execute; the status and body the page shows."""
        block.locator("button.execute").click()
        row = block.locator(".live-responses-table tbody tr.response").first
        row.wait_for(timeout=10_000)
        status = row.locator(".response-col_status").inner_text().strip()
        return status, row.locator(".response-col_description").inner_text()

    def authorize(self, key: str) -> None:
        self.page.click("button.authorize")
        bearer = self.page.locator(".modal-ux .auth-container").first
        assert "bearer" in bearer.inner_text()
        bearer.locator("input").fill(key)
        bearer.locator("button.authorize").click()
        self.page.locator(".modal-ux button.btn-done").first.click()


@pytest.fixture
def docs(browser: Any, site: Site) -> Iterator[DocsPage]:
    page = DocsPage(browser, site)
    yield page
    page.context.close()


def test_every_operation_is_on_the_page_and_nothing_is_refused(docs: DocsPage) -> None:
    page = docs.page
    routes = app_routes()  # ROUTES and the Conversations API's
    assert page.locator(".opblock").count() == len(routes)
    for route in routes:  # (Swagger UI writes a space of a tag as _ in its ids)
        tag = route.tag.replace(" ", "_")
        block = page.locator(f"#operations-{tag}-{route.handler.__name__}")
        assert block.count() == 1, (route.method, route.path)
        assert route.path in block.locator(".opblock-summary-path").inner_text()
    tags = [t.inner_text().split("\n")[0] for t in page.locator(".opblock-tag-section h3").all()]
    assert tags == ["sessions", "search", "assets", "data", "system", "OpenAI Conversations"]
    assert docs.console == []  # a CSP refusal or a script error is logged here
    foreign = [url for url in docs.requests if not url.startswith(docs.site.url + "/")]
    assert foreign == []
    assert f"{docs.site.url}/openapi.json" in docs.requests


def test_try_it_out_calls_the_api_with_the_key(docs: DocsPage) -> None:
    me = docs.operation("data", "me")
    status, body = docs.execute(me)
    assert status == "401" and "unauthorized" in body  # no key yet
    docs.authorize(docs.site.key("acme"))
    status, body = docs.execute(me)
    assert status == "200" and '"tenant": "acme"' in body
    # a write, its body pre-filled from the document's example
    create = docs.operation("sessions", "create_session")
    assert '"id": "demo"' in create.locator("textarea.body-param__text").input_value()
    status, body = docs.execute(create)
    assert status == "201" and '"id": "demo"' in body
    assert docs.site.store.get_session("demo", tenant="acme").user == "ana"
    # the browser logs the refused call; nothing else
    assert docs.console == ["error: Failed to load resource: the server responded with a "
                            "status of 401 (Unauthorized)"]
