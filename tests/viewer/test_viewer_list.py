"""The session list, search and the key dialog in a real browser (issue 19):
titles and previews from the list response (no request per card), the total,
search snippets with the matches marked and linked to their message, what an
empty list says with and without keys, the key dialog on a phone, the font
stack. Desktop (1280x900) and phone (390x844) sizes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pages import api_paths, settled
from seed import wait_until
from serverkit import LiveServer

from chathistory import Message
from chathistory.server import auth
from chathistory.server.app import create_app
from chathistory.stores.search import search_text, words
from chathistory.stores.sqlite import SQLiteStore

PHONE = {"width": 390, "height": 844}
BULK = 1_001  # sessions of tenant "bulk": more than a page, and more than a search counts


@pytest.fixture(scope="module")
def tenants(site: Any) -> Any:
    """Two more tenants with keys: ``bulk`` (1,001 untitled sessions, each a
    user message with "needle") and ``empty`` (none); and a key that the
    server does not know."""
    store = site.store
    for tenant in ("bulk", "empty"):
        site.seeded.keys[tenant] = auth.create_key(store, tenant, "list test")[1]
    site.seeded.keys["unknown"] = "chk_" + "0" * 40
    for i in range(BULK):
        store.create_session(f"bulk-{i:04d}", tenant="bulk")
        store.append(f"bulk-{i:04d}", [Message.user(f"**needle** number {i}"),
                                       Message.assistant("found it")], tenant="bulk")
    return site


def listed(page: Any, rows: int) -> str:
    """Wait for ``rows`` cards and a status line; the status line's text."""
    return settled(page, ".session-row", rows, "Loading")


def row(page: Any, session_id: str) -> Any:
    return page.locator(f".session-row[data-session-id='{session_id}']")


def test_list_page_in_two_requests_load_more_in_one(open_page: Any, tenants: Any) -> None:
    view = open_page(tenant="bulk")
    paths = api_paths(view.page)
    page = view.open("#/")
    assert listed(page, 50) == f"50 of {BULK:,} sessions"
    page.wait_for_timeout(300)  # a request per card would have been sent by now
    assert paths == ["/v1/me", "/v1/sessions"]
    # untitled sessions are titled by their first user message, Markdown stripped,
    # with no preview repeating it
    newest = row(page, f"bulk-{BULK - 1:04d}")
    assert newest.locator(".session-title").inner_text() == f"needle number {BULK - 1}"
    assert newest.locator(".session-preview").count() == 0
    page.click("button.more")
    assert listed(page, 100) == f"100 of {BULK:,} sessions"
    page.wait_for_timeout(300)
    assert paths == ["/v1/me", "/v1/sessions", "/v1/sessions"]


def test_titles_and_previews_from_the_list(open_page: Any, tenants: Any) -> None:
    view = open_page()
    paths = api_paths(view.page)
    page = view.open("#/")
    status = listed(page, 6)
    assert status == "6 sessions"  # all on one page: no "of"
    markdown = row(page, "markdown")
    assert markdown.locator(".session-title").inner_text() == "Sorting in Python"
    assert (markdown.locator(".session-preview").inner_text()
            == "How do I sort a list of words by length?")
    assert "Rival plans" not in page.locator("main").inner_text()
    page.wait_for_timeout(300)
    assert paths == ["/v1/me", "/v1/sessions"]
    view.shot("viewer-list")


def test_search_snippet_marks_the_match_and_opens_the_message(open_page: Any,
                                                              tenants: Any) -> None:
    view = open_page()
    paths = api_paths(view.page)
    page = view.open("#/?q=atlantis")
    assert listed(page, 1) == "1 session"
    snippet = row(page, "tools").locator(".session-snippet")
    # one of the session's messages with the word (the best by the store's ranking):
    # its role, a piece of its text, the word marked, a link to it
    matching = {m.id: m for m in tenants.store.range("tools", tenant="acme")
                if "atlantis" in words(search_text(m))}
    href = snippet.get_attribute("href")
    assert href is not None and href.startswith("#/s/tools?m=")
    shown = matching[href.removeprefix("#/s/tools?m=")]
    assert snippet.locator(".snippet-role").inner_text().lower() == shown.role
    text = snippet.locator(".snippet-text").inner_text()
    assert text and text in " ".join(search_text(shown).split())
    assert {m.lower() for m in snippet.locator("mark").all_inner_texts()} == {"atlantis"}
    assert paths == ["/v1/me", "/v1/sessions"]
    snippet.click()
    wait_until(page, "id => document.querySelector(`.msg[data-id='${id}']`)"
               "?.classList.contains('flash')", arg=shown.id)


def test_search_marks_every_match_as_text(open_page: Any, tenants: Any) -> None:
    view = open_page()
    page = view.open("#/?q=words")
    listed(page, 3)  # the long chat, and the question of markdown and of its fork
    marks = row(page, "long").locator(".session-snippet mark").all_inner_texts()
    assert len(marks) >= 2 and {m.lower() for m in marks} == {"words"}
    view.shot("viewer-search")
    # hostile text in a snippet stays text; only the match is an element
    page.goto(f"{tenants.url}/#/?q=script")
    listed(page, 1)
    snippet = row(page, "xss").locator(".session-snippet .snippet-text")
    assert "<script>" in snippet.inner_text()
    assert page.locator("main script, main img, main svg").count() == 0
    tags = page.evaluate("[...document.querySelectorAll('.snippet-text *')].map(e => e.tagName)")
    assert tags and set(tags) == {"MARK"}
    assert page.evaluate("window.__xss") is None


def test_search_total_is_a_lower_bound(open_page: Any, tenants: Any) -> None:
    view = open_page(tenant="bulk")
    page = view.open("#/?q=needle")
    assert listed(page, 50) == "50 of 1,000+ sessions"
    marks = page.locator(".session-row").first.locator(".session-snippet mark")
    assert marks.all_inner_texts() == ["needle"]


def test_empty_tenant_says_where_imported_sessions_go(open_page: Any, tenants: Any) -> None:
    view = open_page(tenant="empty")
    page = view.open("#/")
    page.wait_for_selector(".list-status p")
    text = " ".join(page.locator(".list-status").inner_text().split())
    assert "No sessions in tenant empty." in text
    assert "chathistory import FILE --tenant empty" in text
    assert "chathistory keys create default" in text
    assert page.locator("#tenant").inner_text() == "tenant empty"
    view.shot("viewer-list-empty-tenant", full_page=False)


def test_key_dialog_says_how_to_get_a_key(open_page: Any, tenants: Any) -> None:
    view = open_page(tenant=None)
    page = view.open("#/")
    dialog = page.locator("#key-dialog")
    dialog.wait_for(state="visible")
    text = " ".join(dialog.inner_text().split())
    assert "chathistory keys create TENANT" in text
    assert "A key sees only its own tenant's sessions" in text
    assert "This server needs an API key." in text
    view.shot("viewer-list-key-desktop", full_page=False)
    page.fill("#key-input", tenants.key("acme"))
    page.click("#key-save")
    listed(page, 6)
    assert page.locator("#tenant").inner_text() == "tenant acme"


@pytest.mark.parametrize("tenant, reason", [(None, "This server needs an API key."),
                                            ("unknown", "unknown or revoked API key")])
def test_phone_key_dialog_leaves_the_error_in_view(open_page: Any, tenants: Any,
                                                   tenant: str | None, reason: str) -> None:
    view = open_page(tenant=tenant, **PHONE)
    page = view.open("#/")
    dialog = page.locator("#key-dialog")
    dialog.wait_for(state="visible")
    banner = page.locator("main .error")
    banner.wait_for(state="visible")
    assert reason in dialog.locator("#key-reason").inner_text()
    box, shown = dialog.bounding_box(), banner.bounding_box()
    assert box is not None and shown is not None
    apart = box["y"] >= shown["y"] + shown["height"] or shown["y"] >= box["y"] + box["height"]
    assert apart, f"the dialog {box} covers the error {shown}"
    assert shown["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"]
    view.shot(f"viewer-list-key-phone-{tenant or 'none'}", full_page=False)


def test_phone_search_fits(open_page: Any, tenants: Any) -> None:
    view = open_page(**PHONE)
    page = view.open("#/?q=words")
    listed(page, 3)
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    assert row(page, "long").locator(".session-snippet mark").count() >= 2
    view.shot("viewer-search-phone", full_page=False)


def test_font_stack_names_cjk_fonts_before_the_fallback(open_page: Any, tenants: Any) -> None:
    view = open_page()
    page = view.open("#/")
    listed(page, 6)
    stack = page.evaluate("getComputedStyle(document.body).fontFamily")
    names = [name.strip().strip('"') for name in stack.split(",")]
    assert names[0] == "system-ui" and names[-1] == "sans-serif"
    for cjk in ("Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei"):
        assert cjk in names


@pytest.fixture(scope="module")
def open_mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server in open mode (no key in its store) over an empty store."""
    folder = tmp_path_factory.mktemp("open")
    store = SQLiteStore(folder / "open.db")
    server = LiveServer(create_app(store, asset_dir=folder / "assets")).start()
    try:
        yield server.url
    finally:
        server.stop()
        store.close()


def test_open_mode_empty_list(browser: Any, open_mode: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{open_mode}/#/")
        page.wait_for_selector(".list-status code")
        assert (page.locator(".list-status").inner_text()
                == "No sessions yet. Import some with: chathistory import FILE")
        assert page.locator("#tenant").inner_text() == "tenant default"
        assert not page.locator("#key-dialog").is_visible()
    finally:
        context.close()
    assert not errors, errors
