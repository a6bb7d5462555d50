"""The viewer's Markdown renderer (viewer/markdown.js), run in Chromium: what it
makes of ordinary chat text, and that no input, however hostile, yields an
element or attribute outside a short allow-list."""

from __future__ import annotations

import random
from typing import Any

import pytest

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


@pytest.fixture(scope="module")
def render(browser: Any, site: Any) -> Any:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{site.url}/")  # an HTML page of this origin (it asks for a key)

    def run(*texts: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = page.evaluate(RENDER, list(texts))
        return result

    yield run
    context.close()


CASES = [
    ("**bold** and *it* and `code`",
     '<p><strong>bold</strong> and <em>it</em> and <code class="md-code">code</code></p>'),
    ("snake_case_name stays", "<p>snake_case_name stays</p>"),
    ("line one\nline two", "<p>line one<br>line two</p>"),
    ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
    ("3. c\n4. d", '<ol start="3"><li>c</li><li>d</li></ol>'),
    ("## Title", '<h4 class="md-h md-h2">Title</h4>'),
    ("> quoted", "<blockquote><p>quoted</p></blockquote>"),
    ("a <b>tag</b> & more", "<p>a &lt;b&gt;tag&lt;/b&gt; &amp; more</p>"),
    ("see https://example.com/x_(y).",
     '<p>see <a href="https://example.com/x_(y)" target="_blank" '
     'rel="noopener noreferrer nofollow" referrerpolicy="no-referrer">'
     "https://example.com/x_(y)</a>.</p>"),
    ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"),
    ("\\*not em\\*", "<p>*not em*</p>"),
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
