"""Importing conversations from other tools' files into a store.

Formats (``import_file(..., format=None)`` detects them from the first record):

============  ==========================================================  ==========
format        what it is                                                  detected by
============  ==========================================================  ==========
sharegpt      ``[{"id", "conversations": [{"from", "value"}]}]``          ``conversations``
chatgpt       a ChatGPT export's ``conversations.json`` (or its zip)      ``mapping``
openai        JSON lines ``{"messages": [...]}`` (fine-tuning format)     ``messages``
chathistory   ``Store.export()`` output (JSON lines)                      ``kind``
============  ==========================================================  ==========

The first non-blank byte tells the container: ``[`` a JSON array, ``{`` JSON
lines (any record format may come in either, except ``chathistory``, which is
JSON lines only); a zip is opened at its ``conversations.json``. Records are
streamed one at a time and bounded (``max_record`` bytes each), so a file of
any size imports in memory bounded by that, and the record read to detect the
format is the first one imported. A file cut short mid-record imports every
whole record and reports the cut (``ImportReport.truncated``) instead of
failing. An invalid record (``_stream`` says how the next one is found after a
malformed one) stops the import naming it, or with ``skip_invalid`` is listed
in ``ImportReport.invalid`` and the records after it are imported.

Imports are idempotent: session and message ids derive from the source's ids
(``uuid5``), so importing a file twice adds nothing the second time (see
``_write`` for how branches are placed).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec

from ..errors import InvalidMessage, NotFound
from ..stores.protocol import Store
from . import chatgpt, openai_jsonl, sharegpt
from ._stream import (
    CHUNK_SIZE,
    MAX_RECORD,
    JSONArrayReader,
    JSONLinesReader,
    Record,
    Truncation,
    decode_any,
)
from ._write import Conversation, ImportReport, TenantArg, check, derived_id, write

__all__ = [
    "FORMATS",
    "MAX_RECORD",
    "Conversation",
    "ImportReport",
    "Source",
    "TenantArg",
    "Truncation",
    "derived_id",
    "detect_format",
    "import_file",
    "open_source",
]

FORMATS = ("sharegpt", "chatgpt", "openai", "chathistory")

_CONVERTERS: dict[str, Callable[[bytes, int, ImportReport], Iterator[Conversation]]] = {
    "sharegpt": sharegpt.convert,
    "chatgpt": chatgpt.convert,
    "openai": openai_jsonl.convert,
}

ProgressCallback = Callable[[int, int, int | None], None]
"""Called after each record with (records read, bytes read, bytes in the source
when known)."""


class Source:
    """A byte stream whose first chunks can be looked at (to see its first byte)
    and then read again from the start, as chunks; works for pipes too."""

    def __init__(self, stream: IO[bytes], name: str, size: int | None) -> None:
        self.stream = stream
        self.name = name
        self.size = size
        """Bytes in the source when known (for progress)."""
        self._head: list[bytes] = []

    def first_byte(self) -> bytes:
        """The first byte that is not a space or the BOM (empty for an empty
        source), reading only as far as that byte."""
        while True:
            chunk = self.stream.read(CHUNK_SIZE)
            if not chunk:
                return b""
            self._head.append(chunk)
            small = sum(len(c) for c in self._head) <= 2 * len(_BOM)  # a BOM may be split
            first = _first_byte(b"".join(self._head) if small else chunk)
            if first:
                return first

    def chunks(self) -> Iterator[bytes]:
        """The source from its first byte, as chunks."""
        head, self._head = self._head, []
        yield from head
        while True:
            chunk = self.stream.read(CHUNK_SIZE)
            if not chunk:
                return
            yield chunk


_BOM = b"\xef\xbb\xbf"


@contextmanager
def open_source(path: str | os.PathLike[str]) -> Iterator[Source]:
    """A file (``-`` for standard input); a zip opens at its ``conversations.json``."""
    if str(path) == "-":
        yield Source(sys.stdin.buffer, "<stdin>", None)
        return
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [i for i in archive.infolist()
                       if i.filename.rsplit("/", 1)[-1] == "conversations.json"]
            if not members:
                raise InvalidMessage(f"{path} is a zip without a conversations.json", "$")
            info = min(members, key=lambda i: i.filename.count("/"))
            with archive.open(info) as stream:
                yield Source(stream, f"{path}:{info.filename}", info.file_size)
        return
    with path.open("rb") as stream:
        yield Source(stream, str(path), path.stat().st_size)


def _first_byte(data: bytes) -> bytes:
    return data.lstrip(_BOM).lstrip()[:1]


def detect_format(head: bytes, *, complete: bool = True) -> str | None:
    """The format of a file starting with ``head``: one of ``FORMATS``, or
    ``"empty"`` for an empty JSON array. None when ``head`` holds no whole first
    record yet and more of the file follows (``complete=False``)."""
    first = _first_byte(head)
    if not first:
        if not complete:
            return None
        raise InvalidMessage("the file is empty", "$")
    if first not in (b"[", b"{"):
        raise _not_json_container()
    reader = _reader(first, [head], MAX_RECORD)
    for record in reader:
        if (isinstance(reader, JSONLinesReader) and not reader.last_line_complete
                and not complete):
            return None
        return _detect(record, lines=first == b"{")
    if isinstance(reader, JSONArrayReader) and reader.truncated is not None:
        if not complete:
            return None
        raise InvalidMessage("the first record of the array is incomplete", "$[0]")
    return "empty"


def _not_json_container() -> InvalidMessage:
    return InvalidMessage("not a JSON array or JSON lines file (it does not start with "
                          "'[' or '{')", "$")


def _reader(first: bytes, chunks: Iterable[bytes],
            max_record: int) -> JSONArrayReader | JSONLinesReader:
    if first == b"[":
        return JSONArrayReader(chunks, max_record=max_record)
    return JSONLinesReader(chunks, max_record=max_record)


def _detect(record: Record, *, lines: bool) -> str:
    """The format of a file whose first record is ``record``."""
    if record.error is not None:
        raise record.invalid()
    try:
        value = decode_any(record.raw)
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"record {record.index} is not JSON: {exc}",
                             f"$[{record.index}]") from None
    fmt = _format_of(value, f"$[{record.index}]")
    if fmt == "chathistory" and not lines:
        raise InvalidMessage("a chathistory export is JSON lines, not an array", "$[0]")
    return fmt


_FORMAT_KEYS = {"chatgpt": "mapping", "sharegpt": "conversations", "openai": "messages"}


def _has_key(key: str) -> Callable[[bytes], bool]:
    """Whether a JSON object's bytes hold ``key`` at its top level (a record of the
    format whose key it is)."""
    def check(raw: bytes) -> bool:
        try:
            value = decode_any(raw)
        except msgspec.DecodeError:
            return False
        return isinstance(value, dict) and key in value

    return check


def _format_of(record: Any, path: str) -> str:
    if isinstance(record, dict):
        if record.get("kind") in ("session", "message"):
            return "chathistory"
        if "mapping" in record:
            return "chatgpt"
        if "conversations" in record:
            return "sharegpt"
        if "messages" in record:
            return "openai"
    keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
    raise InvalidMessage(f"unrecognized record ({keys}): expected conversations (ShareGPT), "
                         "mapping (ChatGPT export), messages (OpenAI JSONL) or kind "
                         "(chathistory export); pass a format to force one", path)


def import_file(store: Store, path: str | os.PathLike[str], *, format: str | None = None,
                limit: int | None = None, tenant: str | None = None,
                skip_invalid: bool = False, max_record: int = MAX_RECORD,
                progress: ProgressCallback | None = None) -> ImportReport:
    """Import the conversations of ``path`` into ``store``; see the module docstring.

    ``limit`` stops after that many records (conversations; sessions for a
    chathistory export). ``tenant`` None keeps the store's default (a remote
    store's key decides it). A record that is not valid (not JSON, larger than
    ``max_record`` bytes, a field of the wrong type or out of range) raises
    ``InvalidMessage`` naming it and the field, and nothing of it is stored
    (records before it stay stored, and a retry adds only the rest); with
    ``skip_invalid`` it is counted in ``invalid``, with where it is and why,
    and the records after it are imported.
    """
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: use one of {', '.join(FORMATS)}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if max_record < 1:
        raise ValueError("max_record must be >= 1")
    with open_source(path) as source:
        first = source.first_byte()
        if not first:
            raise InvalidMessage("the file is empty", "$")
        if first not in (b"[", b"{"):
            raise _not_json_container()
        lines = first == b"{"
        if format == "chathistory" and not lines:
            raise InvalidMessage("a chathistory export is JSON lines, not an array", "$")
        reader = _reader(first, source.chunks(), max_record)
        records = iter(reader)
        fmt = format
        before: list[Record] = []  # invalid records before the first one of a known format
        if fmt is None:
            for record in records:
                if _cut_short(reader, record):
                    break
                try:
                    fmt = _detect(record, lines=lines)
                except InvalidMessage:
                    if not skip_invalid:
                        raise
                    before.append(record)
                    continue
                before.append(record)
                break
        report = ImportReport(format=fmt or "empty")
        if fmt == "chathistory":
            assert isinstance(reader, JSONLinesReader)
            _import_export(store, reader, itertools.chain(before, records), report, limit,
                           tenant, progress, source.size)
            return report
        if isinstance(reader, JSONArrayReader) and fmt is not None:
            reader.is_record = _has_key(_FORMAT_KEYS[fmt])
        convert = _CONVERTERS.get(fmt or "", _undetected)
        for record in itertools.chain(before, records):
            if limit is not None and record.index >= limit:
                break
            if _cut_short(reader, record):
                break
            report.conversations += 1
            try:
                if record.error is not None:
                    raise record.invalid()
                raw, record = record.raw, dataclasses.replace(record, raw=b"")
                conversations = list(convert(raw, record.index, report))
                del raw  # not kept while the conversations are stored
                for conversation in conversations:
                    check(conversation, record.index)
            except InvalidMessage as exc:
                if not skip_invalid:
                    raise
                report.invalid.append(_placed(str(exc), record))
                conversations = []
            for conversation in conversations:
                write(store, conversation, report, tenant)
            if progress is not None:
                progress(report.conversations, reader.offset, source.size)
        report.truncated = reader.truncated
        report.bytes_read = reader.offset
        return report


def _placed(text: str, record: Record) -> str:
    """An error of ``record`` that says where the record is (``record 3 (line 4): ...``)."""
    name = f"record {record.index}"
    if record.error is not None:
        return text  # it says already
    if text.startswith(name):
        return f"{name} ({record.where()})" + text[len(name):]
    return f"{name} ({record.where()}): {text}"


def _undetected(raw: bytes, index: int, report: ImportReport) -> Iterator[Conversation]:
    """The converter of records before the first of a known format: each says why
    it is not one."""
    _detect(Record(index, 0, raw), lines=True)
    raise AssertionError("a record of a known format is the first one detected")


def _cut_short(reader: JSONArrayReader | JSONLinesReader, record: Record) -> bool:
    """Whether ``record`` is the partial last line of a file cut short (then marked so)."""
    if (isinstance(reader, JSONLinesReader) and not reader.last_line_complete
            and record.error is None and not _is_json(record.raw)):
        reader.mark_truncated(record.index, record.line, record.offset)
        return True
    return False


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True


class _Head(msgspec.Struct):
    kind: str | None = None
    session: dict[str, Any] | None = None


_head_decoder = msgspec.json.Decoder(_Head)


def _import_export(store: Store, reader: JSONLinesReader, records: Iterable[Record],
                   report: ImportReport, limit: int | None, tenant: str | None,
                   progress: ProgressCallback | None, size: int | None) -> None:
    """``Store.import_`` over the lines, counting sessions (and stopping at ``limit``)."""

    def lines() -> Iterator[bytes]:
        for record in records:
            if record.error is not None:
                raise InvalidMessage(f"line {record.line}: {record.error}",
                                     f"$.line[{record.line}]")
            number, offset, line = record.line, record.offset, record.raw
            try:
                head = _head_decoder.decode(line)
            except msgspec.DecodeError:
                if not reader.last_line_complete:
                    reader.mark_truncated(report.conversations, number, offset)
                    return
                raise InvalidMessage(f"line {number} is not JSON", f"$.line[{number}]") from None
            if head.kind == "session" and head.session is not None:
                if limit is not None and report.conversations >= limit:
                    return
                if progress is not None and report.conversations:
                    progress(report.conversations, offset, size)
                report.conversations += 1
                _count_new(store, head.session, tenant, report)
            yield line

    report.messages_added = store.import_(lines(), tenant=tenant)
    if progress is not None and report.conversations:
        progress(report.conversations, reader.offset, size)
    report.truncated = reader.truncated
    report.bytes_read = reader.offset


def _count_new(store: Store, session: dict[str, Any], tenant: str | None,
               report: ImportReport) -> None:
    kwargs = {"tenant": tenant} if tenant is not None else (
        {"tenant": session["tenant"]} if isinstance(session.get("tenant"), str) else {})
    try:
        store.get_session(str(session.get("id")), **kwargs)
    except NotFound:
        if session.get("parent_id"):
            report.forks_created += 1
        else:
            report.sessions_created += 1
    except ValueError:
        pass  # a remote store serves one tenant: nothing to count against
