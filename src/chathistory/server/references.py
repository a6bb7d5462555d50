"""References to stored bytes in written messages: each must name an asset of the
tenant, checked before anything is stored.

An attachment without ``data`` is a reference by ``sha256``. A message stored with
a reference nothing holds could never be shown whole (OpenAI's Conversations API
listed such a conversation as a 404), so a write refuses it with a 422 naming the
field (``$.messages[0].parts[1].attachment.sha256``). A reference is good when
the tenant uploaded those bytes (``POST /v1/assets``), when the same request
carries them inline, or when the store holds them from an earlier message of the
tenant. Another tenant's bytes count for nothing, and the answer is the same
whether another tenant holds them or nobody does: a write reveals no more than an
upload of the bytes would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..assets import FileAssetStore, check_digest
from ..errors import InvalidMessage, NotFound
from ..model import Attachment, MediaPart, Message, ToolResult
from ..model.parts import MAX_ATTACHMENT_BYTES
from ..stores.protocol import Store

__all__ = ["READ_LIMIT", "check_references", "media"]

READ_LIMIT = 20 * 1024 * 1024
"""Bytes of earlier messages' attachments the references of one request may make the
server read to check them (uploads cost a file's description, not counted)."""


def media(messages: Sequence[Message], root: str = "$") -> Iterator[tuple[str, Attachment]]:
    """Every attachment of ``messages`` with its path, ``root`` the path of the list
    (``$.messages[3].parts[1].attachment``; root "" for one message: ``$.parts[1]...``),
    tool results' content included."""
    for i, message in enumerate(messages):
        at = f"{root}[{i}]" if root else "$"
        for j, part in enumerate(message.parts):
            if isinstance(part, MediaPart) and part.attachment is not None:
                yield f"{at}.parts[{j}].attachment", part.attachment
            elif isinstance(part, ToolResult) and not isinstance(part.content, str):
                for k, item in enumerate(part.content):
                    if isinstance(item, MediaPart) and item.attachment is not None:
                        yield f"{at}.parts[{j}].content[{k}].attachment", item.attachment


def check_references(messages: Sequence[Message], root: str, assets: FileAssetStore,
                     store: Store, tenant: str, read_limit: int = READ_LIMIT) -> None:
    """``InvalidMessage`` at ``<path>.sha256`` (``root`` as ``media`` takes it) for the
    first reference in ``messages`` that names no asset of ``tenant`` (see the
    module's docstring). A reference that validation refuses anyway (a ``sha256`` that
    is not a digest, no ``size`` or ``mime_type``, a size over the attachment limit) is
    left to it: it names the field.

    An upload is checked by its description; bytes the store holds are read (the
    store has no cheaper test), at most ``read_limit`` bytes for one request, so that a
    small body naming many stored assets cannot make the server read gigabytes: past
    it, a 422 saying to upload them. (Work pool: reads the uploads' descriptions and
    the store.)"""
    inline = {att.sha256 for _, att in media(messages, root) if att.data is not None}
    sizes: dict[str, int | None] = {}  # digest -> the bytes' size; None: not held
    read = 0
    for path, att in media(messages, root):
        if (att.data is not None or att.sha256 in inline or not att.mime_type
                or not 0 <= att.size <= MAX_ATTACHMENT_BYTES):
            continue  # (a reference lacking its type, or a bad size: validation names it)
        try:
            check_digest(att.sha256)
        except InvalidMessage:
            continue
        if att.sha256 not in sizes:
            upload = assets.info(tenant, att.sha256)
            if upload is not None:
                sizes[att.sha256] = upload.size
            elif read + att.size > read_limit:
                raise InvalidMessage(
                    f"the references of one request may name at most {read_limit} bytes "
                    "that came inline with earlier messages; upload these bytes (POST "
                    "/v1/assets) and reference the upload, or send them in data",
                    f"{path}.sha256")
            else:
                try:
                    sizes[att.sha256] = len(store.get_asset(att.sha256, tenant=tenant))
                except NotFound:
                    sizes[att.sha256] = None
                read += sizes[att.sha256] or 0
        size = sizes[att.sha256]
        if size is None:
            raise InvalidMessage(
                f"no asset {att.sha256} here: upload the bytes first (POST /v1/assets) or "
                "send them in data", f"{path}.sha256")
        if att.size != size:
            raise InvalidMessage(f"size is {size} for asset {att.sha256}, not {att.size}",
                                 f"{path}.size")
