"""What the two OpenAI formats (Chat Completions, Responses) share: audio as
``input_audio``, files as data URLs or ids, images as URLs; and the Responses
input content parts, used by both its messages and its function call outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from ..errors import InvalidMessage
from ..model import AudioPart, FilePart, ImagePart, TextPart
from ._common import (
    FILE_ID_SCHEMES,
    JSON,
    FileRef,
    Inline,
    Options,
    Remote,
    Source,
    attachment,
    b64decode,
    check_keys,
    expect_dict,
    expect_str,
    file_ref_id,
    media_source,
    meta,
    parse_data_url,
    with_meta,
)

_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
_FORMAT_MIME = {"wav": "audio/wav", "mp3": "audio/mpeg"}
FILE_SCHEME = FILE_ID_SCHEMES["openai"]


def encode_audio(part: AudioPart, source: Source, path: str, opts: Options) -> JSON | None:
    """An ``input_audio`` block: OpenAI takes wav or mp3 bytes, nothing by URL."""
    fmt = _AUDIO_FORMATS.get(part.media_type or "")
    if not isinstance(source, Inline) or fmt is None:
        opts.unsupported("OpenAI takes audio only as wav or mp3 bytes", path)
        return None
    return {"type": "input_audio", "input_audio": {"data": source.b64, "format": fmt}}


def decode_audio(block: Mapping[str, Any], path: str) -> AudioPart:
    audio = expect_dict(block.get("input_audio"), path + ".input_audio")
    fmt = expect_str(audio.get("format"), path + ".input_audio.format")
    data = expect_str(audio.get("data"), path + ".input_audio.data")
    return AudioPart(attachment=attachment(b64decode(data, path + ".input_audio.data"),
                                           _FORMAT_MIME.get(fmt)))


def file_id(source: FileRef, path: str, opts: Options) -> str | None:
    """The OpenAI file id of a reference; another provider's id is unsupported."""
    found = file_ref_id(source, "openai", path)
    if found is None:
        opts.unsupported(f"a {source.provider} file id cannot go to OpenAI", path)
    return found


def decode_image_url(url: str, path: str, detail: str | None) -> ImagePart:
    """An image from an ``image_url``: a data URL becomes an attachment."""
    if url.startswith("data:"):
        mime, data = parse_data_url(url, path)
        return ImagePart(attachment=attachment(data, mime), detail=detail)
    return ImagePart(url=url, detail=detail)


def decode_file_data(raw: str, path: str, name: str | None, pmeta: JSON) -> FilePart:
    """A file from ``file_data``: a data URL, or bare base64 (the type is sniffed)."""
    if raw.startswith("data:"):
        mime, data = parse_data_url(raw, path)
        return FilePart(attachment=attachment(data, mime, name), name=name, provider_metadata=pmeta)
    data = b64decode(raw, path)
    return FilePart(attachment=attachment(data, None, name), name=name, provider_metadata=pmeta)


def decode_file_id(raw: Any, path: str, name: str | None, pmeta: JSON) -> FilePart:
    return FilePart(url=FILE_SCHEME + expect_str(raw, path), name=name, provider_metadata=pmeta)


# ---------------------------------------------------------------- Responses content parts

RESPONSES = "openai_responses"


def encode_input_media(part: ImagePart | AudioPart | FilePart, path: str,
                       opts: Options) -> JSON | None:
    """A Responses ``input_image`` / ``input_audio`` / ``input_file`` content part."""
    source = media_source(part, path, opts.resolver)
    match part:
        case ImagePart():
            image: JSON = {"type": "input_image", "detail": part.detail or "auto"}
            match source:
                case Inline():
                    image["image_url"] = source.data_url
                case Remote():
                    image["image_url"] = source.url
                case FileRef():
                    if (found := file_id(source, path, opts)) is None:
                        return None
                    image["file_id"] = found
                case _:
                    assert_never(source)
            return image
        case AudioPart():
            return encode_audio(part, source, path, opts)
        case FilePart():
            file: JSON = {"type": "input_file"}
            match source:
                case Inline():
                    file.update(filename=part.filename, file_data=source.data_url)
                case Remote():
                    file["file_url"] = source.url
                case FileRef():
                    if (found := file_id(source, path, opts)) is None:
                        return None
                    file["file_id"] = found
                case _:
                    assert_never(source)
            if "detail" in meta(part, RESPONSES):
                file["detail"] = meta(part, RESPONSES)["detail"]
            return file
        case _:
            assert_never(part)


def decode_input_part(raw: Any, path: str) -> TextPart | ImagePart | AudioPart | FilePart:
    """A part from Responses input content (``input_text``, ``input_image``, ...)."""
    part = expect_dict(raw, path)
    kind = part.get("type")
    check_keys(part, {"type", "text", "image_url", "file_id", "detail", "file_data", "file_url",
                      "filename", "input_audio"}, path)
    match kind:
        case "input_text":
            return TextPart(text=expect_str(part.get("text"), path + ".text"))
        case "input_image":
            detail = part.get("detail")
            detail = None if detail == "auto" else detail
            if part.get("file_id"):
                file_ref = expect_str(part["file_id"], path + ".file_id")
                return ImagePart(url=FILE_SCHEME + file_ref, detail=detail)
            url = expect_str(part.get("image_url"), path + ".image_url")
            return decode_image_url(url, path + ".image_url", detail)
        case "input_file":
            return _decode_input_file(part, path)
        case "input_audio":
            return decode_audio(part, path)
        case _:
            raise InvalidMessage(f"unsupported content type {kind!r}", path + ".type")


def _decode_input_file(part: Mapping[str, Any], path: str) -> FilePart:
    name = part.get("filename") or None
    pmeta = with_meta(RESPONSES, detail=part.get("detail"))
    if part.get("file_id"):
        return decode_file_id(part["file_id"], path + ".file_id", name, pmeta)
    if part.get("file_url"):
        return FilePart(url=expect_str(part["file_url"], path + ".file_url"), name=name,
                        provider_metadata=pmeta)
    raw = expect_str(part.get("file_data"), path + ".file_data")
    return decode_file_data(raw, path + ".file_data", name, pmeta)
