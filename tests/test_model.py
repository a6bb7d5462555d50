"""The message model: factories, validation with paths, views, KV fields."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest

from chathistory import (
    Attachment,
    AudioPart,
    ChatHistoryError,
    FilePart,
    ImagePart,
    InvalidMessage,
    KVStatus,
    Message,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)
from chathistory.formats import to_anthropic, to_gemini, to_openai_chat, to_openai_responses
from chathistory.model import PROVIDER_ROLES
from chathistory.model.parts import MAX_ATTACHMENT_BYTES


def test_ids_are_fresh_uuids() -> None:
    a, b = Message.user("hi"), Message.user("hi")
    assert a.id != b.id
    assert uuid.UUID(a.id).version == 4
    assert Message.user("hi", id="fixed").id == "fixed"


def test_factories_set_roles_and_parts() -> None:
    assert Message.system("s").role == "system"
    assert Message.developer("d").role == "developer"
    u = Message.user("hello", name="alice")
    assert (u.role, u.name, u.text) == ("user", "alice", "hello")
    a = Message.assistant("ok", [{"id": "c1", "name": "f", "arguments": '{"x": 1}'}],
                          reasoning="think")
    assert [type(p) for p in a.parts] == [Reasoning, TextPart, ToolCall]
    assert a.tool_calls[0].arguments == {"x": 1}
    r = Message.tool_result("c1", "42", is_error=True, name="f")
    assert r.role == "tool" and r.tool_results[0].is_error and r.tool_results[0].call_id == "c1"


def test_custom_roles_are_kept() -> None:
    for role in ("agent", "tool_response", "mcp_response", "anything-else"):
        m = Message(role=role, parts=[TextPart(text="x")]).validate()
        assert m.role == role
        assert Message.from_json(m.to_json()).role == role


AGENT_ROLES = ("agent", "tool_response", "pcp_response", "mcp_response")


def test_role_names_every_role() -> None:
    every = ("system", "developer", "user", "assistant", "tool", *AGENT_ROLES)
    assert every == Role.ALL
    assert (Role.SYSTEM, Role.DEVELOPER, Role.USER, Role.ASSISTANT, Role.TOOL,
            Role.AGENT, Role.TOOL_RESPONSE, Role.PCP_RESPONSE, Role.MCP_RESPONSE) == Role.ALL
    # all nine are members: iteration, values and lookup by value know each of them
    assert list(Role) == [Role(value) for value in every]
    assert [r.value for r in Role] == list(every)
    assert {r.value for r in Role} == set(every)
    assert list(Role.__members__) == [value.upper() for value in every]
    assert "ALL" not in Role.__members__
    # the roles a provider format sends are their own list
    assert [r.value for r in PROVIDER_ROLES] == list(every[:5])
    for role in AGENT_ROLES:
        assert isinstance(Role(role), Role) and Role(role) not in PROVIDER_ROLES
        message = Message(role=getattr(Role, role.upper()), parts=[TextPart(text="x")])
        assert Message.from_json(message.validate().to_json()).role == role


FORMATS = {
    "openai_chat": (to_openai_chat, lambda out: out[0]["role"]),
    "openai_responses": (to_openai_responses, lambda out: out[0]["role"]),
    "anthropic": (to_anthropic, lambda out: out["messages"][0]["role"]),
    "gemini": (to_gemini, lambda out: out["contents"][0]["role"]),
}


@pytest.mark.parametrize("role", AGENT_ROLES)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_formats_refuse_a_role_they_lack_unless_mapped(fmt: str, role: str) -> None:
    encode, sent_role = FORMATS[fmt]
    messages = [Message.user("hi"), Message(role=role, parts=[TextPart(text="from elsewhere")])]
    with pytest.raises(InvalidMessage) as info:
        encode(messages)
    assert info.value.path == "$[1].role"
    assert role in info.value.reason
    assert "role_map" in info.value.reason
    # the roles it offers as targets are the ones a provider has
    assert info.value.reason.endswith("naming one of system, developer, user, assistant, tool")
    mapped = encode(messages[1:], role_map={role: "assistant"})
    assert sent_role(mapped) == ("model" if fmt == "gemini" else "assistant")
    with pytest.raises(InvalidMessage) as info:  # mapped onto another role it lacks
        encode(messages[1:], role_map={role: "agent" if role != "agent" else "mcp_response"})
    assert info.value.path == "$[0].role"


def test_defaults_of_kv_fields() -> None:
    m = Message.user("x")
    assert (m.kv_size, m.kv_start, m.kv_status) == (-1, -1, KVStatus.LOADED)
    assert (KVStatus.LOADED, KVStatus.MARKED, KVStatus.UNLOADED) == (1, 0, -1)


def test_kv_fields_survive_serialization() -> None:
    m = Message.user("x")
    m.kv_size, m.kv_start, m.kv_status = 12, 300, KVStatus.MARKED
    back = Message.from_json(m.to_json())
    assert (back.kv_size, back.kv_start, back.kv_status) == (12, 300, KVStatus.MARKED)
    assert isinstance(back.kv_status, KVStatus)
    assert Message.from_dict(m.to_dict()) == m


@pytest.mark.parametrize(
    ("message", "path"),
    [
        (Message(role="user", parts=[]), "$.parts"),
        (Message(role="user", parts=[TextPart(text="   ")]), "$.parts"),
        (Message(role="", parts=[TextPart(text="x")]), "$.role"),
        (Message(role="user", name="", parts=[TextPart(text="x")]), "$.name"),
        (Message(role="tool", parts=[ToolResult(call_id="", content="x")]), "$.parts[0].call_id"),
        (Message(role="assistant", parts=[TextPart(text="a"), ToolCall(id="", name="f")]),
         "$.parts[1].id"),
        (Message(role="assistant", parts=[ToolCall(id="c", name="")]), "$.parts[0].name"),
        (Message(role="user", parts=[ImagePart()]), "$.parts[0]"),
        (Message(role="user", parts=[ImagePart(url="")]), "$.parts[0].url"),
    ],
)
def test_validation_names_the_field(message: Message, path: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        message.validate()
    assert info.value.path == path
    assert path in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ChatHistoryError)


def test_tool_result_in_tool_result_content_path(png_bytes: bytes) -> None:
    bad = Attachment.from_bytes(png_bytes, mime_type="application/x-msdownload")
    m = Message(role="tool", parts=[ToolResult(call_id="c", content=[ImagePart(attachment=bad)])])
    with pytest.raises(InvalidMessage) as info:
        m.validate()
    assert info.value.path == "$.parts[0].content[0].attachment.mime_type"


def test_tool_call_arguments_that_are_not_json_are_kept_as_sent() -> None:
    """A model's arguments string that is not a JSON object (truncated at
    finish_reason=length) is kept byte for byte, never refused (issue 16)."""
    message = Message.assistant("", [{"id": "c", "name": "f", "arguments": "{not json"}])
    call = message.parts[0]
    assert isinstance(call, ToolCall)
    assert call.arguments == {} and call.raw_arguments == "{not json"
    assert call.arguments_json == "{not json"
    message.validate()
    spaced = Message.assistant("", [{"id": "c", "name": "f", "arguments": '{"a": 1}'}])
    assert spaced.parts[0].arguments_json == '{"a": 1}'  # type: ignore[union-attr]
    with pytest.raises(InvalidMessage) as info:  # a non-string, non-mapping call is refused
        Message.assistant("", [["not", "a", "call"]])  # type: ignore[list-item]
    assert info.value.path == "$.parts[0]"


def test_attachment_from_bytes_sniffs(png_bytes: bytes, wav_bytes: bytes, pdf_bytes: bytes) -> None:
    img = Attachment.from_bytes(png_bytes, name="red.png")
    assert (img.mime_type, img.modality, img.width, img.height) == ("image/png", "image", 4, 3)
    assert img.size == len(png_bytes) and len(img.sha256) == 64
    assert Attachment.from_bytes(wav_bytes).modality == "audio"
    pdf = Attachment.from_bytes(pdf_bytes)
    assert (pdf.mime_type, pdf.modality) == ("application/pdf", "document")
    assert pdf.name.endswith(".pdf")
    text = Attachment.from_bytes("héllo".encode(), name="notes.md")
    assert text.mime_type == "text/markdown"
    assert Attachment.from_bytes(b"plain words").mime_type == "text/plain"
    assert Attachment.from_bytes(png_bytes, mime_type="image/webp").mime_type == "image/webp"


def test_user_with_attachments(png_bytes: bytes, wav_bytes: bytes, pdf_bytes: bytes) -> None:
    m = Message.user(
        "look", Attachment.from_bytes(png_bytes), Attachment.from_bytes(wav_bytes),
        Attachment.from_bytes(pdf_bytes, name="r.pdf"), ImagePart(url="https://x/y.png"),
    )
    assert [type(p) for p in m.parts] == [TextPart, ImagePart, AudioPart, FilePart, ImagePart]
    assert m.has_media
    assert m.total_media_size == len(png_bytes) + len(wav_bytes) + len(pdf_bytes)
    assert [a.name for a in m.attachments][-1] == "r.pdf"
    only_text = m.to_text_only()
    assert only_text.id == m.id and not only_text.has_media and only_text.text == "look"
    assert m.has_media  # the original is untouched


def test_attachment_only_message_is_valid(png_bytes: bytes) -> None:
    assert Message.user("", Attachment.from_bytes(png_bytes)).has_media


def test_attachment_limits(png_bytes: bytes) -> None:
    empty = Attachment(name="e", size=0, modality="image", mime_type="image/png", sha256="0" * 64)
    with pytest.raises(InvalidMessage, match="empty") as info:
        Message.user("x", empty)
    assert info.value.path == "$.parts[1].attachment.size"
    huge = Attachment(name="h", size=MAX_ATTACHMENT_BYTES + 1, modality="image",
                      mime_type="image/png", sha256="0" * 64)
    with pytest.raises(InvalidMessage, match="limit"):
        Message.user("x", huge)
    exe = Attachment.from_bytes(b"MZ\x90\x00", mime_type="application/x-msdownload")
    with pytest.raises(InvalidMessage, match="unsupported media type") as info:
        Message.user("x", exe)
    assert info.value.path == "$.parts[1].attachment.mime_type"
    audio_as_image = ImagePart(attachment=Attachment.from_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt "))
    with pytest.raises(InvalidMessage, match="cannot hold audio"):
        Message.user("x", audio_as_image)


UNKNOWN_BYTES = bytes(range(256))  # no magic number, not UTF-8


def test_attachment_of_unknown_bytes_is_refused_with_its_path(png_bytes: bytes) -> None:
    sniffed = Attachment.from_bytes(UNKNOWN_BYTES, name="blob.bin")
    assert sniffed.mime_type == "application/octet-stream"
    with pytest.raises(InvalidMessage, match="match no known format") as info:
        Message.user("look", Attachment.from_bytes(png_bytes), sniffed)
    assert info.value.path == "$.parts[2].attachment.data"
    inside = Message(role="tool", parts=[ToolResult(call_id="c", content=[
        TextPart(text="made a file"), FilePart(attachment=Attachment.from_bytes(UNKNOWN_BYTES))])])
    with pytest.raises(InvalidMessage) as info:
        inside.validate()
    assert info.value.path == "$.parts[0].content[1].attachment.data"
    # the same bytes with a supported type declared by the caller are accepted
    declared = Attachment.from_bytes(UNKNOWN_BYTES, mime_type="application/pdf")
    assert Message.user("", declared).attachments == [declared]
    # octet-stream is not a declaration: known bytes are named, a stored file refused too
    with pytest.raises(InvalidMessage, match="look like image/png") as info:
        Message.user("", Attachment.from_bytes(png_bytes, mime_type="application/octet-stream"))
    assert info.value.path == "$.parts[0].attachment.mime_type"
    with pytest.raises(InvalidMessage) as info:
        Message.user("", sniffed.without_data())
    assert info.value.path == "$.parts[0].attachment.mime_type"


def test_history_and_decoding_refuse_unknown_bytes() -> None:
    from chathistory import History

    bad = Message(role="user", parts=[FilePart(attachment=Attachment.from_bytes(UNKNOWN_BYTES))])
    h = History([Message.user("hi")])
    with pytest.raises(InvalidMessage) as info:
        h.extend([Message.user("ok"), bad])
    assert info.value.path == "$[1].parts[0].attachment.data" and len(h) == 1
    with pytest.raises(InvalidMessage) as info:
        Message.from_json(bad.to_json())
    assert info.value.path == "$.parts[0].attachment.data"


def test_asset_store_keeps_unknown_bytes(tmp_path: Path) -> None:
    from chathistory.assets import FileAssetStore

    stored = FileAssetStore(tmp_path).put("t", UNKNOWN_BYTES)
    assert stored.mime_type == "application/octet-stream"  # stored; a message refuses it
    with pytest.raises(InvalidMessage):
        Message.user("", stored)


def test_message_is_a_value() -> None:
    m = Message.user("x", id="a")
    same = msgspec.structs.replace(m)
    assert m == same
    with pytest.raises(AttributeError):
        m.parts[0].text = "changed"  # type: ignore[misc]


def test_decode_errors_carry_paths() -> None:
    with pytest.raises(InvalidMessage) as info:
        Message.from_json(b'{"role": "user", "parts": [{"type": "text", "text": 5}]}')
    assert info.value.path == "$.parts[0].text"
    with pytest.raises(InvalidMessage) as info:
        Message.from_json(b'{"role": "user", "parts": [{"type": "video3d"}]}')
    assert info.value.path == "$.parts[0].type"
    with pytest.raises(InvalidMessage, match="invalid JSON"):
        Message.from_json(b'{"role": ')
    with pytest.raises(InvalidMessage) as info:
        Message.from_dict({"role": "tool", "parts": [{"type": "tool_result", "call_id": ""}]})
    assert info.value.path == "$.parts[0].call_id"


def test_reasoning_keeps_opaque_data() -> None:
    r = Reasoning(text="", data="gAAAA-encrypted", provider_metadata={"id": "rs_1"})
    m = Message(role="assistant", parts=[r, ToolCall(id="c", name="f")]).validate()
    back = Message.from_json(m.to_json())
    assert back.parts[0] == r


def test_an_upload_whose_tenant_is_erased_meanwhile_is_a_conflict(tmp_path: Path) -> None:
    """Found by the OpenAPI conformance run (two workers): ``POST /v1/erase`` removed
    the tenant's directory under an upload in progress, whose commit then raised
    ``FileNotFoundError`` (a 500). Now a ``Conflict`` (409): send it again."""
    from chathistory.assets import FileAssetStore
    from chathistory.errors import Conflict

    assets = FileAssetStore(tmp_path)
    writer = assets.writer("t", name="notes.txt", mime_type="text/plain")
    writer.write(b"The meeting is at 10.")
    assets.erase("t")
    with pytest.raises(Conflict):
        writer.commit()
    again = assets.put("t", b"The meeting is at 10.", name="notes.txt", mime_type="text/plain")
    assert assets.info("t", again.sha256) is not None
