"""A session's page in a real browser (issue 19, items 6 and 7): it opens at the
newest messages and reads backwards ("Load earlier", scroll kept, real
positions, tool calls still paired across pages), a huge message is collapsed
so the page stays short, and the context-window panel previews the window at
any budget, in words, without writing anything, with gap markers in "only what
the model sees". Desktop (1280x900) and phone (390x844)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from seed import wait_until

from chathistory import History, Message

WAIT = 10_000  # ms: a wait for a loaded machine, not a timing assertion
PHONE = {"width": 390, "height": 844}
FITS = "document.scrollingElement.scrollWidth <= window.innerWidth"
HUGE_LINES = 4_000  # about 167,000 tokens


@dataclass
class Sessions:
    pages: list[str]  # ids of "pages" in order: 450 messages, tool groups across page edges
    huge: list[str]  # ids of "huge": the third message is the huge one
    huge_text: str
    chat: list[str]  # ids of "chat126": 126 messages, no planned window


def _tool_group(call_id: str, at: int) -> list[Message]:
    """An assistant's two tool calls, their two results and its answer (4 messages
    from position ``at``: the call, two results, the answer)."""
    return [
        Message.assistant(f"Message {at}: looking it up", [
            {"id": f"{call_id}_a", "name": "lookup", "arguments": {"q": f"first {at}"}},
            {"id": f"{call_id}_b", "name": "lookup", "arguments": {"q": f"second {at}"}}]),
        Message.tool_result(f"{call_id}_a", f"result a of {call_id}", name="lookup"),
        Message.tool_result(f"{call_id}_b", f"result b of {call_id}", name="lookup"),
        Message.assistant(f"Message {at + 3}: found both."),
    ]


def _pages() -> list[Message]:
    """450 messages of about 60 tokens: a system prompt, then turns, with tool
    groups at 46-49 and 248-251. Pages are asked for as [250, 450), [48, 248),
    [0, 48): each start falls inside a group, so the page is widened back to it."""
    out: list[Message] = [Message.system("Message 0: be helpful.")]
    groups = {46: "call_early", 248: "call_late"}
    while len(out) < 450:
        at = len(out)
        if at in groups:
            out += _tool_group(groups[at], at)
            continue
        role = Message.user if at % 2 else Message.assistant
        out.append(role(f"Message {at}: " + "some words about the weather " * 10))
    assert len(out) == 450
    return out


def _huge() -> tuple[list[Message], str]:
    lines = [f"line {i}: " + " ".join(f"w{(i * 7 + k) % 997}" for k in range(18))
             for i in range(HUGE_LINES)]
    text = "\n".join(lines)
    return [Message.user("Please read this log."),
            Message.assistant("Here it is, whole:"),
            Message.assistant(text),
            Message.user("Thanks, what does the last line say?"),
            Message.assistant("It names the last words.")], text


def _chat() -> list[Message]:
    out = [Message.system("You answer questions about the weather.")]
    for i in range(1, 126):
        role = Message.user if i % 2 else Message.assistant
        out.append(role(f"Message {i}: " + "rain and sun and wind and snow " * 45))
    return out


@pytest.fixture(scope="module")
def sessions(site: Any) -> Iterator[Sessions]:
    store = site.store
    made = {}
    for sid, messages in (("pages", _pages()), ("chat126", _chat())):
        store.create_session(sid, tenant="acme", metadata={"title": f"The {sid} session"})
        store.append(sid, messages, tenant="acme")
        made[sid] = [m.id for m in messages]
    huge, text = _huge()
    store.create_session("huge", tenant="acme", metadata={"title": "A huge message"})
    store.append("huge", huge, tenant="acme")
    assert store.get_session("huge", tenant="acme").token_count > 150_000
    yield Sessions(made["pages"], [m.id for m in huge], text, made["chat126"])


def shown_ids(page: Any) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('.timeline > li.msg')]"
                         ".map(e => e.dataset.id)")


def visible_ids(page: Any) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('.timeline > li.msg')]"
                         ".filter(e => e.offsetParent !== null).map(e => e.dataset.id)")


def count_is(page: Any, n: int) -> None:
    wait_until(page, "n => document.querySelectorAll('.timeline > li.msg').length === n", n,
               timeout=WAIT)


def preview(site: Any, sid: str, max_tokens: int) -> dict[str, Any]:
    """The preview route's answer, read as any client would."""
    answer = httpx.get(f"{site.url}/v1/sessions/{sid}/window", params={"max_tokens": max_tokens},
                       headers={"Authorization": f"Bearer {site.key()}"})
    answer.raise_for_status()
    found: dict[str, Any] = answer.json()
    return found


def oracle(site: Any, sid: str, max_tokens: int) -> list[str]:
    """The window the library itself selects (the route's documented rule)."""
    messages = site.store.range(sid, include_marked=True, tenant="acme")
    return [m.id for m in History(messages).by_tokens(max_tokens, "o200k_base", keep_system=True)]


def sentence(found: dict[str, Any]) -> str:
    return (f"The model would see {found['messages']:,} messages, {found['tokens']:,} tokens; "
            f"{found['left_out']:,} older messages are left out.")


def saying(page: Any, start: str) -> str:
    wait_until(page, "s => document.querySelector('.window-says').textContent.startsWith(s)",
               start, timeout=WAIT)
    text: str = page.locator(".window-says").inner_text()
    return text


# ---------------------------------------------------------------- open at the newest


def test_opens_at_the_newest_then_loads_earlier(open_page: Any, site: Any,
                                                sessions: Sessions) -> None:
    view = open_page()
    page = view.open("#/s/pages")
    count_is(page, 450 - 248)  # [250, 450) widened back to the tool call at 248
    ids = sessions.pages
    assert shown_ids(page) == ids[248:]
    # real positions, not counts of what is shown
    assert page.locator(".timeline > li.msg .seq").first.inner_text() == "#248"
    assert page.locator(".timeline > li.msg .seq").last.inner_text() == "#449"
    assert page.locator(".timeline-status").inner_text() == \
        "The newest 202 of 450 messages are shown."
    # the newest message is in view, at the bottom of the page
    in_view = ("id => { const r = document.querySelector(`.msg[data-id='${id}']`)"
               ".getBoundingClientRect(); return r.bottom <= innerHeight + 1 && r.bottom > 0; }")
    wait_until(page, in_view, ids[-1], timeout=WAIT)
    assert page.evaluate("scrollY") > 1000
    # the call at 248 is paired with both results (249, 250, the newest page's start)
    late = page.locator("details.tool-call[data-call-id='call_late_a']")
    assert late.locator(".call-state").inner_text() == "done"
    assert page.locator("details.tool-call[data-call-id='call_late_b'] .call-state")\
        .inner_text() == "done"
    assert page.locator(".tool-call.orphan").count() == 0

    # "Load earlier" prepends the page before, keeping what was in view in place
    page.evaluate("scrollTo(0, 0)")
    button = page.locator(".earlier-row button.earlier")
    assert button.inner_text() == "Load 200 earlier"
    top = f"document.querySelector(`.msg[data-id='{ids[248]}']`).getBoundingClientRect().top"
    before = page.evaluate(top)
    button.click()
    count_is(page, 450 - 46)  # [48, 248) widened back to the call at 46
    assert abs(page.evaluate(top) - before) < 2
    assert page.evaluate("scrollY") > 1000
    assert shown_ids(page) == ids[46:]
    assert page.locator("details.tool-call[data-call-id='call_early_a'] .call-state")\
        .inner_text() == "done"
    button.click()
    count_is(page, 450)
    assert button.is_hidden()
    assert page.locator(".timeline-status").inner_text() == ""
    assert shown_ids(page) == ids == [m.id for m in site.store.range("pages", tenant="acme")]
    seqs = page.locator(".timeline > li.msg .seq").all_inner_texts()
    assert seqs == [f"#{i}" for i in range(450)]
    texts = page.locator(".timeline > li.msg").all_inner_texts()
    assert all(f"Message {i}:" in texts[i] for i in range(450) if i not in (47, 48, 249, 250))
    assert page.locator(".tool-call.orphan").count() == 0
    assert page.locator(".tool-result-ref").count() == 4  # each result points to its call


def test_a_linked_message_is_loaded_back_to(open_page: Any, sessions: Sessions) -> None:
    view = open_page()
    target = sessions.pages[10]
    page = view.open(f"#/s/pages?m={target}")
    wait_until(page, "id => document.querySelector(`.msg[data-id='${id}']`)"
               "?.classList.contains('flash')", target, timeout=WAIT)
    assert page.locator(f".msg[data-id='{target}'] .seq").inner_text() == "#10"
    wait_until(page, "id => { const r = document.querySelector(`.msg[data-id='${id}']`)"
               ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }",
               target, timeout=WAIT)


def test_an_untitled_session_is_named_by_its_opening_line(open_page: Any, site: Any) -> None:
    """Its first page is not read (it opens at the newest), yet its heading is
    still its opening user message."""
    site.store.create_session("untitled", tenant="acme")
    site.store.append("untitled", [Message.user("What is the capital of France?")] + [
        Message.assistant(f"Reply {i}") for i in range(260)], tenant="acme")
    view = open_page()
    page = view.open("#/s/untitled")
    count_is(page, 200)
    wait_until(page, "() => document.querySelector('h1.page-title').textContent"
               " === 'What is the capital of France?'", timeout=WAIT)


# ---------------------------------------------------------------- long messages


@pytest.mark.parametrize("size", [{}, PHONE], ids=["desktop", "phone"])
def test_a_huge_message_is_collapsed(open_page: Any, sessions: Sessions,
                                     size: dict[str, int]) -> None:
    view = open_page(**size)
    page = view.open("#/s/huge")
    count_is(page, 5)
    height = "document.scrollingElement.scrollHeight"
    assert page.evaluate(height) < 6_000
    huge = page.locator(f".msg[data-id='{sessions.huge[2]}']")
    body = huge.locator(".msg-body")
    assert "collapsed" in (body.get_attribute("class") or "")
    assert body.evaluate("b => b.clientHeight <= Math.min(innerHeight * 0.6, 1200) + 1")
    show = huge.locator(".show-all")
    size_kb = len(sessions.huge_text.encode()) / 1024
    assert show.inner_text() == f"Show all ({HUGE_LINES:,} lines, {size_kb:.1f} KB)"
    assert page.locator(".show-all").count() == 1  # short messages are left whole
    # the newest message is still what the page opens on
    wait_until(page, "id => document.querySelector(`.msg[data-id='${id}']`)"
               ".getBoundingClientRect().bottom <= innerHeight + 1", sessions.huge[-1])
    view.shot(f"session-huge-{'phone' if size else 'desktop'}", full_page=False)
    show.click()
    assert show.inner_text() == "Show less"
    assert page.evaluate(height) > 80_000  # what the page would be with it whole
    assert f"line {HUGE_LINES - 1}: " in body.inner_text()
    show.click()
    assert page.evaluate(height) < 6_000
    assert show.get_attribute("aria-expanded") == "false"


# ---------------------------------------------------------------- the context window


def test_window_preview_in_words_and_writes_nothing(open_page: Any, site: Any,
                                                    sessions: Sessions) -> None:
    store = site.store
    before = store.get_session("chat126", tenant="acme")
    statuses = [m.kv_status for m in store.range("chat126", tenant="acme")]
    view = open_page()
    page = view.open("#/s/chat126")
    count_is(page, 126)
    panel = page.locator(".window-panel")
    # no window was planned: the panel previews one at 8,000 tokens at once
    assert page.locator(".budget-input").input_value() == "8000"
    found = preview(site, "chat126", 8000)
    expected = oracle(site, "chat126", 8000)
    assert found["message_ids"] == expected and 10 < len(expected) < 60
    assert saying(page, "The model would see") == sentence(found)
    assert found["left_out"] == 126 - len(expected)
    in_window = page.evaluate("[...document.querySelectorAll('.msg.in-window')]"
                              ".map(e => e.dataset.id)")
    assert in_window == expected
    text = panel.inner_text()
    assert "/v1/" not in text and "POST" not in text and "KV" not in text

    # a preset asks again
    panel.locator(".preset[data-tokens='4000']").click()
    found4k = preview(site, "chat126", 4000)
    assert saying(page, f"The model would see {found4k['messages']:,} ") == sentence(found4k)
    assert panel.locator(".preset[aria-pressed='true']").inner_text() == "4k"
    assert page.locator(".msg.in-window").count() == len(oracle(site, "chat126", 4000))

    # only what the model sees: the rest hidden behind one marker saying how many
    page.check(".only-window input")
    assert visible_ids(page) == oracle(site, "chat126", 4000)
    gap = page.locator(".window-gap")
    assert gap.count() == 1  # the system prompt, then the newest messages
    hidden = found4k["left_out"]
    assert [g[2] for g in found4k["gaps"]] == [hidden]
    assert gap.inner_text() == f"… {hidden:,} earlier messages not sent to the model … · show"
    view.shot("viewer-window-preview", full_page=False)
    gap.locator("button").click()  # shows them
    assert len(visible_ids(page)) == 126
    assert "hide them" in page.locator(".window-gap").inner_text()
    page.locator(".window-gap button").click()
    assert visible_ids(page) == oracle(site, "chat126", 4000)

    # a budget typed in; everything fits
    page.fill(".budget-input", "128000")
    page.press(".budget-input", "Enter")
    everything = preview(site, "chat126", 128000)
    assert saying(page, "The model would see all") == \
        f"The model would see all 126 messages, {everything['tokens']:,} tokens."
    assert page.locator(".window-gap").count() == 0
    assert len(visible_ids(page)) == 126
    page.uncheck(".only-window input")
    panel.locator(".preset[data-tokens='8000']").click()
    saying(page, f"The model would see {found['messages']:,} ")

    # nothing was written
    after = store.get_session("chat126", tenant="acme")
    assert after.version == before.version
    assert after.state == before.state
    assert [m.kv_status for m in store.range("chat126", tenant="acme")] == statuses


def test_only_what_the_model_sees_loads_the_window_back(open_page: Any, site: Any,
                                                        sessions: Sessions) -> None:
    """On a long session the window's system prompt is 400 messages back: "only what
    the model sees" reads back to it and says how many are hidden between."""
    view = open_page()
    page = view.open("#/s/pages")
    count_is(page, 202)
    found = preview(site, "pages", 8000)
    assert saying(page, "The model would see") == sentence(found)
    window = oracle(site, "pages", 8000)
    assert window[0] == sessions.pages[0] and len(window) < 202  # the system prompt and a tail
    page.check(".only-window input")
    wait_until(page, "id => !!document.querySelector(`.msg[data-id='${id}']`)", window[0],
               timeout=WAIT)
    wait_until(page, "() => document.querySelectorAll('.window-gap').length === 1",
               timeout=WAIT)
    assert visible_ids(page) == window
    assert page.locator(".window-gap").inner_text() == \
        f"… {found['left_out']:,} earlier messages not sent to the model … · show"
    assert page.locator(".msg .seq").first.inner_text() == "#0"


def test_a_planned_window_is_kept_beside_the_preview(open_page: Any, site: Any) -> None:
    state = site.store.get_session("long", tenant="acme").state["chathistory.window"]
    layout = [i for i, _ in state["layout"]]
    view = open_page()
    page = view.open("#/s/long")
    page.wait_for_selector(".kv-bar .kv-seg")
    panel = page.locator(".window-panel")
    assert panel.locator(".window-plan-says").inner_text() == (
        f"When the window was last planned, the model saw {len(layout)} messages, "
        f"{state['last_turn']['end']:,} of {state['max_tokens']:,} tokens.")
    assert "/v1/" not in panel.inner_text() and "POST" not in panel.inner_text()
    # the planned window is what the timeline marks until a budget is picked
    assert page.locator(".budget-input").input_value() == str(state["max_tokens"])
    marked = "[...document.querySelectorAll('.msg.in-window')].map(e => e.dataset.id)"
    # the timeline's messages come by a request of their own, which the panel does not
    # wait for: wait for them (without it the check raced them, 2 runs in 10)
    wait_until(page, f"n => {marked}.length >= n", len(layout))
    assert page.evaluate(marked) == layout
    assert "Pick a budget" in panel.locator(".window-says").inner_text()
    panel.locator(".preset[data-tokens='32000']").click()
    found = preview(site, "long", 32000)
    assert saying(page, "The model would see") == (
        f"The model would see all {found['messages']} messages, {found['tokens']:,} tokens."
        if not found["left_out"] else sentence(found))
    assert page.evaluate(marked) == found["message_ids"] != layout
    panel.locator(".back-to-plan").click()
    assert page.evaluate(marked) == layout
    assert panel.locator(".back-to-plan").is_hidden()


def test_phone(open_page: Any, site: Any, sessions: Sessions) -> None:
    view = open_page(**PHONE)
    page = view.open("#/s/chat126")
    count_is(page, 126)
    found = preview(site, "chat126", 8000)
    assert saying(page, "The model would see") == sentence(found)
    assert page.evaluate(FITS)
    # the panel comes before the conversation; the page opens at the newest message
    assert page.evaluate("document.querySelector('.window-panel').getBoundingClientRect().bottom"
                         " < document.querySelector('.timeline').getBoundingClientRect().top")
    assert page.evaluate("scrollY") > 1000
    page.check(".only-window input")
    assert re.fullmatch(r"… [\d,]+ earlier messages not sent to the model … · show",
                        page.locator(".window-gap").inner_text())
    assert page.evaluate(FITS)
    page.goto(page.url.split("#")[0] + "#/s/pages")
    count_is(page, 202)
    assert page.evaluate(FITS)
    page.evaluate("scrollTo(0, 0)")
    assert page.locator(".earlier-row").is_visible()
    view.shot("viewer-session-phone", full_page=False)
