"""Long texts are counted in slices cut where the pre-tokenizers cut (issue 43, item 10):
the same count as the reference counter (``bpe-openai``, tiktoken's counts) on any
text, and a bounded amount of work per character however long a text's pieces are
(fastokens' and tiktoken's counts grow faster than the length of a piece: 8 MiB of
``x`` took fastokens about 24 s)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chathistory import tokens
from chathistory.token_slices import CUT, slices
from chathistory.tokens import EncodingCounter

ENCODINGS = ("o200k_base", "cl100k_base")

# runs of one character (the pieces that grow without bound), the characters around
# the cuts, special-token text, contractions, digits, marks, scripts without spaces
_RUNS = ["x", "X", "7", " ", "\n", "\t", "\r\n", "!", "'", "/", "é", "e\u0301", "日", "🎉",
         "\u00a0", "ǅ", "x1", "a!", "<|endoftext|>", "'s", "I'M", "٣", "\u3000"]
_WORDS = ["<|endoftext|>", "<|fim_prefix|>", " 's", "'re ", "Hello, world!", "123456",
          " naïve café", "日本語のテキスト", "def f(x):\n    return x", "a/b/c", "--", "\n\n"]
_PIECE = st.one_of(
    st.tuples(st.sampled_from(_RUNS), st.integers(1, 60)).map(lambda run: run[0] * run[1]),
    st.sampled_from(_WORDS),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
    st.text(alphabet=" !\"#'(),-./0123456789:;?ABCXYZabcxyz_\n", max_size=30),
)
TEXTS = st.lists(_PIECE, max_size=12).map("".join)


def _reference(encoding: str) -> Callable[[str], int]:
    return tokens._bpe_openai_count(encoding)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def patterns() -> dict[str, Any]:
    """Each encoding's pre-tokenizer, tiktoken's own pattern (``regex`` module)."""
    regex = pytest.importorskip("regex")
    public = pytest.importorskip("tiktoken_ext.openai_public")
    found: dict[str, Any] = {}
    for name in ENCODINGS:
        with mock.patch.object(public, "load_tiktoken_bpe", lambda *a, **k: {}):
            found[name] = regex.compile(getattr(public, name)()["pat_str"])
    return found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, size=st.integers(2, 24))
def test_every_cut_is_a_piece_boundary_of_both_encodings(patterns: dict[str, Any], text: str,
                                                          size: int) -> None:
    """The slices cover the text in order, and every cut between them is where
    tiktoken's pattern ends a piece, for both encodings: BPE never sees across it."""
    spans = list(slices(text, size))
    assert [s for s, _ in spans] == ([0, *[e for _, e in spans[:-1]]] if text else [])
    assert (spans[-1][1] if spans else 0) == len(text)
    for start, end in spans:  # a slice over ``size`` has no cut near its start
        assert end - start <= size or CUT.search(text, start, start + size + 1) is None
    cuts = {end for _, end in spans[:-1]}
    for name, pattern in patterns.items():
        ends = {m.end() for m in pattern.finditer(text)}
        assert cuts <= ends, (name, sorted(cuts - ends))


@contextmanager
def _slice_chars(size: int) -> Iterator[None]:
    with mock.patch.object(tokens, "SLICE_CHARS", size):
        yield


@pytest.fixture(scope="module")
def gil_free() -> dict[str, dict[str, Callable[[str], int]]]:
    """The counts that grow faster than a piece's length: fastokens and tiktoken."""
    built: dict[str, dict[str, Callable[[str], int]]] = {}
    for package, build in (("fastokens", tokens._fastokens_count),
                           ("tiktoken", tokens._tiktoken_count)):
        pytest.importorskip(package)
        built[package] = {name: build(name) for name in ENCODINGS}  # type: ignore[misc]
    return built


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, size=st.integers(2, 24), encoding=st.sampled_from(ENCODINGS),
       package=st.sampled_from(["fastokens", "tiktoken", "bpe-openai"]))
def test_a_text_counted_in_slices_counts_as_the_reference_does(
        gil_free: dict[str, dict[str, Callable[[str], int]]], text: str, size: int,
        encoding: str, package: str) -> None:
    """Whatever counts the slices (fastokens for a thread alone, tiktoken while threads
    count at once, bpe-openai), the sum is the reference counter's count of the whole
    text, special-token text included."""
    counter = EncodingCounter(encoding)
    count = _reference(encoding) if package == "bpe-openai" else gil_free[package][encoding]
    with _slice_chars(size):
        assert counter._count_with(count, text) == _reference(encoding)(text)


def _adversarial(size: int) -> dict[str, str]:
    rng = random.Random(43)
    letters = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=size))
    return {
        "x": "x" * size, "digits": "7" * size, "é": "é" * size, "marks": "e\u0301" * (size // 2),
        "cjk": "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(size)),
        "emoji": "🎉" * (size // 2), "!": "!" * size, "spaces": " " * size,
        "newlines": "\n" * size, "letters": letters, "endoftext": "<|endoftext|>" * (size // 13),
        "mixed": "".join(rng.choice(["x" * 5000, " ", "7" * 700, "日本" * 900, "!?", "\n\n",
                                     "<|endoftext|>", "it's ", "a1b2", "\t"])
                         for _ in range(size // 900)),
        "random": "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0x3000)]))
                          for _ in range(size)),
    }


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_long_adversarial_texts_count_as_the_reference_does(
        gil_free: dict[str, dict[str, Callable[[str], int]]], encoding: str) -> None:
    """300,000 characters of each: runs of one letter, digit, accented and CJK letter,
    emoji, punctuation mark, space and newline, random letters, special-token text, a
    mix of long runs and words, random characters; at the real ``SLICE_CHARS``."""
    counter = EncodingCounter(encoding)
    for kind, text in _adversarial(300_000).items():
        expected = _reference(encoding)(text)
        for package in ("fastokens", "tiktoken"):
            got = counter._count_with(gil_free[package][encoding], text)
            assert got == expected, (kind, package)


def _spy(calls: list[int], count: Callable[[str], int]) -> Callable[[str], int]:
    def counting(text: str) -> int:
        calls.append(len(text))
        return count(text)
    return counting


@pytest.mark.parametrize("text", ["x" * (8 << 20), ("word " * (8 << 20 // 5)),
                                  ("x" * 50_000 + " ") * 160],
                         ids=["8 MiB of x", "8 MiB of words", "runs of 50,000 x"])
def test_a_count_does_a_bounded_amount_of_work_whatever_the_text(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """fastokens (whose count grows faster than a piece's length) is never given more
    than ``SLICE_CHARS`` characters; what it is not given goes to bpe-openai, whose
    count is linear in a piece's length; the number of calls is about twice the
    text's length over ``SLICE_CHARS`` at most. (It was one call of 8 MiB: 24 s for
    ``x``.) Counted calls, not time."""
    pytest.importorskip("fastokens")
    monkeypatch.setattr(tokens, "_sharing", True)  # a server made in another test
    monkeypatch.setattr(tokens, "_offload", None)  # (and its counting processes)
    counter = EncodingCounter("o200k_base")
    monkeypatch.setattr(counter, "_crowded", lambda: False)
    fast_calls: list[int] = []
    linear_calls: list[int] = []
    counter._fast = _spy(fast_calls, tokens._fastokens_count("o200k_base"))  # type: ignore[arg-type]
    counter._fast_asked = True
    counter._count = _spy(linear_calls, _reference("o200k_base"))
    assert counter.count_text(text) == _reference("o200k_base")(text)
    assert max(fast_calls, default=0) <= tokens.SLICE_CHARS
    assert len(fast_calls) + len(linear_calls) <= 2 * len(text) // tokens.SLICE_CHARS + 2
    assert sum(fast_calls) + sum(linear_calls) == len(text)  # each character once
    if text.startswith("x" * 50_000):
        assert linear_calls, "the long runs go to the linear count"
    else:
        assert fast_calls and not linear_calls, "text with cuts is fastokens' alone"


def test_the_counting_process_counts_in_slices_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``count_here`` (what the server's counting process runs) slices as
    ``count_text`` does."""
    pytest.importorskip("fastokens")
    fast_calls: list[int] = []
    counter = EncodingCounter("o200k_base")
    counter._fast = _spy(fast_calls, tokens._fastokens_count("o200k_base"))  # type: ignore[arg-type]
    counter._fast_asked = True
    monkeypatch.setitem(tokens._local_counters, "o200k_base", counter)
    text = "word " * 100_000
    assert tokens.count_here("o200k_base", text) == _reference("o200k_base")(text)
    assert fast_calls and max(fast_calls) <= tokens.SLICE_CHARS


def test_slices_refuse_a_size_below_two() -> None:
    with pytest.raises(ValueError):
        list(slices("abc", 1))
