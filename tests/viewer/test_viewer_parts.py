"""How the viewer renders messages (issue 19, items 8 and 9), in Chromium over a
server of its own: code highlighted by the vendored highlight.js and built as
nodes, code-interpreter arguments as code, each tool result once (and opened by
"expand tools and reasoning"), tables wrapped at word boundaries, images a
ChatGPT export did not include labelled as images, a switcher where branches
part, distinct branch labels, titles with their Markdown stripped, and a provider's
compaction as a card with a line above its message (issue 21)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from pages import SCREENSHOTS, Page
from seed import wait_until
from serverkit import LiveServer

from chathistory import Message, TextPart
from chathistory.importers import import_file
from chathistory.model import Compaction
from chathistory.server.app import create_app
from chathistory.stores.sqlite import SQLiteStore
from chathistory.titles import plain_preview

WAIT = 10_000  # ms: a wait on a loaded machine, not a timing assertion

PYTHON = "def area(width, height):\n    return width * height  # in pixels\n"
TABLE = """| Phase | What happens |
|---|---|
| Orchestration | The orchestrator schedules every containerized workload across the cluster |
| Observability | Distributed tracing, structured logging and metrics aggregation |
"""
ANSWER = f"""Here is the function:

```python
{PYTHON}```

```json
{{"width": 512, "height": 512, "ok": true}}
```

```
no language: plain
```

```nosuchlanguage
def not_highlighted(): pass
```

{TABLE}"""
CODE = "import numpy as np\nprint(np.arange(3).sum())"
OPAQUE = "gAAAAB" + "Zx" * 600 + "é"  # 1,208 bytes in UTF-8 (1,207 characters)
SUMMARY = "They plan **a week in Italy**: Rome, Florence, Venice; the user likes trains."
LONG = "word " * 9_000  # more than the 8,000 tokens the viewer previews a window at


def compacted() -> list[Message]:
    """A session compacted three times: by OpenAI (opaque), by Anthropic (with a
    summary, in the turn it answered), and by Anthropic again, failed (neither summary
    nor data); a message too long for the previewed window before the second."""
    return [
        Message.system("You plan trips."),
        Message.user("A week in Italy?"),
        Message.assistant("Rome, Florence, Venice."),
        Message(role="assistant", parts=[Compaction(provider="openai_responses", data=OPAQUE)]),
        Message.user(LONG),
        Message(role="assistant", parts=[
            Compaction(provider="anthropic", text=SUMMARY, data="e1", signature="s1"),
            TextPart(text="Rome first, then Florence.")]),
        Message.user("And the weekend after?"),
        Message(role="assistant", parts=[Compaction(provider="anthropic")]),
        Message.assistant("Venice."),
    ]


def node(key: str, parent: str | None, children: list[str], role: str | None = None,
         content: dict[str, Any] | None = None, **message: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": key, "parent": parent, "children": children}
    if role is not None:
        entry["message"] = {"id": key, "author": {"role": role}, "recipient": "all",
                            "create_time": 1700000000.0, "metadata": {},
                            "content": content or {"content_type": "text", "parts": [""]},
                            **message}
    return entry


def text(value: str) -> dict[str, Any]:
    return {"content_type": "text", "parts": [value]}


def chatgpt_export() -> list[dict[str, Any]]:
    """Two conversations: a code-interpreter run with a regenerated answer and an
    uploaded image; a question answered twice where the user kept the second
    answer (ChatGPT's 2/2)."""
    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-img1",
             "width": 512, "height": 512}
    resize = {
        "root": node("root", None, ["u1"]),
        "u1": node("u1", "root", ["a1"], "user", text("Sum a range with numpy")),
        "a1": node("a1", "u1", ["t1"], "assistant",
                   {"content_type": "code", "language": "unknown", "text": CODE},
                   recipient="python"),
        "t1": node("t1", "a1", ["a2", "a2b"], "tool",
                   {"content_type": "execution_output", "text": "3"},
                   author={"role": "tool", "name": "python"}),
        "a2": node("a2", "t1", ["u2"], "assistant", text("The sum is 3.")),
        "u2": node("u2", "a2", ["a3"], "user",
                   {"content_type": "multimodal_text", "parts": [image, "And this picture?"]},
                   metadata={"attachments": [{"id": "file-img1", "name": "chart.png",
                                              "mimeType": "image/png"}]}),
        "a3": node("a3", "u2", [], "assistant", text("A bar chart.")),
        "a2b": node("a2b", "t1", [], "assistant", text("Regenerated: it is 3.")),
    }
    colours = {
        "root": node("root", None, ["c1"]),
        "c1": node("c1", "root", ["r1", "r2"], "user", text("Name a colour")),
        "r1": node("r1", "c1", [], "assistant", text("Red")),
        "r2": node("r2", "c1", [], "assistant", text("Teal")),
    }
    edited = {  # the first prompt edited: the two paths share no message
        "root": node("root", None, ["e1", "e2"]),
        "e1": node("e1", "root", ["f1"], "user", text("Frist try")),
        "f1": node("f1", "e1", [], "assistant", text("Did you mean first?")),
        "e2": node("e2", "root", ["f2"], "user", text("First try")),
        "f2": node("f2", "e2", [], "assistant", text("Hello.")),
    }
    return [{"title": "Numpy sums", "conversation_id": "numpy", "mapping": resize,
             "current_node": "a3"},
            {"title": "Colours", "conversation_id": "colours", "mapping": colours,
             "current_node": "r2"},
            {"title": "Edited", "conversation_id": "edited", "mapping": edited,
             "current_node": "f2"}]


class Served:
    def __init__(self, url: str, store: SQLiteStore) -> None:
        self.url, self.store = url, store

    def session_by(self, title: str, last_text: str) -> str:
        """The id of the session with this metadata title whose last message is this."""
        for s in self.store.list_sessions(limit=100).items:
            if s.metadata.get("title") == title and self.store.range(s.id)[-1].text == last_text:
                return s.id
        raise AssertionError(f"no session {title!r} ending {last_text!r}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("parts")
    store = SQLiteStore(folder / "parts.db", counter="o200k_base")
    store.create_session("code", metadata={"title": "Code, tools and a table"})
    store.append("code", [
        Message.user("Show me code and a table"),
        Message.assistant(ANSWER),
        Message.assistant("", [{"id": "call_py", "name": "python", "arguments": {"code": CODE}}]),
        Message.tool_result("call_py", "RESULT-ONCE: 3", name="python"),
        Message.assistant("", [{"id": "call_w", "name": "get_weather",
                                "arguments": {"city": "Paris"}}]),
        Message.tool_result("call_w", '{"temperature": 21, "sky": "clear"}', name="get_weather"),
        Message.assistant("Paris is 21 °C.", reasoning="Two tools, two results."),
    ])
    store.create_session("compacted", metadata={"title": "A trip, compacted"})
    store.append("compacted", compacted())
    question = Message.user("What is 512 \\* 512?")
    store.create_session("calc")  # untitled: called by its first user message
    store.append("calc", [question, Message.assistant("262,144")])
    store.fork("calc", question.id, new_session_id="calc-alt")
    store.append("calc-alt", [Message.assistant("2^18")])
    export = folder / "conversations.json"
    export.write_text(json.dumps(chatgpt_export()))
    import_file(store, export)
    # no key: open mode, for loopback clients
    server = LiveServer(create_app(store, asset_dir=folder / "assets")).start()
    try:
        yield Served(server.url, store)
    finally:
        server.stop()
        store.close()


class View(Page):
    """A page of the open-mode server (no key) that opens at a session's messages."""

    def open(self, hash_path: str = "#/") -> Any:
        page = super().open(hash_path)
        page.wait_for_selector(".msg", timeout=WAIT)
        return page

    def shot(self, name: str, full_page: bool = False) -> Path:
        return super().shot(name, full_page)


@pytest.fixture
def view(browser: Any, served: Served) -> Iterator[Any]:
    views: list[View] = []

    def make(width: int = 1280, height: int = 900) -> View:
        views.append(View(browser, served.url, None, width, height))
        return views[-1]

    yield make
    for v in views:
        v.context.close()
        assert not v.errors, f"script errors on the page: {v.errors}"


# ---------------------------------------------------------------- the vendored highlighter

# npm's @highlightjs/cdn-assets@11.12.0 (tarball sha1 19b1b064bdd3d02705a200e9fa6538d41a566a47,
# as `npm view @highlightjs/cdn-assets@11.12.0 dist.shasum` says): es/highlight.min.js,
# styles/github.min.css, styles/github-dark.min.css, unchanged
VENDORED = {
    "highlight.min.js": "1ed8fc5256b738b8875b74e4d3f0754f60d6411fb034d618dfbc4e6e6c9999d7",
    "highlight-github.min.css": "3a9a5def8b9c311e5ae43abde85c63133185eed4f0d9f67fea4b00a8308cf066",
    "highlight-github-dark.min.css":
        "9f208d022102b1d0c7aebfecd8e42ca7997d5de636649d2b31ea63093d809019",
}


def test_vendored_highlight_js_is_the_release_beside_its_license() -> None:
    folder = resources.files("chathistory.server").joinpath("viewer")
    for name, digest in VENDORED.items():
        assert hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest() == digest, name
    assert b"Highlight.js v11.12.0" in folder.joinpath("highlight.min.js").read_bytes()[:200]
    license_text = folder.joinpath("highlight.js.LICENSE").read_text()
    assert "BSD 3-Clause License" in license_text
    assert "Copyright (c) 2006, Ivan Sagalaev." in license_text


# ---------------------------------------------------------------- code

def test_code_blocks_are_highlighted_when_a_language_is_named(view: Any) -> None:
    v = view()
    page = v.open("#/s/code")
    answer = page.locator(".msg.role-assistant .md").first
    python = answer.locator(".md-pre code.lang-python")
    python.scroll_into_view_if_needed()
    wait_until(page, "() => !!document.querySelector('code.lang-python.hl')")
    assert python.locator(".hljs-keyword").first.inner_text() == "def"
    assert python.locator(".hljs-title").first.inner_text() == "area"
    assert python.locator(".hljs-comment").inner_text() == "# in pixels"
    # the text is the code, character for character (the copy button copies it too)
    assert python.evaluate("c => c.textContent") == PYTHON.rstrip("\n")
    # the theme colours a keyword unlike plain text
    colours = python.evaluate("c => [getComputedStyle(c.querySelector('.hljs-keyword')).color,"
                              " getComputedStyle(c).color]")
    assert colours[0] != colours[1]
    json_code = answer.locator(".md-pre code.lang-json")
    wait_until(page, "() => !!document.querySelector('code.lang-json.hl')")
    assert json_code.locator(".hljs-attr").first.inner_text() == '"width"'
    assert json_code.locator(".hljs-literal").inner_text() == "true"
    # no language, or one highlight.js does not know: plain text, no guessing
    plain = answer.locator(".md-pre code").nth(2)
    unknown = answer.locator(".md-pre code.lang-nosuchlanguage")
    for code in (plain, unknown):
        assert code.evaluate("c => c.children.length === 0 && !c.classList.contains('hl')")
    assert unknown.inner_text() == "def not_highlighted(): pass"
    v.shot("parts-code")


HOSTILE = """async () => {
  const syntax = await import('/viewer/syntax.js');
  const code = '</code><img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    + '<a href="javascript:window.__xss=3">&amp; &lt;b&gt;</a> <!-- c --> \\u2028 ${x}';
  const out = {};
  for (const lang of ['xml', 'javascript', 'markdown', 'php', 'python']) {
    const node = document.createElement('code');
    const done = syntax.highlight(node, code, lang);
    const all = [...node.querySelectorAll('*')];
    out[lang] = {
      done, same: node.textContent === code,
      tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))],
      attrs: [...new Set(all.flatMap((e) => [...e.attributes].map((a) => a.name)))],
      classes: [...new Set(all.flatMap((e) => [...e.classList]))],
    };
  }
  const big = 'x = 1\\n'.repeat(syntax.HIGHLIGHT_MAX / 6 + 1);
  out.big = syntax.canHighlight(big, 'python');
  out.deep = (() => {
    // template literals nested 300 deep: highlight.js nests 600 scopes
    const deep = '`${'.repeat(300) + '}`'.repeat(300);
    const node = document.createElement('code');
    const done = syntax.highlight(node, deep, 'javascript');
    let depth = 0;
    for (const span of node.querySelectorAll('span')) {
      let d = 0;
      for (let e = span; e !== node; e = e.parentElement) d++;
      depth = Math.max(depth, d);
    }
    return { done, same: node.textContent === deep, depth };
  })();
  out.xss = window.__xss ?? null;
  return out;
}"""


def test_highlighting_makes_only_spans_and_text(view: Any) -> None:
    """highlight.js's HTML string is not used: its token tree becomes spans with
    class names and text nodes, the text the code itself."""
    v = view()
    page = v.open("#/s/code")
    out = page.evaluate(HOSTILE)
    for lang in ("xml", "javascript", "markdown", "php", "python"):
        found = out[lang]
        assert found["done"] and found["same"], lang
        assert set(found["tags"]) <= {"span"}, (lang, found["tags"])
        assert set(found["attrs"]) <= {"class"}, (lang, found["attrs"])
        assert all(c.startswith(("hljs-", "language-")) or c.endswith("_")
                   for c in found["classes"]), (lang, found["classes"])
    assert out["xml"]["tags"] == ["span"]  # the markup was tokenized, and stayed text
    assert out["big"] is False  # past HIGHLIGHT_MAX: plain
    assert out["deep"]["done"] and out["deep"]["same"] and out["deep"]["depth"] == 24
    assert out["xss"] is None


def test_code_interpreter_arguments_show_as_code(view: Any) -> None:
    v = view()
    page = v.open("#/s/code")
    call = page.locator("details.tool-call[data-call-id='call_py']")
    assert call.locator(".tool-args-preview").inner_text() == "import numpy as np"
    call.locator("summary").click()
    section = call.locator(".tool-section").first
    assert section.locator(".label").inner_text() == "Code"
    assert section.locator(".md-lang").inner_text() == "python"
    code = section.locator("code.lang-python")
    assert code.evaluate("c => c.textContent") == CODE  # real newlines, no JSON escapes
    wait_until(page, "() => !!document.querySelector("
               "\"details[data-call-id='call_py'] code.lang-python.hl\")")
    assert code.locator(".hljs-keyword").first.inner_text() == "import"
    # other tools' arguments stay JSON, highlighted as JSON
    weather = page.locator("details.tool-call[data-call-id='call_w']")
    weather.locator("summary").click()
    args = weather.locator(".tool-section").first
    assert args.locator(".label").inner_text() == "Arguments"
    assert '"city": "Paris"' in args.locator("code.lang-json").inner_text()
    v.shot("parts-code-interpreter")


def test_code_of_recognises_code_arguments(view: Any) -> None:
    v = view()
    page = v.open("#/s/code")
    found = page.evaluate("""async () => {
      const { codeOf } = await import('/viewer/parts.js');
      return [
        codeOf({ name: 'python', arguments: { code: 'x = 1' } }),
        codeOf({ name: 'code_interpreter', arguments: 'print(1)' }),
        codeOf({ name: 'run', arguments: { code: 'ls', language: 'bash' } }),
        codeOf({ name: 'run', arguments: { code: 'x', timeout: 3 } }),
        codeOf({ name: 'get_weather', arguments: { city: 'Paris' } }),
      ];
    }""")
    assert found == [{"text": "x = 1", "lang": "python"}, {"text": "print(1)", "lang": "python"},
                     {"text": "ls", "lang": "bash"}, None, None]


# ---------------------------------------------------------------- tool results

def test_each_result_is_shown_once_and_expand_opens_it(view: Any) -> None:
    v = view()
    page = v.open("#/s/code")
    timeline = page.locator(".timeline")
    assert timeline.evaluate("t => t.textContent.split('RESULT-ONCE').length - 1") == 1
    # the result is in its call's card; the tool message links to it
    call = page.locator("details.tool-call[data-call-id='call_py']")
    assert "RESULT-ONCE: 3" in call.locator(".tool-result-slot").evaluate("s => s.textContent")
    tool = page.locator(".msg.role-tool").first
    assert tool.locator("details").count() == 0
    assert tool.locator(".tool-result-ref .jump").inner_text() == "↑ result of python"
    assert not call.evaluate("d => d.open")
    tool.locator(".jump").click()
    assert call.evaluate("d => d.open")
    call.locator("summary").click()  # closed again
    # "expand tools and reasoning" opens every card that holds a result
    page.locator(".expand-all input").check()
    holders = page.evaluate("""() => [...document.querySelectorAll('.timeline details')]
      .filter((d) => d.querySelector('.tool-result-slot, .result-parts, .md-pre'))
      .map((d) => [d.className, d.open])""")
    assert holders and all(is_open for _, is_open in holders), holders
    assert page.get_by_text("RESULT-ONCE: 3").is_visible()
    assert page.get_by_text("Two tools, two results.").is_visible()
    v.shot("parts-tools-expanded", full_page=True)
    page.evaluate("window.scrollTo(0, document.querySelectorAll('.msg')[1]"
                  ".getBoundingClientRect().top + window.scrollY - 60)")
    v.shot("parts-code-desktop")


def test_a_result_without_its_call_is_a_card_that_expand_opens(view: Any) -> None:
    """The range API serves no such result, but a page can hold one (a call on a
    page not loaded): it is a details.tool-call card, which the expand box opens."""
    v = view()
    page = v.open("#/s/code")
    found = page.evaluate("""async () => {
      const { PartRenderer } = await import('/viewer/parts.js');
      const card = new PartRenderer().render({ type: 'tool_result', call_id: 'call_gone',
        name: 'lookup', content: 'late answer', is_error: true });
      return [card.tagName, card.matches('details.tool-call'), card.classList.contains('orphan'),
        card.querySelector('.call-state').textContent, card.textContent.includes('late answer'),
        card.textContent.includes('no call call_gone')];
    }""")
    assert found == ["DETAILS", True, True, "error", True, True]


# ---------------------------------------------------------------- tables

WORDS_ON_ONE_LINE = """() => {
  // every word of every cell: the rectangles of its text on one line
  const split = [];
  for (const cell of document.querySelectorAll('.md td, .md th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      for (const m of t.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(t, m.index);
        range.setEnd(t, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) split.push(m[0]);
      }
    }
  }
  return split;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_tables_wrap_at_word_boundaries(view: Any, width: int) -> None:
    v = view(width=width, height=844 if width < 500 else 900)
    page = v.open("#/s/code")
    table = page.locator(".md table").first
    table.scroll_into_view_if_needed()
    cell = table.locator("td", has_text="Orchestration").first
    # the word is on one line: its cell is at least as wide as the word
    word = cell.evaluate("""c => { const r = document.createRange();
      const t = c.firstChild; const i = t.data.indexOf('Orchestration');
      r.setStart(t, i); r.setEnd(t, i + 13); return r.getClientRects().length; }""")
    assert word == 1
    assert page.evaluate(WORDS_ON_ONE_LINE) == []
    # long cells wrap between words rather than widening the page
    described = table.locator("td", has_text="orchestrator schedules")
    lines = described.evaluate("c => Math.round(c.getBoundingClientRect().height"
                               " / parseFloat(getComputedStyle(c).lineHeight))")
    if width < 500:
        assert lines >= 2
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    table.screenshot(path=str(SCREENSHOTS / f"parts-table-{width}.png"))


# ---------------------------------------------------------------- images, branches, titles

def test_an_image_the_export_did_not_include_is_labelled_as_an_image(
        view: Any, served: Served) -> None:
    v = view()
    main = served.session_by("Numpy sums", "A bar chart.")
    page = v.open(f"#/s/{main}")
    figure = page.locator("figure.image.missing")
    figure.wait_for(timeout=WAIT)
    assert figure.locator(".image-missing-box").inner_text().replace("\n", " ").strip() == \
        "Image (not included in the export)"
    caption = figure.locator("figcaption").inner_text()
    assert caption == "512\u00d7512 · image/png · file-service://file-img1"
    assert "File: file-service" not in page.locator("main").inner_text()
    textof = page.evaluate("""async () => {
      const { textOf } = await import('/viewer/dom.js');
      return [textOf({ parts: [{ type: 'image', url: 'file-service://file-img1' },
                               { type: 'text', text: 'And **this** picture?' }] }),
              textOf({ parts: [{ type: 'image', url: 'https://example.com/a.png' }] }),
              textOf({ parts: [{ type: 'image', url: 'data:image/png;base64,AAAA' }] }),
              textOf({ parts: [{ type: 'file', url: 'file-service://f', name: 'data.csv' }] })];
    }""")
    assert textof == ["And this picture? Image (not included)", "Image: https://example.com/a.png",
                      "Image (inline)", "File: data.csv"]


def test_switcher_where_branches_part(view: Any, served: Served) -> None:
    main = served.session_by("Numpy sums", "A bar chart.")
    regenerated = served.session_by("Numpy sums", "Regenerated: it is 3.")
    v = view()
    page = v.open(f"#/s/{main}")
    switches = page.locator(".msg .branch-switch")
    switches.first.wait_for(timeout=WAIT)
    assert switches.count() == 1  # the answer after the tool result, position 3
    message = page.locator(".msg", has=page.locator(".branch-switch"))
    assert message.locator(".seq").inner_text() == "#3"
    assert "The sum is 3." in message.inner_text()
    assert switches.locator(".branch-count").inner_text() == "1/2"
    assert switches.locator(".branch-step.off").count() == 1  # no previous
    # the branch panel tells the branches apart
    labels = page.locator(".branches .tree a").evaluate_all("as => as.map((a) => a.textContent)")
    assert labels[0].startswith("Numpy sums ") and "·" not in labels[0]
    assert labels[1].startswith("Numpy sums · 2 of 2 at #3 ")
    v.shot("parts-branch-switch")
    # next: the other answer, opened at that message
    switches.locator("a.branch-step").click()
    wait_until(page, "(id) => location.hash.startsWith('#/s/' + id + '?m=')", regenerated)
    page.wait_for_selector(".msg .branch-switch .branch-count >> text=2/2", timeout=WAIT)
    focused = page.locator(".msg", has=page.locator(".branch-switch"))
    assert "Regenerated: it is 3." in focused.inner_text()
    assert page.locator(".branches a.current .branch-label").inner_text() == " · 2 of 2 at #3"
    page.locator(".msg .branch-switch a.branch-step").click()  # previous: back
    wait_until(page, "(id) => location.hash.startsWith('#/s/' + id + '?m=')", main)


def test_the_list_tells_two_branches_of_one_title_apart(view: Any, served: Served) -> None:
    regenerated = served.session_by("Numpy sums", "Regenerated: it is 3.")
    v = view()
    page = v.page
    page.goto(f"{v.url}/#/?q=Numpy")
    row = page.locator(f".session-row[data-session-id='{regenerated}']")
    row.wait_for(timeout=WAIT)
    assert row.locator(".session-title .branch-label").inner_text() == " · branch 2 of 2 at #3"
    titles = page.locator(".session-title").evaluate_all("ts => ts.map((t) => t.textContent)")
    numpy = [t for t in titles if t.startswith("Numpy sums")]
    assert len(numpy) == 2 and len(set(numpy)) == 2, titles


def test_switcher_numbers_alternatives_as_the_export_does(view: Any, served: Served) -> None:
    """The user kept ChatGPT's second answer: the main session shows 2/2, the
    first answer (the fork, metadata branch "1 of 2") 1/2."""
    teal = served.session_by("Colours", "Teal")
    red = served.session_by("Colours", "Red")
    v = view()
    page = v.open(f"#/s/{teal}")
    switch = page.locator(".msg .branch-switch")
    switch.wait_for(timeout=WAIT)
    assert switch.locator(".branch-count").inner_text() == "2/2"
    assert switch.locator("a.branch-step").get_attribute("href") == f"#/s/{red}"
    assert switch.locator("a.branch-step").get_attribute("aria-label") == \
        "previous: alternative 1 of 2"


def test_a_branch_sharing_no_message_links_to_its_main_session(
        view: Any, served: Served) -> None:
    main = served.session_by("Edited", "Hello.")
    typo = served.session_by("Edited", "Did you mean first?")
    v = view()
    page = v.open(f"#/s/{typo}")
    note = page.locator(".branches .branch-of")
    note.wait_for(timeout=WAIT)
    assert note.inner_text() == \
        "Alternative 1 of 2 at the first message, beside the main session (they share no message)."
    assert note.locator("a").get_attribute("href") == f"#/s/{main}"


def test_titles_strip_markdown_on_the_page_and_in_branch_labels(view: Any) -> None:
    v = view()
    page = v.open("#/s/calc-alt")
    wait_until(page, "() => document.querySelector('h1.page-title').textContent"
               " === 'What is 512 * 512?'")
    names = page.locator(".branches .tree .branch-title")
    wait_until(page, "() => [...document.querySelectorAll('.branches .branch-title')]"
               ".every((n) => n.textContent === 'What is 512 * 512?')")
    assert names.count() == 2
    labels = page.locator(".branches .tree a").evaluate_all("as => as.map((a) => a.textContent)")
    assert labels == ["What is 512 * 512? calc", "What is 512 * 512? · 2 of 2 at #1 calc-alt"]
    assert page.locator(".msg .branch-switch .branch-count").inner_text() == "2/2"
    plain = page.evaluate("""async () => {
      const { titleOf, textOf } = await import('/viewer/dom.js');
      return [titleOf({ metadata: { title: '  __init__   trouble ' } }),
              titleOf({ metadata: {}, title: 'from the server' }),
              titleOf({ metadata: { title: 't'.repeat(200) } }),
              textOf({ parts: [{ type: 'text',
                               text: '## Fix **the** [build](https://x.y) `now`' }] }),
              textOf({ parts: [{ type: 'text', text: 'word '.repeat(100) }] }, 120)];
    }""")
    # the server's rule (chathistory.titles): a metadata title is plain text
    assert plain[0] == "__init__ trouble"
    assert plain[1] == "from the server"
    assert plain[2] == "t" * 119 + "…"
    assert plain[3] == "Fix the build now"
    assert plain[4] == plain_preview("word " * 100, 120)


SAMPLES = [
    "What is 512 \\* 512?", "__init__ trouble", "2 * 3 * 4", "snake_case_name", "**bold** _it_",
    "# Heading\n\n- item *one*\n- item two\n\n> quoted", "[docs](./readme) and <b>tag</b>",
    "```python\nprint('x')\n```\nafter", "| a | b |\n|---|---|\n| c | ~~d~~ |",
    "![alt text](https://x.y/i.png) https://example.com/a_b", "line\u2028two\u00a0three\x1cfour",
    "emoji 😀 " * 40, "x" * 300, "a\\\nb  \nc", "[[[[[[[[[[ a",
]


def test_plain_text_is_the_servers_rule(view: Any) -> None:
    """The page's plainText and chathistory.titles.plain_preview agree."""
    v = view()
    page = v.open("#/s/code")
    got = page.evaluate("""async (samples) => {
      const { plainText } = await import('/viewer/markdown.js');
      return samples.map((s) => [plainText(s, 120), plainText(s, 40)]);
    }""", SAMPLES)
    expected = [[plain_preview(s, 120) or "", plain_preview(s, 40) or ""] for s in SAMPLES]
    assert got == expected


def test_phone_reads_code_tools_and_branches(view: Any, served: Served) -> None:
    v = view(width=390, height=844)
    fits = "document.scrollingElement.scrollWidth <= window.innerWidth"
    page = v.open("#/s/code")
    page.locator(".expand-all input").check()
    wait_until(page, "() => !!document.querySelector(\"details[data-call-id='call_py'] code.hl\")")
    assert page.evaluate(fits)
    page.locator("details.tool-call[data-call-id='call_py']").scroll_into_view_if_needed()
    v.shot("parts-tools-phone")
    main = served.session_by("Numpy sums", "A bar chart.")
    page.goto(f"{served.url}/#/s/{main}")
    page.locator(".msg .branch-switch").wait_for(timeout=WAIT)
    assert page.evaluate(fits)
    page.locator(".msg .branch-switch").scroll_into_view_if_needed()
    v.shot("parts-branches-phone")


# ---------------------------------------------------------------- compactions

COMPACTIONS = """() => [...document.querySelectorAll('.timeline > li')].flatMap((li) => {
  if (li.classList.contains('compaction-divider')) return [['divider', li.textContent]];
  const card = li.querySelector('.compaction');
  if (!card) return [];
  const said = card.querySelector('.compaction-opaque') || card.querySelector('.md');
  return [['card', li.querySelector('.seq').textContent,
           card.querySelector('.compaction-provider').textContent, said.textContent]];
})"""


def test_a_compaction_is_a_card_below_a_line_saying_compacted_here(view: Any) -> None:
    v = view()
    page = v.open("#/s/compacted")
    assert page.evaluate(COMPACTIONS) == [
        ["divider", "compacted here · OpenAI Responses reads from here on"],
        ["card", "#3", "OpenAI Responses", "opaque compaction data, 1,208 bytes"],
        ["divider", "compacted here · Anthropic reads from here on"],
        ["card", "#5", "Anthropic",
         "They plan a week in Italy: Rome, Florence, Venice; the user likes trains."],
        ["divider", "compacted here · Anthropic reads from here on"],
        ["card", "#7", "Anthropic", "no summary and no data (the provider's compaction gave none)"],
    ]
    # each line sits right above the message that holds the compaction
    above = page.evaluate("""() => [...document.querySelectorAll('.compaction-divider')]
      .map((d) => d.nextElementSibling.matches('li.msg') && !!d.nextElementSibling
        .querySelector(':scope > .msg-body > .compaction'))""")
    assert above == [True, True, True]
    assert page.locator(".compaction-divider").first.is_visible()
    # the summary is Markdown; the Anthropic turn's text follows it in the same message
    assert page.locator(".compaction .md strong").inner_text() == "a week in Italy"
    turn = page.locator(".msg", has=page.locator(".compaction .md"))
    assert turn.locator(".msg-body > .md").inner_text() == "Rome first, then Florence."
    page.locator(".compaction-divider").first.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -140)")
    v.shot("parts-compaction")


def test_a_compactions_text_and_provider_stay_text(view: Any) -> None:
    v = view()
    page = v.open("#/s/compacted")
    found = page.evaluate("""async () => {
      const { PartRenderer, compactionDivider } = await import('/viewer/parts.js');
      const hostile = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>';
      const card = new PartRenderer().render({ type: 'compaction', provider: hostile,
        text: `**bold** ${hostile}` });
      const line = compactionDivider({ type: 'compaction', provider: hostile });
      document.body.append(card, line);
      const tags = [...card.querySelectorAll('*'), ...line.querySelectorAll('*')]
        .map((e) => e.tagName.toLowerCase());
      return [card.querySelector('.compaction-provider').textContent,
        card.querySelector('.md').textContent, line.textContent,
        tags.includes('img') || tags.includes('script'), tags.includes('strong')];
    }""")
    hostile = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    assert found == [hostile, f"bold {hostile}", f"compacted here · {hostile} reads from here on",
                     False, True]
    assert page.evaluate("window.__xss ?? null") is None


def test_only_what_the_model_sees_keeps_the_line_of_the_compaction_it_reads(
        view: Any) -> None:
    """The window previewed at 8,000 tokens holds the system prompt and everything
    from the Anthropic compaction on (the long message before it does not fit): the
    OpenAI compaction's line hides with its message, the marker of the hidden
    messages goes above the line, not between it and its message."""
    v = view()
    page = v.open("#/s/compacted")
    wait_until(page, "() => document.querySelectorAll('.msg.in-window').length === 5")
    page.check(".only-window input")
    shown = page.evaluate("""() => [...document.querySelectorAll('.timeline > li')]
      .filter((li) => getComputedStyle(li).display !== 'none')
      .map((li) => li.classList.contains('msg') ? li.querySelector('.seq').textContent
                                                 : li.className)""")
    assert shown == ["#0", "window-gap", "compaction-divider", "#5", "#6",
                     "compaction-divider", "#7", "#8"]
    v.shot("viewer-compaction")
