"""Every base64 decode keeps every byte or refuses with a reason: the one decoder
(``model/b64.decode_base64``), the codec's ``attachment.data``, and the opaque
cursors of the session list and of search. The formats' and the adapters' paths
are in ``tests/formats/test_format_base64.py`` and
``tests/integrations/test_adapter_base64.py``."""

from __future__ import annotations

import base64
import binascii
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chathistory import Attachment, ImagePart, InvalidArgument, InvalidMessage, Message
from chathistory.model.b64 import decode_base64
from chathistory.model.codec import decode_message
from chathistory.stores import open_store

ALPHABET_BYTES = (b"\xfb\xef\xbeabc", b"\xff\xff\xff", b"\xfb\xff", b"\xfe", b"\xf8>\x0f\xc0")
"""Bytes whose base64 holds ``-`` / ``+``, ``_`` / ``/`` (URL-safe / standard) and each
padding: ``----YWJj``, ``____``, ``-_8=``, ``_g==``, ``-D4PwA==``."""


def encodings(data: bytes) -> list[str]:
    """Standard and URL-safe, each padded and not."""
    std, url = base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()
    return [std, std.rstrip("="), url, url.rstrip("=")]


@pytest.mark.parametrize("data", ALPHABET_BYTES)
def test_either_alphabet_padded_or_not_gives_the_bytes(data: bytes) -> None:
    assert {"-", "_"} & set(base64.urlsafe_b64encode(data).decode()) or data == b"\xfe"
    for text in encodings(data):
        assert decode_base64(text) == data
        assert decode_base64(text.encode()) == data


@given(st.binary(max_size=64))
def test_any_bytes_in_any_encoding_come_back(data: bytes) -> None:
    for text in encodings(data):
        assert decode_base64(text) == data


@given(st.text(alphabet="AZaz09+/-_= !\n\u00e9", max_size=12))
def test_any_text_decodes_to_what_encodes_it_or_raises(text: str) -> None:
    """Never a character skipped: what decodes is exactly the encoding of its bytes."""
    try:
        data = decode_base64(text)
    except ValueError:
        return
    assert text in encodings(data)


@pytest.mark.parametrize(("text", "reason"), [
    ("----YWJj!", "character '!' at offset 8 is not base64"),
    ("---- YWJj", "character ' ' at offset 4 is not base64"),
    ("++++\nYWJj", "character '\\n' at offset 4 is not base64"),
    ("ab==cd==", "character '=' at offset 2 is not base64"),
    ("+_8=", "mixes the standard (+ /) and the URL-safe (- _) alphabets"),
    ("abcde", "no base64 has 5 characters"),
    ("-_8==", "wrong padding"),
    ("-_8=a", "character '=' at offset 3"),
    ("-_9=", "bits set that encode nothing"),
    ("caf\u00e9", "character '\u00e9' at offset 3"),
])
def test_what_is_not_base64_raises_saying_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        decode_base64(text)


def test_the_standard_decoder_without_validation_changed_bytes_in_silence() -> None:
    """What the decoder replaces: ``----YWJj`` (URL-safe) read as ``b"abc"``."""
    assert base64.b64decode("----YWJj") == b"abc"
    assert decode_base64("----YWJj") == b"\xfb\xef\xbeabc"
    with pytest.raises(binascii.Error):
        base64.b64decode("-_8=", validate=True)
    assert decode_base64("-_8=") == b"\xfb\xff"


# ---------------------------------------------------------------- the codec (storage, HTTP)


@pytest.mark.parametrize("data", ALPHABET_BYTES)
def test_codec_round_trips_attachment_bytes(data: bytes) -> None:
    message = Message(role="user", parts=[ImagePart(attachment=Attachment.from_bytes(
        data, mime_type="image/png"))])
    back = decode_message(message.to_json())
    assert back.parts[0].attachment.data == data  # type: ignore[union-attr]


def test_codec_refuses_url_safe_attachment_bytes_naming_the_field() -> None:
    """Our JSON writes bytes in the standard alphabet; msgspec refuses the other one
    (and anything else) with the path, never a changed byte."""
    message = Message(role="user", parts=[ImagePart(attachment=Attachment.from_bytes(
        b"\xfb\xef\xbeabc", mime_type="image/png"))])
    text = message.to_json().decode()
    assert '"++++YWJj"' in text
    with pytest.raises(InvalidMessage) as info:
        decode_message(text.replace("++++YWJj", "----YWJj"))
    assert info.value.path == "$.parts[0].attachment.data"


# ---------------------------------------------------------------- cursors


def test_a_session_cursor_with_a_stray_character_is_refused() -> None:
    store = open_store("memory://")
    for n in range(3):
        store.create_session(f"s{n}")
    cursor = store.list_sessions(limit=1).next_cursor
    assert cursor is not None
    assert [s.id for s in store.list_sessions(limit=1, cursor=cursor).items]
    for forged in (cursor[:4] + "!" + cursor[4:], cursor[:4] + " \n.." + cursor[4:]):
        with pytest.raises(InvalidArgument):  # the lenient decoder skipped the character
            store.list_sessions(limit=1, cursor=forged)


def test_a_search_cursor_with_a_stray_character_is_refused() -> None:
    store = open_store("memory://")
    store.create_session("s")
    store.append("s", [Message.user(f"apple {n}") for n in range(3)])
    cursor = store.search("apple", limit=1).next_cursor
    assert cursor is not None
    assert store.search("apple", limit=1, cursor=cursor).items
    for forged in (cursor[:4] + "!" + cursor[4:], cursor[:4] + " \n.." + cursor[4:]):
        with pytest.raises(InvalidArgument):
            store.search("apple", limit=1, cursor=forged)
