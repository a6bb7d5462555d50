"""OpenAI Agents SDK: the ``Session`` protocol over any chathistory store.

``ChatHistorySession(session_id, store)`` can be passed as ``session=`` to
``Runner.run``. It returns what the SDK's own ``SQLiteSession`` returns (a test
runs both side by side on every backend): items come back in the order they were
added and equal to ``json.loads(json.dumps(item))``, ``get_items(limit=n)``
returns the newest ``n`` in chronological order (``0`` gives none, a negative
limit all, and ``session_settings.limit`` is the default), ``pop_item`` removes
and returns the newest item (None when empty), ``clear_session`` removes them all.

Storage: each item is one message, appended in one atomic write per
``add_items``. The item itself is kept as given in
``provider_metadata["openai_agents"]["item"]`` (that is what ``get_items``
returns), and the message's role and parts are what
``chathistory.formats.from_openai_responses`` decodes from it, so token counts,
pair safety, the viewer and the other adapters see real content. Items that
adapter does not take are mapped here:

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
- anything else (hosted tool calls such as ``web_search_call`` or ``mcp_call``,
  ``item_reference``, ``compaction``, ...) is a message of the item's role
  (``assistant`` if it has none) whose text is the item as JSON.

Differences from ``SQLiteSession``, the first two from chathistory's pair-safety
rule, on purpose:

- a limit that would split a tool call from its results (parallel calls from each
  other's results, or reasoning from the item after it) is widened to the whole
  group, so ``get_items(n)`` may return a few more than ``n``: the newest ``n``
  items and the rest of their oldest group (``pair_safe=False`` gives exactly
  ``n``). ``SQLiteSession`` can hand the model ``[call_2, out_1, out_2, answer]``,
  which the Responses API rejects (``out_1`` has no call);
- a result whose call was never added (an ``*_output`` with an unknown
  ``call_id``) is kept but not returned, for the same reason;
- an item ``json.dumps`` cannot write strictly (NaN or infinity, a lone surrogate)
  is refused with ``InvalidMessage`` instead of being stored as non-standard JSON.

Messages that other writers added to the same session (a ``HistoryProvider``,
another adapter) are returned as ``to_openai_responses`` encodes them
(``pop_item`` removes such a message whole and returns its last item).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, cast

from ..errors import InvalidMessage, MissingDependency, NotFound
from ..formats import from_openai_responses, to_openai_responses
from ..model import Message, Part, Reasoning, TextPart, ToolCall, ToolResult, new_id
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store
from ..stores.model import DEFAULT_TENANT
from ._common import append_creating, or_empty, resolved, store_pair

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency("openai-agents", "openai-agents") from exc

__all__ = ["ChatHistorySession", "item_of", "message_of"]

NS = "openai_agents"
_CALL_FIELDS = frozenset({"type", "call_id", "id", "status", "name"})
_RESULT_FIELDS = ("output", "result")  # result: a program_output's


def message_of(item: Mapping[str, Any]) -> Message:
    """The message that stores one Responses input item (a new id every time: the
    SDK may add equal items twice, and each is an item of its own)."""
    try:
        # the copy SQLiteSession makes (json.loads(json.dumps(item))), strict JSON only
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
    return Message(id=new_id(), role=role, parts=parts,
                   provider_metadata={**meta, NS: {"item": raw}}).validate()


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


def item_of(message: Message) -> list[dict[str, Any]]:
    """The item(s) a stored message stands for: the one it was added as, or, for
    a message another writer added, its Responses encoding."""
    kept = message.provider_metadata.get(NS)
    if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
        return [kept["item"]]
    return to_openai_responses([message])


class ChatHistorySession:
    """An Agents SDK ``Session`` kept in a chathistory store (any backend).

    ``store`` may be sync (calls run in a worker thread) or an ``AsyncStoreAdapter``.
    The store session ``(tenant, session_id)`` is created on the first ``add_items``.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, store: Store | AsyncStoreAdapter, *,
                 tenant: str = DEFAULT_TENANT,
                 session_settings: SessionSettings | None = None,
                 pair_safe: bool = True) -> None:
        self.session_id = session_id
        self.store, self.async_store = store_pair(store)
        self.tenant = tenant
        self.session_settings = session_settings or SessionSettings()
        self.pair_safe = pair_safe

    def _messages(self, limit: int | None) -> list[Message]:
        store, sid, tenant = self.store, self.session_id, self.tenant
        if limit is None or limit < 0:  # negative: all, as SQLiteSession's LIMIT does
            return or_empty(lambda: store.range(sid, include_marked=False, tenant=tenant))
        if limit == 0:
            return []
        if self.pair_safe:
            return or_empty(lambda: store.tail(sid, limit, tenant=tenant))

        def exact() -> list[Message]:
            count = store.get_session(sid, tenant=tenant).message_count
            found = store.range(sid, max(0, count - limit), tenant=tenant, include_marked=False)
            return found[-limit:]

        return or_empty(exact)

    def _items(self, limit: int | None) -> list[TResponseInputItem]:
        messages = self._messages(limit)
        if any(NS not in m.provider_metadata for m in messages):
            messages = resolved(self.store, messages, self.tenant)
        items = [item for m in messages for item in item_of(m)]
        return cast(list[TResponseInputItem], items)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the newest ``limit``."""
        resolved_limit = resolve_session_limit(limit, self.session_settings)
        return await self.async_store.call(self.tenant, self._items, resolved_limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in one atomic write (nothing is stored if one is invalid)."""
        if not items:
            return
        messages = []
        for i, item in enumerate(items):
            try:
                messages.append(message_of(cast(Mapping[str, Any], item)))
            except InvalidMessage as exc:
                raise exc.under(f"$[{i}]") from None
        await self.async_store.call(self.tenant, append_creating, self.store,
                                    self.session_id, messages, tenant=self.tenant)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; None when the session is empty."""
        try:
            message = await self.async_store.pop(self.session_id, tenant=self.tenant)
        except NotFound:
            return None
        if message is None:
            return None
        if NS not in message.provider_metadata:
            message = resolved(self.store, [message], self.tenant)[0]
        items = item_of(message)
        return cast(TResponseInputItem, items[-1]) if items else None

    async def clear_session(self) -> None:
        """Remove every item of the session (the store session itself stays)."""
        with contextlib.suppress(NotFound):
            await self.async_store.clear(self.session_id, tenant=self.tenant)
