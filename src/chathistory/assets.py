"""Content-addressed attachment storage in a directory (the service's ``--asset-dir``).

Files are kept once per tenant and SHA-256 digest, so an image uploaded for ten
sessions is stored once. Paths are built only from a hash of the tenant and
the hex digest, never from what a client sent::

    <root>/<sha256(tenant)[:32]>/<digest[:2]>/<digest>        the bytes
    <root>/<sha256(tenant)[:32]>/<digest[:2]>/<digest>.json   name, media type, size

An upload streams into a temporary file in the tenant's directory while its
digest is computed, and is renamed into place (atomic on POSIX) only when it
is complete and under the size limit; an aborted or oversized upload, or one
that meets a full disk (``StorageFull``, the service's 507), leaves nothing
behind. Messages reference an uploaded file by an ``Attachment`` without
``data`` carrying the same ``sha256``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec

from .errors import ChatHistoryError, Conflict, InvalidMessage, NotFound, StorageFull
from .model import Attachment
from .model._sniff import SUPPORTED_MIME_TYPES, UNKNOWN_MIME_TYPE, sniff_mime
from .model.parts import MAX_ATTACHMENT_BYTES

__all__ = ["AssetTooLarge", "AssetWriter", "FileAssetStore", "check_digest"]

_DIGEST = re.compile(r"[0-9a-f]{64}")
_SNIFF_BYTES = 256 * 1024  # enough for magic numbers and a JPEG's size header


class AssetTooLarge(ChatHistoryError, ValueError):
    """An upload passed the size limit; nothing of it was kept."""


class _Meta(msgspec.Struct, kw_only=True):
    name: str
    mime_type: str
    size: int
    width: int | None = None
    height: int | None = None


def check_digest(sha256: str) -> str:
    """``sha256`` if it is 64 lowercase hex digits, else ``InvalidMessage``."""
    if not isinstance(sha256, str) or not _DIGEST.fullmatch(sha256):
        raise InvalidMessage("sha256 must be 64 lowercase hex digits", "$.sha256")
    return sha256


def _normal_mime(mime_type: str) -> str:
    """The bare, lower-case type; unknown bytes (``application/octet-stream``) are
    stored too, a message referencing them is what refuses them."""
    mime = mime_type.split(";")[0].strip().lower()
    if mime not in SUPPORTED_MIME_TYPES and mime != UNKNOWN_MIME_TYPE \
            and not mime.startswith("text/"):
        raise InvalidMessage(f"unsupported media type {mime_type!r}", "$.mime_type")
    return mime


class FileAssetStore:
    """Attachments in a directory, content-addressed per tenant."""

    def __init__(self, root: str | os.PathLike[str], *,
                 max_bytes: int = MAX_ATTACHMENT_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    @contextlib.contextmanager
    def room(self) -> Iterator[None]:
        """A full disk (or quota) met inside as ``StorageFull`` naming this directory:
        the service answers it 507, as it answers the store's."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise StorageFull(f"no space left for attachments in {self.root}",
                              where=str(self.root)) from None

    def _dir(self, tenant: str) -> Path:
        return self.root / hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:32]

    def _path(self, tenant: str, sha256: str) -> Path:
        check_digest(sha256)
        return self._dir(tenant) / sha256[:2] / sha256

    def writer(self, tenant: str, *, name: str | None = None,
               mime_type: str | None = None) -> AssetWriter:
        """An upload in progress: ``write`` chunks, then ``commit`` (or ``abort``)."""
        return AssetWriter(self, tenant, name, _normal_mime(mime_type) if mime_type else None)

    def put(self, tenant: str, data: bytes | BinaryIO, *, name: str | None = None,
            mime_type: str | None = None) -> Attachment:
        """Store ``data`` (bytes or a binary file) and return its attachment (no data)."""
        writer = self.writer(tenant, name=name, mime_type=mime_type)
        try:
            if isinstance(data, bytes | bytearray | memoryview):
                writer.write(bytes(data))
            else:
                while chunk := data.read(1024 * 1024):
                    writer.write(chunk)
            return writer.commit()
        except BaseException:
            writer.abort()
            raise

    def info(self, tenant: str, sha256: str) -> Attachment | None:
        """The stored file's attachment (no data), or None when this tenant has none."""
        path = self._path(tenant, sha256)
        try:
            meta = msgspec.json.decode(path.with_suffix(".json").read_bytes(), type=_Meta)
        except FileNotFoundError:
            return None
        if not path.exists():
            return None
        return Attachment(name=meta.name, size=meta.size, mime_type=meta.mime_type,
                          sha256=sha256, width=meta.width, height=meta.height)

    def path(self, tenant: str, sha256: str) -> Path:
        """Where the bytes are; ``NotFound`` when this tenant has no such file."""
        path = self._path(tenant, sha256)
        if not path.exists():
            raise NotFound(f"no asset {sha256!r}")
        return path

    def get(self, tenant: str, sha256: str) -> bytes:
        """The bytes; ``NotFound`` when this tenant has no such file."""
        try:
            return self.path(tenant, sha256).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no asset {sha256!r}") from None

    def erase(self, tenant: str) -> None:
        """Remove every file of ``tenant``."""
        shutil.rmtree(self._dir(tenant), ignore_errors=True)

    def delete(self, tenant: str, sha256: str) -> bool:
        """Remove a file; True when there was one."""
        path = self._path(tenant, sha256)
        found = path.exists()
        for p in (path, path.with_suffix(".json")):
            p.unlink(missing_ok=True)
        return found


class AssetWriter:
    """One upload: bytes go to a temporary file while the digest is computed."""

    def __init__(self, store: FileAssetStore, tenant: str, name: str | None,
                 mime_type: str | None) -> None:
        self.store, self.tenant = store, tenant
        self.name, self.mime_type = name, mime_type
        self.size = 0
        self._hash = hashlib.sha256()
        self._head = bytearray()
        directory = store._dir(tenant)
        with store.room():
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".upload-", dir=directory)
        self._tmp = Path(tmp)
        self._file: BinaryIO | None = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        """Add bytes; ``AssetTooLarge`` (and nothing kept) past the limit."""
        if self._file is None:
            raise ValueError("the upload is finished")
        self.size += len(chunk)
        if self.size > self.store.max_bytes:
            self.abort()
            raise AssetTooLarge(f"the upload is over the limit of {self.store.max_bytes} bytes")
        if len(self._head) < _SNIFF_BYTES:
            self._head += chunk[:_SNIFF_BYTES - len(self._head)]
        self._hash.update(chunk)
        with self.store.room():
            self._file.write(chunk)

    def commit(self) -> Attachment:
        """Finish: move the file into place (or drop it when already stored)."""
        if self._file is None:
            raise ValueError("the upload is finished")
        if self.size == 0:
            self.abort()
            raise InvalidMessage("the upload is empty", "$.body")
        head = bytes(self._head)
        try:
            mime = self.mime_type or _normal_mime(sniff_mime(head, self.name))
        except InvalidMessage:
            self.abort()
            raise
        # described as Attachment.from_bytes describes inline bytes: one way to count them
        attachment = Attachment.of_file(head, size=self.size, sha256=self._hash.hexdigest(),
                                        name=self.name, mime_type=mime)
        digest = attachment.sha256
        meta = _Meta(name=attachment.name, mime_type=mime, size=self.size,
                     width=attachment.width, height=attachment.height)
        final = self.store._path(self.tenant, digest)
        meta_path = final.with_suffix(".json")
        tmp_meta = final.parent / f".{digest}.{os.getpid()}.json"
        try:
            with self.store.room():  # written whole before either file is in place
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
                final.parent.mkdir(parents=True, exist_ok=True)
                if not meta_path.exists():
                    try:
                        tmp_meta.write_bytes(msgspec.json.encode(meta))
                    except BaseException:
                        tmp_meta.unlink(missing_ok=True)
                        raise
            if final.exists():
                self._tmp.unlink(missing_ok=True)  # stored before: keep one copy
            else:
                os.replace(self._tmp, final)
            if tmp_meta.exists():
                os.replace(tmp_meta, meta_path)
        except FileNotFoundError:  # the tenant's files were erased during the upload
            self._tmp.unlink(missing_ok=True)
            tmp_meta.unlink(missing_ok=True)
            raise Conflict("the tenant's attachments were erased during this upload; "
                           "send it again") from None
        return attachment

    def abort(self) -> None:
        """Drop the upload; nothing is kept."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)
