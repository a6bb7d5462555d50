"""Where a long text may be cut so that its token count is the sum of its slices'.

OpenAI's encodings (``cl100k_base``, ``o200k_base``) first cut a text into pieces
with a regular expression (the pre-tokenizer) and then apply BPE to each piece on
its own: a text cut where the pre-tokenizer cuts has exactly the count of the whole,
whatever counts the slices. ``slices`` cuts only at positions that both encodings'
pre-tokenizers always cut at, whatever surrounds them, judged from two ASCII
characters (so no Unicode table, which could differ between Python's and a
tokenizer's, decides a cut):

- a printable non-space character followed by a space (a piece never runs from a
  non-space into a space: the space starts the next word, punctuation or
  whitespace piece);
- a letter or digit followed by punctuation other than ``'`` (which may start a
  contraction such as ``'s``), a letter followed by a digit, a digit followed by a
  letter, punctuation followed by a digit (letters, digits and punctuation are
  pieces of different kinds; a digit never prefixes a piece).

A stretch with none of those (8 MB of ``x``, a text without ASCII, a long run of
one punctuation mark or of whitespace) may be one piece, and it is returned whole:
``EncodingCounter`` counts such a stretch with ``bpe-openai``, whose BPE is linear
in a piece's length, where fastokens' and tiktoken's grow faster
(docs/tokens.md). Nothing here reads the text's characters in Python one by one:
the cuts are found by one compiled pattern searched a window at a time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["CUT", "slices"]

CUT = re.compile(r"[!-~] |[A-Za-z0-9][!-&(-/:-@\[-`{-~]|[A-Za-z][0-9]|[0-9][A-Za-z]"
                 r"|[!-/:-@\[-`{-~][0-9]")
"""Two characters between which both pre-tokenizers cut (the cut is after the first)."""


def _last_cut(text: str, low: int, high: int) -> int | None:
    """The last cut position in ``[low, high]`` (None: none)."""
    found = None
    for match in CUT.finditer(text, low - 1, high + 1):
        found = match.start() + 1
    return found


_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]*")
_BLOCK = 64 * 1024


def _cut_free(chars: str) -> bool:
    """Whether ``chars`` is all letters, all digits, all whitespace or all ASCII
    punctuation, which holds no cut (every cut needs two of those kinds), checked in
    C: a long stretch of one kind is passed over without the pattern, which costs
    several times as much a character."""
    return (chars.isalpha() or chars.isdigit() or chars.isspace()
            or _PUNCTUATION.fullmatch(chars) is not None)


def _first_cut(text: str, low: int, high: int | None = None) -> int | None:
    """The first cut position in ``[low, high]`` (``high`` None: to the end), searched
    a block at a time (the blocks overlap by a character: a cut between them is seen)."""
    end = len(text) if high is None else min(high + 1, len(text))
    at = low - 1
    while end - at > 1:
        stop = min(end, at + _BLOCK)
        if not _cut_free(text[at:stop]):
            match = CUT.search(text, at, stop)
            if match is not None:
                return match.start() + 1
        at = stop - 1
    return None


def slices(text: str, size: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of consecutive slices covering ``text``, each cut where the
    pre-tokenizers cut: a slice of at most ``size`` characters, or a longer stretch
    in which no cut lies less than ``size`` characters from its start (counted whole).
    A slice is at least ``size // 2`` long unless a stretch without a cut follows it,
    so a text has about ``2 * len(text) / size`` slices at most, and each window of
    ``size`` characters is searched once or twice."""
    if size < 2:
        raise ValueError("slices of at least 2 characters")
    n, start, half = len(text), 0, size // 2
    while n - start > size:
        cut = _first_cut(text, start + half, start + size)
        if cut is None:  # no cut in the second half: the last one in the first
            cut = _last_cut(text, start + 1, start + half - 1)
        if cut is None:  # none within ``size``: a stretch, to the next cut (or the end)
            cut = _first_cut(text, start + size + 1) or n
        yield start, cut
        start = cut
    if start < n:
        yield start, n
