"""Token counting: exact offline counters, a documented approximation, any callable.

A counter has a ``name`` (the key its counts are cached under in each
message), ``count_text`` and ``count_message``. ``cached_count`` computes a
message's count once per counter and keeps it in ``message.token_counts``,
which serializes with the message: a restored session is not re-tokenized.

Message counts follow OpenAI's documented chat accounting (3 tokens per
message, 1 more when a name is set, the role and content counted as text,
3 tokens priming the reply once per request). That is exact for text
messages. Tool calls and results are counted as their JSON text plus the same
overhead (OpenAI does not document its internal tool format, so this is an
estimate); images use the provider's published formula from their
dimensions; audio and non-text files use the documented estimates below.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
import types
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .model import (
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    Message,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
)
from .model.parts import MediaPart
from .token_slices import slices

__all__ = [
    "AUDIO_TOKENS_ESTIMATE",
    "COUNTER_NAME_PATTERN",
    "FILE_TOKENS_PER_KB_ESTIMATE",
    "ApproxCounter",
    "CallableCounter",
    "ChatCounter",
    "EncodingCounter",
    "TokenCounter",
    "anthropic_image_tokens",
    "cached_count",
    "count_here",
    "get_counter",
    "model_encoding",
    "offload_large_texts",
    "openai_image_tokens",
    "share_counts",
]

AUDIO_TOKENS_ESTIMATE = 200
"""Tokens counted for an audio part without a transcript (about 10 s of speech)."""
FILE_TOKENS_PER_KB_ESTIMATE = 50
"""Tokens counted per KiB of a binary file (a PDF page of text is about 500 tokens)."""


@runtime_checkable
class TokenCounter(Protocol):
    """What selectors and reducers need of a tokenizer."""

    name: str
    """Cache key: two counters with the same name must give the same counts."""
    priming_tokens: int
    """Tokens added once per request (the reply's priming)."""

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...


def compaction_tokens(part: Compaction, count_text: Callable[[str], int]) -> int:
    """What a provider charges to read a compaction back: the summary's own tokens when
    it is readable (Anthropic). OpenAI's is encrypted, so this is an estimate: the
    ciphertext is base64 (3 bytes per 4 characters) of about the summary's size, at
    about 4 bytes per token; no summary and no data (a failed compaction) is 0."""
    if part.text:
        return count_text(part.text)
    return math.ceil(len(part.data) * 3 / 16) if part.data else 0


def openai_image_tokens(width: int | None, height: int | None, detail: str | None = None) -> int:
    """OpenAI's published image cost (GPT-4o family): 85 base + 170 per 512-px tile
    after fitting in 2048x2048 and scaling the short side to 768; ``low`` is 85."""
    if detail == "low":
        return 85
    if not width or not height:
        width = height = 1024  # unknown size: the cost of a typical 1024x1024 image
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def anthropic_image_tokens(width: int | None, height: int | None) -> int:
    """Anthropic's published image cost: width*height/750 after fitting the long edge
    in 1568 px (unknown size: a 1092x1092 image, about 1,590 tokens)."""
    if not width or not height:
        width = height = 1092
    scale = min(1.0, 1568 / max(width, height))
    return math.ceil(width * scale * height * scale / 750)


class ChatCounter:
    """Counts messages in OpenAI's chat accounting over any ``count_text``.

    Subclasses (or ``CallableCounter``) supply ``count_text``.
    """

    name: str = "chat"
    tokens_per_message: int = 3
    tokens_per_name: int = 1
    priming_tokens: int = 3
    image_formula: str = "openai"

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        count_text = self.count_text
        total = self.tokens_per_message + count_text(message.role)
        if message.name:
            total += self.tokens_per_name + count_text(message.name)
        for part in message.parts:
            kind = type(part)
            if kind is TextPart:
                total += count_text(part.text)  # type: ignore[union-attr, arg-type]
            else:
                total += self._count_part(part)
        return total

    def _count_part(self, part: object) -> int:
        count_text = self.count_text
        if isinstance(part, ToolCall):
            # the string sent: the model's own when kept (also when not a JSON object)
            args = part.arguments_json
            return self.tokens_per_message + count_text(part.name) + count_text(args)
        if isinstance(part, ToolResult):
            total = count_text(part.call_id)
            if isinstance(part.content, str):
                return total + count_text(part.content)
            return total + sum(self._count_part(c) for c in part.content)
        if isinstance(part, TextPart):
            return count_text(part.text)
        if isinstance(part, Reasoning):
            return count_text(part.text) if part.text else 0
        if isinstance(part, Compaction):
            return compaction_tokens(part, count_text)
        if isinstance(part, ImagePart):
            width, height = part.dimensions or (None, None)
            if self.image_formula == "anthropic":
                return anthropic_image_tokens(width, height)
            return openai_image_tokens(width, height, part.detail)
        if isinstance(part, AudioPart):
            return count_text(part.transcript) if part.transcript else AUDIO_TOKENS_ESTIMATE
        if isinstance(part, FilePart | MediaPart):
            return self._count_file(part)
        return 0

    def _count_file(self, part: MediaPart) -> int:
        att = part.attachment
        if att is None:
            return FILE_TOKENS_PER_KB_ESTIMATE  # by URL: size unknown
        if att.data is not None and att.mime_type.startswith("text/"):
            return self.count_text(att.data.decode("utf-8", "replace"))
        return max(1, math.ceil(att.size / 1024 * FILE_TOKENS_PER_KB_ESTIMATE))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _bpe_openai_count(encoding: str) -> Callable[[str], int]:
    from bpe_openai import _bindings  # type: ignore[import-untyped]

    tokenizer = _bindings.tokenizer_for_encoding(encoding)
    count: Callable[[str], int] = tokenizer.count
    return count


def _shipped_ranks(encoding: str) -> bytes:
    """The ranks file of ``encoding`` (tiktoken's format) that ``bpe-openai`` ships."""
    import gzip
    from importlib import resources

    return gzip.decompress(resources.files("bpe_openai.data")
                           .joinpath(f"{encoding}.tiktoken.gz").read_bytes())


@functools.cache
def _fastokens_count(encoding: str) -> Callable[[str], int] | None:
    """fastokens' count for ``encoding`` (its ``Tokenizer.from_tiktoken`` over the ranks
    ``bpe-openai`` ships, with tiktoken's split pattern: the same counts, a test checks
    them against tiktoken and ``bpe-openai``), or None where fastokens is not installed
    (it ships wheels for Linux x86_64 and aarch64, macOS and Windows x86_64 only).
    Built once a process (~1.5 s, and ~0.23 s more at its first count; about as much
    memory as ``bpe-openai``'s, which a thread counting alone never loads)."""
    try:
        import fastokens  # type: ignore[import-untyped]
    except ImportError:
        return None
    import os
    import tempfile

    try:  # fastokens reads the ranks from a file only
        fd, path = tempfile.mkstemp(prefix=f"chathistory-{encoding}-", suffix=".tiktoken")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_shipped_ranks(encoding))
            encode = fastokens.Tokenizer.from_tiktoken(path, encoding=encoding).encode_ordinary
        finally:
            os.unlink(path)
    except Exception:  # no writable temporary directory, a fastokens that changed...
        import logging
        logging.getLogger("chathistory").exception(
            "fastokens could not be built for %s: bpe-openai counts", encoding)
        return None

    def count(text: str) -> int:
        return len(encode(text))
    return count


@functools.cache
def _tiktoken_count(encoding: str) -> Callable[[str], int] | None:
    """tiktoken's count for ``encoding`` built from the tables ``bpe-openai`` ships
    (tiktoken itself would download them), or None without tiktoken; built once a
    process (~0.5 s, some 80 MB). Its constructor (the split pattern and the special
    tokens) is tiktoken's own, called with a loader of those tables in place of its
    download, the module left as it is."""
    try:
        import tiktoken
        from tiktoken_ext import openai_public  # type: ignore[import-untyped]
    except ImportError:
        return None
    maker = getattr(openai_public, encoding)
    if "load_tiktoken_bpe" not in maker.__code__.co_names:
        return None  # a tiktoken that loads its tables otherwise: never download them
    import binascii

    raw = _shipped_ranks(encoding)
    ranks = {binascii.a2b_base64(token, strict_mode=True): int(rank)  # never a byte skipped
             for token, rank in (line.split() for line in raw.splitlines() if line)}
    offline = types.FunctionType(maker.__code__, {
        **maker.__globals__, "load_tiktoken_bpe": lambda *_a, **_k: ranks})
    spec = offline()
    encode = tiktoken.Encoding(name=spec["name"], pat_str=spec["pat_str"],
                               mergeable_ranks=spec["mergeable_ranks"],
                               special_tokens=spec["special_tokens"]).encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))
    return count


FAST_AFTER = 512
"""``EncodingCounter``: a thread other than the main one counts with fastokens only after
this many counts. fastokens sets up each OS thread at that thread's first count (6-15 ms
on this machine, whatever the text), which about 500 counts at fastokens' speed pay back:
a thread made for one request, or a burst of threads, counts with ``bpe-openai``."""
_thread_counts = threading.local()


def _seasoned() -> bool:
    """Whether this thread may count with fastokens (``FAST_AFTER``); counts it."""
    counted: int = getattr(_thread_counts, "n", 0)
    if counted >= FAST_AFTER:
        return True
    if threading.current_thread() is threading.main_thread():
        _thread_counts.n = FAST_AFTER
        return True
    _thread_counts.n = counted + 1
    return False


SHARED_CHARS = 512
"""``EncodingCounter``: a text at least this long, counted while another thread
counts too, is counted by tiktoken when it is installed (which lets the other threads
run meanwhile); a shorter one costs less to count than to hand the GIL over."""
SHARED_WINDOW = 0.005
"""Seconds: a count that follows another thread's count this closely is shared."""
_sharing = True


def share_counts(enabled: bool) -> None:
    """Whether ``EncodingCounter`` picks its tokenizer by the threads counting (on by
    default: fastokens for a thread alone, tiktoken for long texts while threads count
    at once; see ``EncodingCounter``). Off, every count is ``bpe-openai``'s, and neither
    fastokens nor tiktoken is built (some 136 and 80 MB a process): the server turns it
    off, since its workers are processes, one per CPU, whose threads count at once
    whenever the server is busy."""
    global _sharing
    _sharing = enabled


class EncodingCounter(ChatCounter):
    """Exact, offline counts for an OpenAI encoding (``o200k_base``, ``cl100k_base``).

    Every count is tiktoken's (the ranks and split pattern it uses, from the tables
    ``bpe-openai`` ships; tests check the three tokenizers below against tiktoken built
    from them). Which tokenizer counts depends on the threads:

    - a thread counting alone: fastokens, 3.5-5 us per ShareGPT message against
      ``bpe-openai``'s 28-31 and tiktoken's 41-53 (one thread, this 2-core machine);
      where fastokens is not installed, ``bpe-openai``; a thread other than the main
      one only after ``FAST_AFTER`` counts (fastokens' setup of a new thread costs
      6-15 ms at its first count), ``bpe-openai`` until then;
    - threads counting at once (a count less than ``SHARED_WINDOW`` after another
      thread's, and every count for ``SHARED_WINDOW`` after such a one): ``bpe-openai``,
      which holds the GIL while it counts. fastokens and tiktoken let it go for the
      count, and a short count then costs its thread more to take the GIL back than
      it saved; a text of ``SHARED_CHARS`` or more is counted by tiktoken when it is
      installed (``chathistory[tiktoken]``; loaded in the background at the first such
      count, ~0.5 s, ``bpe-openai`` counting until then): 8 threads appending to one
      store made 10-15% more appends a second so (docs/tokens.md), for some 80 MB more
      memory in the process (``share_counts(False)`` turns this off).

    A text over ``SLICE_CHARS`` is counted in slices cut where the pre-tokenizer cuts
    (the same total), each by the tokenizer above, and a stretch without such a cut by
    ``bpe-openai`` (``_count_with``): fastokens' and tiktoken's BPE grow faster than a
    piece's length, and a text without spaces may be one piece.

    Special-token text such as ``<|endoftext|>`` inside a message is counted as
    ordinary text, as it is for user input.
    """

    def __init__(self, encoding: str = "o200k_base", *, image_formula: str = "openai") -> None:
        if encoding not in ("o200k_base", "cl100k_base"):
            raise ValueError(f"unknown encoding {encoding!r}: use o200k_base or cl100k_base")
        self.encoding = encoding
        self.name = encoding if image_formula == "openai" else f"{encoding}+{image_formula}"
        self.image_formula = image_formula
        self._count: Callable[[str], int] | None = None  # bpe-openai, on first use (~0.8 s)
        # fastokens' count, for a thread counting alone (None: not loaded, or no
        # fastokens); loaded at the first such count (~1.5 s)
        self._fast: Callable[[str], int] | None = None
        self._fast_asked = False
        self._fast_lock = threading.Lock()
        # tiktoken's count, for texts counted while other threads count (None: not
        # loaded, or no tiktoken); loaded once, in a thread of its own
        self._shared: Callable[[str], int] | None = None
        self._shared_asked = False
        self._shared_lock = threading.Lock()
        self._last_thread = 0
        self._last_at = 0.0
        self._crowded_until = 0.0

    def _load(self) -> Callable[[str], int]:
        self._count = count = _bpe_openai_count(self.encoding)
        return count

    def _fast_count(self) -> Callable[[str], int] | None:
        """fastokens' count (None without it), built at the first call."""
        return self._fast if self._fast_asked else self._load_fast()

    def _load_fast(self) -> Callable[[str], int] | None:
        """fastokens' count, built by the first thread that needs it while the others
        that need it meanwhile wait (they would otherwise count with ``bpe-openai`` and
        load it too, for the ~1.5 s of the build)."""
        with self._fast_lock:
            if not self._fast_asked:
                self._fast = _fastokens_count(self.encoding)
                self._fast_asked = True
        return self._fast

    def load_shared(self) -> bool:
        """Build the count that threads counting at once use (tiktoken's) now, rather
        than in the background at the first such count; False without tiktoken."""
        with self._shared_lock:
            self._shared_asked = True
        if self._shared is None:
            try:
                self._shared = _tiktoken_count(self.encoding)
            except Exception:  # bpe-openai goes on counting
                import logging
                logging.getLogger("chathistory").exception("tiktoken could not be built")
        return self._shared is not None

    def _load_shared_later(self) -> None:
        with self._shared_lock:
            if self._shared_asked:
                return
            self._shared_asked = True
        threading.Thread(target=self.load_shared, name="chathistory-tiktoken",
                         daemon=True).start()

    def _crowded(self) -> bool:
        """Whether threads count at once: this count follows another thread's by less
        than ``SHARED_WINDOW``, or such a count came less than ``SHARED_WINDOW`` ago."""
        me, now = threading.get_ident(), time.monotonic()
        if me != self._last_thread:
            if now - self._last_at < SHARED_WINDOW:
                self._crowded_until = now + SHARED_WINDOW
            self._last_thread = me
        self._last_at = now
        return now < self._crowded_until

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > OFFLOAD_CHARS and _offload is not None:
            return _offload(self.encoding, text)
        return self._count_with(self._pick(len(text)), text)

    def _pick(self, size: int) -> Callable[[str], int]:
        """The tokenizer for a text of ``size`` characters counted now (see the class)."""
        if _sharing:  # else bpe-openai, always
            if not self._crowded():
                fast = self._fast_count() if _seasoned() else None
                if fast is not None:
                    return fast
            elif size >= SHARED_CHARS:
                if self._shared is not None:
                    return self._shared
                if not self._shared_asked:
                    self._load_shared_later()
        return self._count or self._load()

    def _count_with(self, count: Callable[[str], int], text: str) -> int:
        """``count(text)`` for a text of up to ``SLICE_CHARS`` characters; a longer
        one in slices cut where the encoding's pre-tokenizer cuts
        (``token_slices.slices``: the same total), a stretch without such a cut
        counted whole by ``bpe-openai``, whose count is linear in a piece's length
        where fastokens' and tiktoken's grow faster. So no text costs more than a
        bounded amount per character, however long its pieces."""
        if len(text) <= SLICE_CHARS:
            return count(text)
        linear = self._count or self._load()
        if count is linear:
            return linear(text)
        total = 0
        for start, end in slices(text, SLICE_CHARS):
            total += (linear if end - start > SLICE_CHARS else count)(text[start:end])
        return total


SLICE_CHARS = 8 * 1024
"""``EncodingCounter``: a longer text is counted in slices of at most this many
characters (``count_with``), its stretches without a cut by ``bpe-openai``."""
OFFLOAD_CHARS = 256 * 1024
"""``EncodingCounter`` texts longer than this go to ``offload_large_texts``' function."""
_offload: Callable[[str, str], int] | None = None
_local_counters: dict[str, EncodingCounter] = {}


def offload_large_texts(count: Callable[[str, str], int] | None) -> None:
    """Count every text over ``OFFLOAD_CHARS`` characters with ``count(encoding, text)``
    instead of in the calling thread (None: in the calling thread again). bpe-openai
    holds the GIL while it counts (about 60 ms per MB), which would stall every other
    thread of the process, and fastokens (about 23 ms per MB, without the GIL) still
    takes the calling thread that long; the server passes a function that counts in a
    process pool (``count_here`` there) and waits without the GIL."""
    global _offload
    _offload = count


def count_here(encoding: str, text: str) -> int:
    """``EncodingCounter(encoding).count_text(text)`` in this process (what an offload
    function runs in its worker process)."""
    counter = _local_counters.get(encoding)
    if counter is None:
        counter = _local_counters[encoding] = EncodingCounter(encoding)
    return counter._count_with(counter._fast_count() or counter._count or counter._load(), text)


class ApproxCounter(ChatCounter):
    """A fast estimate: one token per ``chars_per_token`` characters (default 4,
    OpenAI's rule of thumb for English; code and non-Latin scripts run higher)."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"approx:{chars_per_token:g}"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


class CallableCounter(ChatCounter):
    """Any ``text -> int`` function as a counter, e.g. a Hugging Face tokenizer::

        CallableCounter(lambda t: len(tok.encode(t, add_special_tokens=False)), name="llama3")
    """

    def __init__(
        self,
        count: Callable[[str], int],
        *,
        name: str,
        tokens_per_message: int = 3,
        tokens_per_name: int = 1,
        priming_tokens: int = 3,
        image_formula: str = "openai",
    ) -> None:
        if not name:
            raise ValueError("a counter needs a name: counts are cached under it")
        self._count = count
        self.name = name
        self.tokens_per_message = tokens_per_message
        self.tokens_per_name = tokens_per_name
        self.priming_tokens = priming_tokens
        self.image_formula = image_formula

    def count_text(self, text: str) -> int:
        return int(self._count(text)) if text else 0


_MODEL_ENCODINGS = (
    ("gpt-4o", "o200k_base"), ("chatgpt-4o", "o200k_base"), ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"), ("gpt-5", "o200k_base"), ("o1", "o200k_base"),
    ("o3", "o200k_base"), ("o4", "o200k_base"), ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"), ("gpt-35", "cl100k_base"), ("text-embedding", "cl100k_base"),
)
"""OpenAI model families -> their encoding (more specific names first)."""
_MODEL_SUFFIX = re.compile(r"[-.:@][A-Za-z0-9._:@-]*")
MAX_COUNTER_NAME = 100
"""The longest counter name ``get_counter`` accepts (model names are far shorter)."""
_APPROX_RATIO = r"0*(?:[1-9][0-9]?(?:\.[0-9]*)?|0?\.[5-9][0-9]*|100(?:\.0*)?)"
"""A number of characters per token from 0.5 to 100, written in decimal."""
_FAMILIES = "|".join(family.replace(".", r"\.") for family, _ in _MODEL_ENCODINGS)
COUNTER_NAME_PATTERN = (
    rf"^(?=.{{1,{MAX_COUNTER_NAME}}}$)(?:o200k_base|cl100k_base|approx(?::{_APPROX_RATIO})?"
    rf"|(?:ft:)?(?:{_FAMILIES})(?:{_MODEL_SUFFIX.pattern})?)$")
"""Every name ``get_counter`` knows, as a regular expression (the OpenAPI document's
``pattern`` of a counter name): ``get_counter`` accepts a name if and only if it matches."""
_counters: dict[str, TokenCounter] = {}
"""One counter per canonical name (o200k_base, cl100k_base, approx): never keyed by a
name a caller chose, so it cannot grow (model names resolve to their encoding's)."""


def model_encoding(name: str) -> str | None:
    """The encoding of an OpenAI model name (``gpt-4o-mini`` -> ``o200k_base``), None
    for anything else. A name is a known family (``gpt-4o``, ``gpt-4.1``, ``o3``,
    ``gpt-3.5``, ...), optionally after ``ft:`` and followed by a suffix that starts
    with ``-``, ``.``, ``:`` or ``@`` and holds only letters, digits and those,
    at most ``MAX_COUNTER_NAME`` characters in all."""
    if not isinstance(name, str) or len(name) > MAX_COUNTER_NAME:
        return None
    model = name.removeprefix("ft:")
    for family, encoding in _MODEL_ENCODINGS:
        if model == family or (model.startswith(family)
                               and _MODEL_SUFFIX.fullmatch(model, len(family))):
            return encoding
    return None


def _approx_ratio(spec: str) -> float:
    """The characters per token of an ``approx:N`` name (what ``ApproxCounter.name``
    records, so a saved window or count names a counter that can be made again)."""
    text = spec[len("approx:"):]
    ratio = float(text) if re.fullmatch(_APPROX_RATIO, text) else 0.0
    if not 0.5 <= ratio <= 100:
        raise ValueError(f"unknown tokenizer {spec[:60]!r}: approx:N takes N characters per "
                         "token, 0.5 to 100")
    return ratio


def get_counter(spec: str | TokenCounter | Callable[[str], int] | None = None) -> TokenCounter:
    """A counter from a name: ``o200k_base`` (the default), ``cl100k_base``,
    ``approx`` (also by its counter's name, ``approx:4``, or another ratio such as
    ``approx:3.5``), or an OpenAI model name (``gpt-4o`` -> o200k_base, see
    ``model_encoding``); a counter is returned as is and a plain callable is wrapped
    in ``CallableCounter``. Any other name raises ``ValueError``."""
    if spec is None:
        spec = "o200k_base"
    if isinstance(spec, str):
        found = _counters.get(spec)
        if found is not None:
            return found
        if len(spec) > MAX_COUNTER_NAME:
            raise ValueError(f"unknown tokenizer {spec[:60]!r}...: a name has at most "
                             f"{MAX_COUNTER_NAME} characters")
        counter: TokenCounter
        if spec in ("o200k_base", "cl100k_base"):
            counter = EncodingCounter(spec)
        elif spec == "approx":
            counter = ApproxCounter()
        elif spec.startswith("approx:"):
            ratio = _approx_ratio(spec)
            if ratio == ApproxCounter().chars_per_token:
                return get_counter("approx")
            return ApproxCounter(ratio)  # not cached: a name a caller made up is not kept
        else:
            encoding = model_encoding(spec)
            if encoding is None:
                shown = spec if len(spec) <= 60 else spec[:60] + "..."
                raise ValueError(
                    f"unknown tokenizer {shown!r}: use o200k_base, cl100k_base, approx, an "
                    "OpenAI model name (gpt-4o, gpt-4.1-mini, o3, gpt-3.5-turbo, ...), a "
                    "TokenCounter or a callable"
                )
            return get_counter(encoding)
        return _counters.setdefault(spec, counter)  # two threads at once: one wins
    if isinstance(spec, (ChatCounter, TokenCounter)):  # ChatCounter first: no protocol check
        return spec
    if callable(spec):
        return CallableCounter(spec, name=getattr(spec, "__qualname__", "callable"))
    raise TypeError(f"not a token counter: {spec!r}")


def cached_count(message: Message, counter: TokenCounter) -> int:
    """The message's count for ``counter``, computed once and cached in the message."""
    counts = message.token_counts
    if counts is None:
        counts = message.token_counts = {}
    else:
        found = counts.get(counter.name)
        if found is not None:
            return found
    n = counts[counter.name] = counter.count_message(message)
    return n
