"""What the provider adapters share: roles, base64 and data URLs, media sources,
tool-call arguments, provider metadata, turn merging and input checks.

Nothing here knows a provider's wire format; each adapter module does. All of
it is pure: no I/O, no HTTP (a stored attachment is loaded by the caller's
``resolver``).
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import unquote_to_bytes

import msgspec

from ..errors import InvalidMessage
from ..model import (
    PROVIDER_ROLES,
    Attachment,
    AudioPart,
    FilePart,
    ImagePart,
    MediaPart,
    Message,
    Part,
    ProviderRole,
    Reasoning,
    ToolCall,
    ToolResult,
)
from ..model.b64 import decode_base64
from ..model.parts import parse_arguments

JSON: TypeAlias = dict[str, Any]
Resolver: TypeAlias = Callable[[Attachment], "bytes | str | Mapping[str, Any]"]
"""Loads a stored attachment (``data is None``): its bytes, a URL (http(s) or a
data URL) the provider can fetch, or a dict naming a file the provider already
holds (``{"file_id": ...}`` for OpenAI and Anthropic, ``{"file_uri": ...}`` for Gemini)."""
RoleMap: TypeAlias = Mapping[str, str]
"""Custom role -> canonical role (``system``, ``developer``, ``user``, ``assistant``, ``tool``)."""

FILE_ID_SCHEMES = {"openai": "openai-file:", "anthropic": "anthropic-file:"}
"""A media part's ``url`` for a file held by a provider: ``openai-file:file-abc``."""

# ---------------------------------------------------------------- roles


def canonical_role(role: str, index: int, role_map: RoleMap | None) -> ProviderRole:
    """The provider role a message is sent as (one of ``PROVIDER_ROLES``).

    ``role_map`` is looked up first (so it may also rename a provider role, e.g.
    ``{"developer": "system"}``); a role that is neither mapped nor a provider role
    (another ``Role`` member such as ``agent``, or any other string) raises
    ``InvalidMessage`` at ``$[index].role``.
    """
    mapped = role_map.get(role, role) if role_map else role
    found = _PROVIDER.get(mapped)
    if found is not None:
        return found
    canon = ", ".join(PROVIDER_ROLES)
    if mapped != role:
        raise InvalidMessage(
            f"role_map maps {role!r} to {mapped!r}, which is not one of {canon}",
            f"$[{index}].role",
        )
    raise InvalidMessage(
        f"unknown role {role!r}: pass role_map={{{role!r}: ...}} naming one of {canon}",
        f"$[{index}].role",
    )


_PROVIDER: dict[str, ProviderRole] = {role.value: role for role in PROVIDER_ROLES}


# ---------------------------------------------------------------- base64 and data URLs


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: object, path: str) -> bytes:
    """The bytes of base64 ``text`` (standard or URL-safe alphabet, padded or not:
    ``decode_base64``); ``InvalidMessage`` at ``path`` saying what is wrong otherwise."""
    if not isinstance(text, str):
        raise InvalidMessage(f"expected base64 text, not {type(text).__name__}", path)
    try:
        return decode_base64(text)
    except ValueError as exc:
        raise InvalidMessage(f"not valid base64: {exc}", path) from None


def data_url(mime_type: str, data: bytes) -> str:
    return f"data:{mime_type};base64,{b64encode(data)}"


def parse_data_url(url: str, path: str) -> tuple[str, bytes]:
    """``(mime_type, bytes)`` of a ``data:`` URL (base64 or percent-encoded)."""
    header, sep, payload = url[5:].partition(",")
    if not sep:
        raise InvalidMessage("a data URL needs a comma before its data", path)
    params = header.split(";")
    mime = params[0].strip().lower() or "text/plain"
    if "base64" in (p.strip().lower() for p in params[1:]):
        return mime, b64decode(payload, path)
    return mime, unquote_to_bytes(payload)


# ---------------------------------------------------------------- media sources


@dataclass(frozen=True, slots=True)
class Inline:
    """Media bytes to send inline (base64 or a data URL)."""

    data: bytes
    mime_type: str

    @property
    def b64(self) -> str:
        return b64encode(self.data)

    @property
    def data_url(self) -> str:
        return data_url(self.mime_type, self.data)


@dataclass(frozen=True, slots=True)
class Remote:
    """Media the provider fetches by URL."""

    url: str
    mime_type: str | None


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file a provider already holds. ``provider`` is ``openai`` / ``anthropic`` for
    an ``openai-file:`` / ``anthropic-file:`` URL, None for a resolver's dict
    (meant for whichever provider the caller is encoding for)."""

    provider: str | None
    fields: Mapping[str, Any]
    mime_type: str | None

    def get(self, *keys: str) -> str | None:
        for key in keys:
            value = self.fields.get(key)
            if isinstance(value, str) and value:
                return value
        return None


Source: TypeAlias = Inline | Remote | FileRef


def source_of_url(url: str, mime_type: str | None, path: str) -> Source:
    if url.startswith("data:"):
        mime, data = parse_data_url(url, path)
        return Inline(data, mime)
    for provider, scheme in FILE_ID_SCHEMES.items():
        if url.startswith(scheme):
            return FileRef(provider, {"file_id": url[len(scheme):]}, mime_type)
    return Remote(url, mime_type)


def media_source(part: MediaPart, path: str, resolver: Resolver | None) -> Source:
    """Where the bytes of a media part come from; stored attachments go through ``resolver``."""
    att = part.attachment
    if att is None:
        return source_of_url(part.url or "", part.mime_type, path + ".url")
    if att.data is not None:
        return Inline(att.data, att.mime_type)
    if resolver is None:
        raise InvalidMessage(
            f"attachment {att.name!r} is a stored reference without inline data; "
            "pass resolver= to load it",
            path + ".attachment.data",
        )
    got = resolver(att)
    if isinstance(got, bytes | bytearray | memoryview):
        return Inline(bytes(got), att.mime_type)
    if isinstance(got, str):
        return source_of_url(got, att.mime_type, path + ".attachment")
    if isinstance(got, Mapping):
        return FileRef(None, got, att.mime_type)
    raise InvalidMessage(
        f"the resolver returned {type(got).__name__}; expected bytes, a URL or a dict",
        path + ".attachment",
    )


def file_ref_id(ref: FileRef, provider: str, path: str) -> str | None:
    """The ``file_id`` of a reference usable by ``provider``; None when it belongs elsewhere."""
    if ref.provider not in (None, provider):
        return None
    file_id = ref.get("file_id")
    if file_id is None:
        raise InvalidMessage(f"a file reference for {provider} needs a 'file_id'", path)
    return file_id


def guess_mime(url: str) -> str | None:
    return mimetypes.guess_type(url.split("?", 1)[0])[0]


MediaKind: TypeAlias = type[ImagePart] | type[AudioPart] | type[FilePart]


def kind_of_mime(mime_type: str) -> MediaKind:
    """The part class for a media type: images, audio, everything else a file."""
    top = mime_type.split("/", 1)[0]
    return ImagePart if top == "image" else AudioPart if top == "audio" else FilePart


def attachment(data: bytes, mime_type: str | None, name: str | None = None) -> Attachment:
    """An attachment for decoded bytes (the media type is sniffed when not given)."""
    return Attachment.from_bytes(data, name=name, mime_type=mime_type or None)


# ---------------------------------------------------------------- tool calls


INVALID_JSON_KEY = "INVALID_JSON"
"""The one key of the object that carries, to a provider wanting an object (Anthropic
``input``, Gemini ``args``), arguments that are not a JSON object: ``{"INVALID_JSON":
"<the model's string>"}``; decoding reads it back as that string. (The key pydantic-ai
sends in this case, which Anthropic's docs suggest for invalid tool input.)"""


def decode_call(raw: Any, path: str, *, id: str, name: str,
                provider_metadata: dict[str, Any] | None = None) -> ToolCall:
    """A call from an arguments string (OpenAI formats), kept byte for byte whatever it
    holds: truncated or invalid JSON is the model's output, not bad input."""
    if not isinstance(raw, str):
        raise InvalidMessage("arguments must be a JSON string", path)
    return ToolCall.from_json_arguments(raw, id=id, name=name,
                                        provider_metadata=provider_metadata)


def arguments_json(call: ToolCall, namespace: str) -> str:
    """The arguments string to send (``ToolCall.arguments_json``); a call stored by
    chathistory 0.1 kept the model's string in ``provider_metadata[namespace]``."""
    legacy = meta(call, namespace).get("arguments")
    if call.raw_arguments is None and isinstance(legacy, str):
        return msgspec.structs.replace(call, raw_arguments=legacy).arguments_json
    return call.arguments_json


def arguments_object(call: ToolCall) -> dict[str, Any]:
    """The arguments as the object Anthropic and Gemini take: ``arguments``, or
    ``{INVALID_JSON_KEY: string}`` for a string that is not a JSON object."""
    unparsed = call.unparsed_arguments
    return {INVALID_JSON_KEY: unparsed} if unparsed is not None else call.arguments


def call_from_object(arguments: Mapping[str, Any], *, id: str, name: str,
                     provider_metadata: dict[str, Any] | None = None) -> ToolCall:
    """A call from an arguments object (Anthropic, Gemini); ``{INVALID_JSON_KEY: s}``
    with a string ``s`` that is not a JSON object is read back as that string."""
    if set(arguments) == {INVALID_JSON_KEY}:
        raw = arguments[INVALID_JSON_KEY]
        if isinstance(raw, str) and parse_arguments(raw) is None:
            return ToolCall(id=id, name=name, raw_arguments=raw,
                            provider_metadata=provider_metadata or {})
    return ToolCall(id=id, name=name, arguments=dict(arguments),
                    provider_metadata=provider_metadata or {})


# ---------------------------------------------------------------- provider metadata


def meta(obj: Part | Message, namespace: str) -> dict[str, Any]:
    """The part's (or message's) metadata for one provider format, ``{}`` if none."""
    value = obj.provider_metadata.get(namespace)
    return value if isinstance(value, dict) else {}


def with_meta(namespace: str, /, **values: Any) -> dict[str, Any]:
    """``{namespace: {...}}`` of the values that are not None, or ``{}``."""
    kept = {k: v for k, v in values.items() if v is not None}
    return {namespace: kept} if kept else {}


def reasoning_owner(part: Reasoning) -> str | None:
    """The provider format a reasoning part can be replayed to, None if to none.

    Reasoning decoded by an adapter carries its namespace; a bare ``signature``
    or ``data`` is Anthropic's (thinking / redacted thinking); bare text belongs
    to nobody (no provider accepts reasoning it did not sign).
    """
    for namespace in ("openai_responses", "gemini", "anthropic"):
        if namespace in part.provider_metadata:
            return namespace
    if part.signature is not None or part.data is not None:
        return "anthropic"
    return None


# ---------------------------------------------------------------- encoding helpers


@dataclass(frozen=True, slots=True)
class Options:
    """The caller's choices every encoder takes."""

    resolver: Resolver | None = None
    role_map: RoleMap | None = None
    drop_unsupported: bool = False
    keep_cache_control: bool = True
    """Anthropic: send the ``cache_control`` decoding kept on a part."""

    def unsupported(self, reason: str, path: str) -> None:
        """Raise for a part the provider cannot carry, unless the caller chose to drop it."""
        if not self.drop_unsupported:
            raise InvalidMessage(f"{reason} (pass drop_unsupported=True to leave it out)", path)


def append_turn(turns: list[JSON], role: str, blocks: list[Any], key: str) -> JSON | None:
    """Add ``blocks`` as a turn, merged into the previous turn when it has the same role
    (Anthropic and Gemini want alternating turns; parallel results share one)."""
    if not blocks:
        return None
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(blocks)
    else:
        turns.append({"role": role, key: blocks})
    return turns[-1]


def result_parts(result: ToolResult) -> list[Any]:
    """A tool result's content as a list of parts (text given as a string is one part)."""
    return list(result.content) if isinstance(result.content, list) else []


def tool_names(messages: Sequence[Message]) -> dict[str, str]:
    """Call id -> tool name, for results that do not name their tool."""
    return {p.id: p.name for m in messages for p in m.parts if isinstance(p, ToolCall)}


# ---------------------------------------------------------------- decoding helpers


def expect_dict(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"expected an object, got {type(value).__name__}", path)
    return value


def expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise InvalidMessage(f"expected a list, got {type(value).__name__}", path)
    return list(value)


def expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessage(f"expected a string, got {type(value).__name__}", path)
    return value


def check_keys(obj: Mapping[str, Any], known: frozenset[str] | set[str], path: str) -> None:
    """Refuse a field we would otherwise lose; null and empty values are ignored."""
    for key, value in obj.items():
        if key not in known and value not in (None, "", [], {}):
            raise InvalidMessage(f"unsupported field {key!r}", f"{path}.{key}")


def message(role: str, parts: list[Part], path: str, **fields: Any) -> Message:
    """A validated message decoded from the provider item at ``path``."""
    try:
        return Message(role=role, parts=parts, **fields).validate()
    except InvalidMessage as exc:
        raise InvalidMessage(exc.reason, path) from None


def split_user_turn(parts: list[Part]) -> list[tuple[str, list[Part]]]:
    """A user turn as messages: each run of tool results one ``tool`` message, each
    run of other parts one ``user`` message, in order."""
    runs: list[tuple[str, list[Part]]] = []
    for part in parts:
        role = "tool" if isinstance(part, ToolResult) else "user"
        if runs and runs[-1][0] == role:
            runs[-1][1].append(part)
        else:
            runs.append((role, [part]))
    return runs

