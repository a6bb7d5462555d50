"""LangChain: a ``BaseChatMessageHistory`` over any chathistory store, and
conversion between LangChain messages and ours.

Mapping (``from_langchain`` / ``to_langchain``):

- ``HumanMessage`` / ``AIMessage`` / ``SystemMessage`` / ``ToolMessage`` are roles
  ``user`` / ``assistant`` / ``system`` / ``tool``; a ``SystemMessage`` marked
  ``__openai_role__ = "developer"`` is ``developer``; a ``ChatMessage`` keeps its role.
- Content: text (a string or ``text`` blocks), images (``image_url`` blocks and
  standard ``image`` blocks; data URLs and base64 become attachments, stored once
  by hash), standard ``audio`` / ``file`` blocks, and reasoning (``reasoning``,
  Anthropic ``thinking`` with its signature, ``redacted_thinking``).
- Provider compactions: a ``compaction`` block (what langchain-openai keeps of a
  Responses ``compaction`` item, what langchain-anthropic keeps of an Anthropic
  ``compaction`` block; either may be wrapped in a ``non_standard`` block) is a
  ``Compaction`` part and goes back as the same block, which those integrations send
  to their provider. A compaction of another provider, or one its block would not
  give back whole, is kept in ``response_metadata["chathistory_compaction"]``,
  which LangChain never sends.
- ``AIMessage.tool_calls`` are tool calls; a ``ToolMessage`` is a tool result
  (``tool_call_id``; ``status="error"`` is ``is_error``; its ``name`` the tool's).
- ``additional_kwargs``, ``response_metadata``, ``usage_metadata``,
  ``invalid_tool_calls`` and ``artifact`` are kept (JSON-safe values only) in
  ``provider_metadata["langchain"]``; so is the original ``content`` when the
  parts would not rebuild it exactly (blocks of other shapes, Anthropic
  ``tool_use`` blocks), so that a round trip gives back equal messages.
- Ids: a LangChain message id is our message id, so adding the same message again
  is a no-op (retry safety); a message without an id, or whose id an earlier
  message of the same batch took, gets a new UUID, and the LangChain id (None when
  it had none) is kept and read back. ``idempotent_ids=False`` gives every message
  a new UUID: adding a message twice then stores it twice, as LangChain's own
  ``InMemoryChatMessageHistory`` does. The caller's messages are never changed.
- An ``AIMessage`` with no content we model (``AIMessage("")``, one with only
  ``invalid_tool_calls``) is stored with a placeholder part that no provider
  format sends (``_common.placeholder``), and read back equal. Any other message
  with empty content has nothing to store and is left out: a message needs content,
  and provider formats refuse the placeholder outside the assistant role.

Parity with ``InMemoryChatMessageHistory`` (tested on every store backend):
``messages`` returns what it returns (``model_dump()`` equal) for every shape
above, added in one batch or one at a time, except that empty non-assistant
messages are left out and, by default, a message whose id is already stored is
not stored again (``idempotent_ids``).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, assert_never

import msgspec

from ..errors import InvalidMessage, MissingDependency
from ..groups import Groups
from ..model import (
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ResultPart,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    new_id,
)
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store
from ..stores.model import DEFAULT_TENANT
from ..tokens import TokenCounter
from ._common import (
    COMPACTION_KEY,
    aappend_creating,
    append_creating,
    b64decode,
    compaction_of,
    data_url,
    ids_for,
    is_placeholder,
    json_safe,
    kept_compactions,
    media_part,
    native_compaction,
    or_empty,
    placeholder,
    resolved,
    storable,
    store_pair,
    with_kept_compactions,
)

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency("langchain-core", "langchain") from exc

__all__ = ["ChatHistoryMessageHistory", "from_langchain", "to_langchain", "usage_of"]

NS = "langchain"
_KEPT_FIELDS = ("additional_kwargs", "response_metadata", "usage_metadata",
                "invalid_tool_calls", "artifact")
_MEDIA = ("image", "audio", "file")


# ---------------------------------------------------------------- LangChain -> ours


def usage_of(message: AIMessage) -> Usage | None:
    """An ``AIMessage``'s ``usage_metadata`` as a ``Usage`` (None without one).
    LangChain's ``input_tokens`` is already the whole prompt, cache reads and
    writes included (``input_token_details.cache_read`` / ``cache_creation``); the
    model and provider come from ``response_metadata`` where the integration put
    them (``model_name`` or ``model``, ``model_provider``)."""
    usage = message.usage_metadata
    if not usage:
        return None
    details: Any = usage.get("input_token_details") or {}
    meta = message.response_metadata or {}
    model = meta.get("model_name") or meta.get("model")
    provider = meta.get("model_provider")
    return Usage(input_tokens=usage.get("input_tokens") or 0,
                 output_tokens=usage.get("output_tokens") or 0,
                 cache_read_tokens=details.get("cache_read") or 0,
                 cache_write_tokens=details.get("cache_creation") or 0,
                 model=model if isinstance(model, str) else None,
                 provider=provider if isinstance(provider, str) else None
                 ).check("$.usage_metadata")


def from_langchain(messages: Sequence[BaseMessage], *, idempotent_ids: bool = True
                   ) -> list[Message]:
    """Our messages for LangChain messages (empty non-assistant ones left out).
    ``idempotent_ids``: a LangChain id is our id (see the module docstring)."""
    ids = (ids_for(m.id for m in messages) if idempotent_ids
           else [new_id() for _ in messages])
    out: list[Message] = []
    for i, (lc, mid) in enumerate(zip(messages, ids, strict=True)):
        try:
            msg = _from_one(lc, mid)
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        if msg is not None:
            out.append(msg)
    return out


def _from_one(lc: BaseMessage, mid: str) -> Message | None:
    kept: dict[str, Any] = {}
    for field in _KEPT_FIELDS:
        value = json_safe(getattr(lc, field, None))
        if value:
            kept[field] = value
    compactions = kept.get("response_metadata", {}).pop(COMPACTION_KEY, None)
    if kept.get("response_metadata") == {}:
        del kept["response_metadata"]
    name = lc.name or None
    parts: list[Part]
    if isinstance(lc, ToolMessage):
        role = "tool"
        content: str | list[ResultPart] = (
            lc.content if isinstance(lc.content, str)
            else [p for p in _parts(lc.content, "$.content") if isinstance(p, ResultPart)])
        parts = [ToolResult(call_id=lc.tool_call_id, content=content,
                            is_error=lc.status == "error", name=name)]
        name = None
    else:
        role = _role_of(lc, kept)
        parts = _parts(lc.content, "$.content")
        if isinstance(lc, AIMessage):
            # a call without an id gets one named after its message, the same each time
            # the message is added (a store refuses other content under a stored id)
            parts += [ToolCall(id=c.get("id") or f"{mid}.call{k}", name=c["name"],
                               arguments=dict(c.get("args") or {}))
                      for k, c in enumerate(lc.tool_calls)]
    parts = with_kept_compactions(parts, compactions, NS, f"$.response_metadata.{COMPACTION_KEY}")
    if lc.id != mid:
        kept["id"] = lc.id  # read back as given (None when it had none)
    msg = Message(id=mid, role=role, name=name, parts=parts,
                  provider_metadata={NS: kept} if kept else {},
                  usage=usage_of(lc) if isinstance(lc, AIMessage) else None)
    original = json_safe(lc.content)
    if _rebuilt_content(msg) != original:
        kept["content"] = original  # blocks we do not model: keep them as given
        msg.provider_metadata = {NS: kept}
    if not storable(msg):
        if role != "assistant":
            if _is_empty(lc.content):
                return None
            raise InvalidMessage("no content block of this message maps to a part",
                                 "$.content")
        msg.parts = [*parts, placeholder(NS)]
    return msg.validate()


def _role_of(lc: BaseMessage, kept: dict[str, Any]) -> str:
    if isinstance(lc, ChatMessage):
        kept["type"] = "chat"
        return lc.role
    if isinstance(lc, HumanMessage):
        return "user"
    if isinstance(lc, AIMessage):
        return "assistant"
    if isinstance(lc, SystemMessage):
        extra = kept.get("additional_kwargs", {})
        if extra.get("__openai_role__") == "developer":
            rest = {k: v for k, v in extra.items() if k != "__openai_role__"}
            if rest:
                kept["additional_kwargs"] = rest
            else:
                kept.pop("additional_kwargs")
            return "developer"
        return "system"
    raise InvalidMessage(f"{type(lc).__name__} is not supported (use HumanMessage, AIMessage, "
                         "SystemMessage, ToolMessage or ChatMessage)", "$.type")


def _is_empty(content: Any) -> bool:
    return content == "" or content == [] or content is None


def _parts(content: str | list[Any], path: str) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    parts: list[Part] = []
    for k, block in enumerate(content):
        part = _part(block, f"{path}[{k}]")
        if part is not None:
            parts.append(part)
    return parts


def _part(block: Any, path: str) -> Part | None:
    """The part for one content block, None for a block we keep only as given."""
    if isinstance(block, str):
        return TextPart(text=block, provider_metadata={NS: {"form": "str"}})
    if not isinstance(block, dict):
        raise InvalidMessage(f"a content block must be a string or an object, not "
                             f"{type(block).__name__}", path)
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return TextPart(text=block["text"])
    if kind == "image_url":
        image = block.get("image_url")
        spec = image if isinstance(image, dict) else {"url": image}
        form = "image_url" if isinstance(image, dict) else "image_url_str"
        part = _media("image", spec.get("url"), None, path + ".image_url")
        return ImagePart(url=part.url, attachment=part.attachment, detail=spec.get("detail"),
                         provider_metadata={NS: {"form": form}})
    if kind in _MEDIA and ("url" in block or "base64" in block):
        return _media(kind, block.get("url"), block, path)
    if kind == "reasoning" and isinstance(block.get("reasoning"), str):
        return Reasoning(text=block["reasoning"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return Reasoning(text=block["thinking"], signature=block.get("signature"),
                         provider_metadata={NS: {"form": "thinking"}})
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return Reasoning(data=block["data"], provider_metadata={NS: {"form": "redacted_thinking"}})
    if kind == "compaction":
        return compaction_of({k: v for k, v in block.items() if k != "index"})
    value = block.get("value")
    if kind == "non_standard" and isinstance(value, dict) and value.get("type") == "compaction":
        found = compaction_of({k: v for k, v in value.items() if k != "index"})
        return None if found is None else msgspec.structs.replace(
            found, provider_metadata={**found.provider_metadata, NS: {"form": "non_standard"}})
    return None


def _media(kind: str, url: Any, block: dict[str, Any] | None, path: str
           ) -> ImagePart | AudioPart | FilePart:
    mime = block.get("mime_type") if block else None
    if block is not None and "base64" in block:
        data = b64decode(block["base64"], path + ".base64")
        return media_part(kind, attachment=Attachment.from_bytes(data, mime_type=mime))
    if not isinstance(url, str) or not url:
        raise InvalidMessage("expected a url", path + ".url")
    if url.startswith("data:"):
        mime, data = data_url(url, path + ".url")
        return media_part(kind, attachment=Attachment.from_bytes(data, mime_type=mime))
    return media_part(kind, url=url, mime_type=mime)


# ---------------------------------------------------------------- ours -> LangChain


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """LangChain messages for ours (attachment bytes must be loaded: see ``Store.resolve``).
    A message carrying several tool results becomes one ``ToolMessage`` per result."""
    out: list[BaseMessage] = []
    for i, msg in enumerate(messages):
        try:
            out.extend(_to_lc(msg))
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
    return out


def _to_lc(msg: Message) -> list[BaseMessage]:
    out = _to_lc_messages(msg)
    compactions = kept_compactions(msg.parts, NS)
    if compactions:  # on the last message only, so that they are read back once
        last = out[-1]
        last.response_metadata = {**last.response_metadata, COMPACTION_KEY: compactions}
    return out


def _to_lc_messages(msg: Message) -> list[BaseMessage]:
    kept = msg.provider_metadata.get(NS, {})
    extra = {k: kept[k] for k in ("additional_kwargs", "response_metadata") if k in kept}
    lc_id = kept.get("id", msg.id)
    out: list[BaseMessage] = []
    results = msg.tool_results
    for k, result in enumerate(results):
        content: Any = (result.content if isinstance(result.content, str)
                        else _blocks(list(result.content), f"$.parts[{k}]"))
        if "content" in kept and len(results) == 1:
            content = kept["content"]
        out.append(ToolMessage(
            content=content, tool_call_id=result.call_id, name=result.name,
            status="error" if result.is_error else "success", artifact=kept.get("artifact"),
            id=lc_id if k == 0 or lc_id is None else f"{lc_id}-{k}", **extra))
    if results and all(isinstance(p, ToolResult) for p in msg.parts):
        return out
    content = kept["content"] if "content" in kept else _rebuilt_content(msg)
    common: dict[str, Any] = {"content": content, "id": lc_id, "name": msg.name, **extra}
    if kept.get("type") == "chat":
        out.append(ChatMessage(role=msg.role, **common))
    elif msg.role == "user":
        out.append(HumanMessage(**common))
    elif msg.role == "assistant":
        out.append(AIMessage(
            tool_calls=[{"id": c.id, "name": c.name, "args": c.arguments, "type": "tool_call"}
                        for c in msg.tool_calls],
            invalid_tool_calls=kept.get("invalid_tool_calls", []),
            usage_metadata=kept.get("usage_metadata"), **common))
    elif msg.role in ("system", "developer"):
        if msg.role == "developer":
            common["additional_kwargs"] = {**common.get("additional_kwargs", {}),
                                           "__openai_role__": "developer"}
        out.append(SystemMessage(**common))
    else:
        out.append(ChatMessage(role=msg.role, **common))
    return out


def _rebuilt_content(msg: Message) -> str | list[Any]:
    parts = [p for p in msg.parts
             if not isinstance(p, ToolCall | ToolResult) and not is_placeholder(p, NS)]
    if msg.role == "tool" and len(msg.parts) == 1 and isinstance(msg.parts[0], ToolResult):
        result = msg.parts[0]
        return (result.content if isinstance(result.content, str)
                else _blocks(list(result.content), "$.parts[0]"))
    if not parts:
        return ""
    if len(parts) == 1 and type(parts[0]) is TextPart and not parts[0].provider_metadata:
        return parts[0].text
    return _blocks(parts, "$.parts")


def _blocks(parts: Sequence[Part], path: str) -> list[Any]:
    blocks: list[Any] = []
    for k, part in enumerate(parts):
        form = part.provider_metadata.get(NS, {}).get("form")
        match part:
            case TextPart():
                blocks.append(part.text if form == "str" else {"type": "text", "text": part.text})
            case ImagePart() | AudioPart() | FilePart():
                blocks.append(_media_block(part, form, f"{path}[{k}]"))
            case Reasoning():
                if form == "redacted_thinking" or (form is None and part.data and not part.text):
                    blocks.append({"type": "redacted_thinking", "data": part.data})
                elif form == "thinking" or part.signature is not None:
                    blocks.append({"type": "thinking", "thinking": part.text,
                                   "signature": part.signature})
                elif part.text:
                    blocks.append({"type": "reasoning", "reasoning": part.text})
            case Compaction():
                native = native_compaction(part)  # None: kept in response_metadata
                if native is not None:
                    blocks.append({"type": "non_standard", "value": native}
                                  if form == "non_standard" else native)
            case ToolCall() | ToolResult():
                pass  # carried by tool_calls / ToolMessage, not by content
            case _:
                assert_never(part)
    return blocks


def _media_block(part: ImagePart | AudioPart | FilePart, form: str | None,
                 path: str) -> dict[str, Any]:
    kind = {ImagePart: "image", AudioPart: "audio", FilePart: "file"}[type(part)]
    att = part.attachment
    if att is not None and att.data is None:
        raise InvalidMessage("attachment bytes are not loaded (read through the store, "
                             "or Store.resolve the messages first)", path + ".attachment")
    b64 = base64.b64encode(att.data).decode() if att is not None and att.data else None
    mime = att.mime_type if att is not None else part.mime_type
    detail = part.detail if isinstance(part, ImagePart) else None
    if isinstance(part, ImagePart) and (form in ("image_url", "image_url_str") or detail):
        url = part.url if b64 is None else f"data:{mime};base64,{b64}"
        if form == "image_url_str":
            return {"type": "image_url", "image_url": url}
        return {"type": "image_url", "image_url": {"url": url, **({"detail": detail}
                                                                   if detail else {})}}
    block: dict[str, Any] = {"type": kind}
    if b64 is not None:
        block.update(base64=b64, mime_type=mime)
    else:
        block["url"] = part.url
        if mime:
            block["mime_type"] = mime
    if isinstance(part, FilePart) and part.name:
        block["extras"] = {"filename": part.name}
    return block


# ---------------------------------------------------------------- the history


class ChatHistoryMessageHistory(BaseChatMessageHistory):
    """LangChain chat history backed by any chathistory store (sync or async).

    ``messages`` returns the session's live messages, or only the newest that fit
    ``max_tokens`` (by ``counter``, the store's by default) and/or the newest
    ``last_n`` (widened to whole tool-call groups); system and developer messages
    are kept unless ``keep_system=False``. The session is created on first add.

    ``idempotent_ids`` (default True): a message whose LangChain id is already
    stored is not stored again, so a retried ``add_messages`` (after a timeout, say)
    never duplicates the turn. ``False`` stores every message added, as LangChain's
    ``InMemoryChatMessageHistory`` does. Messages without an id are stored each
    time they are added either way, and the caller's messages are never changed.
    """

    def __init__(self, store: Store | AsyncStoreAdapter, session_id: str, *,
                 tenant: str = DEFAULT_TENANT, max_tokens: int | None = None,
                 last_n: int | None = None, counter: str | TokenCounter | None = None,
                 keep_system: bool = True, idempotent_ids: bool = True) -> None:
        if max_tokens is not None and max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        if last_n is not None and last_n < 0:
            raise ValueError("last_n must be >= 0")
        self.store, self.async_store = store_pair(store)
        self.session_id = session_id
        self.tenant = tenant
        self.max_tokens = max_tokens
        self.last_n = last_n
        self.counter = counter
        self.keep_system = keep_system
        self.idempotent_ids = idempotent_ids

    # ------------------------------------------------------------------ reading

    def _read(self) -> list[Message]:
        store, sid, tenant = self.store, self.session_id, self.tenant
        if self.max_tokens is not None:
            found = store.window(sid, self.max_tokens, self.counter, tenant=tenant,
                                 keep_system=self.keep_system)
            if self.last_n is not None:
                found = _newest(found, self.last_n, self.keep_system)
        elif self.last_n is not None:
            found = (store.context(sid, head=0, tail=self.last_n, tenant=tenant)
                     if self.keep_system else store.tail(sid, self.last_n, tenant=tenant))
        else:
            found = store.range(sid, include_marked=False, tenant=tenant)
        return resolved(store, found, tenant)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The selected messages of the session, oldest first ([] before the first add)."""
        return to_langchain(or_empty(self._read))

    async def aget_messages(self) -> list[BaseMessage]:
        """``messages`` without blocking the event loop."""
        return to_langchain(await self.async_store.call(self.tenant, or_empty, self._read))

    # ------------------------------------------------------------------ writing

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append in one atomic write; with ``idempotent_ids``, messages whose id is
        already stored are skipped."""
        append_creating(self.store, self.session_id,
                        from_langchain(messages, idempotent_ids=self.idempotent_ids),
                        tenant=self.tenant)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """``add_messages`` without blocking the event loop."""
        await aappend_creating(self.async_store, self.session_id,
                               from_langchain(messages, idempotent_ids=self.idempotent_ids),
                               tenant=self.tenant)

    def clear(self) -> None:
        """Remove every message of the session (the session itself stays)."""
        or_empty(lambda: [self.store.clear(self.session_id, tenant=self.tenant)])

    async def aclear(self) -> None:
        """``clear`` without blocking the event loop."""
        await self.async_store.call(self.tenant, self.clear)


def _newest(messages: list[Message], n: int, keep_system: bool) -> list[Message]:
    """The newest ``n`` of a selection, widened to whole groups, system kept if asked."""
    kept_roles = ("system", "developer") if keep_system else ()
    rest = [m for m in messages if m.role not in kept_roles]
    if n >= len(rest):
        start = 0
    else:
        start = Groups.of(rest).widen(len(rest) - n, len(rest))[0] if n > 0 else len(rest)
    chosen = {m.id for m in rest[start:]}
    return [m for m in messages if m.id in chosen or m.role in kept_roles]
