"""Every base64 field a provider format reads keeps every byte, in the standard or the
URL-safe alphabet, padded or not (google-genai's own ``model_dump(mode="json")``
writes the URL-safe one), and refuses anything else with ``InvalidMessage`` naming
the field; what each format writes decodes back to the same bytes."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from google.genai import types as genai_types

from chathistory import InvalidMessage, Message
from chathistory.formats import (
    from_anthropic,
    from_gemini,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)

ALPHABET_BYTES = (b"\xfb\xef\xbeabc", b"\xff\xff\xff", b"\xfb\xff", b"\xfe", b"\xf8>\x0f\xc0")
"""Base64 ``----YWJj`` / ``++++YWJj``, ``____`` / ``////``, ``-_8=`` / ``+/8=``,
``_g==`` / ``/g==``, ``-D4PwA==`` / ``+D4PwA==`` (URL-safe / standard)."""

ENCODINGS: dict[str, Callable[[bytes], str]] = {
    "standard": lambda b: base64.b64encode(b).decode(),
    "standard-unpadded": lambda b: base64.b64encode(b).decode().rstrip("="),
    "url-safe": lambda b: base64.urlsafe_b64encode(b).decode(),
    "url-safe-unpadded": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
}

# name -> (input holding base64 text, decoder, encoder, path of the base64 field)
PATHS: dict[str, tuple[Callable[[str], Any], Callable[[Any], list[Message]],
                       Callable[[list[Message]], Any], str]] = {
    "openai_chat image data URL": (
        lambda t: [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{t}"}}]}],
        from_openai_chat, to_openai_chat, "$[0].content[0].image_url.url"),
    "openai_chat file_data": (
        lambda t: [{"role": "user", "content": [
            {"type": "file", "file": {"file_data": f"data:image/png;base64,{t}",
                                      "filename": "a.png"}}]}],
        from_openai_chat, to_openai_chat, "$[0].content[0].file.file_data"),
    "openai_chat input_audio": (
        lambda t: [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": t, "format": "wav"}}]}],
        from_openai_chat, to_openai_chat, "$[0].content[0].input_audio.data"),
    "openai_responses input_image": (
        lambda t: [{"type": "message", "role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{t}",
             "detail": "auto"}]}],
        from_openai_responses, to_openai_responses, "$[0].content[0].image_url"),
    "anthropic image": (
        lambda t: {"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": t}}]}]},
        lambda request: from_anthropic(**request), to_anthropic,
        "$.messages[0].content[0].source.data"),
    "gemini inlineData": (
        lambda t: {"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": t}}]}]},
        from_gemini, to_gemini, "$.contents[0].parts[0].inlineData.data"),
}


def attached(messages: list[Message]) -> bytes | None:
    [message] = messages
    attachment = getattr(message.parts[0], "attachment", None)
    return None if attachment is None else attachment.data


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_byte_comes_back_in_either_alphabet(path: str, encoding: str) -> None:
    build, decode, encode, _ = PATHS[path]
    for data in ALPHABET_BYTES:
        messages = decode(build(ENCODINGS[encoding](data)))
        assert attached(messages) == data, (path, encoding, data)
        assert attached(decode(encode(messages))) == data  # what the format writes


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("bad", ["----YWJj!", "---- YWJj", "+_8=", "-_8==", "-_9="])
def test_what_is_not_base64_is_refused_naming_the_field(path: str, bad: str) -> None:
    build, decode, _, field = PATHS[path]
    with pytest.raises(InvalidMessage) as info:
        decode(build(bad))
    assert info.value.path.startswith(field)
    assert "base64" in info.value.reason


@pytest.mark.parametrize("data", ALPHABET_BYTES)
def test_gemini_reads_what_google_genai_writes_and_the_reverse(data: bytes) -> None:
    """google-genai, the oracle: its ``Content.model_dump(mode="json")`` (URL-safe
    base64) gives the bytes, and what ``to_gemini`` writes validates to them."""
    content = genai_types.Content(role="user", parts=[genai_types.Part(
        inline_data=genai_types.Blob(data=data, mime_type="image/png"))])
    dumped = content.model_dump(mode="json", exclude_none=True)
    assert dumped["parts"][0]["inline_data"]["data"] == base64.urlsafe_b64encode(data).decode()
    messages = from_gemini([dumped])
    assert attached(messages) == data
    written = genai_types.Content.model_validate(to_gemini(messages)["contents"][0])
    assert written.parts is not None and written.parts[0].inline_data is not None
    assert written.parts[0].inline_data.data == data
