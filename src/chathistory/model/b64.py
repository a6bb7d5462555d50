"""Strict base64: the one decoder of base64 text that comes from outside (provider
formats, framework adapters, opaque cursors).

``base64.b64decode`` without ``validate=True`` drops every character outside its
alphabet: the URL-safe alphabet's ``-`` and ``_``, which pydantic and protobuf's JSON
mapping write, vanish and the bytes come out wrong with no error. This decoder
takes either alphabet whole and refuses anything else with a reason, so a byte is
never changed in silence.
"""

from __future__ import annotations

import binascii
import re

__all__ = ["decode_base64"]

_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/]")


def decode_base64(text: str | bytes) -> bytes:
    """The bytes ``text`` encodes, in the standard alphabet (``+ /``) or the URL-safe
    one (``- _``), padded or not.

    Raises ``ValueError`` saying what is wrong for anything else: a character in
    neither alphabet (whitespace and a misplaced ``=`` included), the two alphabets
    mixed, a length no encoding has, wrong padding, or a last character with bits
    set that encode nothing (each byte string has one encoding per alphabet, as
    pydantic decodes it).
    """
    if isinstance(text, str):
        if not text.isascii():
            at = next(i for i, c in enumerate(text) if not c.isascii())
            raise ValueError(f"character {text[at]!r} at offset {at} is not base64")
        raw = text.encode("ascii")
    else:
        raw = bytes(text)
    body = raw.rstrip(b"=")
    padding = len(raw) - len(body)
    if b"-" in body or b"_" in body:
        if b"+" in body or b"/" in body:
            raise ValueError("it mixes the standard (+ /) and the URL-safe (- _) alphabets")
        body = body.translate(_TO_STANDARD)
    rest = len(body) % 4
    if rest == 1 or (padding and (padding > 2 or (len(body) + padding) % 4)):
        raise ValueError(_fault(raw, body, padding))
    try:
        data = binascii.a2b_base64(body + b"=" * (-len(body) % 4), strict_mode=True)
    except binascii.Error:
        raise ValueError(_fault(raw, body, padding)) from None
    if rest and _ALPHABET.index(body[-1]) & (0x0F if rest == 2 else 0x03):
        raise ValueError("its last character has bits set that encode nothing")
    return data


def _fault(raw: bytes, body: bytes, padding: int) -> str:
    """What is wrong with base64 ``raw`` (``body`` without its ``padding``), found only
    once decoding failed: the fast path never scans twice."""
    bad = _NOT_BASE64.search(body)
    if bad is not None:
        return f"character {chr(raw[bad.start()])!r} at offset {bad.start()} is not base64"
    if len(body) % 4 == 1:
        return f"no base64 has {len(body)} characters before its padding"
    return f"{padding} '=' after {len(body)} characters is wrong padding"
