"""Provider-side compaction as history: the part, its codec, count, text, window and
the provider formats that carry it (checked against the SDKs' own types)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types.beta import BetaMessageParam
from openai.types.responses import ResponseCompactionItem

from chathistory import History, InvalidMessage, Message, TextPart
from chathistory.formats import (
    from_anthropic,
    from_openai_responses,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)
from chathistory.formats.responses_items import item_of, message_of
from chathistory.history import render_text
from chathistory.model import Compaction
from chathistory.model.codec import decode_document, encode_document
from chathistory.tokens import get_counter
from formats.format_helpers import assert_sdk_valid, check_openai_responses

OPENAI_ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA" + "x" * 95,
               "created_by": "resp_9"}
ANTHROPIC_BLOCK = {"type": "compaction", "content": "User asked about Paris; done.",
                   "encrypted_content": "opaque", "signature": "sig",
                   "tool_changes": [], "cache_control": {"type": "ephemeral"}}


def session() -> list[Message]:
    return from_openai_responses([
        {"type": "message", "role": "user", "content": "first"},
        {"type": "message", "role": "assistant", "content": "old answer"},
        OPENAI_ITEM,
        {"type": "message", "role": "user", "content": "next"},
    ])


def test_openai_item_is_a_compaction_message_and_goes_back_byte_for_byte() -> None:
    messages = session()
    assert [m.role for m in messages] == ["user", "assistant", "assistant", "user"]
    part = messages[2].parts[0]
    assert part == Compaction(provider="openai_responses", data=OPENAI_ITEM["encrypted_content"],
                              provider_metadata={"openai_responses": {
                                  "id": "cmp_1", "created_by": "resp_9"}})
    out = to_openai_responses(messages)
    assert json.dumps(out[2]) == json.dumps(OPENAI_ITEM)
    ResponseCompactionItem.model_validate(out[2])  # the SDK's output item
    check_openai_responses([{k: v for k, v in item.items() if k != "created_by"}
                            if item.get("type") == "compaction" else item for item in out])
    bare = {"type": "compaction", "encrypted_content": "e"}  # the input param: id optional
    assert to_openai_responses(from_openai_responses([bare])) == [bare]
    check_openai_responses([bare])


def test_responses_items_keep_a_compaction_item_as_a_compaction_part() -> None:
    msg = message_of(OPENAI_ITEM)
    assert [type(p) for p in msg.parts] == [Compaction] and msg.role == "assistant"
    assert item_of(msg) == [OPENAI_ITEM]
    added = Message(role="assistant", parts=[msg.parts[0]])  # another writer's: encoded
    assert item_of(added) == [OPENAI_ITEM]


def test_anthropic_block_goes_back_unchanged_and_validates_as_beta_param() -> None:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [ANTHROPIC_BLOCK, {"type": "text", "text": "ok"}]},
    ]
    messages = from_anthropic(None, turns)
    part = messages[1].parts[0]
    assert isinstance(part, Compaction) and part.provider == "anthropic"
    assert (part.text, part.data, part.signature) == ("User asked about Paris; done.",
                                                     "opaque", "sig")
    request = to_anthropic(messages)
    assert request["messages"] == turns
    assert_sdk_valid(list[BetaMessageParam], request["messages"])
    failed = [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
              {"role": "assistant", "content": [{"type": "compaction", "content": None}]}]
    assert to_anthropic(from_anthropic(None, failed))["messages"] == failed


def test_a_compaction_goes_only_to_the_provider_that_wrote_it() -> None:
    messages = [*session(), *from_anthropic(None, [
        {"role": "assistant", "content": [ANTHROPIC_BLOCK, {"type": "text", "text": "ok"}]}])]
    assert [i for i in to_openai_responses(messages) if i.get("type") == "compaction"] == [
        OPENAI_ITEM]
    sent = to_anthropic(messages)["messages"]
    assert [b for turn in sent for b in turn["content"] if isinstance(b, dict)
            and b.get("type") == "compaction"] == [ANTHROPIC_BLOCK]
    for out in (json.dumps(to_openai_chat(messages)), json.dumps(to_gemini(messages))):
        assert "compaction" not in out and "gAAAA" not in out and "Paris" not in out


def test_document_with_a_compaction_is_version_2_and_round_trips() -> None:
    messages = session()
    doc = encode_document(messages)
    assert json.loads(doc)["schema_version"] == 2
    assert decode_document(doc)[0] == messages
    assert json.loads(encode_document(messages[:2]))["schema_version"] == 1
    assert History.from_json(History(messages).to_json()).messages == messages


def test_a_compaction_needs_its_provider() -> None:
    with pytest.raises(InvalidMessage) as err:
        Message(role="assistant", parts=[Compaction(provider="")]).validate()
    assert err.value.path == "$.parts[0].provider"


def test_tokens_are_the_summary_or_an_estimate_from_the_ciphertext() -> None:
    counter = get_counter("approx")
    summary = Message(role="assistant", parts=[Compaction(provider="anthropic", text="a" * 400)])
    opaque = Message(role="assistant", parts=[Compaction(provider="openai_responses",
                                                          data="x" * 1600)])
    empty = Message(role="assistant", parts=[Compaction(provider="anthropic")])
    base = counter.count_message(empty)
    assert counter.count_message(summary) - base == counter.count_text("a" * 400)
    assert counter.count_message(opaque) - base == 300  # 1600 * 3 / 16


def test_text_view_shows_the_summary_or_a_placeholder() -> None:
    assert render_text(Message(role="assistant", parts=[
        Compaction(provider="anthropic", text="summary")])) == ["Compaction: summary"]
    assert render_text(session()[2]) == ["Compaction (openai_responses, not readable)"]


def test_since_compaction_starts_at_the_last_compaction() -> None:
    history = History([Message.system("be brief"), *session(), *session()[1:]])
    window = history.since_compaction()
    assert [m.text or "<compaction>" for m in window] == ["<compaction>", "next"]
    assert window[0].id == history[-2].id
    kept = history.since_compaction(keep_system=True)
    assert [m.role for m in kept] == ["system", "assistant", "user"]
    plain = History([Message.user("a"), Message.assistant("b")])
    assert plain.since_compaction() == plain.messages


def test_since_compaction_keeps_a_call_with_its_result() -> None:
    call = Message.assistant("", [{"id": "c1", "name": "f", "arguments": {}}])
    compaction = Message(role="assistant", parts=[
        Compaction(provider="openai_responses", data="e")])
    history = History([Message.user("q"), call, compaction, Message.tool_result("c1", "r"),
                       Message.assistant("done")])
    window = history.since_compaction()
    assert [m.id for m in window] == [m.id for m in history.messages[1:]]
    assert isinstance(window[-1].parts[0], TextPart)
