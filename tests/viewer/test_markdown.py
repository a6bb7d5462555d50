"""The viewer's Markdown renderer (viewer/markdown.js: markdown-it's tokens made
into DOM nodes), run in Chromium: what it makes of ordinary chat text, that no
input, however hostile, yields an element or attribute outside a short
allow-list or a link that is not http(s) or mailto, that raw HTML stays text,
and that hostile input of a million characters takes linear time."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
from pathological import ISSUE, cases

RENDER = """async (inputs) => {
  const md = await import('/viewer/markdown.js');
  return inputs.map((text) => {
    const node = md.renderMarkdown(text);
    const all = [...node.querySelectorAll('*')];
    return {
      html: node.innerHTML,
      text: node.textContent,
      tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))],
      attrs: [...new Set(all.flatMap((e) => [...e.attributes].map((a) => a.name)))],
      hrefs: all.filter((e) => e.hasAttribute('href')).map((e) => e.getAttribute('href')),
    };
  });
}"""

ALLOWED_TAGS = {"div", "p", "br", "strong", "em", "del", "code", "pre", "a", "h3", "h4", "h5",
                "h6", "ul", "ol", "li", "blockquote", "hr", "table", "thead", "tbody", "tr",
                "th", "td", "span", "button"}
ALLOWED_ATTRS = {"class", "href", "target", "rel", "referrerpolicy", "style", "start", "type"}


class Renderer:
    """markdown.js in a page of the viewer's origin (which asks for a key)."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def __call__(self, *texts: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.page.evaluate(RENDER, list(texts))
        return result


@pytest.fixture(scope="module")
def render(browser: Any, site: Any) -> Any:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{site.url}/")
    yield Renderer(page)
    context.close()


CASES = [
    ("**bold** and *it* and `code`",
     '<p><strong>bold</strong> and <em>it</em> and <code class="md-code">code</code></p>'),
    ("snake_case_name stays", "<p>snake_case_name stays</p>"),
    ("line one\nline two", "<p>line one<br>line two</p>"),
    ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
    ("3. c\n4. d", '<ol start="3"><li>c</li><li>d</li></ol>'),
    ("1. c\n2. d", "<ol><li>c</li><li>d</li></ol>"),
    ("0. c", '<ol start="0"><li>c</li></ol>'),
    ("## Title", '<h4 class="md-h md-h2">Title</h4>'),
    ("> quoted", "<blockquote><p>quoted</p></blockquote>"),
    ("a <b>tag</b> & more", "<p>a &lt;b&gt;tag&lt;/b&gt; &amp; more</p>"),
    ("see https://example.com/x_(y).",
     '<p>see <a href="https://example.com/x_(y)" target="_blank" '
     'rel="noopener noreferrer nofollow" referrerpolicy="no-referrer">'
     "https://example.com/x_(y)</a>.</p>"),
    ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"),
    ("\\*not em\\*", "<p>*not em*</p>"),
    ("~~gone~~ and [doc](https://example.com/d \"t\")",
     '<p><del>gone</del> and <a href="https://example.com/d" target="_blank" '
     'rel="noopener noreferrer nofollow" referrerpolicy="no-referrer">doc</a></p>'),
    ("![cat](https://example.com/c.png)",
     '<p><a href="https://example.com/c.png" target="_blank" rel="noopener noreferrer nofollow" '
     'referrerpolicy="no-referrer">image: cat</a></p>'),
    ("| a | b |\n|:-|-:|\n| 1 | 2 |",
     '<div class="md-table"><table><thead><tr><th style="text-align: left;">a</th>'
     '<th style="text-align: right;">b</th></tr></thead><tbody><tr>'
     '<td style="text-align: left;">1</td><td style="text-align: right;">2</td></tr></tbody>'
     "</table></div>"),
    ("- a\n\n  more\n- b", "<ul><li><p>a</p><p>more</p></li><li><p>b</p></li></ul>"),
    ("> > twice", "<blockquote><blockquote><p>twice</p></blockquote></blockquote>"),
    ("***", "<hr>"),
    ("a `<b>` `` x`y ``", '<p>a <code class="md-code">&lt;b&gt;</code> '
                          '<code class="md-code">x`y</code></p>'),
]

# Raw HTML, as a block and inline: markdown-it with html: false makes it text.
RAW_HTML = [
    ("<div onclick=alert(1)>\n<script>alert(1)</script>\n</div>",
     "<p>&lt;div onclick=alert(1)&gt;<br>&lt;script&gt;alert(1)&lt;/script&gt;<br>"
     "&lt;/div&gt;</p>"),
    ("x <img src=x onerror=alert(1)> y", "<p>x &lt;img src=x onerror=alert(1)&gt; y</p>"),
    ("<!-- c --><?php x ?><![CDATA[z]]>",
     "<p>&lt;!-- c --&gt;&lt;?php x ?&gt;&lt;![CDATA[z]]&gt;</p>"),
    ("&lt;script&gt; &amp;", "<p>&lt;script&gt; &amp;</p>"),
]

# Every way Markdown can make a link, with a scheme the viewer must not link to.
NOT_LINKS = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x]( javascript:alert(1) )",
    "[x](<javascript:alert(1)>)",
    "[x](javascript&#58;alert(1))",
    "[x](&#x6A;avascript:alert(1))",
    "[x](java%73cript:alert(1))",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](file:///etc/passwd)",
    "[x](/relative) [y](#frag) [z](//evil.example/)",
    "[x]\n\n[x]: javascript:alert(1)",
    "[x][r]\n\n[r]: <javascript:alert(1)> \"t\"",
    "<javascript:alert(1)> <vbscript:x> <data:text/html,x>",
    "![x](javascript:alert(1)) ![y](data:image/png;base64,iVBORw0KGgo=)",
    "javascript:alert(1) ftp://evil.example/ //evil.example/ www.evil.example a@evil.example",
]


@pytest.mark.parametrize(("source", "html"), CASES)
def test_renders_chat_markdown(render: Any, source: str, html: str) -> None:
    assert render(source)[0]["html"] == html


def test_code_block_keeps_its_text_verbatim(render: Any) -> None:
    out = render("```js\nif (a < b && c) { x = '<script>' }\n```")[0]
    assert "if (a < b && c) { x = '<script>' }" in out["text"]
    assert "pre" in out["tags"] and "script" not in out["tags"]


PIECES = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "javascript:alert(1)",
          "[a](", "](javascript:x)", "![i](data:text/html,<b>)", "<a href='//evil'>", "**",
          "*", "_", "__", "`", "```", "~~", "\n", "\n\n", "- ", "1. ", "> ", "| a | b |\n|---|---|",
          "# ", "<svg/onload=alert(1)>", "&lt;", "\\", "(", ")", "[", "]", "<", ">", "\"", "'",
          "https://ok.example/a?b=<c>", "<https://ok.example>", "mailto:a@b.c", " ", "text",
          "<iframe src=x>", "vbscript:x", "data:text/html;base64,PHNjcmlwdD4=", "\t", "\u2028"]


def test_no_input_yields_unsafe_markup(render: Any) -> None:
    rng = random.Random(20261123)
    inputs = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
              for _ in range(600)]
    for source, out in zip(inputs, render(*inputs), strict=True):
        assert set(out["tags"]) <= ALLOWED_TAGS, (source, out["tags"])
        assert set(out["attrs"]) <= ALLOWED_ATTRS, (source, out["attrs"])
        for href in out["hrefs"]:
            assert href.startswith(("https://", "http://", "mailto:")), (source, href)


@pytest.mark.parametrize(("source", "html"), RAW_HTML)
def test_raw_html_stays_text(render: Any, source: str, html: str) -> None:
    out = render(source)[0]
    assert out["html"] == html
    assert out["tags"] == ["p", "br"] or out["tags"] == ["p"]


@pytest.mark.parametrize("source", NOT_LINKS)
def test_other_schemes_are_not_links(render: Any, source: str) -> None:
    out = render(source)[0]
    assert out["hrefs"] == [], out["html"]
    assert "a" not in out["tags"]


def test_links_that_pass_are_normalised_and_safe(render: Any) -> None:
    out = render("[a](HTTPS://Example.COM/a%20b) <https://example.com/x> "
                 "https://example.com/y_(z). [m](mailto:a@example.com)")[0]
    assert out["hrefs"] == ["https://example.com/a%20b", "https://example.com/x",
                            "https://example.com/y_(z)", "mailto:a@example.com"]
    assert out["text"] == "a https://example.com/x https://example.com/y_(z). m"


def test_code_block_has_its_language_and_a_copy_button(render: Any) -> None:
    out = render("text\n\n```python title=x\nprint('<b>')\n```\n\n    indented code")[0]
    assert out["html"].count('class="md-pre"') == 2
    assert '<span class="md-lang">python</span>' in out["html"]
    assert '<code class="lang-python">print(\'&lt;b&gt;\')</code>' in out["html"]
    assert '<button class="md-copy" type="button">copy</button>' in out["html"]
    assert "<code>indented code</code>" in out["html"]


BOUNDS = """async (size) => {
  const md = await import('/viewer/markdown.js');
  const plain = (node) => node.firstChild.className === 'md-plain';
  const big = 'x\\n'.repeat(md.BIG / 2 + 1);
  const many = '- a\\n'.repeat(md.ELEMENTS);
  const deep = '> '.repeat(40) + 'end';
  const emph = '*a **a '.repeat(5000) + 'b' + ' a** a*'.repeat(5000);
  const long = 'line\\n'.repeat(5000);
  const out = {};
  for (const [name, text] of Object.entries({big, many, deep, emph})) {
    const node = md.renderMarkdown(text);
    out[name] = {plain: plain(node), same: node.textContent === text, text: node.textContent,
                 depth: Math.max(...[...node.querySelectorAll('*')].map((e) => {
                   let d = 0; for (let p = e; p !== node; p = p.parentNode) d++; return d; }))};
  }
  const code = md.codeBlock(long, 'txt').querySelector('code');
  out.parts = {count: code.querySelectorAll('.md-part').length, same: code.textContent === long};
  out.shallow = plain(md.renderMarkdown('> '.repeat(8) + 'end'));
  return out;
}"""


def test_bounds_show_the_text_as_written(render: Any) -> None:
    """Past the bounds of markdown.js (characters, elements, block nesting) a
    text is shown whole as preformatted text; emphasis nested 10,000 deep is
    flattened past 24 levels without losing a character; a long code block is
    split into parts the browser lays out only near the viewport."""
    out = render.page.evaluate(BOUNDS, 0)
    for name in ("big", "many", "deep"):
        assert out[name]["plain"] and out[name]["same"], (name, out[name]["depth"])
    assert not out["emph"]["plain"] and out["emph"]["depth"] <= 25
    assert out["emph"]["text"] == "a a " * 5000 + "b" + " a a" * 5000
    assert out["parts"] == {"count": 25, "same": True}  # 200 lines each
    assert out["shallow"] is False


PAINT = """async (text) => {
  const md = await import('/viewer/markdown.js');
  const box = document.body.appendChild(document.createElement('div'));
  const start = performance.now();
  const node = md.renderMarkdown(text);
  box.append(node);
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const ms = performance.now() - start;
  const all = [...node.querySelectorAll('*')];
  const out = {
    ms,
    text: node.textContent.length,
    tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))],
    hrefs: all.filter((e) => e.hasAttribute('href')).map((e) => e.getAttribute('href')),
  };
  box.remove();
  return out;
}"""
# 30x the target of issue 17 item 12 (a million hostile characters on screen in
# under a second, which bench/viewer.py measures and prints): loose enough for a
# machine at load 12 (issue 43: tests failed by time there), far too tight for a
# quadratic renderer (the hand-written one took 30 s for 200,000 "[", so minutes
# for a million).
LINEAR_BOUND_MS = 30_000.0


@functools.cache
def _hostile() -> dict[str, str]:
    return {**ISSUE, **{f"{name} (1M)": text for name, text in cases(1_000_000).items()}}


@pytest.mark.parametrize("name", list(_hostile()))
def test_hostile_input_renders_in_linear_time(render: Any, name: str) -> None:
    """Each input of issue 17 item 12 and of tests/viewer/pathological.py at a
    million characters is rendered and painted within LINEAR_BOUND_MS, and
    still yields only allowed elements and links."""
    source = _hostile()[name]
    out = render.page.evaluate(PAINT, source)
    assert out["ms"] < LINEAR_BOUND_MS, f"{name}: {out['ms']:.0f} ms"
    assert set(out["tags"]) <= ALLOWED_TAGS, out["tags"]
    assert all(h.startswith(("https://", "http://", "mailto:")) for h in out["hrefs"])
    assert out["text"] > 0
