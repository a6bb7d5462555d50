"""Rules every adapter shares: custom roles, stored attachments and the resolver,
reasoning replayed only to its provider, the public surface, and a property test
over generated conversations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from format_helpers import (
    check_anthropic,
    check_gemini,
    check_openai_chat,
    check_openai_responses,
    essence,
    load_fixture,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import chathistory.formats as formats
from chathistory import Attachment, InvalidMessage, Message, ToolCall, ToolResult
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

ENCODERS: dict[str, Callable[..., Any]] = {
    "openai_chat": to_openai_chat,
    "openai_responses": to_openai_responses,
    "anthropic": to_anthropic,
    "gemini": to_gemini,
}
CHECKS: dict[str, Callable[[Any], None]] = {
    "openai_chat": check_openai_chat,
    "openai_responses": check_openai_responses,
    "anthropic": check_anthropic,
    "gemini": check_gemini,
}
DECODERS: dict[str, Callable[[Any], list[Message]]] = {
    "openai_chat": from_openai_chat,
    "openai_responses": from_openai_responses,
    "anthropic": lambda r: from_anthropic(**r),
    "gemini": from_gemini,
}
formats_param = pytest.mark.parametrize("fmt", list(ENCODERS))


def test_public_surface() -> None:
    assert set(formats.__all__) == {
        "Resolver", "RoleMap", "anthropic_request", "cache_request_fields", "from_anthropic",
        "from_gemini", "from_openai_chat", "from_openai_responses", "gemini_request",
        "openai_chat_request", "openai_responses_request", "record_usage", "to_anthropic",
        "to_gemini", "to_openai_chat", "to_openai_responses", "usage_from_anthropic",
        "usage_from_gemini",
        "usage_from_openai_chat", "usage_from_openai_responses", "usage_from_response"}


# ---------------------------------------------------------------- roles


@formats_param
def test_unknown_role_raises_naming_role_and_path(fmt: str) -> None:
    msgs = [Message.user("hi"), Message(role="mcp_response", parts=[])]
    with pytest.raises(InvalidMessage) as err:
        ENCODERS[fmt](msgs)
    assert err.value.path == "$[1].role"
    assert "'mcp_response'" in err.value.reason and "role_map" in err.value.reason


@formats_param
def test_role_map_maps_custom_roles(fmt: str) -> None:
    msgs = [Message(role="mcp_response", parts=[ToolResult(call_id="c", content="42")]),
            Message(role="agent", parts=[ToolCall(id="c2", name="g")]),
            Message.tool_result("c2", "ok", name="g")]
    msgs.insert(0, Message(role="agent", parts=[ToolCall(id="c", name="f")]))
    msgs.insert(0, Message.user("q"))
    out = ENCODERS[fmt](msgs, role_map={"agent": "assistant", "mcp_response": "tool"})
    CHECKS[fmt](out)
    assert [m.role for m in DECODERS[fmt](out)] == ["user", "assistant", "tool", "assistant",
                                                    "tool"]


@formats_param
def test_role_map_target_must_be_canonical(fmt: str) -> None:
    with pytest.raises(InvalidMessage, match="not one of") as err:
        ENCODERS[fmt]([Message(role="agent", parts=[])], role_map={"agent": "bot"})
    assert err.value.path == "$[0].role"


def test_role_map_may_rename_canonical_roles() -> None:
    out = to_openai_chat([Message.developer("rules")], role_map={"developer": "system"})
    assert out == [{"role": "system", "content": "rules"}]


# ---------------------------------------------------------------- stored attachments


@formats_param
def test_stored_attachment_needs_a_resolver(fmt: str, png: Attachment) -> None:
    msgs = [Message.user("see", png.without_data())]
    with pytest.raises(InvalidMessage) as err:
        ENCODERS[fmt](msgs)
    assert err.value.path == "$[0].parts[1].attachment.data"


@formats_param
def test_resolver_bytes_and_urls(fmt: str, png: Attachment) -> None:
    stored = [Message.user("see", png.without_data())]
    inline = ENCODERS[fmt](stored, resolver=lambda att: png.data)
    assert inline == ENCODERS[fmt]([Message.user("see", png)])
    by_url = ENCODERS[fmt](stored, resolver=lambda att: f"https://cdn.example/{att.sha256}.png")
    CHECKS[fmt](by_url)
    assert f"https://cdn.example/{png.sha256}.png" in str(by_url)


@pytest.mark.parametrize(("fmt", "ref", "expected"), [
    ("openai_chat", {"file_id": "file-1"}, {"type": "file", "file": {"file_id": "file-1"}}),
    ("openai_responses", {"file_id": "file-1"}, {"type": "input_file", "file_id": "file-1"}),
    ("anthropic", {"file_id": "file_1"},
     {"type": "document", "source": {"type": "file", "file_id": "file_1"}}),
    ("gemini", {"file_uri": "https://generativelanguage.googleapis.com/v1beta/files/f1"},
     {"fileData": {"mimeType": "application/pdf",
                   "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/f1"}}),
])
def test_resolver_file_ids(fmt: str, ref: Mapping[str, str], expected: dict[str, Any],
                           pdf: Attachment) -> None:
    out = ENCODERS[fmt]([Message.user("read", pdf.without_data())], resolver=lambda att: ref)
    CHECKS[fmt](out)
    assert expected in blocks_of(out)


def blocks_of(out: Any) -> list[Any]:
    """Every content block / part of an encoded request."""
    items = (out.get("contents") or out["messages"]) if isinstance(out, dict) else out
    blocks: list[Any] = []
    for item in items:
        content = item.get("content", item.get("parts"))
        if isinstance(content, list):
            blocks.extend(content)
    return blocks


# ---------------------------------------------------------------- cross-provider


def test_anthropic_history_goes_to_every_provider() -> None:
    fixture = load_fixture("anthropic_thinking_tools.json")
    msgs = from_anthropic(**fixture)
    for fmt, encode in ENCODERS.items():
        out = encode(msgs)
        CHECKS[fmt](out)
        if fmt != "anthropic":  # the thinking signature is valid only at Anthropic
            assert "thinking" not in str(out) and "BDaL4Vrb" not in str(out)


def test_gemini_history_goes_to_openai_with_matching_ids() -> None:
    msgs = from_gemini(load_fixture("gemini_parallel_function_calling.json"))
    out = to_openai_chat(msgs)
    check_openai_chat(out)
    call_ids = [c["id"] for c in out[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in out[3:6]] == call_ids


# ---------------------------------------------------------------- property

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1,
                max_size=20).filter(lambda s: s.strip() == s and s.strip())
args = st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=5),
                       st.integers() | st.booleans() | texts, max_size=3)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """system?, then turns of user text / assistant text with parallel calls and
    one tool message per result: a shape every format carries exactly."""
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message.system(draw(texts)))
    for turn in range(draw(st.integers(1, 4))):
        msgs.append(Message.user(draw(texts)))
        n_calls = draw(st.integers(0, 3))
        calls = [ToolCall(id=f"call_{turn}_{k}", name=draw(st.sampled_from(["f", "g"])),
                          arguments=draw(args)) for k in range(n_calls)]
        msgs.append(Message.assistant(draw(texts) if not calls or draw(st.booleans()) else "",
                                      calls))
        if calls:
            msgs.extend(Message.tool_result(c.id, draw(texts), name=c.name) for c in calls)
            msgs.append(Message.assistant(draw(texts)))
    return msgs


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_round_trip_property(msgs: list[Message]) -> None:
    for fmt in ("openai_chat", "openai_responses"):
        out = ENCODERS[fmt](msgs)
        CHECKS[fmt](out)
        assert essence(DECODERS[fmt](out)) == essence(msgs)
    # Anthropic and Gemini merge parallel results into one tool message.
    merged = merge_tool_messages(msgs)
    request = to_anthropic(msgs)
    check_anthropic(request)
    assert essence(from_anthropic(**request)) == essence(merged)
    request = to_gemini(msgs, send_call_ids=True)
    check_gemini(request)
    assert essence(from_gemini(request)) == essence(merged)


def merge_tool_messages(msgs: list[Message]) -> list[Message]:
    out: list[Message] = []
    for m in msgs:
        if m.role == "tool" and out and out[-1].role == "tool":
            out[-1] = Message(role="tool", parts=[*out[-1].parts, *m.parts])
        else:
            out.append(m)
    return out
