"""Microsoft Agent Framework: a ``HistoryProvider`` backed by chathistory.

``ChatHistoryAgentProvider`` is an ``agent_framework.HistoryProvider`` (the
framework's current base for history storage) that runs chathistory's own
``HistoryProvider`` underneath, with its semantics:

- ``before_run`` adds the history chosen by ``policy`` (a ``ContextWindow``,
  reducers, the newest ``n``, or everything live) to the context; ``after_run``
  stores the turn's input and response messages in one atomic write. A run
  without a response (it failed) stores nothing; the framework does not call
  ``after_run`` for a run that raised.
- Its state lives in the framework's session: ``session.state[source_id]`` holds
  the messages themselves when there is no store (so ``AgentSession.to_dict()``
  carries the conversation), or only the turn's bookkeeping when a store keeps
  them (under the store session ``(tenant, session.session_id)``, created on
  first use). The provider object holds nothing per session.
- Audit mode: ``load_messages=False`` stores every turn and loads nothing. With
  ``store_context_messages`` (and no ``store_context_from``) it stores the context of
  the agent's other context providers, not of its history providers: that is their
  stored history, loaded again every run, which the audit stored when it happened.
- Loaded history is attributed to this provider, so it is never stored twice.

Mapping of ``Message`` contents: ``text`` (annotations kept), ``text_reasoning``
(``protected_data`` is the reasoning's opaque data), ``data`` / ``uri`` media
(data URIs become attachments), ``function_call`` (``call_id``; a string
``arguments`` is kept as given) and ``function_result`` (``exception`` set is
``is_error``). Every field of a content these parts do not carry (the content's
own ``id``, ``status``, ``exception``, ``additional_properties``, ``name``, ...)
is kept beside the part and put back. Other contents (usage, approvals, hosted
tools) are kept as the framework serializes them and put back in place. An
assistant message with no content of ours (no contents, an empty text, only
usage) is stored with a placeholder part that no provider format sends
(``_common.placeholder``); any other such message has nothing to store and is
left out. ``message_id`` is our id (a message without one gets a UUID and reads
back with none, as given; the caller's messages are never changed);
``author_name`` is ``Message.name``; JSON-safe ``additional_properties`` are kept.

A provider compaction (``Compaction``) has no content type in the framework (its
OpenAI client drops the ``compaction`` items it receives): it is kept in the
message's ``additional_properties["chathistory_compaction"]`` and read back in place,
and the framework never sends it to a provider (a run leaves a message holding
nothing else out of the context, as the framework's own provider leaves out a message
with no contents).

Observed usage: a run's ``AgentResponse.usage_details`` (the framework's sum over
the run's model calls: ``input_token_count``, ``output_token_count``,
``cache_read_input_token_count``, ``cache_creation_input_token_count``) is recorded
on the run's last assistant message (``usage_of``), with the model of the response
it wraps where that names one.

Parity with the framework's ``InMemoryHistoryProvider`` (tested on every store
backend, saved in one batch or one at a time, and through agent runs): what
``get_messages`` returns is ``to_dict()``-equal to what it returns after its
session's JSON round trip, with two differences: non-assistant messages with
no content are left out, and a message whose ``message_id`` is already stored
is not stored again (the framework drops only a repeated tail).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, assert_never

import msgspec

from ..errors import Conflict, InvalidMessage, MissingDependency, NotFound
from ..model import (
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    KVStatus,
    Message,
    Part,
    Reasoning,
    ResultPart,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from ..model.codec import message_from_builtins
from ..provider import HistoryProvider as _Provider
from ..provider import Policy, from_history
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store
from ..stores.model import DEFAULT_TENANT
from ..stores.model import Session as StoreSession
from ._common import (
    COMPACTION_KEY,
    append_creating,
    data_url,
    ids_for,
    is_placeholder,
    json_safe,
    kept_compactions,
    media_part,
    or_empty,
    placeholder,
    resolved,
    storable,
    with_kept_compactions,
)

try:
    from agent_framework import AgentSession, Content, HistoryProvider, SessionContext
    from agent_framework import Message as AFMessage
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency("agent-framework-core", "agent-framework") from exc

__all__ = ["ChatHistoryAgentProvider", "from_agent_framework", "to_agent_framework",
           "usage_of"]

NS = "agent_framework"
_PENDING = "_pending"


# ---------------------------------------------------------------- conversion


def from_agent_framework(messages: Sequence[AFMessage], *, assign_ids: bool = False
                         ) -> list[Message]:
    """Our messages for Agent Framework messages (ones with nothing to store left out).
    ``assign_ids`` sets the new UUID on messages that had no ``message_id`` (by
    default the caller's messages are left as they are)."""
    out: list[Message] = []
    for i, (af, mid) in enumerate(zip(messages, ids_for(m.message_id for m in messages),
                                      strict=True)):
        parts: list[Part] = []
        kept: list[list[Any]] = []
        for k, content in enumerate(af.contents):
            path = f"$[{i}].contents[{k}]"
            part = _part(content, path)
            if part is None:
                kept.append([k, content.to_dict()])
            else:
                parts.append(_with_fields(part, content, path))
        meta: dict[str, Any] = {}
        if kept:
            meta["contents"] = json_safe(kept)
        props = json_safe(dict(af.additional_properties)) or {}
        compactions = props.pop(COMPACTION_KEY, None)
        if props:
            meta["additional_properties"] = props
        if af.message_id != mid and not (assign_ids and af.message_id is None):
            meta["message_id"] = af.message_id  # read back as given (None when it had none)
        try:
            parts = with_kept_compactions(parts, compactions, NS,
                                          f"$.additional_properties.{COMPACTION_KEY}", _no_form)
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        msg = Message(id=mid, role=str(af.role), name=af.author_name or None, parts=parts,
                      provider_metadata={NS: meta} if meta else {})
        try:
            if not storable(msg):
                if msg.role != "assistant":
                    continue  # nothing to store: provider formats refuse a placeholder here
                msg.parts = [*parts, placeholder(NS)]
            out.append(msg.validate())
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        if assign_ids and af.message_id is None:
            af.message_id = mid
    return out


def _no_form(part: Compaction) -> None:
    """The framework has no content for a compaction (see the module docstring)."""
    return None


def _with_fields(part: Part, content: Content, path: str) -> Part:
    """``part`` carrying the content's fields it does not rebuild (``id``, ``status``,
    ``additional_properties``, ...), so that the content comes back equal."""
    given = json_safe(content.to_dict()) or {}
    rebuilt = _content(part, path)
    plain = rebuilt.to_dict() if rebuilt is not None else {}
    fields = {k: v for k, v in given.items() if k not in plain or plain[k] != v}
    drop = [k for k in plain if k not in given]
    if not fields and not drop:
        return part
    meta = dict(part.provider_metadata.get(NS, {}))
    if fields:
        meta["fields"] = fields
    if drop:
        meta["drop"] = drop
    return msgspec.structs.replace(part, provider_metadata={**part.provider_metadata, NS: meta})


def _part(content: Content, path: str) -> Part | None:
    kind = content.type
    if kind == "text":
        notes = json_safe(content.annotations)
        return TextPart(text=content.text or "",
                        provider_metadata={NS: {"annotations": notes}} if notes else {})
    if kind == "text_reasoning" and (content.text or content.protected_data):
        return Reasoning(text=content.text or "", data=content.protected_data,
                         provider_metadata={NS: {"id": content.id}} if content.id else {})
    if kind in ("data", "uri") and content.uri:
        return _media(content.uri, content.media_type, path)
    if kind == "function_call" and content.call_id and content.name:
        raw = content.arguments
        meta = {"arguments": raw} if isinstance(raw, str) else {}
        return ToolCall(id=content.call_id, name=content.name, arguments=_arguments(raw),
                        provider_metadata={NS: meta} if meta else {})
    if kind == "function_result" and content.call_id:
        items = [_part(c, path + ".items") for c in content.items or []]
        result: str | list[ResultPart] = content.result if isinstance(content.result, str) else ""
        if any(not isinstance(p, TextPart) for p in items):
            result = [p for p in items if isinstance(p, ResultPart)]
        return ToolResult(call_id=content.call_id, content=result,
                          is_error=content.exception is not None)
    return None


def _media(uri: str, media_type: str | None, path: str) -> ImagePart | AudioPart | FilePart:
    kind = (media_type or "").split("/")[0]
    if not uri.startswith("data:"):
        return media_part(kind, url=uri, mime_type=media_type)
    mime, data = data_url(uri, path + ".uri")
    att = Attachment.from_bytes(data, mime_type=media_type or mime)
    return media_part(att.modality, attachment=att)



def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {}
    return dict(raw) if isinstance(raw, dict) else {}


def to_agent_framework(messages: Sequence[Message]) -> list[AFMessage]:
    """Agent Framework messages for ours (attachment bytes must be loaded)."""
    out: list[AFMessage] = []
    for i, msg in enumerate(messages):
        meta = msg.provider_metadata.get(NS, {})
        contents: list[Content] = []
        for j, part in enumerate(msg.parts):
            content = _content(part, f"$[{i}].parts[{j}]")
            if content is not None:
                contents.append(_fielded(content, part))
        for index, raw in meta.get("contents", []):
            contents.insert(index, Content.from_dict(raw))
        props = dict(meta.get("additional_properties", {}))
        compactions = kept_compactions(msg.parts, NS, _no_form)
        if compactions:
            props[COMPACTION_KEY] = compactions
        out.append(AFMessage(msg.role, contents, author_name=msg.name,
                             message_id=meta.get("message_id", msg.id),
                             additional_properties=props))
    return out


def _fielded(content: Content, part: Part) -> Content:
    meta = part.provider_metadata.get(NS, {})
    if "fields" not in meta and "drop" not in meta:
        return content
    data = content.to_dict()
    data.update(meta.get("fields", {}))
    for key in meta.get("drop", []):
        data.pop(key, None)
    return Content.from_dict(data)


def _content(part: Part, path: str) -> Content | None:
    meta = part.provider_metadata.get(NS, {})
    match part:
        case TextPart():
            return Content.from_text(part.text, annotations=meta.get("annotations"))
        case Reasoning():
            if is_placeholder(part, NS):
                return None
            return Content.from_text_reasoning(id=meta.get("id"), text=part.text or None,
                                               protected_data=part.data)
        case ImagePart() | AudioPart() | FilePart():
            att = part.attachment
            if att is None:
                return Content.from_uri(part.url or "", media_type=part.mime_type)
            if att.data is None:
                raise InvalidMessage("attachment bytes are not loaded (Store.resolve them)",
                                     path + ".attachment")
            return Content.from_data(att.data, att.mime_type)
        case ToolCall():
            return Content.from_function_call(part.id, part.name,
                                              arguments=meta.get("arguments", part.arguments))
        case ToolResult():
            result: Any = part.content
            if not isinstance(result, str):
                result = [c for c in (_content(p, path) for p in result) if c is not None]
            return Content.from_function_result(
                part.call_id, result=result, exception="error" if part.is_error else None)
        case Compaction():
            return None  # no content type: kept in the message's additional_properties
        case _:
            assert_never(part)


# ---------------------------------------------------------------- the provider


def usage_of(response: Any) -> Usage | None:
    """An ``AgentResponse``'s (or ``ChatResponse``'s) ``usage_details`` as a ``Usage``;
    None without one. ``input_token_count`` is taken as the whole prompt, as OpenTelemetry's
    ``gen_ai.usage.input_tokens`` is; one smaller than its cache reads and writes (a
    client that passed on Anthropic's uncached remainder) has them added."""
    details = getattr(response, "usage_details", None)
    if not details:
        return None
    def count(*keys: str) -> int:
        for key in keys:
            value = details.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0
    read = count("cache_read_input_token_count", "anthropic.cache_read_input_tokens",
                 "openai.cached_input_tokens")
    write = count("cache_creation_input_token_count", "anthropic.cache_creation_input_tokens")
    prompt = count("input_token_count")
    if prompt < read + write:
        prompt += read + write
    raw = getattr(response, "raw_representation", None)
    model = getattr(raw, "model", None) or getattr(raw, "model_id", None)
    return Usage(input_tokens=prompt, output_tokens=count("output_token_count"),
                 cache_read_tokens=read, cache_write_tokens=write,
                 model=model if isinstance(model, str) else None).check("$.usage_details")


class ChatHistoryAgentProvider(HistoryProvider):
    """An Agent Framework history provider over chathistory (see the module docstring).

    ``store``: any store (sync or async), or None to keep the messages in the
    framework's session state. ``policy`` as for ``chathistory.HistoryProvider``.
    """

    DEFAULT_SOURCE_ID = "chathistory"

    def __init__(self, store: Store | AsyncStoreAdapter | None = None, *,
                 source_id: str | None = None, policy: Policy = None,
                 tenant: str = DEFAULT_TENANT, load_messages: bool = True,
                 store_inputs: bool = True, store_outputs: bool = True,
                 store_context_messages: bool = False,
                 store_context_from: set[str] | None = None,
                 validate_tool_results: bool = True) -> None:
        super().__init__(source_id or self.DEFAULT_SOURCE_ID, load_messages=load_messages,
                         store_inputs=store_inputs, store_context_messages=store_context_messages,
                         store_context_from=store_context_from, store_outputs=store_outputs)
        self.history = _Provider(store, policy=policy, key=self.source_id, tenant=tenant,
                                 load_messages=load_messages,
                                 validate_tool_results=validate_tool_results)
        self.store: Store | None = self.history.store
        self.tenant = tenant

    # ------------------------------------------------------------------ state

    def _session(self, session_id: str, state: dict[str, Any]) -> StoreSession:
        """Our session for the framework's: the state's messages, or the store's session
        with the turn's bookkeeping from the framework state."""
        key = self.source_id
        if self.store is None:
            return StoreSession(id=session_id, tenant=self.tenant, state={key: dict(state)})
        try:
            found = self.store.get_session(session_id, tenant=self.tenant)
        except NotFound:
            try:
                found = self.store.create_session(session_id, tenant=self.tenant)
            except Conflict:
                found = self.store.get_session(session_id, tenant=self.tenant)
        if _PENDING in state:
            ours = found.state.get(key)
            found.state = {**found.state, key: {**(ours if isinstance(ours, dict) else {}),
                                                _PENDING: state[_PENDING]}}
        return found

    def _keep(self, ours: StoreSession, state: dict[str, Any]) -> None:
        kept = ours.state.get(self.source_id)
        kept = kept if isinstance(kept, dict) else {}
        state.clear()
        if self.store is None:
            state.update(kept)
        elif _PENDING in kept:
            state[_PENDING] = kept[_PENDING]

    # ------------------------------------------------------------------ the run

    async def before_run(self, *, agent: Any, session: AgentSession, context: SessionContext,
                         state: dict[str, Any]) -> None:
        """Add the history the policy selects to the context."""
        ours = await self.history.dispatched(self._session, session.session_id, state)
        new = from_agent_framework(context.input_messages)
        prompt = await self.history.abefore_run(ours, new)
        self._keep(ours, state)
        loaded = [m for m in prompt if from_history(m)]
        if self.store is not None:
            loaded = await self.history.dispatched(resolved, self.store, loaded, self.tenant)
        # As the framework's own HistoryProvider does, a message with no contents (a
        # compaction alone) is not added: there is nothing in it to send.
        context.extend_messages(self, [m for m in to_agent_framework(loaded) if m.contents])

    async def after_run(self, *, agent: Any, session: AgentSession, context: SessionContext,
                        state: dict[str, Any]) -> None:
        """Store the turn (nothing when the run has no response)."""
        ours = await self.history.dispatched(self._session, session.session_id, state)
        response = context.response
        if response is None:
            await self.history.aafter_run(ours, [], [], complete=False)
        else:
            request = self._context_to_store(agent, context)
            if self.store_inputs:
                request.extend(context.input_messages)
            outputs = list(response.messages) if self.store_outputs else []
            await self.history.aafter_run(ours, from_agent_framework(request),
                                          from_agent_framework(outputs),
                                          usage=usage_of(response))
        self._keep(ours, state)

    def _context_to_store(self, agent: Any, context: SessionContext) -> list[AFMessage]:
        """The context messages to store: with ``store_context_from``, those of the
        sources it names; otherwise those of every other provider but the agent's
        history providers, whose context is their stored history, loaded again every
        run (this provider stored it in the run it happened)."""
        if not self.store_context_messages or self.store_context_from is not None:
            return list(self._get_context_messages_to_store(context))
        history = {provider.source_id for provider in getattr(agent, "context_providers", ())
                   if isinstance(provider, HistoryProvider)}
        return context.get_messages(exclude_sources={self.source_id, *history})

    # ------------------------------------------------------------------ direct access

    def _stored(self, session_id: str | None, state: dict[str, Any] | None) -> list[Message]:
        if self.store is None:
            saved = (state or {}).get("messages", [])
            messages = [message_from_builtins(d) for d in saved]
            return [m for m in messages if m.kv_status == KVStatus.LOADED]
        if session_id is None:
            raise ValueError("a session id is needed to read a store")
        store, tenant = self.store, self.tenant
        found = or_empty(lambda: store.range(session_id, include_marked=False, tenant=tenant))
        return resolved(store, found, tenant)

    async def get_messages(self, session_id: str | None, *,
                           state: dict[str, Any] | None = None, **kwargs: Any) -> list[AFMessage]:
        """Every live stored message of the session."""
        return to_agent_framework(await self.history.dispatched(self._stored, session_id, state))

    async def save_messages(self, session_id: str | None, messages: Sequence[AFMessage], *,
                            state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Store messages (idempotent by id), outside a run."""
        ours = from_agent_framework(messages)
        if self.store is None:
            if state is None:
                return
            saved = list(state.get("messages", []))
            known = {d.get("id") for d in saved}
            saved.extend(m.to_dict() for m in ours if m.id not in known)
            state["messages"] = saved
            return
        if session_id is None:
            raise ValueError("a session id is needed to write to a store")
        await self.history.dispatched(append_creating, self.store, session_id, ours,
                                tenant=self.tenant)
