"""Media type sniffing and image dimensions from the first bytes of a file.

Only the standard library: magic numbers for the formats providers accept,
then the file name's extension, then "is it UTF-8 text".
"""

from __future__ import annotations

import mimetypes
import struct

__all__ = ["SUPPORTED_MIME_TYPES", "UNKNOWN_MIME_TYPE", "image_size", "modality_of", "sniff_mime"]

_IMAGE = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/heic", "image/heif"}
_AUDIO = {
    "audio/wav", "audio/mpeg", "audio/ogg", "audio/flac", "audio/webm", "audio/mp4",
    "audio/aac", "audio/aiff", "audio/x-m4a",
}
_VIDEO = {"video/mp4", "video/webm", "video/quicktime", "video/mpeg", "video/x-msvideo"}
_DOCUMENT = {
    "application/pdf", "application/json", "application/xml", "application/rtf",
    "application/msword",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.ms-excel", "application/zip",
}

SUPPORTED_MIME_TYPES = frozenset(_IMAGE | _AUDIO | _VIDEO | _DOCUMENT)
"""Every media type a message's attachment may have, besides any ``text/*``."""

UNKNOWN_MIME_TYPE = "application/octet-stream"
"""What ``sniff_mime`` says of bytes that match no known format. Not a supported
type: a message refuses such an attachment unless its type is declared; the
asset store keeps the bytes (storing is not sending them to a model)."""

_EXTRA_EXTENSIONS = {
    ".md": "text/markdown", ".jsonl": "application/json", ".webp": "image/webp",
    ".m4a": "audio/mp4", ".flac": "audio/flac", ".wav": "audio/wav", ".mp3": "audio/mpeg",
    ".heic": "image/heic", ".py": "text/x-python", ".ts": "text/plain", ".yaml": "text/yaml",
    ".yml": "text/yaml", ".toml": "text/plain", ".csv": "text/csv",
}


def modality_of(mime_type: str) -> str | None:
    """``image``, ``audio``, ``video`` or ``document`` for a supported type, else None."""
    if mime_type in _IMAGE:
        return "image"
    if mime_type in _AUDIO:
        return "audio"
    if mime_type in _VIDEO:
        return "video"
    if mime_type in _DOCUMENT or mime_type.startswith("text/"):
        return "document"
    return None


def _magic(data: bytes) -> str | None:
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "video/x-msvideo"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return "audio/aiff"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"M4A ", b"M4B "):
            return "audio/mp4"
        if brand in (b"heic", b"heix", b"mif1"):
            return "image/heic"
        if brand == b"qt  ":
            return "video/quicktime"
        return "video/mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm"
    if head.startswith(b"PK\x03\x04"):
        return "application/zip"
    return None


def sniff_mime(data: bytes, name: str | None = None) -> str:
    """The media type of ``data``: magic bytes first, then the name, then text or binary."""
    found = _magic(data)
    by_name: str | None = None
    if name:
        lower = name.lower()
        dot = lower.rfind(".")
        if dot >= 0:
            by_name = _EXTRA_EXTENSIONS.get(lower[dot:]) or mimetypes.guess_type(lower)[0]
    if found == "application/zip" and by_name and by_name.startswith("application/vnd.openxml"):
        return by_name  # docx/xlsx/pptx are zip files: trust the extension
    if found:
        return found
    if by_name:
        return by_name
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        # A multi-byte character cut at the 4096 boundary is not binary.
        try:
            data[:4093].decode("utf-8")
        except UnicodeDecodeError:
            return UNKNOWN_MIME_TYPE
    return "text/plain"


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, GIF, JPEG or WebP image, or None when unknown."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return int(w), int(h)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return int(w) & 0x3FFF, int(h) & 0x3FFF
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(data)
    while i + 9 < n:
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        # SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None
