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
streamed one at a time, so a file of any size imports in constant memory, and
a file cut short mid-record imports every whole record and reports the cut
(``ImportReport.truncated``) instead of failing.

Imports are idempotent: session and message ids derive from the source's ids
(``uuid5``), so importing a file twice adds nothing the second time (see
``_write`` for how branches are placed).
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec

from ..errors import InvalidMessage, NotFound
from ..stores.protocol import Store
from . import chatgpt, openai_jsonl, sharegpt
from ._stream import CHUNK_SIZE, JSONArrayReader, JSONLinesReader, Truncation
from ._write import Conversation, ImportReport, TenantArg, derived_id, write

__all__ = [
    "FORMATS",
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
_DETECT_LIMIT = 256 << 20
"""Bytes read at most to see the first record (a ChatGPT conversation can be large)."""

ProgressCallback = Callable[[int, int, int | None], None]
"""Called after each record with (records read, bytes read, bytes in the source
when known)."""


class Source:
    """A byte stream whose head can be read ahead (to detect its format) and then
    read again from the start, as chunks; works for pipes too."""

    def __init__(self, stream: IO[bytes], name: str, size: int | None) -> None:
        self.stream = stream
        self.name = name
        self.size = size
        """Bytes in the source when known (for progress)."""
        self._head: list[bytes] = []
        self.eof = False

    def read_ahead(self) -> bytes:
        """Read one more chunk into the head; returns the whole head."""
        chunk = self.stream.read(CHUNK_SIZE)
        if chunk:
            self._head.append(chunk)
        else:
            self.eof = True
        return b"".join(self._head)

    def chunks(self) -> Iterator[bytes]:
        """The source from its first byte, as chunks."""
        head, self._head = self._head, []
        yield from head
        while True:
            chunk = self.stream.read(CHUNK_SIZE)
            if not chunk:
                return
            yield chunk


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
    return data.lstrip(b"\xef\xbb\xbf").lstrip()[:1]


def detect_format(head: bytes, *, complete: bool = True) -> str | None:
    """The format of a file starting with ``head``: one of ``FORMATS``, or
    ``"empty"`` for an empty JSON array. None when ``head`` holds no whole first
    record yet and more of the file follows (``complete=False``)."""
    first = _first_byte(head)
    if first == b"[":
        reader = JSONArrayReader([head])
        element = next(iter(reader), None)
        if element is None:
            if reader.truncated is None:
                return "empty"
            if not complete:
                return None
            raise InvalidMessage("the first record of the array is incomplete", "$[0]")
        record = _decode_head(element[2], "$[0]")
        fmt = _format_of(record, "$[0]")
        if fmt == "chathistory":
            raise InvalidMessage("a chathistory export is JSON lines, not an array", "$[0]")
        return fmt
    if first == b"{":
        text = head.lstrip(b"\xef\xbb\xbf").lstrip()
        line, newline, _ = text.partition(b"\n")
        if not newline and not complete:
            return None
        return _format_of(_decode_head(line, "$[0]"), "$[0]")
    if not first:
        if not complete:
            return None
        raise InvalidMessage("the file is empty", "$")
    raise InvalidMessage("not a JSON array or JSON lines file (it does not start with "
                         "'[' or '{')", "$")


def _decode_head(data: bytes, path: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"the first record is not JSON: {exc}", path) from None


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
                skip_invalid: bool = False,
                progress: ProgressCallback | None = None) -> ImportReport:
    """Import the conversations of ``path`` into ``store``; see the module docstring.

    ``limit`` stops after that many records (conversations; sessions for a
    chathistory export). ``tenant`` None keeps the store's default (a remote
    store's key decides it). A record that does not decode raises
    ``InvalidMessage`` naming it (records before it stay stored, and a retry
    adds only the rest), or with ``skip_invalid`` is counted in ``invalid``.
    """
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: use one of {', '.join(FORMATS)}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    with open_source(path) as source:
        head = source.read_ahead()
        detected = None if format is not None else detect_format(head, complete=source.eof)
        while format is None and detected is None:
            if len(head) > _DETECT_LIMIT:
                raise InvalidMessage("no whole record in the first 256 MB; pass a format", "$")
            head = source.read_ahead()
            detected = detect_format(head, complete=source.eof)
        fmt = format or detected or "empty"
        report = ImportReport(format=fmt)
        if fmt == "empty":
            return report
        lines = _first_byte(head) != b"["
        if fmt == "chathistory":
            if not lines:
                raise InvalidMessage("a chathistory export is JSON lines, not an array", "$")
            _import_export(store, JSONLinesReader(source.chunks()), report, limit, tenant,
                           progress, source.size)
            return report
        convert = _CONVERTERS[fmt]
        reader: JSONArrayReader | JSONLinesReader = (
            JSONLinesReader(source.chunks()) if lines else JSONArrayReader(source.chunks()))
        for index, (number, offset, raw) in enumerate(reader):
            if limit is not None and index >= limit:
                break
            if (isinstance(reader, JSONLinesReader) and not reader.last_line_complete
                    and not _is_json(raw)):
                reader.mark_truncated(index, number, offset)
                break
            report.conversations += 1
            try:
                conversations = list(convert(raw, index, report))
            except InvalidMessage as exc:
                if not skip_invalid:
                    raise
                report.invalid.append(str(exc))
                conversations = []
            for conversation in conversations:
                try:
                    write(store, conversation, report, tenant)
                except InvalidMessage as exc:
                    raise InvalidMessage(f"record {index}: {exc.reason}",
                                         f"$[{index}].messages" + exc.path[1:]) from None
            if progress is not None:
                progress(report.conversations, reader.offset, source.size)
        report.truncated = reader.truncated
        report.bytes_read = reader.offset
        return report


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


def _import_export(store: Store, reader: JSONLinesReader, report: ImportReport,
                   limit: int | None, tenant: str | None,
                   progress: ProgressCallback | None, size: int | None) -> None:
    """``Store.import_`` over the lines, counting sessions (and stopping at ``limit``)."""

    def lines() -> Iterator[bytes]:
        for number, offset, line in reader:
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
