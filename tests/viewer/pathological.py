"""Hostile Markdown for the viewer's renderer: the inputs of issue 17 item 12, and
cmark's pathological tests (commonmark/cmark ``test/pathological_tests.py``),
stretched to a given length, plus GitHub extensions (tables, strikethrough, bare
URLs) that cmark does not test. Each one took a quadratic or worse path in some
Markdown parser, ours (the hand-written markdown.js before markdown-it) included.

Used by tests/viewer/test_markdown.py and bench/viewer.py."""

from __future__ import annotations

ISSUE = {  # issue 17 item 12, at the sizes it reported
    "[ x 60,000": "[" * 60_000,
    "[ x 200,000": "[" * 200_000,
    "*a  x 30,000": "*a " * 30_000,
    "**a  x 30,000": "**a " * 30_000,
    "~~a  x 30,000": "~~a " * 30_000,
}


def _fill(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def cases(size: int = 1_000_000) -> dict[str, str]:
    """Name -> a text of about ``size`` characters (never more)."""
    half = size // 2
    nested_lists = []
    length = 0
    for depth in range(size):  # cmark: "  " * x + "* a\n", as deep as fits
        line = "  " * depth + "* a\n"
        if length + len(line) > size:
            break
        nested_lists.append(line)
        length += len(line)
    backticks = []
    length = 0
    for run in range(1, size):
        piece = "e" + "`" * run
        if length + len(piece) > size:
            break
        backticks.append(piece)
        length += len(piece)
    pairs = size // 14
    references = size // 20
    return {
        "[": _fill("[", size),
        "*a ": _fill("*a ", size),
        "**a ": _fill("**a ", size),
        "~~a ": _fill("~~a ", size),
        "nested strong emph": "*a **a " * pairs + "b" + " a** a*" * pairs,
        "emph closers without openers": _fill("a_ ", size),
        "emph openers without closers": _fill("_a ", size),
        "link closers without openers": _fill("a]", size),
        "link openers without closers": _fill("[a", size),
        "mismatched openers and closers": _fill("*a_ ", size),
        "openers and closers multiple of 3": "a**b" + _fill("c* ", size - 4),
        "link openers and emph closers": _fill("[ a_", size),
        "pattern [ (](": _fill("[ (](", size),
        "pattern ![[]()": _fill("![[]()", size),
        "nested brackets": "[" * (half - 1) + "a" + "]" * half,
        "nested block quotes": "> " * (half - 1) + "a",
        "deeply nested lists": "".join(nested_lists),
        "backticks": "".join(backticks),
        "unclosed links A": _fill("[a](<b", size),
        "unclosed links B": _fill("[a](b", size),
        "many references": "".join(f"[{n}]: u\n" for n in range(references))
                           + _fill("[0] ", size // 4),
        "unclosed autolinks": _fill("<http://a ", size),
        "bare URLs": _fill("http://a.b/(c ", size),
        "backslashes": _fill("\\", size),
        "entities": _fill("&#", size),
        "one-character lines": _fill("a\n", size),
        "headings": _fill("# a\n", size),
        "setext headings": _fill("a\n-\n", size),
        "table rows": "|a|b|\n|-|-|\n" + _fill("|x|y|\n", size - 12),
        "table columns": "|" + "a|" * 500 + "\n|" + "-|" * 500 + "\n" + _fill("|\n", size - 2004),
        "fences": _fill("```\n", size),
        "chat prose": _fill("Some *chat* with **bold**, `code`, ~~old~~ and "
                            "[a link](https://example.com/a_(b)). ", size),
    }
