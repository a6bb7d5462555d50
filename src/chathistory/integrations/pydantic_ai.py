"""pydantic-ai: conversion between chathistory messages and ``list[ModelMessage]``.

``to_pydantic_ai(messages)`` is usable as ``Agent.run(..., message_history=...)``;
``from_pydantic_ai(result.all_messages())`` gives messages to store. Mapping:

- A ``ModelRequest`` becomes one message per part: ``SystemPromptPart`` ->
  ``system``, ``UserPromptPart`` -> ``user`` (text, ``ImageUrl`` / ``AudioUrl`` /
  ``DocumentUrl`` / ``VideoUrl`` as URL media, ``BinaryContent`` as an
  attachment; other items of its content list, such as a ``CachePoint``, are kept
  as given and put back in place), ``ToolReturnPart`` -> ``tool`` (any ``outcome``
  but ``success`` is ``is_error``; non-string content is sent as its JSON text and
  kept as given), ``RetryFeedbackPart`` -> ``user`` text. A legacy
  ``RetryPromptPart`` is first read the way pydantic-ai reads it: a tool-bound one
  is a ``ToolReturnPart`` with ``outcome="retried"``, any other a
  ``RetryFeedbackPart``. Messages of one request share a group key, so they go back
  as one request.
- A ``ModelResponse`` becomes one ``assistant`` message: ``TextPart``,
  ``ThinkingPart`` (a ``Reasoning`` with its ``signature``) and ``ToolCallPart``
  (a JSON-string ``args`` is kept as given) in order. A response with no content
  of ours (no parts, an empty ``TextPart("")``, only native tool parts) is stored
  with a placeholder part (``_common.placeholder``) that no provider format sends.
- A provider's ``CompactionPart`` in a response is a ``Compaction`` part: OpenAI's
  (``provider_details`` the Responses ``compaction`` item, as pydantic-ai's OpenAI
  model keeps it) and Anthropic's (``content`` the summary, ``provider_details`` its
  ``encrypted_content`` / ``signature``). Ours go back as the part pydantic-ai's own
  models build from that item or block, which they send to the provider that wrote
  it. A compaction of another provider, or one that part would not give back whole
  (Anthropic's ``tool_changes``, say), is kept in the response's
  ``metadata["chathistory_compaction"]``, which pydantic-ai never sends; a
  compaction outside an assistant message has no place and raises
  ``InvalidMessage``. A ``CompactionPart`` of another provider, and a request's
  summary (``SummarizingCompaction``), are kept as given.
- A response's ``usage`` (with its model and provider names) is also the message's
  ``Usage`` (``usage_of``): the observation chathistory reads; it is not sent back.
- Every other field (timestamps, ids, ``provider_name`` / ``provider_details``,
  usage, model name, instructions, run ids) is kept in
  ``provider_metadata["pydantic_ai"]``, and parts with no chathistory equivalent
  (native tool calls, files, empty prompts, ...) are kept as
  pydantic-ai serializes them and put back in place, so
  ``to_pydantic_ai(from_pydantic_ai(h))`` equals pydantic-ai's own JSON round trip
  of ``h``.
- A request with nothing to store as a user, system or tool message (no parts,
  only an empty prompt) rides on the next message of the same call (or the
  previous one, at the end), as given. Alone in a call it has nothing to ride on
  and is left out: a message needs content, and a placeholder cannot stand in a
  non-assistant role (provider formats refuse reasoning there).
- Messages that did not come from pydantic-ai: ``system`` / ``developer`` ->
  ``SystemPromptPart``; ``user`` -> ``UserPromptPart``; ``tool`` -> ``ToolReturnPart``
  (tool name from the call); ``assistant`` -> ``ModelResponse``; reasoning with a
  signature is attributed to the provider that signed it. Other roles raise
  ``InvalidMessage``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, assert_never

import msgspec

from ..errors import InvalidMessage, MissingDependency
from ..model import (
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    MediaPart,
    Message,
    Part,
    Reasoning,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    new_id,
)
from ._common import (
    COMPACTION_KEY,
    b64decode,
    compaction_of,
    is_placeholder,
    kept_compactions,
    media_part,
    native_compaction,
    placeholder,
    storable,
    with_kept_compactions,
)

try:
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency("pydantic-ai-slim", "pydantic-ai") from exc

__all__ = ["from_pydantic_ai", "to_pydantic_ai", "usage_of"]

NS = "pydantic_ai"
JSON = dict[str, Any]
_URL_KINDS = {"image-url": "image", "audio-url": "audio", "document-url": "file",
              "video-url": "file"}
_REQUEST_ROLES = {"system-prompt": "system", "user-prompt": "user", "tool-return": "tool",
                  "retry-feedback": "user"}
_SIGNERS = {"openai_responses": "openai", "gemini": "google-gla", "anthropic": "anthropic"}
_OPENAI_ITEM = ("type", "id", "encrypted_content", "created_by")  # ResponseCompactionItem
_ANTHROPIC_DETAILS = ("encrypted_content", "signature")  # what its Anthropic model sends back


def _rest(obj: JSON, *drop: str) -> JSON:
    return {k: v for k, v in obj.items() if v is not None and k not in drop}


# ---------------------------------------------------------------- pydantic-ai -> ours


def from_pydantic_ai(messages: Sequence[ModelMessage]) -> list[Message]:
    """Our messages for a pydantic-ai message history."""
    # One trip through pydantic-ai's own codec: JSON-shaped dicts, legacy parts translated.
    dumped: list[JSON] = ModelMessagesTypeAdapter.dump_python(
        ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(
            list(messages))), mode="json")
    out: list[Message] = []
    waiting: list[JSON] = []  # requests with nothing to store, for the next message
    for i, raw in enumerate(dumped):
        try:
            made = _from_request(raw) if raw["kind"] == "request" else [_from_response(raw)]
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        if not made:
            waiting.append(raw)
            continue
        if waiting:
            made[0].provider_metadata[NS]["before"] = waiting
            waiting = []
        out.extend(made)
    if waiting and out:
        out[-1].provider_metadata[NS]["after"] = waiting
    return out


def _from_request(raw: JSON) -> list[Message]:
    group = new_id()
    out: list[Message] = []
    extra: list[list[Any]] = []
    for k, part in enumerate(raw["parts"]):
        kind = part.get("part_kind")
        built = _request_part(part, f"$.parts[{k}]") if kind in _REQUEST_ROLES else None
        message = None
        if built is not None:
            role, parts, rest = built
            message = Message(id=new_id(), role=role, parts=parts,
                              provider_metadata={NS: {"group": group, "part": rest}})
        if message is None or not storable(message):
            extra.append([k, part])  # kept as given, put back in place
            continue
        out.append(message)
    if out:
        first = out[0].provider_metadata[NS]
        first["request"] = _rest(raw, "parts")
        if extra:
            first["extra"] = extra
    return out


def _request_part(part: JSON, path: str) -> tuple[str, list[Part], JSON] | None:
    kind = part["part_kind"]
    content = part.get("content")
    if kind == "tool-return":
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        result = ToolResult(call_id=part["tool_call_id"], content=text, name=part["tool_name"],
                            is_error=part.get("outcome", "success") != "success")
        keep = ("tool_name", "tool_call_id", "part_kind") + (
            ("content",) if isinstance(content, str) else ())
        return "tool", [result], _rest(part, *keep)
    if kind == "user-prompt" and not isinstance(content, str):
        parts: list[Part] = []
        items: list[list[Any]] = []  # cache points, uploaded files...: kept in place
        for k, item in enumerate(content or []):
            found = _user_item(item, f"{path}.content[{k}]")
            if found is None:
                items.append([k, item])
            else:
                parts.append(found)
        rest = _rest(part, "content", "part_kind")
        return "user", parts, rest | ({"items": items} if items else {})
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    keep = (("content",) if isinstance(content, str) else ()) + (
        () if kind == "retry-feedback" else ("part_kind",))
    return _REQUEST_ROLES[kind], [TextPart(text=text)], _rest(part, *keep) | (
        {"str": True} if kind == "user-prompt" else {})


def _user_item(item: Any, path: str) -> Part | None:
    if isinstance(item, str):
        return TextPart(text=item)
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind == "binary":
        # pydantic writes bytes in the URL-safe alphabet: a decoder of the standard one
        # alone would drop its '-' and '_' and change the bytes in silence
        data = b64decode(item["data"], path + ".data")
        att = Attachment.from_bytes(data, mime_type=item["media_type"])
        return media_part(att.modality, attachment=att,
                           provider_metadata={NS: _rest(item, "data", "media_type")})
    if kind in _URL_KINDS:
        return media_part(_URL_KINDS[kind], url=item["url"], mime_type=item.get("media_type"),
                           provider_metadata={NS: _rest(item, "url")})
    return None


def _from_response(raw: JSON) -> Message:
    parts: list[Part] = []
    extra: list[list[Any]] = []
    metadata = dict(raw.get("metadata") or {})
    compactions = metadata.pop(COMPACTION_KEY, None)
    for k, part in enumerate(raw["parts"]):
        kind = part.get("part_kind")
        found = _compaction(part) if kind == "compaction" else None
        if found is not None:
            parts.append(found)
            continue
        if kind == "text":
            parts.append(TextPart(text=part["content"],
                                  provider_metadata=_pm(_rest(part, "content", "part_kind"))))
        elif kind == "thinking":
            parts.append(Reasoning(text=part["content"], signature=part.get("signature"),
                                   provider_metadata=_pm(_rest(part, "content", "signature",
                                                               "part_kind"))))
        elif kind == "tool-call":
            args = part.get("args")
            keep = ("tool_name", "tool_call_id", "part_kind") + (
                ("args",) if isinstance(args, dict) else ())
            rest = _rest(part, *keep) | ({"args": None} if args is None else {})
            parts.append(ToolCall(id=part["tool_call_id"], name=part["tool_name"],
                                  arguments=_arguments(args), provider_metadata=_pm(rest)))
        else:
            extra.append([k, part])
    parts = with_kept_compactions(parts, compactions, NS, f"$.metadata.{COMPACTION_KEY}",
                                  _carried)
    meta: JSON = {"response": _rest({**raw, "metadata": metadata or None}, "parts")}
    if extra:
        meta["extra"] = extra
    message = Message(id=new_id(), role="assistant", parts=parts, provider_metadata={NS: meta},
                      usage=usage_of(raw))
    if not storable(message):
        message.parts = [*parts, placeholder(NS)]
    return message.validate()


def usage_of(response: JSON) -> Usage | None:
    """A ``ModelResponse``'s ``usage`` (as pydantic-ai dumps it) as a ``Usage``, with
    its ``model_name`` and ``provider_name``; None when it measured nothing.
    pydantic-ai's ``input_tokens`` already includes the cache reads and writes, and
    ``cache_write_1h_tokens`` is part of ``cache_write_tokens``."""
    usage = response.get("usage") or {}
    counts = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    if not any(usage.get(k) for k in counts):
        return None
    write: int = usage.get("cache_write_tokens") or 0
    one_hour: int = usage.get("cache_write_1h_tokens") or 0
    split = one_hour > 0
    model, provider = response.get("model_name"), response.get("provider_name")
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_tokens") or 0, cache_write_tokens=write,
        cache_write_5m_tokens=write - one_hour if split else None,
        cache_write_1h_tokens=one_hour if split else None,
        model=model if isinstance(model, str) else None,
        provider=provider if isinstance(provider, str) else None).check("$.usage")


def _compaction(part: JSON) -> Compaction | None:
    """Our part for a provider's ``CompactionPart``, the fields of it that ours would
    not rebuild kept beside it; None for one of another provider."""
    details = part.get("provider_details") or {}
    if details.get("type") == "compaction":  # ResponseCompactionItem.model_dump()
        native = {k: details[k] for k in _OPENAI_ITEM if details.get(k) is not None}
        if "id" not in native and part.get("id") is not None:
            native["id"] = part["id"]
    elif part.get("provider_name") == "anthropic":
        native = {"type": "compaction", "content": part.get("content"),
                  **{k: details[k] for k in _ANTHROPIC_DETAILS if details.get(k) is not None}}
    else:
        return None
    found = compaction_of(native)
    if found is None:
        return None
    rebuilt = _compaction_part(found) or {}
    rest = {k: v for k, v in part.items() if rebuilt.get(k) != v}
    return msgspec.structs.replace(found, provider_metadata={**found.provider_metadata,
                                                              **_pm(rest)})


def _compaction_part(part: Compaction) -> JSON | None:
    """The ``CompactionPart`` pydantic-ai's own model builds from the provider's item or
    block for ``part`` (``map_compaction_item`` for OpenAI's, the ``BetaCompactionBlock``
    case for Anthropic's); None for a compaction of another provider."""
    native = native_compaction(part)
    if native is None:
        return None
    built: JSON = {"part_kind": "compaction", "metadata": None}
    if part.provider == "openai_responses":
        return {**built, "content": None, "id": native.get("id"), "provider_name": "openai",
                "provider_details": {"id": None, "created_by": None, **native}}
    details = {k: native[k] for k in _ANTHROPIC_DETAILS if k in native}
    return {**built, "content": native.get("content"), "id": None, "provider_name": "anthropic",
            "provider_details": details or None}


def _carried(part: Compaction) -> Compaction | None:
    built = _compaction_part(part)
    return None if built is None else _compaction(built)


def _pm(rest: JSON) -> JSON:
    return {NS: rest} if rest else {}


def _arguments(args: Any) -> dict[str, Any]:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return {}
    return dict(args) if isinstance(args, dict) else {}


# ---------------------------------------------------------------- ours -> pydantic-ai


def to_pydantic_ai(messages: Sequence[Message]) -> list[ModelMessage]:
    """A pydantic-ai message history for our messages (attachment bytes must be loaded)."""
    out: list[JSON] = []
    names = {p.id: p.name for m in messages for p in m.parts if isinstance(p, ToolCall)}
    group: str | None = None
    joinable = False  # whether a request message may join the request out[-1]
    extras: dict[int, list[list[Any]]] = {}
    for i, msg in enumerate(messages):
        meta = msg.provider_metadata.get(NS, {})
        path = f"$[{i}]"
        if meta.get("before"):  # requests kept as given: nothing joins them
            out.extend(meta["before"])
            joinable = False
        if msg.role == "assistant":
            out.append(_response(msg, meta, path))
            joinable = False
        else:
            part = _request_part_of(msg, meta, names, path)
            mine = meta.get("group")
            if joinable and (mine is None or mine == group):
                out[-1]["parts"].append(part)
            else:
                out.append({**meta.get("request", {}), "kind": "request", "parts": [part]})
            group, joinable = mine, True
            if "extra" in meta:
                extras.setdefault(len(out) - 1, []).extend(meta["extra"])
        if meta.get("after"):
            out.extend(meta["after"])
            joinable = False
    for at, found in extras.items():  # parts kept as given go back where they were
        for index, raw in sorted(found, key=lambda e: int(e[0])):
            out[at]["parts"].insert(index, raw)
    result: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(msgspec.json.encode(out))
    return result


def _request_part_of(msg: Message, meta: JSON, names: dict[str, str], path: str) -> JSON:
    for j, part in enumerate(msg.parts):
        if isinstance(part, Compaction):
            raise InvalidMessage("pydantic-ai keeps a provider's compaction in a model "
                                 "response: only an assistant message can carry one",
                                 f"{path}.parts[{j}]")
    rest: JSON = dict(meta.get("part", {}))
    stamp = msg.created_at.isoformat()
    if msg.role in ("system", "developer"):
        return {"timestamp": stamp, **rest, "part_kind": rest.get("part_kind", "system-prompt"),
                "content": rest.get("content", msg.text)}
    if msg.role == "tool" and msg.tool_results:
        result = msg.tool_results[0]
        content = rest.pop("content", result.text)
        outcome = rest.pop("outcome", "failed" if result.is_error else "success")
        return {"timestamp": stamp, **rest, "part_kind": "tool-return", "content": content,
                "tool_call_id": result.call_id, "outcome": outcome,
                "tool_name": result.name or names.get(result.call_id, "unknown_tool")}
    if msg.role == "user":
        if rest.get("part_kind") == "retry-feedback":
            return {**rest, "content": rest.get("content", msg.text)}
        items = rest.pop("items", [])
        single = rest.pop("str", None) or (not meta and len(msg.parts) == 1
                                           and isinstance(msg.parts[0], TextPart))
        prompt: Any = msg.text if single else [
            _user_content(p, f"{path}.parts[{j}]") for j, p in enumerate(msg.parts)]
        for index, raw in sorted(items, key=lambda e: int(e[0])):
            prompt.insert(index, raw)
        return {"timestamp": stamp, **rest, "part_kind": "user-prompt", "content": prompt}
    raise InvalidMessage(f"pydantic-ai has no place for role {msg.role!r}", path + ".role")


def _user_content(part: Part, path: str) -> Any:
    rest = dict(part.provider_metadata.get(NS, {}))
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, MediaPart):
        att = part.attachment
        if att is None:
            kind = rest.pop("kind", {ImagePart: "image-url", AudioPart: "audio-url"}.get(
                type(part), "document-url"))
            return {**rest, "kind": kind, "url": part.url,
                    **({"media_type": part.mime_type} if part.mime_type else {})}
        if att.data is None:
            raise InvalidMessage("attachment bytes are not loaded (Store.resolve them)",
                                 path + ".attachment")
        return {**rest, "kind": "binary", "media_type": att.mime_type,
                "data": base64.urlsafe_b64encode(att.data).decode()}  # as pydantic writes it
    raise InvalidMessage(f"a user prompt cannot carry a {type(part).__name__}", path)


def _response(msg: Message, meta: JSON, path: str) -> JSON:
    parts: list[JSON] = []
    for j, part in enumerate(msg.parts):
        rest = dict(part.provider_metadata.get(NS, {}))
        match part:
            case TextPart():
                parts.append({**rest, "part_kind": "text", "content": part.text})
            case Reasoning():
                if is_placeholder(part, NS):
                    continue
                if not meta and part.signature is not None:
                    rest["provider_name"] = next((v for k, v in _SIGNERS.items()
                                                  if k in part.provider_metadata), "anthropic")
                parts.append({**rest, "part_kind": "thinking", "content": part.text,
                              "signature": part.signature})
            case ToolCall():
                parts.append({"args": part.arguments, **rest, "part_kind": "tool-call",
                              "tool_name": part.name, "tool_call_id": part.id})
            case Compaction():
                built = _compaction_part(part)  # None: kept in the response's metadata
                if built is not None:
                    parts.append({**built, **rest})
            case ImagePart() | AudioPart() | FilePart() | ToolResult():
                raise InvalidMessage(f"a model response cannot carry a {type(part).__name__}",
                                     f"{path}.parts[{j}]")
            case _:
                assert_never(part)
    for index, raw in meta.get("extra", []):
        parts.insert(index, raw)
    response = dict(meta.get("response", {"timestamp": msg.created_at.isoformat()}))
    compactions = kept_compactions(msg.parts, NS, _carried)
    if compactions:
        response["metadata"] = {**(response.get("metadata") or {}), COMPACTION_KEY: compactions}
    return {**response, "kind": "response", "parts": parts}
