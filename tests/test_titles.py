"""The title rule shared by the CLI and the service (chathistory.titles)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chathistory import titles
from chathistory.titles import plain_preview, session_title, strip_markdown, truncate


def test_all_is_pinned() -> None:
    assert titles.__all__ == sorted(titles.__all__)
    assert set(titles.__all__) == {"PREVIEW_LIMIT", "TITLE_KEYS", "TITLE_LIMIT",
                                   "metadata_title", "plain_preview", "session_title",
                                   "strip_markdown", "truncate"}


@pytest.mark.parametrize(("markdown", "plain"), [
    (r"512 \* 512 pixels", "512 * 512 pixels"),
    ("make it **bold** and *soft* and _this_", "make it bold and soft and this"),
    ("see [the docs](https://example.com/x) now", "see the docs now"),
    ("# A heading\n\nbody text", "A heading body text"),
    ("```python\nprint(1)\n```\nwhy?", "print(1) why?"),
    ("call `f(x)` twice", "call f(x) twice"),
    ("- one\n- two\n\n> quoted", "one two quoted"),
    ("![a cat](cat.png) sleeping", "a cat sleeping"),
    ("~~old~~ new", "old new"),
    ("fish &amp; chips", "fish & chips"),
    ("  many\n\n   spaces\t here  ", "many spaces here"),
    # not Markdown markup: kept as written
    ("snake_case_name and 2 * 3 * 4", "snake_case_name and 2 * 3 * 4"),
    ("what does <vector> do in C++?", "what does <vector> do in C++?"),
    ("", ""),
])
def test_strip_markdown(markdown: str, plain: str) -> None:
    assert strip_markdown(markdown) == plain


def test_truncate_cuts_on_a_word_and_marks_the_cut() -> None:
    assert truncate("short", 10) == "short"
    assert truncate("exactly10!", 10) == "exactly10!"
    assert truncate("the quick brown fox jumps", 16) == "the quick brown…"
    assert truncate("abcdefghijklmnop", 8) == "abcdefg…"
    with pytest.raises(ValueError, match="limit"):
        truncate("x", 0)


@given(st.text(), st.integers(min_value=1, max_value=300))
def test_truncate_never_exceeds_the_limit(text: str, limit: int) -> None:
    cut = truncate(text, limit)
    assert len(cut) <= limit
    assert cut == text or (cut.endswith("…") and text.startswith(cut[:-1]))


@given(st.text())
def test_strip_markdown_is_collapsed(text: str) -> None:
    plain = strip_markdown(text)
    assert plain == " ".join(plain.split())


def test_metadata_title_comes_first_in_key_order_as_plain_text() -> None:
    assert session_title({"title": "__init__ trouble"}, "hi") == "__init__ trouble"
    assert session_title({"name": "N", "subject": "S"}, "hi") == "N"
    assert session_title({"subject": " a\n b "}, "hi") == "a b"
    # blank or non-string titles fall through to the next key, then to the message
    assert session_title({"title": "  ", "name": 7, "subject": "S"}, "hi") == "S"
    assert session_title({"title": ""}, "**Fix** the `build`") == "Fix the build"


def test_first_user_message_is_stripped_and_cut() -> None:
    title = session_title(None, "## " + "word " * 100)
    assert title is not None and len(title) <= 120 and title.endswith("…")
    assert title.startswith("word word")
    assert session_title({}, "abc", limit=2) == "a…"
    long_title = session_title({"title": "t" * 200}, None)
    assert long_title == "t" * 119 + "…"


def test_no_title_at_all_is_none() -> None:
    assert session_title({}, None) is None
    assert session_title(None, "") is None
    assert session_title({}, "```\n```") is None  # only markup
    assert plain_preview(None) is None


def test_a_huge_message_gives_its_first_words() -> None:
    text = "hello there " + "x" * 10_000 + "\n```\n" + "code " * 100_000
    assert plain_preview(text, 20) == "hello there xxxxxxx…"
