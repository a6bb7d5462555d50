"""Content parts and attachments: one tagged union, discriminated by ``type``.

A message holds a list of parts. Parts are frozen ``msgspec`` structs, so a
part is a value: equal when its fields are equal, cheap to copy by reference.
Tags are never reused; a new kind of part gets a new tag (schema rules in
``docs/schema.md``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from typing import Annotated, Any, TypeAlias

import msgspec

from ._sniff import image_size, modality_of, sniff_mime

__all__ = [
    "Attachment",
    "AudioPart",
    "Compaction",
    "FilePart",
    "ImagePart",
    "MediaPart",
    "Part",
    "Reasoning",
    "ResultPart",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "bare_mime",
    "holds_compaction",
    "new_id",
]

MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024
_json_decoder = msgspec.json.Decoder()


def _about(description: str) -> msgspec.Meta:
    return msgspec.Meta(description=description)


def new_id() -> str:
    """A new random UUID (version 4) as a string."""
    return str(uuid.uuid4())


class Attachment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A file kept by content hash: the same bytes are stored once however often used.

    ``data`` holds the bytes inline until a store moves them into its asset
    storage; after that the attachment is a pure reference by ``sha256``.

    What the bytes say need not be given: with ``data``, a field left out is derived
    from them (``size``, ``sha256``, ``mime_type`` sniffed with the help of ``name``,
    an image's ``width`` and ``height``); ``modality`` comes from ``mime_type`` and
    ``name`` from the digest. Fields given are kept as given: ``Message.validate``
    refuses a ``size`` or ``sha256`` that disagrees with the bytes, and
    ``check_described`` a ``modality``, ``width`` or ``height``.
    """

    id: str = msgspec.field(default_factory=new_id)
    name: Annotated[str, _about("file name (default: from the digest)")] = ""
    size: Annotated[int, _about("bytes (derived from data)")] = -1
    modality: Annotated[str, _about("image, audio, video or document (derived from "
                                    "mime_type)")] = ""
    mime_type: Annotated[str, _about("media type (sniffed from data)")] = ""
    sha256: Annotated[str, _about("hex digest of the bytes (derived from data); "
                                  "without data it names stored bytes")] = ""
    width: Annotated[int | None, _about("an image's width (derived from data)")] = None
    height: Annotated[int | None, _about("an image's height (derived from data)")] = None
    data: Annotated[bytes | None, _about("the bytes, base64 in JSON")] = None

    def __post_init__(self) -> None:
        if self.data is not None or not self.modality or not self.name:
            _derive(self, self.data)

    @classmethod
    def from_bytes(
        cls, data: bytes, *, name: str | None = None, mime_type: str | None = None
    ) -> Attachment:
        """An attachment for ``data``; the media type is sniffed when not given."""
        return cls(data=bytes(data), name=name or "", mime_type=mime_type or "")

    @classmethod
    def of_file(cls, head: bytes, *, size: int, sha256: str, name: str | None = None,
                mime_type: str | None = None) -> Attachment:
        """A reference (no ``data``) to a file of ``size`` bytes and digest ``sha256``
        whose first bytes are ``head`` (enough for its magic number and an image's
        size header): what ``from_bytes`` would say of the whole file, for a file
        streamed to disk (an upload)."""
        att = cls(name=name or "", size=size, sha256=sha256,
                  mime_type=mime_type or sniff_mime(head, name))
        _derive(att, head)
        return att

    def without_data(self) -> Attachment:
        """The same attachment as a pure reference (no inline bytes)."""
        return msgspec.structs.replace(self, data=None) if self.data is not None else self


def bare_mime(mime_type: str) -> str:
    """The media type without parameters, lower case (``image/png``)."""
    return mime_type.split(";")[0].strip().lower()


def _derive(att: Attachment, head: bytes | None) -> None:
    """Fill the fields ``att`` was given without, from ``head``: the file's bytes, or
    its first bytes when ``size`` and ``sha256`` are given (an attachment is frozen:
    this runs as it is made, from ``__post_init__`` or ``of_file``)."""
    put = msgspec.structs.force_setattr
    if head is not None:
        if att.size < 0:
            put(att, "size", len(head))
        if not att.sha256:
            put(att, "sha256", hashlib.sha256(head).hexdigest())
        if not att.mime_type:
            put(att, "mime_type", sniff_mime(head, att.name or None))
    mime = bare_mime(att.mime_type)
    if not att.modality and mime:
        put(att, "modality", modality_of(mime) or "document")
    if (head is not None and att.modality == "image" and (att.width is None or att.height is None)
            and (size := image_size(head)) is not None):
        if att.width is None:
            put(att, "width", size[0])
        if att.height is None:
            put(att, "height", size[1])
    if not att.name and att.sha256 and mime:
        ext = (mime.split("/")[-1] or "bin").replace("jpeg", "jpg")
        put(att, "name", f"{att.sha256[:12]}.{ext}")


class _Part(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False,
            tag_field="type"):
    """Base of every part; ``provider_metadata`` is echoed back to the provider as is."""

    provider_metadata: dict[str, Any] = {}


class TextPart(_Part, tag="text", frozen=True):
    text: str


class MediaPart(_Part, frozen=True):
    """Media given either by ``url`` (http(s) or data URL) or by an ``attachment``."""

    url: str | None = None
    attachment: Attachment | None = None
    mime_type: str | None = None

    @property
    def media_type(self) -> str | None:
        """The media type from the attachment, else the one given with the URL."""
        return self.attachment.mime_type if self.attachment else self.mime_type

    @property
    def size(self) -> int:
        """Bytes of the attachment (0 for media given by URL)."""
        return self.attachment.size if self.attachment else 0


class ImagePart(MediaPart, tag="image", frozen=True):
    """An image; ``detail`` is OpenAI's ``auto`` / ``low`` / ``high`` hint."""

    detail: str | None = None
    width: int | None = None
    height: int | None = None

    @property
    def dimensions(self) -> tuple[int, int] | None:
        """(width, height) when known from the part or its attachment."""
        if self.width and self.height:
            return self.width, self.height
        att = self.attachment
        if att is not None and att.width and att.height:
            return att.width, att.height
        return None


class AudioPart(MediaPart, tag="audio", frozen=True):
    """Audio input; ``transcript`` may carry its text for text-only views."""

    transcript: str | None = None


class FilePart(MediaPart, tag="file", frozen=True):
    """A document or other file (PDF, text, video); ``name`` is its file name."""

    name: str | None = None

    @property
    def filename(self) -> str:
        """The best name to show: the part's, the attachment's, or the URL's tail."""
        if self.name:
            return self.name
        if self.attachment:
            return self.attachment.name
        if self.url and not self.url.startswith("data:"):
            return self.url.rstrip("/").rsplit("/", 1)[-1] or self.url
        return "file"


class ToolCall(_Part, tag="tool_call", frozen=True):
    """A request by the model to run tool ``name`` with JSON ``arguments``.

    ``raw_arguments`` is the arguments string exactly as the model emitted it, kept
    when ``arguments`` does not give it back as compact JSON: spelled otherwise
    (``{"a": 1}``), or not a JSON object at all (cut short at ``finish_reason=
    "length"``, a trailing comma, an array, a string, a number, empty). Then
    ``arguments`` is the object it encodes, ``{}`` when it encodes none. Build such
    a call with ``ToolCall.from_json_arguments``; send ``arguments_json``.
    """

    id: str
    name: str
    arguments: dict[str, Any] = {}
    raw_arguments: str | None = None

    @classmethod
    def from_json_arguments(cls, raw: str, *, id: str, name: str,
                            provider_metadata: dict[str, Any] | None = None) -> ToolCall:
        """A call from the arguments string a model emitted; never refuses the string.

        Only a JSON object is parsed into ``arguments``; the string itself is kept in
        ``raw_arguments`` unless compact JSON of ``arguments`` is the very same bytes.
        """
        parsed = parse_arguments(raw)
        arguments = parsed if parsed is not None else {}
        keep = None if parsed is not None and compact_json(parsed) == raw else raw
        return cls(id=id, name=name, arguments=arguments, raw_arguments=keep,
                   provider_metadata=provider_metadata or {})

    @property
    def arguments_json(self) -> str:
        """The arguments string to send: ``raw_arguments`` while it says what
        ``arguments`` says, else ``arguments`` as compact JSON. (A call copied with
        other ``arguments`` and a stale ``raw_arguments`` sends the new ones.)"""
        raw = self.raw_arguments
        if raw is not None and _agrees(raw, self.arguments):
            return raw
        return compact_json(self.arguments)

    @property
    def unparsed_arguments(self) -> str | None:
        """``raw_arguments`` when it is not a JSON object (so no ``arguments`` stands
        for it), None otherwise. A blank string counts as no arguments, ``{}``."""
        raw = self.raw_arguments
        if raw is None or self.arguments or parse_arguments(raw) is not None:
            return None
        return raw


def compact_json(arguments: Any) -> str:
    """JSON without spaces, the form models emit tool-call arguments in."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """The JSON object ``raw`` encodes (``{}`` for a blank string); None when it is not
    one. Strict JSON (no NaN, no lone surrogates), so what is parsed stores exactly."""
    if not raw.strip():
        return {}
    try:
        value = _json_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeEncodeError):
        return None
    return value if isinstance(value, dict) else None


def _agrees(raw: str, arguments: dict[str, Any]) -> bool:
    parsed = parse_arguments(raw)
    return parsed == arguments if parsed is not None else not arguments


ResultPart: TypeAlias = TextPart | ImagePart | AudioPart | FilePart


class ToolResult(_Part, tag="tool_result", frozen=True):
    """The answer to the tool call ``call_id``: text, or a list of parts."""

    call_id: str
    content: str | list[ResultPart] = ""
    is_error: bool = False
    name: str | None = None

    @property
    def text(self) -> str:
        """The result's text (text parts joined by newlines)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


class Reasoning(_Part, tag="reasoning", frozen=True):
    """Model reasoning: readable ``text`` and/or opaque provider ``data``.

    ``signature`` (Anthropic thinking) and ``data`` (redacted thinking, OpenAI
    encrypted reasoning) must be sent back unchanged with the call they precede.
    """

    text: str = ""
    signature: str | None = None
    data: str | None = None


class Compaction(_Part, tag="compaction", frozen=True):
    """A provider's compaction of the conversation before it: what the provider reads
    instead of everything earlier (OpenAI Responses ``compaction`` item, Anthropic
    ``compaction`` block).

    ``provider`` is the format that wrote it (``openai_responses``, ``anthropic``):
    only that provider can read ``data`` and ``signature``, which go back unchanged.
    ``text`` is the readable summary when the provider gives one (Anthropic), None
    otherwise (OpenAI's is encrypted; an Anthropic compaction that failed has none).
    Item ids and other fields to echo are in ``provider_metadata[provider]``.
    """

    provider: str
    text: str | None = None
    data: str | None = None
    signature: str | None = None


Part: TypeAlias = (TextPart | ImagePart | AudioPart | FilePart | ToolCall | ToolResult | Reasoning
                   | Compaction)
"""Any content part; JSON carries the kind in ``type``."""


def holds_compaction(parts: Iterable[Part]) -> bool:
    """Whether any of ``parts`` is a ``Compaction`` (a message that compacts the ones
    before it)."""
    return any(type(p) is Compaction for p in parts)
