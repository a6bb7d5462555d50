"""Token counters: exact offline encodings, caching, formulas, plug-ins."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chathistory import Attachment, History, ImagePart, Message, get_counter, tokens
from chathistory.tokens import (
    ApproxCounter,
    CallableCounter,
    EncodingCounter,
    TokenCounter,
    anthropic_image_tokens,
    cached_count,
    openai_image_tokens,
)

# Reference counts from tiktoken 0.x for these strings (o200k_base / cl100k_base).
KNOWN = [
    ("hello world", 2, 2),
    ("", 0, 0),
    ("The quick brown fox jumps over the lazy dog.", 10, 10),
]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN)
def test_known_counts(text: str, o200k: int, cl100k: int) -> None:
    assert get_counter("o200k_base").count_text(text) == o200k
    assert get_counter("cl100k_base").count_text(text) == cl100k


def test_special_token_text_counts_as_ordinary_text() -> None:
    counter = get_counter("o200k_base")
    # '<|endoftext|>' in user text is not the special token: several ordinary tokens
    assert counter.count_text("<|endoftext|>") > 1


def test_bpe_openai_matches_tiktoken_built_from_the_same_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tiktoken cannot download here; build it from bpe-openai's table files and
    compare counts on varied text: the two must agree exactly."""
    tiktoken = pytest.importorskip("tiktoken")
    import gzip
    from importlib import resources

    public = pytest.importorskip("tiktoken_ext.openai_public")
    texts = [
        "Hello, world! 123 4567 89012",
        "Ünïcödé  naïve café — 日本語のテキスト, 中文, 한국어 🎉🎉",
        "def f(x):\n    return x ** 2  # comment\n\n\n\tindented",
        "   leading spaces and trailing   ",
        "<|endoftext|> in the middle <|fim_prefix|>",
        "'s 're 've 'll 'd I'M YOU'RE",
        "a" * 1000 + " " + "ab" * 300,
    ]
    for name in ("o200k_base", "cl100k_base"):
        raw = gzip.decompress(
            resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes()
        )
        import base64

        ranks = {
            base64.b64decode(tok): int(rank)
            for tok, rank in (line.split() for line in raw.splitlines() if line)
        }
        # tiktoken's own constructor (pattern, special tokens) with the table from disk
        monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *a, _r=ranks, **k: _r)
        spec = getattr(public, name)()
        enc = tiktoken.Encoding(name=spec["name"], pat_str=spec["pat_str"],
                                mergeable_ranks=ranks, special_tokens=spec["special_tokens"])
        ours = EncodingCounter(name)
        fallback = tokens._bpe_openai_count(name)
        for text in texts:
            expected = len(enc.encode_ordinary(text))
            assert ours.count_text(text) == expected == fallback(text), (name, text)


_SHARED_TEXTS = st.lists(
    st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
        ["<|endoftext|>", "'s", " ", "  ", "\n", "\r\n", "\t", "é", "日本", "🎉", "123456",
         "ǅ", "Hello", "WORLD", "naïve", "def f(x):"]),
    max_size=60).map("".join)


def _hide_imports(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Importing any of ``packages`` (or a module in one) raises ImportError, as where
    they are not installed."""
    import builtins
    real_import = builtins.__import__

    def hidden(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in packages:
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", hidden)


@pytest.fixture
def holding_the_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters made in the test count as where fastokens is not installed
    (``bpe-openai``, which holds the GIL: the path that shares counts)."""
    monkeypatch.setattr(tokens, "_fastokens_count", lambda encoding: None)


_BUILDS = {"fastokens": tokens._fastokens_count, "tiktoken": tokens._tiktoken_count}


def _built(package: str) -> dict[str, Any]:
    """``package``'s count for each encoding, built from bpe-openai's tables."""
    pytest.importorskip(package)
    return {name: _BUILDS[package](name) for name in ("o200k_base", "cl100k_base")}


@pytest.fixture(scope="module")
def fastokens_counts() -> dict[str, Any]:
    return _built("fastokens")


@pytest.fixture(scope="module", params=sorted(_BUILDS))
def gil_free_counts(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _built(request.param)


@settings(max_examples=300, deadline=None)
@given(text=_SHARED_TEXTS, name=st.sampled_from(["o200k_base", "cl100k_base"]))
def test_the_gil_free_counts_count_as_bpe_openai_does(
        gil_free_counts: dict[str, Any], text: str, name: str) -> None:
    """The counts that let the GIL go, fastokens (for a thread alone) and tiktoken (for
    long texts while threads count at once), each built from bpe-openai's tables with
    tiktoken's split pattern and without tiktoken's download, count what bpe-openai
    counts (and so tiktoken: the test above), special-token text included."""
    assert gil_free_counts[name](text) == tokens._bpe_openai_count(name)(text)


def test_fastokens_counts_long_texts_as_bpe_openai_does(
        fastokens_counts: dict[str, Any]) -> None:
    """Long texts too (fastokens cuts a long input across threads; a release of it
    once cut o200k's pieces wrongly there): texts of 64 KB to 1 MB of varied
    pieces, joined in different ways."""
    import random
    pieces = ["Hello, world!", " naïve café", "日本語のテキスト", "def f(x):\n    return x",
              "   ", "\n\n", "'s 're", "12345678", "🎉🎉", "<|endoftext|>", "ǅemal", "\t\t"]
    rng = random.Random(5)
    for size in (64_000, 256_000, 1_000_000):
        text = "".join(rng.choice(pieces) + rng.choice(["", " ", "\n"])
                       for _ in range(size // 8))
        for name in ("o200k_base", "cl100k_base"):
            assert fastokens_counts[name](text) == tokens._bpe_openai_count(name)(text)


def test_a_thread_counting_alone_counts_with_fastokens(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    pytest.importorskip("fastokens")
    monkeypatch.setattr(tokens, "_sharing", True)  # a server made in another test
    counter = EncodingCounter("o200k_base")
    assert counter.count_text("hello world") == 2
    assert counter._fast is tokens._fastokens_count("o200k_base")
    assert counter._count is None  # bpe-openai never loaded


def test_without_fastokens_the_counter_counts_with_bpe_openai(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_imports(monkeypatch, "fastokens")
    monkeypatch.setattr(tokens, "_fastokens_count", tokens._fastokens_count.__wrapped__)
    assert tokens._fastokens_count("o200k_base") is None
    monkeypatch.setattr(tokens, "_sharing", True)
    counter = EncodingCounter("o200k_base")
    assert counter.count_text("hello world") == 2
    assert counter._fast is None and counter._count is not None


def _two_threads_take_turns(counter: EncodingCounter, text: str) -> list[int]:
    """Counts of ``text`` by two threads taking turns, 10 each, in order."""
    turns = [threading.Event(), threading.Event()]
    found: list[list[int]] = [[], []]

    def counting(me: int) -> None:
        for _ in range(10):
            assert turns[me].wait(5)
            turns[me].clear()
            found[me].append(counter.count_text(text))
            turns[1 - me].set()
    threads = [threading.Thread(target=counting, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    turns[0].set()
    for t in threads:
        t.join()
    return found[0] + found[1]


@pytest.mark.parametrize("sharing", [True, False])
def test_counts_are_shared_only_while_threads_count_at_once(
        monkeypatch: pytest.MonkeyPatch, holding_the_gil: None, sharing: bool) -> None:
    """Where fastokens is not installed. One thread counting: bpe-openai always. Two
    threads taking turns within the window: the shared counter (tiktoken), the same
    counts; unless ``share_counts`` turned that off (the server does)."""
    monkeypatch.setattr(tokens, "_sharing", True)
    tokens.share_counts(sharing)
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 60.0)  # a slow machine still takes turns
    counter = EncodingCounter("o200k_base")
    shared = tokens._tiktoken_count("o200k_base")
    if shared is None:
        pytest.skip("tiktoken is not installed")
    used: list[str] = []

    def spy(text: str) -> int:
        used.append(text)
        return shared(text)  # type: ignore[misc]
    counter._shared, counter._shared_asked = spy, True
    long = "the quick brown fox jumps over the lazy dog " * 20
    alone = [counter.count_text(long) for _ in range(20)]
    assert used == []
    assert counter.count_text("short") == 1 and used == []

    assert _two_threads_take_turns(counter, long) == alone
    if sharing:  # every count (the first follows the main thread's)
        assert len(used) == 20
    else:
        assert used == []


def test_a_tiktoken_that_loads_its_tables_otherwise_is_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken's constructor is called with bpe-openai's tables in place of its loader;
    a constructor that no longer calls that loader would download: it is not called."""
    public = pytest.importorskip("tiktoken_ext.openai_public")
    called: list[str] = []

    def o200k_base() -> dict[str, Any]:
        called.append("o200k_base")
        raise AssertionError("the constructor ran")
    monkeypatch.setattr(public, "o200k_base", o200k_base)
    assert tokens._tiktoken_count.__wrapped__("o200k_base") is None
    assert called == []


def test_without_tiktoken_threads_count_with_bpe_openai(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    _hide_imports(monkeypatch, "tiktoken", "tiktoken_ext")
    monkeypatch.setattr(tokens, "_tiktoken_count", tokens._tiktoken_count.__wrapped__)
    assert tokens._tiktoken_count("o200k_base") is None
    counter = EncodingCounter("o200k_base")
    assert counter.load_shared() is False
    assert counter._shared is None
    assert counter.count_text("hello world") == 2


def test_message_overhead_follows_openai_cookbook() -> None:
    c = get_counter("o200k_base")
    m = Message.user("hello world")
    assert c.count_message(m) == 3 + c.count_text("user") + 2
    named = Message.user("hello world", name="alice")
    assert c.count_message(named) == c.count_message(m) + 1 + c.count_text("alice")
    assert c.priming_tokens == 3


def test_counts_are_cached_once_per_counter() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    counter = CallableCounter(count, name="words")
    m = Message.user("one two three")
    first = cached_count(m, counter)
    n_calls = len(calls)
    assert cached_count(m, counter) == first
    assert len(calls) == n_calls  # not re-counted
    assert m.token_counts == {"words": first}
    restored = Message.from_json(m.to_json())
    assert cached_count(restored, counter) == first
    assert len(calls) == n_calls  # restored messages are not re-tokenized


def test_by_tokens_never_retokenizes() -> None:
    calls = 0

    def count(text: str) -> int:
        nonlocal calls
        calls += 1
        return len(text)

    h = History([Message.user(f"message {i}") for i in range(50)],
                counter=CallableCounter(count, name="chars"))
    h.by_tokens(100)
    after_first = calls
    h.by_tokens(100)
    h.by_tokens(50)
    assert calls == after_first
    h.add_user("one more")
    h.by_tokens(100)
    assert calls == after_first + 2  # the new message's role and text, once


def test_openai_image_formula() -> None:
    assert openai_image_tokens(4096, 4096, "low") == 85
    # OpenAI's documented examples: 1024x1024 -> 765, 2048x4096 -> 1105
    assert openai_image_tokens(1024, 1024) == 765
    assert openai_image_tokens(2048, 4096) == 1105
    assert openai_image_tokens(None, None) == 765


def test_anthropic_image_formula() -> None:
    assert anthropic_image_tokens(1000, 1000) == 1334  # documented: ~1334 for 1000x1000
    assert anthropic_image_tokens(3000, 3000) == anthropic_image_tokens(1568, 1568)


def test_image_tokens_from_attachment_dimensions(png_bytes: bytes) -> None:
    c = get_counter("o200k_base")
    m = Message.user("", Attachment.from_bytes(png_bytes))
    assert c.count_message(m) == 3 + c.count_text("user") + openai_image_tokens(4, 3)
    low = Message.user("", ImagePart(url="https://x/y.png", detail="low"))
    assert c.count_message(low) == 3 + c.count_text("user") + 85


def test_tool_calls_are_counted() -> None:
    c = get_counter("o200k_base")
    small = Message.assistant("", [{"id": "c", "name": "f", "arguments": {}}])
    big = Message.assistant("", [{"id": "c", "name": "f", "arguments": {"q": "word " * 50}}])
    assert c.count_message(big) > c.count_message(small) + 40


def test_get_counter_specs() -> None:
    assert get_counter().name == "o200k_base"
    assert get_counter("gpt-4o-mini") is get_counter("o200k_base")
    assert get_counter("gpt-4") is get_counter("cl100k_base")
    assert isinstance(get_counter("approx"), ApproxCounter)
    custom = ApproxCounter(3)
    assert get_counter(custom) is custom
    assert isinstance(get_counter(len), TokenCounter)
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_counter("no-such-model")
    with pytest.raises(ValueError, match="name"):
        CallableCounter(len, name="")


@pytest.mark.parametrize(("name", "encoding"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini-2024-07-18", "o200k_base"),
    ("chatgpt-4o-latest", "o200k_base"), ("gpt-4.1-nano", "o200k_base"),
    ("gpt-5", "o200k_base"), ("gpt-5.1-codex", "o200k_base"), ("o3-mini", "o200k_base"),
    ("ft:gpt-4o-mini:org::abc123", "o200k_base"), ("gpt-4", "cl100k_base"),
    ("gpt-4-turbo", "cl100k_base"), ("gpt-3.5-turbo-0125", "cl100k_base"),
    ("gpt-35-turbo", "cl100k_base"), ("text-embedding-3-small", "cl100k_base"),
    ("gpt-4o" + "-x" * 40, "o200k_base"),  # 86 characters: still a name
    ("gpt-4o-" + "x" * 100, None), ("o1x", None), ("gpt-4o mini", None), ("gpt-4o/..", None),
    ("llama-3", None), ("", None), ("ft:", None),
])
def test_model_names_come_from_a_closed_table(name: str, encoding: str | None) -> None:
    from chathistory.tokens import model_encoding

    assert model_encoding(name) == encoding


def test_the_counter_cache_never_holds_a_made_up_name() -> None:
    """Was: every name starting with a model prefix was cached, 4 MB names included."""
    import uuid

    from chathistory import tokens

    for _ in range(200):
        assert get_counter(f"gpt-4o-{uuid.uuid4()}") is get_counter("o200k_base")
    huge = "gpt-4o-" + "x" * (4 * 1024 * 1024)
    with pytest.raises(ValueError, match="unknown tokenizer") as caught:
        get_counter(huge)
    assert len(str(caught.value)) < 500  # not echoed whole
    assert set(tokens._counters) <= {"o200k_base", "cl100k_base", "approx"}


def test_an_approx_counter_is_made_again_from_its_name() -> None:
    """``ApproxCounter.name`` (``approx:4``) is what a saved window or a message's cached
    counts record: ``get_counter`` must take it back."""
    from chathistory.tokens import ApproxCounter, get_counter

    default = get_counter("approx")
    assert get_counter(default.name) is default and default.name == "approx:4"
    other = get_counter("approx:3.5")
    assert isinstance(other, ApproxCounter) and other.name == "approx:3.5"
    assert other.count_text("x" * 7) == 2
    for bad in ("approx:0", "approx:", "approx:x", "approx:1000"):
        with pytest.raises(ValueError, match="approx:N"):
            get_counter(bad)


@pytest.mark.parametrize("sharing", [True, False])
def test_a_text_past_offload_chars_goes_to_the_offload_whether_counts_are_shared_or_not(
        monkeypatch: pytest.MonkeyPatch, sharing: bool) -> None:
    """The server shares no counts and offloads long texts to its processes: turning
    the one off must leave the other on (it once did not: 9 MB appends then held the
    GIL for half a second each)."""
    monkeypatch.setattr(tokens, "_sharing", sharing)
    offloaded: list[tuple[str, int]] = []

    def offload(encoding: str, text: str) -> int:
        offloaded.append((encoding, len(text)))
        return 7
    monkeypatch.setattr(tokens, "_offload", offload)
    counter = EncodingCounter("o200k_base")
    text = "x" * (tokens.OFFLOAD_CHARS + 1)
    assert counter.count_text(text) == 7
    assert offloaded == [("o200k_base", len(text))]
    assert counter.count_text("hello world") == 2 and len(offloaded) == 1


def _spied(counter: EncodingCounter) -> list[str]:
    """The counter's fastokens and bpe-openai counts, each noting its name in the list
    returned when it counts ("fast", "held")."""
    used: list[str] = []

    def spy(name: str, count: Any) -> Any:
        def counting(text: str) -> int:
            used.append(name)
            return int(count(text))
        return counting
    counter._fast = spy("fast", tokens._fastokens_count("o200k_base"))
    counter._fast_asked = True
    counter._count = spy("held", tokens._bpe_openai_count("o200k_base"))
    return used


def test_threads_counting_at_once_hold_the_gil_and_one_alone_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """fastokens lets the GIL go for each count; with threads counting at once that
    handover cost more than the count (8 threads appending measured no better with it),
    so they count as without it: bpe-openai (or tiktoken, shared, for long texts). A
    thread alone counts with fastokens, and again once the others have stopped."""
    pytest.importorskip("fastokens")
    monkeypatch.setattr(tokens, "_sharing", True)
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 60.0)
    counter = EncodingCounter("o200k_base")
    used = _spied(counter)
    counter._shared_asked = True  # as without tiktoken: long texts stay bpe-openai's
    long = "the quick brown fox jumps over the lazy dog " * 20
    alone = counter.count_text(long)
    assert used == ["fast"]
    assert _two_threads_take_turns(counter, long) == [alone] * 20
    assert used[1:] == ["held"] * 20
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 0.0)  # the window has passed
    counter._crowded_until = 0.0
    assert counter.count_text(long) == alone and used[-1] == "fast"


def test_a_new_thread_counts_with_bpe_openai_before_fastokens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """fastokens sets up each OS thread at its first count (6-15 ms): a thread other
    than the main one counts its first ``FAST_AFTER`` texts with bpe-openai, alone or
    not, and with fastokens after; the main thread with fastokens from its first."""
    pytest.importorskip("fastokens")
    monkeypatch.setattr(tokens, "_sharing", True)
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 0.0)  # every count is alone
    monkeypatch.setattr(tokens, "FAST_AFTER", 5)
    counter = EncodingCounter("o200k_base")
    used = _spied(counter)
    found: list[int] = []

    def count_eight() -> None:
        found.extend(counter.count_text(f"hello world {i}") for i in range(8))

    worker = threading.Thread(target=count_eight)
    worker.start()
    worker.join()
    assert used == ["held"] * 5 + ["fast"] * 3
    assert found == [counter.count_text(f"hello world {i}") for i in range(8)]
    assert used[8:] == ["fast"] * 8  # the main thread: fastokens from the start
    used.clear()
    worker = threading.Thread(target=count_eight)  # a new thread starts over
    worker.start()
    worker.join()
    assert used == ["held"] * 5 + ["fast"] * 3


def test_fastokens_counts_the_same_from_threads_at_once(
        fastokens_counts: dict[str, Any]) -> None:
    """One tokenizer, counting from four threads at once (a counter's threads share it):
    every count the one it gives alone, long texts (cut across its own threads) too."""
    import random
    rng = random.Random(11)
    pieces = ["Hello, world!", " naïve", "日本語", "def f(x):\n", "  ", "'s", "1234", "🎉"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.choice([5, 200, 20_000])))
             for _ in range(40)]
    count = fastokens_counts["o200k_base"]
    alone = [count(t) for t in texts]
    found: list[list[int]] = [[] for _ in range(4)]

    def counting(me: int) -> None:
        found[me] = [count(t) for t in texts]
    threads = [threading.Thread(target=counting, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [alone] * 4


def test_a_thread_alone_while_fastokens_is_built_waits_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A second thread counting alone while the first builds fastokens waits for that
    build rather than loading bpe-openai beside it (some 140 MB more)."""
    pytest.importorskip("fastokens")
    import time
    monkeypatch.setattr(tokens, "_sharing", True)
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 0.0)  # every count is alone
    monkeypatch.setattr(tokens, "FAST_AFTER", 0)  # (the other thread's first count too)
    real = tokens._fastokens_count("o200k_base")
    built: list[str] = []

    def slow_build(encoding: str) -> Any:
        built.append(encoding)
        time.sleep(0.3)
        return real
    monkeypatch.setattr(tokens, "_fastokens_count", slow_build)
    counter = EncodingCounter("o200k_base")
    found: list[int] = []
    first = threading.Thread(target=lambda: found.append(counter.count_text("hello world")))
    first.start()
    time.sleep(0.05)
    found.append(counter.count_text("hello world"))
    first.join()
    assert found == [2, 2]
    assert built == ["o200k_base"]
    assert counter._count is None  # bpe-openai never loaded


def test_where_fastokens_cannot_be_built_bpe_openai_counts(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """fastokens reads its ranks from a temporary file: with no writable temporary
    directory (a read-only container) the counter counts with bpe-openai, and says why."""
    pytest.importorskip("fastokens")
    import tempfile

    def no_tmp(*args: Any, **kwargs: Any) -> Any:
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(tempfile, "mkstemp", no_tmp)
    monkeypatch.setattr(tokens, "_fastokens_count", tokens._fastokens_count.__wrapped__)
    monkeypatch.setattr(tokens, "_sharing", True)
    counter = EncodingCounter("o200k_base")
    assert counter.count_text("hello world") == 2
    assert counter._fast is None and counter._count is not None
    assert "fastokens could not be built" in caplog.text
