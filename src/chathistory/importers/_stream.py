"""Reading big JSON files one record at a time: the elements of a top-level JSON
array, or the lines of a JSON-lines file, each as a ``Record`` (its bytes and
where it starts).

Memory stays at about one chunk plus one record, whatever the file's size, and
a record is bounded (``max_record`` bytes): a larger one is refused, never
buffered whole. Each byte is scanned once, however large the record, except
while finding the next record after a malformed one (below).

Splitting is a scan of strings and brackets (a regular expression skips each
string whole, also across chunks); msgspec then checks each element is JSON, in
C and without building it. No streaming parser gives what this needs: ijson
(the maintained one, with its yajl C backend) yields values but not their bytes
or offsets (the importers decode the bytes into typed structs and hash them for
ids) and stops for good at the first syntax error, where an import must skip
that record and go on.

A file cut short (a download or a dataset truncated mid-record) ends the stream
cleanly and sets ``truncated``: every complete record before the cut is
yielded, the partial one is not, and the caller reports where the cut is.

A record that is not JSON (a stray ``{``, a lost quote) is yielded with its
``error`` and the reader finds the next record: the first ``{`` after the
fault that follows a ``,`` and opens a whole JSON object that ``is_record``
accepts (the caller sets it to "has this format's key"). Objects nested in the
bad record are not records, so they are passed over.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import InvalidMessage

__all__ = ["CHUNK_SIZE", "MAX_RECORD", "JSONArrayReader", "JSONLinesReader", "Record",
           "Truncation", "json_error"]

CHUNK_SIZE = 1 << 20
MAX_RECORD = 64 << 20
"""Bytes one record may hold by default (``import_file(max_record=...)``)."""

# A whole JSON string (escapes included), or a lone quote when the string runs
# past the end of the buffer, or a bracket. Everything else between tokens
# (numbers, literals, commas, colons, whitespace) is skipped by the regex engine.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\[\]{}]', re.S)
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_SPACE = re.compile(rb"[ \t\r\n]*")
_CANDIDATE = re.compile(rb",[ \t\r\n]*\{")
_CANDIDATE_TAIL = re.compile(rb",[ \t\r\n]*\Z")
_BYTE = re.compile(r"\(byte (\d+)\)")
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


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the file: its bytes, or (``error`` set, ``raw`` empty) why
    it is not one."""

    index: int
    """Its position among the file's records, from 0."""
    offset: int
    """The byte where it starts."""
    raw: bytes
    error: str | None = None
    line: int = 0
    """Its line number in a JSON-lines file (0 in an array)."""

    def where(self) -> str:
        return f"line {self.line}" if self.line else f"byte {self.offset:,}"

    def invalid(self) -> InvalidMessage:
        """``error`` as an ``InvalidMessage`` naming the record and where it is."""
        return InvalidMessage(f"record {self.index} ({self.where()}): {self.error}",
                              f"$[{self.index}]")


def json_error(raw: bytes) -> tuple[str, int] | None:
    """None if ``raw`` is one whole JSON value; else why not and the byte where
    that shows (``len(raw)`` when it is only cut short: reason ``"truncated"``)."""
    try:
        msgspec.json.decode(raw, type=msgspec.Raw)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "truncated" in text:
            return "truncated", len(raw)
        found = _BYTE.search(text)
        at = int(found.group(1)) if found else 0
        if at >= len(raw):  # a number cut short ("1." or "-") is only cut short
            return "truncated", len(raw)
        reason = text.replace("JSON is malformed: ", "")
        return _BYTE.sub("", reason).strip(), at
    except RecursionError:
        return "it is nested too deeply to decode", -1
    return None


class _Brackets:
    """Where a bracketed JSON value ends, fed a chunk at a time: strings are
    skipped whole (also when they run over chunks), brackets counted."""

    __slots__ = ("depth", "escape", "in_string")

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False  # the chunk ended on a backslash inside a string

    def end_in(self, data: bytes, pos: int) -> int | None:
        """The end of the value in ``data`` (scanned from ``pos``), or None when
        it goes on past ``data``."""
        n = len(data)
        if self.escape:
            self.escape = False
            pos += 1
        while pos < n:
            if self.in_string:
                rest = _STRING_REST.match(data, pos)
                assert rest is not None
                pos = rest.end()
                if pos >= n:
                    return None
                if data[pos] == 0x22:  # '"'
                    self.in_string = False
                    pos += 1
                    continue
                self.escape = True  # a backslash ends the chunk
                return None
            token = _TOKEN.search(data, pos)
            if token is None:
                return None
            pos = token.end()
            first = data[token.start()]
            if first == 0x22:
                if pos - token.start() == 1:  # the string runs past the chunk
                    self.in_string = True
                continue
            self.depth += 1 if first in (0x7B, 0x5B) else -1  # '{' '['
            if self.depth == 0:
                return pos
        return None


class _Chunks:
    """A chunk iterator that bytes can be pushed back into (read again first)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._back: list[bytes] = []

    def next(self) -> bytes | None:
        if self._back:
            return self._back.pop()
        for chunk in self._chunks:
            if chunk:
                return chunk
        return None

    def push(self, data: bytes) -> None:
        if data:
            self._back.append(data)


_OK, _EOF, _OVERSIZE = 0, 1, 2


class JSONArrayReader:
    """The elements of a top-level JSON array, as ``Record``s (see the module
    docstring); ``max_record`` bounds one element's bytes."""

    def __init__(self, chunks: Iterable[bytes], *, max_record: int = MAX_RECORD,
                 is_record: Callable[[bytes], bool] | None = None) -> None:
        self._chunks = _Chunks(chunks)
        self.max_record = max_record
        self.is_record: Callable[[bytes], bool] = is_record or _is_object
        """Whether a whole JSON value found after a malformed record is the next
        record (rather than an object nested in the bad one)."""
        self.truncated: Truncation | None = None
        self.offset = 0
        """Bytes consumed so far (for progress)."""
        self._data = b""
        self._pos = 0
        self._base = 0  # the file offset of _data[0]
        self._eof = False

    # ---------------------------------------------------------------- the cursor

    def _advance(self) -> bool:
        """Move on to the next chunk; False at the end of the file."""
        chunk = self._chunks.next()
        self._base += len(self._data)
        if chunk is None:
            self._data, self._pos, self._eof = b"", 0, True
            return False
        self._data, self._pos = chunk, 0
        return True

    def _rewind(self, data: bytes, offset: int) -> None:
        """Read ``data`` (which starts at file offset ``offset``) again next."""
        self._chunks.push(self._data[self._pos:])
        self._chunks.push(data)
        self._data, self._pos, self._base, self._eof = b"", 0, offset, False

    def _here(self) -> int:
        return self._base + self._pos

    def _skip_space(self) -> int | None:
        """The next non-space byte (the cursor is left on it), or None at the end."""
        while True:
            match = _SPACE.match(self._data, self._pos)
            assert match is not None
            if match.end() < len(self._data):
                self._pos = match.end()
                return self._data[self._pos]
            if not self._advance():
                return None

    def _element(self) -> tuple[bytes, int, _Brackets]:
        """The bracketed value at the cursor: its bytes and ``_OK`` (the cursor
        after it), or the bytes read and ``_EOF`` / ``_OVERSIZE`` (the first
        ``max_record`` bytes or more; the cursor at the end of what was read)."""
        scan = _Brackets()
        pieces: list[bytes] = []
        size = 0
        while True:
            start = self._pos
            end = scan.end_in(self._data, start)
            if end is not None:
                self._pos = end
                piece = self._data[start:end]
                return (b"".join([*pieces, piece]) if pieces else piece), _OK, scan
            pieces.append(self._data[start:])
            size += len(self._data) - start
            self._pos = len(self._data)
            if size > self.max_record:
                return b"".join(pieces), _OVERSIZE, scan
            if not self._advance():
                return b"".join(pieces), _EOF, scan

    def _skip_rest(self, scan: _Brackets) -> bool:
        """Scan on to the end of an element too large to keep; False at the end of
        the file."""
        while True:
            end = scan.end_in(self._data, self._pos)
            if end is not None:
                self._pos = end
                return True
            self._pos = len(self._data)
            if not self._advance():
                return False

    def _next_candidate(self) -> bool:
        """Move to the next ``{`` that follows a ``,``; False at the end of the file."""
        while True:
            found = _CANDIDATE.search(self._data, self._pos)
            if found is not None:
                self._pos = found.end() - 1
                return True
            tail = _CANDIDATE_TAIL.search(self._data, self._pos)
            carry = self._data[tail.start():] if tail is not None else b""
            if not self._advance():
                return False
            if carry:  # a ',' and spaces at the end of a chunk: the '{' may follow
                self._data = carry + self._data
                self._base -= len(carry)

    # ---------------------------------------------------------------- the records

    def __iter__(self) -> Iterator[Record]:
        start = b""
        while len(start) < len(_BOM):  # a BOM may be split over the first chunks
            chunk = self._chunks.next()
            if chunk is None:
                break
            start += chunk
        skip = len(_BOM) if start.startswith(_BOM) else 0
        self._rewind(start[skip:], skip)
        char = self._skip_space()
        if char is None:
            raise InvalidMessage("the file is empty", "$")
        if char != 0x5B:  # '['
            raise InvalidMessage("expected a JSON array ('[') at the start of the file", "$")
        self._pos += 1
        index = 0
        expect_value = True  # after '[' or ','
        resync = False  # looking for the next record after a malformed one
        while True:
            if resync:
                if not self._next_candidate():
                    self.offset = self._here()
                    return
            else:
                char = self._skip_space()
                if char is None:
                    self._truncate(index, self._here(), "the closing ']' of the array is missing")
                    return
                if char == 0x5D:  # ']'
                    self.offset = self._here() + 1
                    return
                if not expect_value:
                    if char == 0x2C:  # ','
                        self._pos += 1
                        expect_value = True
                        continue
                    yield Record(index, self._here(), b"", f"expected ',' or ']' after record "
                                 f"{index - 1} at byte {self._here():,}")
                    index += 1
                    resync = True
                    continue
                if char not in (0x7B, 0x5B):  # '{' '['
                    yield Record(index, self._here(), b"", "it is not an object "
                                 f"(byte {self._here():,})")
                    index += 1
                    resync = True
                    continue
            offset = self._here()
            raw, status, scan = self._element()
            error = json_error(raw)
            if resync and not (
                    (status == _OK and error is None and self.is_record(raw))
                    or (status == _OVERSIZE and error is not None and error[0] == "truncated")):
                self._rewind(raw[1:], offset + 1)  # not the next record: look on
                continue
            if status == _OK and error is None:
                self.offset = self._here()
                # handed over in a box, so that this frame keeps no reference to the
                # bytes while the caller converts and stores them
                box = [Record(index, offset, raw) if len(raw) <= self.max_record else
                       Record(index, offset, b"", self._too_large())]
                raw = b""
                yield box.pop()
                index, expect_value, resync = index + 1, False, False
                continue
            if status == _EOF and error is not None and error[0] == "truncated" and not resync:
                self._truncate(index, offset, "the partial record is left out")
                return
            if status == _OVERSIZE and (error is None or error[0] == "truncated"):
                self.offset = self._here()
                yield Record(index, offset, b"", self._too_large())
                index, expect_value, resync = index + 1, False, False
                if not self._skip_rest(scan):
                    self.offset = self._here()
                    return
                continue
            assert error is not None
            reason, at = error
            self.offset = self._here()
            where = f" at byte {offset + at:,}" if at >= 0 else ""
            yield Record(index, offset, b"", f"it is not JSON{where}: {reason}")
            index, expect_value = index + 1, False
            if at >= 0:  # the brackets may be off from ``at`` on: find the next record
                self._rewind(raw[at:], offset + at)
                resync = True
            elif status == _OVERSIZE and not self._skip_rest(scan):
                return
            else:
                resync = False

    def _too_large(self) -> str:
        return (f"it is larger than {self.max_record:,} bytes (the most one record may "
                "hold: raise max_record to import it)")

    def _truncate(self, index: int, offset: int, reason: str) -> None:
        self.offset = self._here()
        self.truncated = Truncation(index, offset, self.offset, reason)


def _is_object(raw: bytes) -> bool:
    return raw[:1] == b"{"


class JSONLinesReader:
    """The non-blank lines of a JSON-lines file, as ``Record``s (``line`` set).

    The last line is yielded even without a final newline; the caller decides
    whether it is whole (``truncated`` is set by ``mark_truncated``). A line
    longer than ``max_record`` is yielded with its ``error`` as soon as it is
    seen, and then passed over without being kept."""

    def __init__(self, chunks: Iterable[bytes], *, max_record: int = MAX_RECORD) -> None:
        self._chunks = chunks
        self.max_record = max_record
        self.truncated: Truncation | None = None
        self.offset = 0
        self.last_line_complete = True

    def __iter__(self) -> Iterator[Record]:
        pieces: list[bytes] = []
        size = 0
        base = 0  # the file offset of the chunk
        line_start = 0
        number = 0
        index = 0
        too_long = False
        at_start: bytes | None = b""  # a BOM may be split over the first chunks
        for chunk in self._chunks:
            if at_start is not None:
                at_start += chunk
                if len(at_start) < len(_BOM) and _BOM.startswith(at_start):
                    continue
                chunk, at_start = at_start, None
                if chunk.startswith(_BOM):
                    chunk = chunk[len(_BOM):]
                    base = line_start = len(_BOM)
            pos = 0
            while True:
                newline = chunk.find(b"\n", pos)
                if newline < 0:
                    if not too_long:
                        pieces.append(chunk[pos:])
                        size += len(chunk) - pos
                        if size > self.max_record and any(p.strip() for p in pieces):
                            too_long, pieces, size = True, [], 0
                            yield self._too_long(index, line_start, number + 1)
                            index += 1
                    break
                number += 1
                if too_long:
                    too_long = False
                else:
                    piece = chunk[pos:newline]
                    line = b"".join([*pieces, piece]) if pieces else piece
                    pieces, piece = [], b""
                    self.offset = base + newline + 1
                    if len(line) > self.max_record and line.strip():
                        yield self._too_long(index, line_start, number)
                        index += 1
                    elif line.strip():
                        box = [Record(index, line_start, line, line=number)]
                        line = b""  # only the caller holds the bytes (see JSONArrayReader)
                        yield box.pop()
                        index += 1
                pieces, size = [], 0
                pos = newline + 1
                line_start = base + pos
            base += len(chunk)
            self.offset = base
        if at_start:  # fewer bytes than a BOM in the whole file
            pieces = [at_start]
            base = len(at_start)
        rest = b"".join(pieces)
        if not too_long and len(rest) > self.max_record and rest.strip():
            self.offset = base
            yield self._too_long(index, line_start, number + 1)
        elif not too_long and rest.strip():
            self.last_line_complete = False
            self.offset = base
            yield Record(index, line_start, rest, line=number + 1)
        self.offset = base

    def _too_long(self, index: int, offset: int, number: int) -> Record:
        return Record(index, offset, b"", f"it is larger than {self.max_record:,} bytes (the "
                      "most one record may hold: raise max_record to import it)", line=number)

    def mark_truncated(self, index: int, line_number: int, offset: int) -> None:
        self.truncated = Truncation(index, offset, self.offset,
                                    f"line {line_number} is not whole JSON and is left out")


def decode_any(raw: bytes) -> Any:
    """``msgspec.json.decode``; a value nested too deeply is a ``DecodeError`` too."""
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        raise msgspec.DecodeError("it is nested too deeply to decode") from None
