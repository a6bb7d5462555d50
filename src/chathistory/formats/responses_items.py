"""Responses API items as stored messages: one item, one message, kept exactly.

The OpenAI Agents SDK's sessions (``integrations.openai_agents``) and the
service's OpenAI Conversations API (``server.conversations``) both store a
Responses input or output item as one chathistory message: ``message_of(item)``
keeps the item as given in ``provider_metadata["openai_agents"]["item"]``
(``ITEM_KEY``; the name of its first writer, kept so that every stored item
still loads) and gives the message the role and parts that
``chathistory.formats.from_openai_responses`` decodes from it, so token counts,
pair safety, the viewer and the other formats see real content.
``item_of(message)`` gives the item back: the kept one, or, for a message
another writer added, its ``to_openai_responses`` encoding (possibly several
items). Needs no SDK.

Items ``from_openai_responses`` does not take are mapped here:

- an item with a ``call_id`` whose type ends in ``_call`` (or is ``program``) is a
  tool call (an assistant ``ToolCall``; name: the item's ``name``, else its type;
  arguments: its other fields), one whose type ends in ``_output`` the result of the
  call with that ``call_id`` (a ``tool`` message; its ``output``, else its
  ``result``, JSON unless a string). That covers every pair the SDK matches by
  ``call_id`` (``function_call``, ``custom_tool_call``, ``computer_call``,
  ``shell_call``, ``local_shell_call``, ``apply_patch_call``, ``tool_search_call``)
  and programmatic tool calling: a ``program`` item is the call and the
  ``program_output`` with its ``call_id`` the result, so the program, the tool calls
  it made and its output form one group;
- a ``reasoning`` item the decoder does not take (OpenAI's stored reasoning, with
  neither summary nor encrypted content) is a reasoning part carrying the item id
  (as its signature, so the part is not empty), which ``to_openai_responses`` sends
  back as the same item;
- a ``compaction`` item is decoded by ``from_openai_responses``: an assistant
  message holding a ``Compaction`` part, so ``History.since_compaction`` finds it;
- anything else (hosted tool calls such as ``web_search_call`` or ``mcp_call``,
  ``item_reference``, ...) is a message of the item's role
  (``assistant`` if it has none) whose text is the item as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessage
from ..model import Message, Part, Reasoning, TextPart, ToolCall, ToolResult, new_id
from .openai_responses import from_openai_responses, to_openai_responses

__all__ = ["ITEM_KEY", "item_of", "kept_item", "message_of"]

ITEM_KEY = "openai_agents"
"""``provider_metadata`` key under which a message keeps its item (``{"item": ...}``)."""
_CALL_FIELDS = frozenset({"type", "call_id", "id", "status", "name"})
_RESULT_FIELDS = ("output", "result")  # result: a program_output's


def message_of(item: Mapping[str, Any], *, message_id: str | None = None) -> Message:
    """The message that stores one Responses item, with id ``message_id`` (default: a
    new one). The item must be strict JSON (what ``json.dumps`` writes without NaN,
    and UTF-8 encodable), else ``InvalidMessage`` at ``$``."""
    try:
        # the copy the Agents SDK's SQLiteSession makes (json.loads(json.dumps(item)))
        text = json.dumps(item, ensure_ascii=False, allow_nan=False)
        text.encode()  # a lone surrogate: no UTF-8, so no store can keep it
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessage(f"an item must be JSON: {exc}", "$") from None
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise InvalidMessage(f"an item must be an object, not {type(item).__name__}", "$")
    try:
        decoded = from_openai_responses([raw])
    except InvalidMessage:
        decoded = []
    role, parts = (decoded[0].role, decoded[0].parts) if len(decoded) == 1 else _mapped(raw)
    meta = decoded[0].provider_metadata if len(decoded) == 1 else {}
    return Message(id=message_id or new_id(), role=role, parts=parts,
                   provider_metadata={**meta, ITEM_KEY: {"item": raw}}).validate()


def _mapped(item: dict[str, Any]) -> tuple[str, list[Part]]:
    """Role and parts for an item ``from_openai_responses`` does not take."""
    kind = item.get("type")
    call_id = item.get("call_id")
    if isinstance(kind, str) and isinstance(call_id, str) and call_id:
        if kind.endswith("_output"):
            output = next((item[k] for k in _RESULT_FIELDS if k in item),
                          {k: v for k, v in item.items() if k not in _CALL_FIELDS})
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            return "tool", [ToolResult(call_id=call_id, content=text)]
        if kind.endswith("_call") or kind == "program":
            name = item.get("name") if isinstance(item.get("name"), str) else None
            args = {k: v for k, v in item.items() if k not in _CALL_FIELDS}
            return "assistant", [ToolCall(id=call_id, name=name or kind, arguments=args)]
    item_id = item.get("id")
    if kind == "reasoning" and isinstance(item_id, str) and item_id:
        return "assistant", [Reasoning(signature=item_id,
                                       provider_metadata={"openai_responses": {"id": item_id}})]
    role = item.get("role")
    text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    return (role if isinstance(role, str) and role else "assistant"), [TextPart(text=text)]


def kept_item(message: Message) -> dict[str, Any] | None:
    """The item ``message`` was stored from (``message_of``), or None."""
    kept = message.provider_metadata.get(ITEM_KEY)
    if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
        item: dict[str, Any] = kept["item"]
        return item
    return None


def item_of(message: Message) -> list[dict[str, Any]]:
    """The item(s) a stored message stands for: the one it was added as, or, for
    a message another writer added, its Responses encoding. Stored attachments
    need the message resolved first (``Store.resolve``)."""
    kept = kept_item(message)
    if kept is not None:
        return [kept]
    return to_openai_responses([message])
