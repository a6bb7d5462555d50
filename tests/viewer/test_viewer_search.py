"""Message search in a real browser (issue 22): #/search lists the tenant's matching
messages from one GET /v1/search a page, each with its role, session and position
and a snippet whose matched words are <mark> elements (text nodes, never markup),
linking to the message in its session; the session list links to it; paging,
another tenant's words, a refused query, a phone."""

from __future__ import annotations

from typing import Any

import pytest
from pages import api_paths, settled
from seed import wait_until

from chathistory import Message
from chathistory.server import auth
from chathistory.stores.search import search_text, words

PHONE = {"width": 390, "height": 844}
MANY = 45


@pytest.fixture(scope="module")
def many(site: Any) -> Any:
    """Tenant ``many``: MANY sessions, each a message with "needle"."""
    site.seeded.keys["many"] = auth.create_key(site.store, "many", "search test")[1]
    for i in range(MANY):
        site.store.create_session(f"n-{i:03d}", tenant="many")
        site.store.append(f"n-{i:03d}", [Message.user(f"a needle, number {i}"),
                                         Message.assistant("nothing to see")], tenant="many")
    return site


def hits(page: Any, count: int) -> str:
    """Wait for ``count`` hits and a settled status line; the status line."""
    return settled(page, ".hit-row", count, "Search")


def test_hits_mark_the_words_and_open_the_message(open_page: Any, many: Any) -> None:
    view = open_page()
    paths = api_paths(view.page)
    page = view.open("#/search?q=atlantis")
    expected = [m for m in many.store.range("tools", tenant="acme")
                if "atlantis" in words(search_text(m))]
    assert hits(page, len(expected)).startswith(f"{len(expected)} messages")
    rows = page.locator(".hit-row")
    shown = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        assert row.get_attribute("data-session-id") == "tools"
        shown[row.get_attribute("data-message-id")] = row
        assert {m.lower() for m in row.locator("mark").all_inner_texts()} == {"atlantis"}
    assert set(shown) == {m.id for m in expected}
    for message in expected:
        row = shown[message.id]
        assert row.locator(".snippet-role").inner_text().lower() == message.role
        seq = [m.id for m in many.store.range("tools", tenant="acme")].index(message.id)
        assert f"#{seq}" in row.locator(".hit-where").inner_text()
        link = row.locator("a.hit-link")
        assert link.get_attribute("href") == f"#/s/tools?m={message.id}"
    assert paths == ["/v1/me", "/v1/search"]
    view.shot("viewer-message-search")
    first = expected[0]
    shown[first.id].locator("a.hit-link").click()
    wait_until(page, "id => document.querySelector(`.msg[data-id='${id}']`)"
               "?.classList.contains('flash')", arg=first.id)
    assert view.errors == []


def test_the_session_list_links_to_the_messages(open_page: Any, many: Any) -> None:
    found = len(many.store.search("atlantis", tenant="acme").items)
    view = open_page()
    page = view.open("#/?q=atlantis")
    page.click("a.search-switch")
    wait_until(page, "() => location.hash.startsWith('#/search?q=atlantis')")
    hits(page, found)
    page.click("a.search-switch")  # and back to the sessions
    wait_until(page, "() => document.querySelectorAll('.session-row').length === 1")
    # the form of the search view searches messages again
    page.goto(f"{many.url}/#/search?q=atlantis")
    hits(page, found)
    page.fill("input.search", '"in paris"')
    page.press("input.search", "Enter")
    wait_until(page, "() => location.hash === '#/search?q=%22in+paris%22'")
    hits(page, 1)
    assert page.locator(".hit-row mark").all_inner_texts() == ["in", "Paris"]


def test_hostile_text_stays_text(open_page: Any, many: Any) -> None:
    view = open_page()
    page = view.open("#/search?q=script")
    hits(page, 2)  # the user's message and the assistant's
    text = page.locator(".hit-row .snippet-text").first.inner_text()
    assert "<script>" in text or "<img" in text
    tags = page.evaluate("[...document.querySelectorAll('.hit-row .snippet-text *')]"
                         ".map(e => e.tagName)")
    assert tags and set(tags) == {"MARK"}
    assert page.locator("main script, main img, main svg").count() == 0
    assert page.evaluate("window.__xss") is None


def test_pages_load_more_with_the_cursor(open_page: Any, many: Any) -> None:
    view = open_page(tenant="many")
    paths = api_paths(view.page)
    page = view.open("#/search?q=needle")
    assert hits(page, 20) == "20 messages so far"
    page.click("button.more")
    assert hits(page, 40) == "40 messages so far"
    page.click("button.more")
    assert hits(page, MANY) == f"{MANY} messages"
    assert page.locator("button.more").is_hidden()
    ids = page.evaluate("[...document.querySelectorAll('.hit-row')].map(r => r.dataset.sessionId)")
    assert sorted(ids) == [f"n-{i:03d}" for i in range(MANY)]  # each once
    assert paths == ["/v1/me", "/v1/search", "/v1/search", "/v1/search"]


def test_another_tenants_words_and_a_refused_query(open_page: Any, many: Any) -> None:
    view = open_page()
    page = view.open("#/search?q=rival%20secret")
    page.wait_for_selector("text=No message matches.")
    assert page.locator(".hit-row").count() == 0
    page.goto(f"{many.url}/#/search?q=%3F%21")
    error = page.locator(".list-status .error")
    error.wait_for()
    assert "q: a search needs at least one word" in error.inner_text()


def test_phone_search_fits(open_page: Any, many: Any) -> None:
    view = open_page(**PHONE)
    page = view.open("#/search?q=words")
    hits(page, 20)
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    view.shot("viewer-message-search-phone", full_page=False)
