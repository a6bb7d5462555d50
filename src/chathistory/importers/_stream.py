"""Reading big JSON files one record at a time: the elements of a top-level JSON
array, or the lines of a JSON-lines file, each as raw bytes with its offset.

Memory stays at about one chunk plus one record, whatever the file's size. A
file cut short (a download or a dataset truncated mid-record) ends the stream
cleanly and sets ``truncated``: every complete record before the cut is
yielded, the partial one is not, and the caller reports where the cut is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import InvalidMessage

__all__ = ["CHUNK_SIZE", "JSONArrayReader", "JSONLinesReader", "Truncation"]

CHUNK_SIZE = 1 << 20

# A whole JSON string (escapes included), or a lone quote when the string runs
# past the end of the buffer, or a bracket. Everything else between tokens
# (numbers, literals, commas, colons, whitespace) is skipped by the regex engine.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\[\]{}]', re.S)
_SPACE = re.compile(rb"[ \t\r\n]*")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Truncation:
    """Where a file ends early: the record starting at ``offset`` (the
    ``index``-th, from 0) is incomplete, and the file stops at ``size``."""

    index: int
    offset: int
    size: int
    reason: str

    def describe(self) -> str:
        return (f"the file is cut short: record {self.index} (at byte {self.offset:,}) "
                f"is incomplete at the end of the file (byte {self.size:,}); {self.reason}")


class _Buffer:
    """Chunks joined on demand; positions are relative to ``base`` (bytes dropped)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.data = b""
        self.base = 0
        self.eof = False

    def more(self, keep_from: int) -> int | None:
        """Read another chunk, dropping the bytes before ``keep_from``; returns how
        far positions moved back (``keep_from``), or None at the end of the file."""
        if self.eof:
            return None
        for chunk in self._chunks:
            if chunk:
                self.base += keep_from
                self.data = self.data[keep_from:] + chunk
                return keep_from
        self.eof = True
        return None


class JSONArrayReader:
    """The elements of a top-level JSON array, as ``(index, offset, raw bytes)``."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._buffer = _Buffer(chunks)
        self.truncated: Truncation | None = None
        self.offset = 0
        """Bytes consumed so far (for progress)."""

    def __iter__(self) -> Iterator[tuple[int, int, bytes]]:
        buf = self._buffer
        while len(buf.data) < len(_BOM) and buf.more(0) is not None:
            pass  # a BOM may be split over the first chunks
        start = len(_BOM) if buf.data.startswith(_BOM) else 0
        pos = self._skip_space(start)
        if pos is None:
            raise InvalidMessage("the file is empty", "$")
        if buf.data[pos:pos + 1] != b"[":
            raise InvalidMessage("expected a JSON array ('[') at the start of the file", "$")
        pos += 1
        index = 0
        expect_comma = False
        while True:
            found = self._skip_space(pos)
            if found is None:
                self._truncate(index, pos, "the closing ']' of the array is missing")
                return
            pos = found
            char = buf.data[pos:pos + 1]
            if char == b"]":
                self.offset = buf.base + pos + 1
                return
            if expect_comma:
                if char != b",":
                    raise InvalidMessage(f"expected ',' or ']' after element {index - 1} "
                                         f"at byte {buf.base + pos:,}", f"$[{index}]")
                pos += 1
                expect_comma = False
                continue
            if char not in (b"{", b"["):
                raise InvalidMessage(f"element {index} is not an object (byte "
                                     f"{buf.base + pos:,})", f"$[{index}]")
            span = self._element_end(pos)
            if span is None:
                self._truncate(index, pos, "the partial record is left out")
                return
            start, end = span
            self.offset = buf.base + end
            yield index, buf.base + start, buf.data[start:end]
            index += 1
            pos = end
            expect_comma = True

    def _truncate(self, index: int, pos: int, reason: str) -> None:
        buf = self._buffer
        self.offset = buf.base + len(buf.data)
        self.truncated = Truncation(index, buf.base + pos, buf.base + len(buf.data), reason)

    def _skip_space(self, pos: int) -> int | None:
        """The position of the next non-space byte, reading more as needed."""
        buf = self._buffer
        while True:
            match = _SPACE.match(buf.data, pos)
            assert match is not None
            if match.end() < len(buf.data):
                return match.end()
            shift = buf.more(pos)
            if shift is None:
                return None
            pos -= shift

    def _element_end(self, start: int) -> tuple[int, int] | None:
        """``(start, end)`` of the bracketed value at ``start`` (positions may have
        shifted while reading more), or None when the file ends inside it."""
        buf = self._buffer
        depth = 0
        pos = start
        while True:
            for match in _TOKEN.finditer(buf.data, pos):
                first = buf.data[match.start()]
                if first == 0x22:  # '"'
                    if match.end() - match.start() == 1:  # the string runs past the buffer
                        pos = match.start()
                        break
                    continue
                depth += 1 if first in (0x7B, 0x5B) else -1  # '{' '['
                if depth == 0:
                    return start, match.end()
            else:
                pos = len(buf.data)
            shift = buf.more(start)
            if shift is None:
                return None
            pos -= shift
            start = 0


class JSONLinesReader:
    """The non-blank lines of a JSON-lines file, as ``(line number, offset, bytes)``.

    The last line is yielded even without a final newline; the caller decides
    whether it is whole (``truncated`` is set by ``mark_truncated``)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.truncated: Truncation | None = None
        self.offset = 0
        self.last_line_complete = True

    def __iter__(self) -> Iterator[tuple[int, int, bytes]]:
        rest = b""
        base = 0
        number = 0
        at_start = True  # a BOM may be split over the first chunks
        for chunk in self._chunks:
            data = rest + chunk if rest else chunk
            if at_start:
                if len(data) < len(_BOM) and _BOM.startswith(data):
                    rest = data
                    continue
                at_start = False
                if data.startswith(_BOM):
                    data = data[len(_BOM):]
                    base = len(_BOM)
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                number += 1
                offset = base
                base += len(line) + 1
                self.offset = base
                if line.strip():
                    yield number, offset, line
        if rest.strip():
            number += 1
            self.last_line_complete = False
            self.offset = base + len(rest)
            yield number, base, rest
        self.offset = base + len(rest)

    def mark_truncated(self, index: int, line_number: int, offset: int) -> None:
        self.truncated = Truncation(index, offset, self.offset,
                                    f"line {line_number} is not whole JSON and is left out")
