"""The viewer in a real browser (headless Chromium) against a real server:
list, search, open, expand a tool call, see an image, the context window,
switch a branch, hostile content rendered as text, another tenant's view, and
a phone-sized window. Every test saves a screenshot (tests/viewer/screenshots)."""

from __future__ import annotations

from typing import Any

from seed import XSS_TEXT, wait_until

WAIT = 10_000  # ms: generous for a loaded 2-core machine; a wait, not a timing assertion


def titles(page: Any) -> list[str]:
    page.wait_for_selector(".session-row")
    wait_until(page, "() => document.querySelector('.list-status').textContent.length > 0")
    return page.locator(".session-row .session-title").all_inner_texts()


def test_key_dialog_then_list_of_this_tenant_only(open_page: Any, site: Any) -> None:
    view = open_page(tenant=None)
    page = view.open("#/")
    dialog = page.locator("#key-dialog")
    dialog.wait_for(state="visible")
    page.fill("#key-input", site.key("acme"))
    page.click("#key-save")
    shown = titles(page)
    assert "Rival plans" not in shown
    assert {"Sorting in Python", "Weather with tools", "A picture and a file", "Hostile content",
            "A long chat with a window"} <= set(shown)
    assert page.locator("#tenant").inner_text() == "tenant acme"
    # counts of messages and tokens per session
    row = page.locator(".session-row", has_text="Weather with tools")
    assert "5 messages" in row.inner_text() and "tokens" in row.inner_text()
    view.shot("list-desktop")


def test_list_sorted_by_last_activity_and_searchable(open_page: Any, site: Any) -> None:
    from chathistory import Message

    site.store.append("image", [Message.user("one more question about the picture")],
                      tenant="acme")
    view = open_page()
    page = view.open("#/")
    assert titles(page)[0] == "A picture and a file"  # the newest activity first
    page.fill("input.search", "atlantis")
    page.press("input.search", "Enter")
    wait_until(page, "() => location.hash.includes('q=atlantis')")
    wait_until(page, "() => document.querySelectorAll('.session-row').length === 1")
    assert titles(page) == ["Weather with tools"]
    view.shot("list-search")
    # a metadata filter
    page.goto(f"{site.url}/#/?meta=topic%3Dweather")
    wait_until(page, "() => document.querySelectorAll('.session-row').length === 1")
    assert titles(page) == ["Weather with tools"]
    page.goto(f"{site.url}/#/?meta=topic%3Dpython")  # a fork keeps its parent's metadata
    wait_until(page, "() => document.querySelectorAll('.session-row').length === 2")
    assert titles(page) == ["Sorting in Python"] * 2
    # another tenant's text is never found
    page.goto(f"{site.url}/#/?q=rival%20secret")
    page.wait_for_selector("text=No session matches.")


def test_open_a_session_renders_markdown(open_page: Any, site: Any) -> None:
    view = open_page()
    page = view.open("#/")
    page.click(".session-row[data-session-id='markdown'] a")
    page.wait_for_selector(".msg.role-assistant")
    assert page.evaluate("location.hash") == "#/s/markdown"
    body = page.locator(".msg.role-assistant .md")
    assert body.locator("h3").inner_text() == "Sorting in Python"
    assert "return sorted(items, key=len, reverse=True)[:n]" in body.locator(
        ".md-pre code").inner_text()
    assert body.locator(".md-pre .md-lang").inner_text() == "python"
    assert body.locator("table tbody tr").count() == 2
    assert body.locator("del").inner_text() == "Never"
    link = body.locator("a")
    assert link.get_attribute("href") == "https://docs.python.org/3/howto/sorting.html"
    assert link.get_attribute("rel") == "noopener noreferrer nofollow"
    user = page.locator(".msg.role-user")
    assert user.locator(".author").inner_text() == "ana"
    assert user.locator(".tokens").inner_text().endswith("tok")
    view.shot("session-markdown")


def test_tool_calls_paired_with_results(open_page: Any) -> None:
    view = open_page()
    page = view.open("#/s/tools")
    calls = page.locator("details.tool-call")
    calls.first.wait_for(timeout=WAIT)
    assert calls.count() == 2
    paris, atlantis = calls.nth(0), calls.nth(1)
    assert not paris.evaluate("d => d.open")
    assert not paris.locator(".tool-section").first.is_visible()
    paris.locator("summary").click()
    assert paris.evaluate("d => d.open")
    args = paris.locator(".tool-section").nth(0).inner_text()
    assert '"city": "Paris"' in args
    assert '"temperature": 21' in paris.locator(".tool-section").nth(1).inner_text()
    assert paris.locator(".call-state").inner_text() == "done"
    assert atlantis.locator(".call-state").inner_text() == "error"
    assert "failed" in (atlantis.get_attribute("class") or "")
    atlantis.locator("summary").click()
    assert "city not found: Atlantis" in atlantis.inner_text()
    # reasoning is collapsed, and opens
    reasoning = page.locator("details.reasoning")
    assert not reasoning.evaluate("d => d.open")
    reasoning.locator("summary").click()
    assert "call the tool twice" in reasoning.inner_text()
    # the tool message points back at its call, which holds the only copy of the result
    paris.locator("summary").click()
    assert not paris.evaluate("d => d.open")
    page.locator(".msg.role-tool .jump").first.click()
    assert paris.evaluate("d => d.open")
    assert page.locator(".msg.role-tool details").count() == 0
    view.shot("session-tools")


def test_image_inline_and_file_as_named_link(open_page: Any, site: Any) -> None:
    view = open_page()
    page = view.open("#/s/image")
    wait_until(page,
        "() => { const i = document.querySelector('figure.image img');"
        " return i && i.complete && i.naturalWidth > 0; }")
    size = page.evaluate("() => { const i = document.querySelector('figure.image img');"
                         " return [i.naturalWidth, i.naturalHeight, i.src.slice(0, 5)]; }")
    assert size == [48, 32, "blob:"]
    assert "square.png" in page.locator("figure.image figcaption").inner_text()
    file_link = page.locator(".file .file-link")
    assert "notes.txt" in file_link.inner_text()
    with page.expect_download() as download:
        file_link.click()
    saved = download.value.path()
    assert saved is not None and saved.read_bytes() == b"colour notes: blue\n"
    view.shot("session-image")


def test_hostile_content_renders_as_text(open_page: Any) -> None:
    view = open_page()
    page = view.open("#/s/xss")
    page.wait_for_selector(".msg.role-assistant")
    page.wait_for_timeout(300)  # anything that could fire (onerror, onload) has had its chance
    assert page.evaluate("window.__xss") is None
    text = page.locator(".msg.role-user .msg-body").inner_text()
    assert "<script>window.__xss=2</script>" in text
    assert '<img src=x onerror="window.__xss=1">' in text
    assert "[a link](javascript:window.__xss=3)" in text
    assert page.locator("main script, main svg, main iframe, main img").count() == 0
    hrefs = page.evaluate("[...document.querySelectorAll('main a')].map(a => a.href)")
    assert all(not h.lower().startswith("javascript:") for h in hrefs)
    handlers = page.evaluate(
        "[...document.querySelectorAll('main *')].flatMap(e => [...e.attributes])"
        ".map(a => a.name).filter(n => n.startsWith('on'))")
    assert handlers == []
    assert XSS_TEXT.splitlines()[0][:20] in text
    view.shot("session-xss")


def test_context_window_bar_summary_and_filter(open_page: Any, site: Any) -> None:
    view = open_page()
    page = view.open("#/s/long")
    page.wait_for_selector(".kv-bar .kv-seg")
    state = site.store.get_session("long", tenant="acme").state["chathistory.window"]
    assert page.locator(".kv-seg").count() == len(state["layout"])
    assert page.locator(".kv-seg.pinned").count() == len(state["pinned"])
    facts = page.locator(".window-panel .facts").inner_text()
    assert f"{state['last_turn']['reused_prefix_tokens']:,} tokens" in facts
    # KV positions per message, from the layout
    first_id, first_start = state["layout"][1]
    badge = page.locator(f".msg[data-id='{first_id}'] .window-badge")
    assert badge.inner_text().startswith(f"KV {first_start:,}\N{EN DASH}")
    # marked messages are shown as such; the summary links to what it replaced
    marked = page.evaluate("[...document.querySelectorAll('.msg.kv-marked')]"
                           ".map(e => e.dataset.id)")
    assert set(site.seeded.summary_of) <= set(marked)  # replaced by the summary
    assert not set(marked) & {i for i, _ in state["layout"]}  # evicted, not in the window
    links = page.locator(".summary-of .summary-link")
    assert links.count() == len(site.seeded.summary_of)
    links.nth(2).click()
    target = page.locator(f".msg[data-id='{site.seeded.summary_of[2]}']")
    wait_until(page,
        "id => document.querySelector(`.msg[data-id='${id}']`).classList.contains('flash')",
        arg=site.seeded.summary_of[2])
    assert "marked" in target.locator(".kv-badge").inner_text()
    # a click on a bar segment goes to its message
    last_id = state["layout"][-1][0]
    page.locator(f".kv-seg[data-id='{last_id}']").click()
    wait_until(page,
        "id => document.querySelector(`.msg[data-id='${id}']`)?.classList.contains('flash')",
        arg=last_id)
    # only what the model sees
    page.check(".only-window input")
    visible = page.evaluate("[...document.querySelectorAll('.msg')]"
                            ".filter(e => e.offsetParent !== null).map(e => e.dataset.id)")
    assert visible == [i for i, _ in state["layout"]]
    view.shot("session-window", full_page=False)


def test_switch_branch(open_page: Any) -> None:
    view = open_page()
    page = view.open("#/s/markdown")
    tree = page.locator(".branches .tree")
    tree.wait_for(timeout=WAIT)
    assert tree.locator("a.current").inner_text().startswith("Sorting in Python")
    tree.locator("li[data-session-id='markdown-alt'] > a").click()
    wait_until(page, "() => location.hash === '#/s/markdown-alt'")
    page.wait_for_selector(".fork-divider")
    assert "Done." in page.locator(".msg.role-assistant").last.inner_text()
    assert page.locator(".msg").count() == 3
    assert page.locator(".branches a.current").get_attribute("href") == "#/s/markdown-alt"
    view.shot("session-branch")
    page.locator(".fork-divider a").click()
    wait_until(page, "() => location.hash === '#/s/markdown'")


def test_other_tenant_sees_nothing_of_acme(open_page: Any) -> None:
    view = open_page(tenant="rival")
    page = view.open("#/")
    assert titles(page) == ["Rival plans"]
    page.goto(page.url.split("#")[0] + "#/s/markdown")
    error = page.locator(".error")
    error.wait_for(timeout=WAIT)
    assert "no session" in error.inner_text()
    assert "Sorting" not in page.locator("main").inner_text()


def test_phone_sized_window(open_page: Any) -> None:
    view = open_page(width=390, height=844)
    page = view.open("#/")
    titles(page)
    fits = "document.scrollingElement.scrollWidth <= window.innerWidth"
    assert page.evaluate(fits)
    view.shot("list-phone")
    for session in ("markdown", "tools", "long"):
        page.goto(page.url.split("#")[0] + f"#/s/{session}")
        page.wait_for_selector(".msg")
        assert page.evaluate(fits), f"{session} scrolls sideways on a phone"
        view.shot(f"session-{session}-phone", full_page=False)
    # on a phone the window panel comes before the conversation
    above = page.evaluate("document.querySelector('.window-panel').getBoundingClientRect().top"
                          " < document.querySelector('.timeline').getBoundingClientRect().top")
    assert above
