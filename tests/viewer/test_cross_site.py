"""Open mode against a real browser (issue 17, item 7): a page of another site cannot
write through a no-cors ``fetch`` (a text body to ``/v1/import``, a Blob to
``.../messages``), a DNS-rebound name cannot read, and the viewer on the server's
own origin keeps working, at every loopback name.

Chromium maps the made-up names ``attacker.test`` and ``rebind.test`` to 127.0.0.1
(``--host-resolver-rules``), as a DNS server of the attacker's would."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import LiveServer

from chathistory import Message
from chathistory.server.app import create_app
from chathistory.stores import MemoryStore

CHROMIUM = os.environ.get("CHATHISTORY_CHROMIUM", "/usr/bin/chromium")
WAIT = 10_000


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Chromium with the attacker's names resolving to this machine."""
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Chromium not found at {CHROMIUM}")
        pytest.skip(f"Chromium not found at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            "--host-resolver-rules=MAP attacker.test 127.0.0.1, MAP rebind.test 127.0.0.1"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, MemoryStore]]:
    """An open-mode server (no keys) with one session of one message."""
    store = MemoryStore(counter="approx")
    store.create_session("victim")
    store.append("victim", [Message.user("mine")])
    server = LiveServer(create_app(store, asset_dir=tmp_path_factory.mktemp("assets"))).start()
    yield server, store
    server.stop()


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title><p>another site"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[int]:
    """A page of another site, served on a loopback port of its own."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def refused(server: LiveServer, route: str) -> int:
    """How many POSTs to ``route`` the server answered 403 so far."""
    text = httpx.get(server.url + "/metrics").text
    found = re.search(r'chathistory_http_requests_total\{method="POST",route="'
                      + re.escape(route) + r'",status="403"\} ([0-9.]+)', text)
    return int(float(found.group(1))) if found else 0


def test_a_page_of_another_site_cannot_write(chromium: Any, victim: Any, elsewhere: int) -> None:
    server, store = victim
    before = (refused(server, "/v1/import"),
              refused(server, "/v1/sessions/{session_id}/messages"))
    context = chromium.new_context()
    page = context.new_page()
    try:
        for origin in (f"http://attacker.test:{elsewhere}", f"http://localhost:{elsewhere}"):
            page.goto(origin + "/")
            page.evaluate("""async (target) => {
                const line = JSON.stringify({kind: "session", id: "planted", tenant: "default"});
                await fetch(target + "/v1/import", {method: "POST", mode: "no-cors",
                                                    body: line + "\\n"});
                const append = JSON.stringify({messages: [{role: "user",
                    parts: [{type: "text", text: "planted"}]}]});
                await fetch(target + "/v1/sessions/victim/messages",
                            {method: "POST", mode: "no-cors", body: new Blob([append])});
            }""", server.url)
    finally:
        context.close()
    # the requests came, and were refused: nothing was stored
    assert refused(server, "/v1/import") == before[0] + 2
    assert refused(server, "/v1/sessions/{session_id}/messages") == before[1] + 2
    assert [s.id for s in store.list_sessions().items] == ["victim"]
    assert [m.text for m in store.range("victim")] == ["mine"]


def test_a_rebound_name_reads_nothing(chromium: Any, victim: Any) -> None:
    server, _ = victim
    context = chromium.new_context()
    page = context.new_page()
    try:
        page.goto(f"http://rebind.test:{server.port}/")
        answer = page.evaluate("""async () => {
            const res = await fetch("/v1/sessions");
            return [res.status, await res.text()];
        }""")
    finally:
        context.close()
    assert answer[0] == 403 and "--allow-host" in answer[1], answer


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_viewer_keeps_working_on_its_own_origin(chromium: Any, victim: Any,
                                                     host: str) -> None:
    server, _ = victim
    context = chromium.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"http://{host}:{server.port}/#/")
        page.wait_for_selector(".session-row", timeout=WAIT)
        page.goto(f"http://{host}:{server.port}/#/s/victim")
        page.wait_for_selector(".msg", timeout=WAIT)
        assert "mine" in page.locator(".msg").first.inner_text()
        assert not errors, errors
    finally:
        context.close()
