"""Every base64 field a framework adapter reads keeps every byte, in the standard or
the URL-safe alphabet, and refuses anything else with ``InvalidMessage`` naming the
field: LangChain's ``base64`` blocks and data URLs, Agent Framework's data URIs
(its own ``Content.from_data`` the oracle of what it writes). pydantic-ai's
``BinaryContent`` is in ``test_pydantic_ai_oracle.py``."""

from __future__ import annotations

import base64

import pytest
from agent_framework import Content
from agent_framework import Message as AFMessage
from langchain_core.messages import HumanMessage

from chathistory import Attachment, ImagePart, InvalidMessage, Message
from chathistory.integrations.agent_framework import from_agent_framework, to_agent_framework
from chathistory.integrations.langchain import from_langchain, to_langchain

ALPHABET_BYTES = (b"\xfb\xef\xbeabc", b"\xff\xff\xff", b"\xfb\xff", b"\xfe", b"\xf8>\x0f\xc0")
"""Base64 ``----YWJj`` / ``++++YWJj``, ``____`` / ``////``, ``-_8=`` / ``+/8=``,
``_g==`` / ``/g==``, ``-D4PwA==`` / ``+D4PwA==`` (URL-safe / standard)."""

ENCODERS = {"standard": base64.b64encode, "url-safe": base64.urlsafe_b64encode}
BAD = ["----YWJj!", "---- YWJj", "+_8=", "-_9="]


def langchain_blocks(text: str) -> dict[str, dict[str, object]]:
    return {
        "base64": {"type": "image", "base64": text, "mime_type": "image/png"},
        "url": {"type": "image", "url": f"data:image/png;base64,{text}"},
        "image_url": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{text}"}},
    }


@pytest.mark.parametrize("form", sorted(langchain_blocks("")))
@pytest.mark.parametrize("alphabet", sorted(ENCODERS))
def test_langchain_media_keeps_every_byte(form: str, alphabet: str) -> None:
    for data in ALPHABET_BYTES:
        block = langchain_blocks(ENCODERS[alphabet](data).decode())[form]
        [message] = from_langchain([HumanMessage(content=[block])])
        assert message.parts[0].attachment.data == data  # type: ignore[union-attr]
        [again] = from_langchain(to_langchain([message]))
        assert again.parts[0].attachment.data == data  # type: ignore[union-attr]


@pytest.mark.parametrize("form", sorted(langchain_blocks("")))
@pytest.mark.parametrize("bad", BAD)
def test_langchain_refuses_what_is_not_base64_naming_the_field(form: str, bad: str) -> None:
    block = langchain_blocks(bad)[form]
    with pytest.raises(InvalidMessage) as info:
        from_langchain([HumanMessage(content=[block])])
    assert info.value.path.startswith("$[0]")
    assert info.value.path.endswith({"base64": ".base64", "url": ".url",
                                     "image_url": ".image_url.url"}[form])
    assert "base64" in info.value.reason


@pytest.mark.parametrize("alphabet", sorted(ENCODERS))
def test_agent_framework_data_uris_keep_every_byte(alphabet: str) -> None:
    for data in ALPHABET_BYTES:
        uri = f"data:image/png;base64,{ENCODERS[alphabet](data).decode()}"
        given = AFMessage("user", [Content.from_uri(uri, media_type="image/png")])
        [message] = from_agent_framework([given])
        assert message.parts[0].attachment.data == data  # type: ignore[union-attr]
        [written] = to_agent_framework([message])
        assert written.to_dict() == given.to_dict()  # the content as given


def test_agent_framework_reads_and_writes_as_its_own_encoder() -> None:
    for data in ALPHABET_BYTES:
        content = Content.from_data(data, "image/png")  # the framework's own base64
        [message] = from_agent_framework([AFMessage("user", [content])])
        assert message.parts[0].attachment.data == data  # type: ignore[union-attr]
        ours = Message(role="user", parts=[ImagePart(attachment=Attachment.from_bytes(
            data, mime_type="image/png"))])
        [written] = to_agent_framework([ours])
        assert written.contents[0].uri == content.uri


@pytest.mark.parametrize("bad", BAD)
def test_agent_framework_refuses_what_is_not_base64_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        from_agent_framework([AFMessage("user", [
            Content.from_uri(f"data:image/png;base64,{bad}", media_type="image/png")])])
    assert info.value.path == "$[0].contents[0].uri"
    assert "base64" in info.value.reason
