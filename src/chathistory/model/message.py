"""The message: a value with an id, a role, content parts and KV-cache fields.

Content (role, name, parts, metadata) is not changed after a message is added
to a history; the KV fields (``kv_size``, ``kv_start``, ``kv_status``) and the
cached token counts are bookkeeping that selectors and the context window
update in place, and that serialize with the message so a restored session
need not be re-tokenized.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import IntEnum, StrEnum, nonmember
from typing import Any, Literal, TypeAlias

import msgspec

from ..errors import InvalidMessage
from ._sniff import (
    SUPPORTED_MIME_TYPES,
    UNKNOWN_MIME_TYPE,
    image_size,
    modality_of,
    sniff_mime,
)
from .parts import (
    MAX_ATTACHMENT_BYTES,
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    MediaPart,
    Part,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
    bare_mime,
    new_id,
)
from .usage import Usage

__all__ = ["KEPT_ROLES", "PROVIDER_ROLES", "KVStatus", "Message", "ProviderRole", "Role",
           "check_described", "media_parts"]


class Role(StrEnum):
    """Every role of a conversation with agents and tools: all nine are members, so
    ``list(Role)`` and ``Role("agent")`` know each of them.

    Only the first five (``PROVIDER_ROLES``) are roles every provider format speaks.
    The other four (``Role.AGENT``, ``Role.TOOL_RESPONSE``, ``Role.PCP_RESPONSE``,
    ``Role.MCP_RESPONSE``) no provider has: a provider format refuses them
    (``InvalidMessage`` at ``$[i].role``) unless a ``role_map`` says what to send
    (``{"agent": "assistant"}``) instead of guessing. ``Message.role`` is a plain
    string: any non-empty role is kept as given.
    """

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    AGENT = "agent"
    TOOL_RESPONSE = "tool_response"
    PCP_RESPONSE = "pcp_response"
    MCP_RESPONSE = "mcp_response"
    ALL = nonmember(("system", "developer", "user", "assistant", "tool",
                     "agent", "tool_response", "pcp_response", "mcp_response"))
    """Every role's value, the provider roles first (``tuple(Role)``, as strings)."""


ProviderRole: TypeAlias = Literal[Role.SYSTEM, Role.DEVELOPER, Role.USER, Role.ASSISTANT,
                                  Role.TOOL]
"""A role every provider format speaks: what a format's exhaustive ``match`` covers."""

PROVIDER_ROLES: tuple[ProviderRole, ...] = (Role.SYSTEM, Role.DEVELOPER, Role.USER,
                                            Role.ASSISTANT, Role.TOOL)
"""The roles every provider format speaks, the targets a ``role_map`` may name; a
format sends no other."""


KEPT_ROLES = frozenset({"system", "developer"})
"""The roles every reducer, selector and store read keeps unless told otherwise
(invariant 4): instructions, not conversation."""


class KVStatus(IntEnum):
    """Where a message stands in a model's KV cache."""

    LOADED = 1
    """In the context (the default)."""
    MARKED = 0
    """Left the window; the engine may free it."""
    UNLOADED = -1
    """Freed by the engine; stays in the store."""


def _now() -> datetime:
    return datetime.now(UTC)


def _media_part(item: Attachment | MediaPart) -> ImagePart | AudioPart | FilePart:
    if isinstance(item, ImagePart | AudioPart | FilePart):
        return item
    if isinstance(item, Attachment):
        if item.modality == "image":
            return ImagePart(attachment=item)
        if item.modality == "audio":
            return AudioPart(attachment=item)
        return FilePart(attachment=item)
    raise InvalidMessage(
        f"an attachment must be an Attachment or a media part, not {type(item).__name__}",
        "$.parts",
    )


def _tool_call(item: ToolCall | Mapping[str, Any], path: str) -> ToolCall:
    if isinstance(item, ToolCall):
        return item
    if not isinstance(item, Mapping):
        raise InvalidMessage(f"expected a ToolCall or a mapping, got {type(item).__name__}", path)
    args: Any = item.get("arguments", {})
    call_id, name = str(item.get("id") or new_id()), str(item.get("name", ""))
    if isinstance(args, str):  # the model's string, kept as it is when not an object
        return ToolCall.from_json_arguments(args, id=call_id, name=name)
    return ToolCall(id=call_id, name=name, arguments=args)


class Message(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """One message of a conversation.

    Build one with a factory (``Message.user("hi")``) or the constructor;
    ``validate()`` checks the rules and raises ``InvalidMessage`` naming the
    field. Histories and stores validate on add.
    """

    id: str = msgspec.field(default_factory=new_id)
    role: str
    name: str | None = None
    parts: list[Part] = []
    metadata: dict[str, Any] = {}
    provider_metadata: dict[str, Any] = {}
    created_at: datetime = msgspec.field(default_factory=_now)
    kv_size: int = -1
    kv_start: int = -1
    kv_status: KVStatus = KVStatus.LOADED
    token_counts: dict[str, int] | None = None
    """Cached counts per token counter name; filled by ``chathistory.tokens``."""
    usage: Usage | None = None
    """What the provider reported for the response this (assistant) message is:
    observation kept beside the content, never sent to a provider nor counted."""

    # ------------------------------------------------------------------ factories

    @classmethod
    def user(
        cls,
        text: str = "",
        *attachments: Attachment | MediaPart,
        name: str | None = None,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        """A user message with optional attachments (images, audio, files)."""
        parts: list[Part] = [TextPart(text=text)] if text else []
        parts.extend(_media_part(a) for a in attachments)
        return cls._make("user", parts, name, id, metadata)

    @classmethod
    def assistant(
        cls,
        text: str = "",
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] = (),
        *,
        reasoning: str | Reasoning | None = None,
        name: str | None = None,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        """An assistant message; tool calls may be ``ToolCall``s or dicts
        ``{"id", "name", "arguments"}`` whose arguments may be a JSON string."""
        parts: list[Part] = []
        if reasoning is not None:
            if not isinstance(reasoning, Reasoning):
                reasoning = Reasoning(text=reasoning)
            parts.append(reasoning)
        if text:
            parts.append(TextPart(text=text))
        parts.extend(_tool_call(c, f"$.parts[{len(parts) + i}]") for i, c in enumerate(tool_calls))
        return cls._make("assistant", parts, name, id, metadata)

    @classmethod
    def system(cls, text: str, *, id: str | None = None, metadata: dict[str, Any] | None = None
               ) -> Message:
        """A system prompt."""
        return cls._make("system", [TextPart(text=text)], None, id, metadata)

    @classmethod
    def developer(cls, text: str, *, id: str | None = None,
                  metadata: dict[str, Any] | None = None) -> Message:
        """A developer message (OpenAI's successor of the system role)."""
        return cls._make("developer", [TextPart(text=text)], None, id, metadata)

    @classmethod
    def tool_result(
        cls,
        call_id: str,
        content: str | list[Any],
        is_error: bool = False,
        *,
        name: str | None = None,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        """The result of tool call ``call_id`` (role ``tool``); ``name`` is the tool's."""
        part = ToolResult(call_id=call_id, content=content, is_error=is_error, name=name)
        return cls._make("tool", [part], None, id, metadata)

    @classmethod
    def _make(cls, role: str, parts: list[Part], name: str | None, id: str | None,
              metadata: dict[str, Any] | None) -> Message:
        msg = cls(id=id or new_id(), role=role, name=name, parts=parts, metadata=metadata or {})
        return msg.validate()

    # ------------------------------------------------------------------ views

    @property
    def text(self) -> str:
        """The text parts joined by newlines."""
        parts = self.parts
        if len(parts) == 1:
            p = parts[0]
            return p.text if type(p) is TextPart else ""
        return "\n".join(p.text for p in parts if type(p) is TextPart)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls this message makes."""
        return [p for p in self.parts if type(p) is ToolCall]

    @property
    def tool_results(self) -> list[ToolResult]:
        """The tool results this message carries."""
        return [p for p in self.parts if type(p) is ToolResult]

    @property
    def has_media(self) -> bool:
        """True when any part (or a tool result's part) is an image, audio or file."""
        return any(True for _ in self._media())

    @property
    def total_media_size(self) -> int:
        """Bytes of all attached media (media given by URL count 0)."""
        return sum(m.size for m in self._media())

    @property
    def attachments(self) -> list[Attachment]:
        """Every attachment referenced by this message, in order."""
        return [m.attachment for m in self._media() if m.attachment is not None]

    def _media(self) -> Iterable[MediaPart]:
        for p in self.parts:
            if isinstance(p, MediaPart):
                yield p
            elif type(p) is ToolResult and not isinstance(p.content, str):
                yield from (c for c in p.content if isinstance(c, MediaPart))

    def to_text_only(self) -> Message:
        """A copy with the same id and no media parts (tool results keep their text)."""
        parts: list[Part] = []
        for p in self.parts:
            if isinstance(p, MediaPart):
                continue
            if type(p) is ToolResult and not isinstance(p.content, str):
                p = msgspec.structs.replace(
                    p, content=[c for c in p.content if not isinstance(c, MediaPart)]
                )
            parts.append(p)
        return msgspec.structs.replace(self, parts=parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes as base64, datetimes as RFC 3339)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """A validated message from ``to_dict()`` output (or any JSON-shaped dict)."""
        from .codec import message_from_builtins

        return message_from_builtins(data)

    def to_json(self) -> bytes:
        """This message as JSON bytes."""
        from .codec import encode

        return encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> Message:
        """A validated message from JSON."""
        from .codec import decode_message

        return decode_message(data)

    # ------------------------------------------------------------------ validation

    def validate(self) -> Message:
        """Check the rules; return ``self`` or raise ``InvalidMessage`` naming the field."""
        if not isinstance(self.id, str) or not self.id or "\x00" in self.id:
            raise InvalidMessage("id must be a non-empty string without NUL", "$.id")
        if not isinstance(self.role, str) or not self.role.strip() or "\x00" in self.role:
            raise InvalidMessage("role must be a non-empty string without NUL", "$.role")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InvalidMessage("name must be a non-empty string or null", "$.name")
        if not isinstance(self.parts, list):
            raise InvalidMessage("parts must be a list", "$.parts")
        has_content = False
        for i, part in enumerate(self.parts):
            path = f"$.parts[{i}]"
            if isinstance(part, TextPart):
                if not isinstance(part.text, str):
                    raise InvalidMessage("text must be a string", path + ".text")
                has_content = has_content or bool(part.text.strip())
            elif isinstance(part, ToolCall):
                _check_tool_call(part, path)
                has_content = True
            elif isinstance(part, ToolResult):
                _check_tool_result(part, path)
                has_content = True
            elif isinstance(part, Reasoning):
                # an opaque provider item (e.g. OpenAI's reasoning item id) is content too
                has_content = has_content or bool(part.text or part.data or part.signature
                                                  or part.provider_metadata)
            elif isinstance(part, MediaPart):
                _check_media(part, path)
                has_content = True
            elif isinstance(part, Compaction):
                if not part.provider:
                    raise InvalidMessage("a compaction names its provider", path + ".provider")
                has_content = True  # even with no summary: the provider wants it back
            else:
                raise InvalidMessage(f"unknown part type {type(part).__name__}", path)
        if not has_content:
            raise InvalidMessage(
                "a message needs non-empty text, an attachment, a tool call or a tool result",
                "$.parts",
            )
        if self.usage is not None:
            if not isinstance(self.usage, Usage):
                raise InvalidMessage("usage must be a Usage or null", "$.usage")
            self.usage.check("$.usage")
        return self


def _check_tool_call(part: ToolCall, path: str) -> None:
    if not isinstance(part.id, str) or not part.id or "\x00" in part.id:
        raise InvalidMessage("a tool call needs a non-empty id without NUL", path + ".id")
    if not isinstance(part.name, str) or not part.name:
        raise InvalidMessage("a tool call needs a non-empty name", path + ".name")
    if not isinstance(part.arguments, dict):
        raise InvalidMessage("arguments must be a JSON object", path + ".arguments")


def _check_tool_result(part: ToolResult, path: str) -> None:
    if not isinstance(part.call_id, str) or not part.call_id or "\x00" in part.call_id:
        raise InvalidMessage("a tool result must name the call_id it answers (without NUL)",
                             path + ".call_id")
    if isinstance(part.content, list):
        for j, item in enumerate(part.content):
            sub = f"{path}.content[{j}]"
            if isinstance(item, MediaPart):
                _check_media(item, sub)
            elif type(item) is not TextPart:
                raise InvalidMessage("tool result content must be text, image, audio or file", sub)
    elif not isinstance(part.content, str):
        raise InvalidMessage("content must be a string or a list of parts", path + ".content")


_SHA256 = re.compile(r"[0-9a-f]{64}")
_PART_MODALITY = {ImagePart: ("image",), AudioPart: ("audio",),
                  FilePart: ("document", "video", "image", "audio")}


def _check_media(part: MediaPart, path: str) -> None:
    att = part.attachment
    if (part.url is None) == (att is None):
        raise InvalidMessage("media needs exactly one of url or attachment", path)
    if part.url is not None:
        if not isinstance(part.url, str) or not part.url:
            raise InvalidMessage("url must be a non-empty string", path + ".url")
        return
    assert att is not None
    apath = path + ".attachment"
    if att.data is None:
        _check_reference(att, apath)
    if att.size <= 0 or (att.data is not None and len(att.data) == 0):
        raise InvalidMessage("attachment is empty", apath + ".size")
    if att.size > MAX_ATTACHMENT_BYTES:
        raise InvalidMessage(
            f"attachment is {att.size} bytes; the limit is {MAX_ATTACHMENT_BYTES}", apath + ".size"
        )
    if att.data is not None and len(att.data) != att.size:
        raise InvalidMessage("size does not match the attached bytes", apath + ".size")
    mime = bare_mime(att.mime_type)
    if mime == UNKNOWN_MIME_TYPE:
        _refuse_unknown(att, apath)
    if mime not in SUPPORTED_MIME_TYPES and not mime.startswith("text/"):
        raise InvalidMessage(f"unsupported media type {att.mime_type!r}", apath + ".mime_type")
    modality = modality_of(mime)
    if modality not in _PART_MODALITY[type(part)]:
        raise InvalidMessage(
            f"a {type(part).__name__} cannot hold {modality} media ({att.mime_type})",
            apath + ".mime_type",
        )
    if not isinstance(att.sha256, str) or not _SHA256.fullmatch(att.sha256):
        raise InvalidMessage("sha256 must be 64 lowercase hex digits", apath + ".sha256")
    # content addressing: stored bytes must be what their name says, or a later message
    # with the real bytes would be served these (the first write of a digest wins)
    if att.data is not None and hashlib.sha256(att.data).hexdigest() != att.sha256:
        raise InvalidMessage("sha256 does not match the attached bytes", apath + ".sha256")


def _check_reference(att: Attachment, path: str) -> None:
    """An attachment without ``data`` names stored bytes: what cannot be derived from
    bytes it does not carry must be given."""
    if not att.sha256:
        raise InvalidMessage("an attachment needs its bytes (data) or the sha256 of stored "
                             "ones (an upload's)", path + ".sha256")
    if att.size < 0:
        raise InvalidMessage("an attachment without data needs its size", path + ".size")
    if not att.mime_type:
        raise InvalidMessage("an attachment without data needs its mime_type",
                             path + ".mime_type")


def check_described(message: Message) -> None:
    """Refuse what an attachment says of its inline bytes that they do not say: a
    ``modality`` other than its ``mime_type``'s, and an image's ``width`` or ``height``
    (the attachment's, or its part's) other than the bytes'. ``InvalidMessage`` names
    the field (``$.parts[1].attachment.width``).

    The service checks its input with it (``Message.validate`` checks ``size`` and
    ``sha256``); documents and stored messages are not held to it, so what an earlier
    release stored still loads."""
    for path, part in media_parts(message):
        att = part.attachment
        if att is None:
            continue
        apath = path + ".attachment"
        modality = modality_of(bare_mime(att.mime_type))
        if modality is not None and att.modality != modality:
            raise InvalidMessage(f"modality is {modality!r} for {att.mime_type}, not "
                                 f"{att.modality!r} (leave it out: it is derived)",
                                 apath + ".modality")
        if att.data is None or modality != "image":
            continue
        measured = image_size(att.data)
        if measured is None:
            continue
        given = [(apath, att.width, att.height)]
        if isinstance(part, ImagePart):
            given.append((path, part.width, part.height))
        for where, width, height in given:
            for field, value, real in (("width", width, measured[0]),
                                       ("height", height, measured[1])):
                if value is not None and value != real:
                    raise InvalidMessage(f"{field} is {real} in the attached bytes, not "
                                         f"{value} (leave it out: it is derived)",
                                         f"{where}.{field}")


def media_parts(message: Message) -> Iterable[tuple[str, MediaPart]]:
    """Every media part of ``message`` with its path (``$.parts[2].content[0]``)."""
    for i, part in enumerate(message.parts):
        if isinstance(part, MediaPart):
            yield f"$.parts[{i}]", part
        elif type(part) is ToolResult and not isinstance(part.content, str):
            for j, item in enumerate(part.content):
                if isinstance(item, MediaPart):
                    yield f"$.parts[{i}].content[{j}]", item


def _refuse_unknown(att: Attachment, path: str) -> None:
    """``application/octet-stream`` is what sniffing says of bytes that match no
    known format; no provider takes it, so the caller must say what the bytes are."""
    if att.data is None:
        raise InvalidMessage(
            f"{UNKNOWN_MIME_TYPE} is not a supported media type (the stored file matched "
            "no known format); declare its mime_type", path + ".mime_type")
    found = sniff_mime(att.data, att.name)
    if found != UNKNOWN_MIME_TYPE:
        raise InvalidMessage(
            f"{UNKNOWN_MIME_TYPE} is not a supported media type; the bytes look like {found}",
            path + ".mime_type")
    raise InvalidMessage(
        "the attached bytes match no known format; pass the supported mime_type they have "
        "(Attachment.from_bytes(data, mime_type=...))", path + ".data")
