"""The one codec for messages and message documents.

JSON goes through ``msgspec`` with typed decoders, so decoding validates
types as it parses; semantic rules run after (``Message.validate``). Errors
become ``InvalidMessage`` with the path of the bad field.

A *document* is the versioned envelope of a list of messages::

    {"schema_version": 1, "messages": [...], "assets": {"<sha256>": "<base64>"}}

Attachment bytes are kept once per content hash in ``assets`` and the
messages reference them, so an image sent ten times is stored once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from ..errors import InvalidMessage
from .message import Message
from .parts import Attachment, MediaPart, Part, ToolResult, holds_compaction

__all__ = [
    "SCHEMA_VERSION",
    "decode",
    "decode_document",
    "decode_message",
    "encode",
    "encode_document",
    "message_from_builtins",
]

SCHEMA_VERSION = 1
"""Version of the serialized form. Every version ever released still decodes."""

COMPACTION_SCHEMA_VERSION = 2
"""The version of a document holding a ``Compaction`` part: a reader of version 1
does not know the part, so it refuses the document (``$.schema_version``) instead of
failing on the part or losing it. Documents without one stay version 1."""

_SUPPORTED_VERSIONS = frozenset({SCHEMA_VERSION, COMPACTION_SCHEMA_VERSION})
_M = TypeVar("_M", bound=MediaPart)


class Document(msgspec.Struct, kw_only=True, omit_defaults=True):
    schema_version: int
    messages: list[Message]
    assets: dict[str, bytes] = {}
    metadata: dict[str, Any] = {}


_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(Message)
_messages_decoder = msgspec.json.Decoder(list[Message])
_document_decoder = msgspec.json.Decoder(Document)
_PATH = re.compile(r"^(.*?)(?: - at `(\$[^`]*)`)?$", re.S)


def invalid_from(exc: msgspec.MsgspecError, prefix: str = "$") -> InvalidMessage:
    """msgspec's decode or validation error as ``InvalidMessage`` naming the field
    (``$.parts[2].call_id``), under ``prefix``."""
    match = _PATH.match(str(exc))
    reason, path = (match.group(1), match.group(2)) if match else (str(exc), None)
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        reason = f"invalid JSON: {reason}"
    return InvalidMessage(reason, (prefix + path[1:]) if path else prefix)


def encode(value: Any) -> bytes:
    """JSON bytes for a message, a part, or a list of them."""
    return _encoder.encode(value)


def _validate_all(messages: Sequence[Message], prefix: str) -> None:
    for i, msg in enumerate(messages):
        try:
            msg.validate()
        except InvalidMessage as exc:
            raise exc.under(f"{prefix}[{i}]") from None


def decode_message(data: bytes | str) -> Message:
    """A validated message from JSON."""
    try:
        msg = _message_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise invalid_from(exc) from None
    return msg.validate()


def decode(data: bytes | str) -> list[Message]:
    """A validated list of messages from a JSON array."""
    try:
        messages = _messages_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise invalid_from(exc) from None
    _validate_all(messages, "$")
    return messages


def message_from_builtins(data: Mapping[str, Any]) -> Message:
    """A validated message from a dict of JSON-shaped values."""
    try:
        msg = msgspec.convert(data, Message, from_attributes=False)
    except msgspec.MsgspecError as exc:
        raise invalid_from(exc) from None
    return msg.validate()


# ---------------------------------------------------------------- documents


def _strip_media(part: _M, assets: dict[str, bytes]) -> _M:
    att = part.attachment
    if att is None or att.data is None:
        return part
    assets.setdefault(att.sha256, att.data)
    return msgspec.structs.replace(part, attachment=att.without_data())


def strip_part(part: Part, assets: dict[str, bytes]) -> Part:
    """``part`` with its inline attachment bytes moved into ``assets`` (by sha256),
    leaving the reference: how a store keeps each attachment once."""
    if isinstance(part, MediaPart):
        return _strip_media(part, assets)
    if type(part) is ToolResult and not isinstance(part.content, str):
        return msgspec.structs.replace(
            part,
            content=[_strip_media(c, assets) if isinstance(c, MediaPart) else c
                     for c in part.content],
        )
    return part


def _has_inline_media(msg: Message) -> bool:
    for p in msg.parts:
        if isinstance(p, MediaPart):
            if p.attachment is not None and p.attachment.data is not None:
                return True
        elif (type(p) is ToolResult and not isinstance(p.content, str)
              and any(isinstance(c, MediaPart) and c.attachment is not None
                      and c.attachment.data is not None for c in p.content)):
            return True
    return False


def encode_document(messages: Iterable[Message], metadata: dict[str, Any] | None = None) -> bytes:
    """The versioned JSON document of ``messages``, attachments stored once by hash."""
    assets: dict[str, bytes] = {}
    out: list[Message] = []
    version = SCHEMA_VERSION
    for msg in messages:
        if _has_inline_media(msg):
            msg = msgspec.structs.replace(msg, parts=[strip_part(p, assets) for p in msg.parts])
        if holds_compaction(msg.parts):
            version = COMPACTION_SCHEMA_VERSION
        out.append(msg)
    doc = Document(schema_version=version, messages=out, assets=assets,
                   metadata=metadata or {})
    return _encoder.encode(doc)


def attach_part(part: Part, assets: Mapping[str, bytes], cache: dict[str, Attachment]) -> Part:
    """The inverse of ``strip_part``: the attachment's bytes put back from ``assets``
    (``cache`` shares one ``Attachment`` between parts that reference it)."""
    if isinstance(part, MediaPart):
        att = part.attachment
        if att is None or att.data is not None or att.sha256 not in assets:
            return part
        full = cache.get(att.id)
        if full is None:
            full = cache[att.id] = msgspec.structs.replace(att, data=assets[att.sha256])
        return msgspec.structs.replace(part, attachment=full)
    if type(part) is ToolResult and not isinstance(part.content, str):
        content: list[Any] = [attach_part(c, assets, cache) for c in part.content]
        return msgspec.structs.replace(part, content=content)
    return part


def decode_document(data: bytes | str) -> tuple[list[Message], dict[str, Any]]:
    """Messages and metadata from a versioned document; validates every message."""
    try:
        doc = _document_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise invalid_from(exc) from None
    if doc.schema_version not in _SUPPORTED_VERSIONS:
        raise InvalidMessage(
            f"schema_version {doc.schema_version} is newer than this chathistory "
            f"(reads {sorted(_SUPPORTED_VERSIONS)}); upgrade chathistory",
            "$.schema_version",
        )
    messages = doc.messages
    if doc.assets:
        cache: dict[str, Attachment] = {}
        for msg in messages:
            if msg.has_media:
                msg.parts = [attach_part(p, doc.assets, cache) for p in msg.parts]
    _validate_all(messages, "$.messages")
    return messages, doc.metadata
