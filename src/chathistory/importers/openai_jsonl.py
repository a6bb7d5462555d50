"""OpenAI chat JSONL: one ``{"messages": [...]}`` per line (the fine-tuning format).

Messages are read by ``chathistory.formats.openai_chat.from_openai_chat``, so
tool calls and tool results (``tool_call_id``) map as everywhere else. The
fine-tuning extras are kept: an assistant message's ``weight`` goes to its
``metadata["weight"]``; a line's ``tools`` / ``functions`` /
``parallel_tool_calls`` go to the session's ``state["openai"]``; the legacy
``function_call`` and ``function`` role become a tool call and its result.

Ids: a line with ``id`` (or ``custom_id``) is keyed by it, any other by the
SHA-256 of its content, so the same line always lands in the same session
and an identical line twice in a file is stored once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgspec

from ..errors import InvalidMessage
from ._write import Conversation, ImportReport, derived_id, invalid_record

__all__ = ["convert"]

_STATE_KEYS = ("tools", "functions", "parallel_tool_calls")


def convert(raw: bytes, index: int, report: ImportReport) -> Iterator[Conversation]:
    """The session of one line."""
    from ..formats.openai_chat import from_openai_chat

    try:
        record = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise invalid_record(exc, index) from None
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise InvalidMessage(f"record {index}: expected an object with a messages list",
                             f"$[{index}].messages")
    explicit = record.get("id") or record.get("custom_id")
    key = str(explicit) if explicit else hashlib.sha256(
        msgspec.json.encode(record, order="deterministic")).hexdigest()[:32]
    raw_messages, weights = _legacy(record["messages"], index)
    try:
        messages = from_openai_chat(raw_messages)
    except InvalidMessage as exc:
        raise exc.under(f"$[{index}].messages") from None
    if len(messages) == len(raw_messages):  # one message per input message: keep weights
        for message, weight in zip(messages, weights, strict=True):
            if weight is not None:
                message.metadata = {**message.metadata, "weight": weight}
    for position, message in enumerate(messages):
        message.id = derived_id("openai", key, position)
    if not messages:
        report.skip("empty conversation")
        return
    state = {k: record[k] for k in _STATE_KEYS if k in record}
    metadata: dict[str, Any] = {"source": "openai"}
    if explicit:
        metadata["source_id"] = key
    yield Conversation(session_id=derived_id("openai", key), paths=[messages],
                       metadata=metadata, state={"openai": state} if state else None)


def _legacy(messages: list[Any], index: int) -> tuple[list[Any], list[Any]]:
    """The messages without ``weight`` (returned beside them), with legacy
    ``function_call`` / ``function`` turned into ``tool_calls`` / ``tool``."""
    out: list[Any] = []
    weights: list[Any] = []
    calls: dict[str, str] = {}  # function name -> the id given to its newest call
    for i, item in enumerate(messages):
        if not isinstance(item, dict):
            raise InvalidMessage(f"record {index}: a message must be an object",
                                 f"$[{index}].messages[{i}]")
        item = dict(item)
        weights.append(item.pop("weight", None))
        call = item.pop("function_call", None)
        if isinstance(call, dict):
            call_id = f"call_{i}"
            calls[str(call.get("name"))] = call_id
            item["tool_calls"] = [*(item.get("tool_calls") or []),
                                  {"id": call_id, "type": "function", "function": call}]
        if item.get("role") == "function":
            name = str(item.get("name"))
            item = {"role": "tool", "tool_call_id": calls.get(name, f"call_{name}"),
                    "content": item.get("content")}
        out.append(item)
    return out, weights
