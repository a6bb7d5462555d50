"""What to call a session, in one rule shared by the CLI and the service.

A session's title is its metadata's ``title``, ``name`` or ``subject`` (the first
non-blank string, taken as plain text), else the text of its first user message
with the Markdown stripped; either is cut to a limit with "…". Markdown is read by
markdown-it-py (CommonMark, plus GFM tables and strikethrough) rather than by
regular expressions, so ``snake_case_name`` and ``2 * 3 * 4`` survive while
``**bold**``, ``[links](url)``, ``# headings``, fences and ``\\*`` escapes go.
Raw HTML is read as text: a user who types ``<vector>`` meant the word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["PREVIEW_LIMIT", "TITLE_KEYS", "TITLE_LIMIT", "metadata_title", "plain_preview",
           "session_title", "strip_markdown", "truncate"]

TITLE_LIMIT = 120
PREVIEW_LIMIT = 160
TITLE_KEYS = ("title", "name", "subject")
# Only a prefix of a long message is parsed: a title needs its first words, and a
# pasted 1 MB log should not cost a full parse. Generous, since markup shrinks.
_PARSE_CHARS = 4_000


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable(
        ["html_inline", "html_block"])


def _inline_text(children: Iterable[Token]) -> Iterable[str]:
    for child in children:
        if child.type in ("text", "code_inline"):
            yield child.content
        elif child.type in ("softbreak", "hardbreak"):
            yield " "
        elif child.type == "image":
            # an image's alt text lives in its children
            yield from _inline_text(child.children or ())


def strip_markdown(text: str) -> str:
    """The plain text of Markdown ``text``, whitespace collapsed to single spaces.

    Emphasis, links (their text kept), headings, list and quote markers, code
    fences (their code kept) and backslash escapes are removed.
    """
    pieces: list[str] = []
    for token in _parser().parse(text):
        if token.type == "inline":
            pieces.extend(_inline_text(token.children or ()))
        elif token.type in ("fence", "code_block"):
            pieces.append(token.content)
        pieces.append(" ")  # block boundaries separate words
    return " ".join("".join(pieces).split())


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut.

    The cut falls on a word boundary when one is near the end.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    space = head.rfind(" ")
    if space >= (limit * 3) // 4:
        head = head[:space]
    return head.rstrip() + "…"


@lru_cache(maxsize=256)
def _plain_start(text: str) -> str:
    """The plain text of the start of ``text`` (a listing asks for a message's title
    and its preview in a row: one parse, ~45 us for a short message)."""
    return strip_markdown(text[:_PARSE_CHARS])


def plain_preview(text: str | None, limit: int = PREVIEW_LIMIT) -> str | None:
    """Markdown ``text`` as plain text cut to ``limit``; None when nothing is left.
    Only the first 4,000 characters of ``text`` are read."""
    if not text:
        return None
    plain = _plain_start(text)
    return truncate(plain, limit) if plain else None


def metadata_title(metadata: Mapping[str, Any] | None) -> str | None:
    """The first non-blank string among ``TITLE_KEYS`` in ``metadata``, spaces collapsed."""
    for key in TITLE_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str):
            collapsed = " ".join(value.split())
            if collapsed:
                return collapsed
    return None


def session_title(metadata: Mapping[str, Any] | None, first_user_text: str | None,
                  limit: int = TITLE_LIMIT) -> str | None:
    """A session's title: its metadata title, else its first user message in plain text.

    Cut to ``limit`` characters with "…"; None when the metadata has no title and
    there is no user text.
    """
    named = metadata_title(metadata)
    if named is not None:
        return truncate(named, limit)
    return plain_preview(first_user_text, limit)
