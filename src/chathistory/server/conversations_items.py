"""Conversation items as the OpenAI Conversations API shows them, and as stored.

Pure functions (no I/O) for ``server.conversations``:

- ``stored_items(items)``: the request's Responses items checked and completed as
  OpenAI completes them (a message item's ``type``, its string ``content`` as one
  text part, an ``id`` in OpenAI's style when none is given, ``status:
  "completed"`` where the SDK's item type requires one), each as one message
  whose id is the item's id (``formats.responses_items.message_of``);
- ``listed_items(message)``: the items a stored message shows: the item it was
  stored from, else (a message written through ``/v1`` or an adapter) its
  ``to_openai_responses`` encoding, with ids derived from the message id so that
  every listed id can be found again (``locate_id``);
- listed ids: ``listed_id`` makes them from message ids and ``locate_id`` reads
  them back. Ids ending in ``~`` and digits (or a bare ``~``) are reserved for
  derived ids (``is_reserved``): a message of several items shows them as
  ``<message id>~<k>``, and a message whose own id has that form shows its one
  item as ``<message id>~``, so no listed id can name two items;
- the checks of metadata (OpenAI's limits) and of ``include``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidMessage
from ..formats import to_openai_responses
from ..formats.responses_items import kept_item, message_of
from ..model import Attachment, Message

__all__ = [
    "INCLUDABLE",
    "MAX_ITEMS",
    "check_include",
    "check_metadata",
    "is_reserved",
    "listed_id",
    "listed_items",
    "locate_id",
    "new_item_id",
    "reserved_id",
    "stored_items",
]

MAX_ITEMS = 20
"""Items one request may add (OpenAI's limit, which the Agents SDK batches by)."""
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_ID = 200
"""An item id is a message id: at most this many characters (``stores.checks``)."""
INCLUDABLE = frozenset({
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs", "reasoning.encrypted_content",
    "message.output_text.logprobs",
})
"""The SDK's ``ResponseIncludable``. Every stored field is always returned, so these
select nothing: they are checked and accepted."""

_ID_PREFIXES = {
    "message": "msg", "function_call": "fc", "function_call_output": "fco",
    "reasoning": "rs", "file_search_call": "fs", "web_search_call": "ws",
    "image_generation_call": "ig", "computer_call": "cu", "computer_call_output": "cuo",
    "code_interpreter_call": "ci", "local_shell_call": "lsh",
    "local_shell_call_output": "lsho", "shell_call": "sh", "shell_call_output": "sho",
    "apply_patch_call": "apc", "apply_patch_call_output": "apco", "mcp_call": "mcp",
    "mcp_list_tools": "mcpl", "mcp_approval_request": "mcpr",
    "mcp_approval_response": "mcpa", "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco", "compaction": "cmp", "tool_search_call": "tsc",
    "tool_search_output": "tso", "program": "prg", "program_output": "prgo",
    "additional_tools": "at", "configuration_update": "cfg",
}
"""Item type -> the prefix of the ids generated for it (OpenAI's where known)."""
_WITH_STATUS = frozenset({
    "message", "function_call", "function_call_output", "file_search_call",
    "web_search_call", "image_generation_call", "computer_call", "computer_call_output",
    "tool_search_call", "tool_search_output", "program_output", "code_interpreter_call",
    "local_shell_call", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output",
})
"""Item types whose SDK type requires ``status`` (``ConversationItem``)."""
_TYPES = frozenset({*_ID_PREFIXES, "compaction_trigger"})
"""The item types the SDK defines (``ResponseInputItemParam``, ``ConversationItem``);
``item_reference`` is refused on its own (it names an item OpenAI stores)."""
_TEXT_FIELD = {"input_text": "text", "output_text": "text", "text": "text",
               "summary_text": "text", "reasoning_text": "text", "refusal": "refusal"}
_CONTENT_TYPES = frozenset({*_TEXT_FIELD, "input_image", "input_file", "input_audio",
                            "computer_screenshot"})
"""A message's content part types (``Message.content``, the input messages')."""
_REQUIRED = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
}
"""What an input item of these types must carry (OpenAI's input schema)."""
_DERIVED = "~"
"""``<message id>~<k>``: the k-th of the items a message written elsewhere encodes to."""
_RESERVED = re.compile(r"~[0-9]*\Z")
"""The end of an id in the form of derived ids (``~`` and ASCII digits, or ``~``)."""
_MAX_INDEX_DIGITS = 9
"""A derived id's index has at most this many digits (no message shows more items)."""


def new_item_id(kind: str) -> str:
    """A new id in OpenAI's style for an item of type ``kind``: ``msg_`` and 48 hex."""
    return f"{_ID_PREFIXES.get(kind, 'item')}_{secrets.token_hex(24)}"


def _completed(raw: Mapping[str, Any], item_id: str | None) -> dict[str, Any]:
    """The item as the API stores and shows it: ``type`` named, a message's text parts
    as lists, ``id`` (``item_id``, else the item's own, else a new one) and ``status``
    where the SDK's type requires them."""
    item = dict(raw)
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"
        item = {"type": kind, **item}
    if kind == "message":
        content = item.get("content")
        output = item.get("role") == "assistant"
        if isinstance(content, str):
            content = [{"type": "output_text" if output else "input_text", "text": content}]
        if isinstance(content, list):
            content = [{**part, "annotations": []} if isinstance(part, dict)
                       and part.get("type") == "output_text" and "annotations" not in part
                       else part for part in content]
            item["content"] = content
    if item_id is not None:
        item["id"] = item_id
    elif not isinstance(item.get("id"), str) or not item["id"]:
        item["id"] = new_item_id(kind if isinstance(kind, str) else "item")
    if kind in _WITH_STATUS and item.get("status") is None:
        item["status"] = "completed"
    return item


def _checked(raw: Any, path: str) -> None:
    """``InvalidMessage`` naming the field for an item OpenAI's schema refuses."""
    if not isinstance(raw, dict):
        raise InvalidMessage(f"an item must be an object, not {type(raw).__name__}", path)
    kind = raw.get("type", "message" if "role" in raw else None)
    if not isinstance(kind, str) or not kind:
        raise InvalidMessage("an item needs a type (or a role and content, for a message)",
                             f"{path}.type")
    for field in _REQUIRED.get(kind, ()):
        if raw.get(field) is None:
            raise InvalidMessage(f"a {kind} item needs {field}", f"{path}.{field}")
    if kind == "item_reference":
        raise InvalidMessage("item_reference items name items OpenAI stores; send the item "
                             "itself", f"{path}.type")
    if kind not in _TYPES:
        raise InvalidMessage(f"unknown item type {kind!r}", f"{path}.type")
    if kind == "message":
        if not isinstance(raw["role"], str):
            raise InvalidMessage("role must be a string", f"{path}.role")
        _check_content(raw["content"], f"{path}.content")
    if kind == "function_call" and not isinstance(raw["arguments"], str):
        raise InvalidMessage("arguments must be a string (JSON)", f"{path}.arguments")
    item_id = raw.get("id")
    if item_id is not None and (not isinstance(item_id, str) or not item_id
                                or len(item_id) > MAX_ID or "\x00" in item_id
                                or "/" in item_id or item_id in (".", "..")):
        # an item id goes into URLs (.../items/{item_id}): '/' would not route there
        raise InvalidMessage(f"id must be a non-empty string of at most {MAX_ID} characters "
                             "without NUL or '/', and not '.' or '..'", f"{path}.id")


def _check_content(content: Any, path: str) -> None:
    """A message's content: a string, or a list of parts of known types whose text is
    a string."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidMessage("content must be a string or a list of parts", path)
    for k, part in enumerate(content):
        where = f"{path}[{k}]"
        if not isinstance(part, dict):
            raise InvalidMessage("a content part must be an object", where)
        kind = part.get("type")
        if kind not in _CONTENT_TYPES:
            raise InvalidMessage(f"unknown content type {kind!r}", f"{where}.type")
        field = _TEXT_FIELD.get(kind)
        if field is not None and not isinstance(part.get(field), str):
            raise InvalidMessage(f"a {kind} part's {field} must be a string",
                                 f"{where}.{field}")


def stored_items(items: Sequence[Any], field: str = "items", *,
                 reserved_ok: bool = False) -> list[Message]:
    """The messages that store ``items`` (one each, its id the item's id), checked:
    ``InvalidMessage`` at ``$.<field>[i]...`` for the first item OpenAI would refuse,
    or whose id is reserved (``is_reserved``) unless ``reserved_ok`` (the caller
    checks that such an id names an item already listed). (CPU work: the work pool.)"""
    if len(items) > MAX_ITEMS:
        raise InvalidMessage(f"at most {MAX_ITEMS} items per request, not {len(items)}",
                             f"$.{field}")
    messages = []
    for i, raw in enumerate(items):
        path = f"$.{field}[{i}]"
        _checked(raw, path)
        item = _completed(raw, None)
        if not reserved_ok and is_reserved(item["id"]):
            raise reserved_id(item["id"], f"{path}.id")
        try:
            messages.append(message_of(item, message_id=item["id"]))
        except InvalidMessage as exc:
            raise exc.under(path) from None
    return messages


Resolver = Callable[[Attachment], "bytes | str"]


def listed_items(message: Message, resolver: Resolver | None = None) -> list[dict[str, Any]]:
    """The items ``message`` shows, each under the id ``listed_id`` gives it (which
    ``locate_id`` reads back): the item it was stored from, else its Responses
    encoding (stored attachments through ``resolver``)."""
    kept = kept_item(message)
    if kept is not None:
        return [_completed(kept, listed_id(message.id, 0, 1))]
    try:
        encoded = to_openai_responses([message], resolver=resolver, drop_unsupported=True)
    except InvalidMessage:  # a role the format has no place for: its text, as a message
        text = "\n".join(t for t in (getattr(p, "text", None) for p in message.parts) if t)
        encoded = [{"type": "message", "role": "unknown",
                    "content": [{"type": "input_text", "text": text}]}]
    return [_completed(item, listed_id(message.id, k, len(encoded)))
            for k, item in enumerate(encoded)]


def is_reserved(item_id: str) -> bool:
    """Whether ``item_id`` has the form of a derived id (it ends in ``~`` and ASCII
    digits, or in ``~``): an item added through the API may not take it."""
    return _RESERVED.search(item_id) is not None


def reserved_id(item_id: str, path: str) -> InvalidMessage:
    """The error for an item id of the reserved form that names no item listed."""
    return InvalidMessage(f"id {item_id!r} ends in '~' and digits (or in '~'), the form "
                          "of the ids of items of messages written through /v1; choose "
                          "another", path)


def listed_id(message_id: str, k: int, count: int) -> str:
    """The id of the k-th of the ``count`` items message ``message_id`` shows:
    ``<message id>~<k>`` for one of several, else the message id, with ``~`` added
    when it has the reserved form itself. No two (message, k) share an id."""
    if count > 1:
        return f"{message_id}{_DERIVED}{k}"
    return message_id + _DERIVED if is_reserved(message_id) else message_id


def locate_id(item_id: str) -> tuple[str, int | None] | None:
    """The item ``listed_id`` gave ``item_id``: ``(message id, k)`` (the k-th of its
    message's several items) or ``(message id, None)`` (its only item); None for an
    id of the reserved form it never gives."""
    found = _RESERVED.search(item_id)
    if found is None:
        return item_id, None
    base, digits = item_id[:found.start()], found.group()[1:]
    if not digits:
        return (base, None) if is_reserved(base) else None
    canonical = digits == "0" or not digits.startswith("0")
    if base and canonical and len(digits) <= _MAX_INDEX_DIGITS:
        return base, int(digits)
    return None


def check_metadata(metadata: Any, field: str = "metadata") -> dict[str, str]:
    """OpenAI's metadata: at most 16 pairs of strings, keys of at most 64 characters,
    values of at most 512; else ``InvalidMessage`` naming the pair."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidMessage("metadata must be an object of strings", f"$.{field}")
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidMessage(f"metadata has {len(metadata)} pairs; at most "
                             f"{MAX_METADATA_PAIRS}", f"$.{field}")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            raise InvalidMessage(f"a metadata key has at most {MAX_METADATA_KEY} characters, "
                                 f"not {len(key)}", f"$.{field}.{key[:MAX_METADATA_KEY]}")
        if not isinstance(value, str):
            raise InvalidMessage("metadata values must be strings", f"$.{field}.{key}")
        if len(value) > MAX_METADATA_VALUE:
            raise InvalidMessage(f"a metadata value has at most {MAX_METADATA_VALUE} "
                                 f"characters, not {len(value)}", f"$.{field}.{key}")
        if "\x00" in key or "\x00" in value:
            raise InvalidMessage("metadata may not hold NUL", f"$.{field}.{key}")
    return dict(metadata)


def check_include(values: Sequence[str]) -> None:
    """``InvalidMessage`` at ``include`` for a value the SDK does not name."""
    for value in values:
        if value not in INCLUDABLE:
            raise InvalidMessage(f"unknown include value {value!r}: one of "
                                 f"{', '.join(sorted(INCLUDABLE))}", "include")
