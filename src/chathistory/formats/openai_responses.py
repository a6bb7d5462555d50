"""OpenAI Responses API: the ``input`` items of ``client.responses.create``.

Mapping, both directions:

- ``system``, ``developer`` and ``user`` messages are ``message`` items with
  ``input_text``, ``input_image``, ``input_file`` (data URL, ``file_url`` or
  ``file_id``) and ``input_audio`` (wav/mp3); a single text part is sent as a string.
- An assistant message is a run of ``reasoning``, ``message`` and ``function_call``
  items in part order. Text from an output message keeps the item's ``id``,
  ``status``, ``phase`` and ``annotations`` in ``provider_metadata["openai_responses"]``
  and goes back as that item (parts of one id share it); text without an id goes
  back as ``{"role": "assistant", "content": "..."}``.
- ``function_call``: ``call_id`` is ``ToolCall.id``; the item ``id`` (``fc_...``),
  ``status`` and ``namespace`` are kept in provider metadata and sent back; the
  ``arguments`` string goes back byte for byte, JSON object or not
  (``ToolCall.raw_arguments``, as for Chat Completions).
- Each ``ToolResult`` is a ``function_call_output`` item (``output`` is a string or
  a list of input_text / input_image / input_file); ``is_error`` has no field and is
  not sent. Results come before the message's other parts.
- ``reasoning`` items: ``Reasoning.data`` is ``encrypted_content``, ``Reasoning.text``
  the summary texts joined by blank lines; the item ``id`` (and the summary list when
  it has several entries, and any ``content``) is kept and sent back. Reasoning not
  decoded from this API (no item id) cannot be replayed and is not sent.
- A ``compaction`` item (``/responses/compact`` or automatic compaction) is a
  ``Compaction`` part with ``provider`` ``openai_responses``, ``data`` its
  ``encrypted_content``, the item ``id`` and ``created_by`` kept in provider
  metadata; it is decoded into an assistant message of its own and sent back as the
  same item from a message of any role. A compaction written by another provider is
  not sent (OpenAI cannot read it).
- Decoding groups consecutive assistant-side items (reasoning, assistant messages,
  function calls) into one assistant message, and each ``function_call_output``
  into one ``tool`` message. ``id`` / ``status`` on user-side messages are API
  bookkeeping and are not kept. ``Message.name`` has no field and is not sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from ..errors import InvalidMessage
from ..model import (
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    Message,
    Part,
    ProviderRole,
    Reasoning,
    ResultPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)
from ._common import (
    JSON,
    Options,
    Resolver,
    RoleMap,
    arguments_json,
    canonical_role,
    check_keys,
    decode_call,
    expect_dict,
    expect_list,
    expect_str,
    message,
    meta,
    reasoning_owner,
    with_meta,
)
from ._openai import decode_input_part, encode_input_media
from .cache_fields import check_cache_plan

if TYPE_CHECKING:
    from ..cache import CachePlan

__all__ = ["from_openai_responses", "to_openai_responses"]

NS = "openai_responses"

# ---------------------------------------------------------------- encode


def to_openai_responses(
    messages: Sequence[Message],
    *,
    resolver: Resolver | None = None,
    role_map: RoleMap | None = None,
    drop_unsupported: bool = False,
    cache_plan: CachePlan | None = None,
) -> list[JSON]:
    """The ``input`` item list for the Responses API.

    Raises ``InvalidMessage`` naming the path for an unknown role, a stored attachment
    without ``resolver``, or a part the API cannot carry (media in an assistant or
    system message, audio other than wav/mp3 bytes) unless ``drop_unsupported``.
    ``cache_plan`` (from ``chathistory.cache.plan_cache``) only checks that the plan
    is OpenAI's and made for ``messages`` (else ``InvalidMessage`` at ``$.cache_plan``);
    its ``prompt_cache_key`` is a request field, which ``openai_responses_request`` adds.
    """
    if cache_plan is not None:
        check_cache_plan(cache_plan, messages, "openai")
    opts = Options(resolver, role_map, drop_unsupported)
    out: list[JSON] = []
    for i, msg in enumerate(messages):
        role = canonical_role(msg.role, i, role_map)
        path = f"$[{i}]"
        if role is Role.ASSISTANT:
            out.extend(_encode_assistant(msg, path, opts))
        else:
            out.extend(_encode_input(msg, role, path, opts))
    return out


def _encode_input(msg: Message, role: ProviderRole, path: str, opts: Options) -> list[JSON]:
    items: list[JSON] = []
    content: list[JSON] = []
    rest_role = Role.USER if role is Role.TOOL else role
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        match part:
            case TextPart():
                if part.text:
                    content.append({"type": "input_text", "text": part.text})
            case ImagePart() | AudioPart() | FilePart():
                if rest_role is not Role.USER:
                    opts.unsupported(f"a {rest_role.value} message cannot carry media", ppath)
                    continue
                encoded = encode_input_media(part, ppath, opts)
                if encoded is not None:
                    content.append(encoded)
            case ToolResult():
                if role not in (Role.TOOL, Role.USER):
                    raise InvalidMessage("tool results belong in a tool or user message", ppath)
                items.append(_encode_result(part, ppath, opts))
            case ToolCall() | Reasoning():
                raise InvalidMessage("only assistant messages carry tool calls and reasoning",
                                     ppath)
            case Compaction():
                if part.provider == NS:
                    items.append(_encode_compaction(part))
            case _:
                assert_never(part)
    if content:
        text_only = len(content) == 1 and content[0]["type"] == "input_text"
        items.append({"type": "message", "role": rest_role.value,
                      "content": content[0]["text"] if text_only else content})
    return items


def _encode_assistant(msg: Message, path: str, opts: Options) -> list[JSON]:
    items: list[JSON] = []
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        match part:
            case TextPart():
                if part.text:
                    _encode_output_text(part, items)
            case ToolCall():
                info = meta(part, NS)
                call: JSON = {"type": "function_call", "call_id": part.id, "name": part.name,
                              "arguments": arguments_json(part, NS)}
                call.update({k: info[k] for k in ("id", "status", "namespace") if k in info})
                items.append(call)
            case Reasoning():
                if reasoning_owner(part) == NS and "id" in meta(part, NS):
                    items.append(_encode_reasoning(part))
            case ImagePart() | AudioPart() | FilePart():
                opts.unsupported("an assistant message cannot carry media", ppath)
            case ToolResult():
                raise InvalidMessage("tool results belong in a tool or user message", ppath)
            case Compaction():
                if part.provider == NS:
                    items.append(_encode_compaction(part))
            case _:
                assert_never(part)
    return items


def _encode_compaction(part: Compaction) -> JSON:
    info = meta(part, NS)
    item: JSON = {"type": "compaction"}
    if "id" in info:
        item["id"] = info["id"]
    item["encrypted_content"] = part.data or ""
    if "created_by" in info:
        item["created_by"] = info["created_by"]
    return item


def _encode_output_text(part: TextPart, items: list[JSON]) -> None:
    info = meta(part, NS)
    item_id = info.get("id")
    if item_id is None:
        easy: JSON = {"type": "message", "role": "assistant", "content": part.text}
        if "phase" in info:
            easy["phase"] = info["phase"]
        items.append(easy)
        return
    block: JSON = (
        {"type": "refusal", "refusal": part.text} if info.get("refusal")
        else {"type": "output_text", "text": part.text, "annotations": info.get("annotations", [])}
    )
    last = items[-1] if items else None
    if last is not None and last.get("type") == "message" and last.get("id") == item_id:
        last["content"].append(block)
        return
    item: JSON = {"type": "message", "role": "assistant", "id": item_id,
                  "status": info.get("status", "completed"), "content": [block]}
    if "phase" in info:
        item["phase"] = info["phase"]
    items.append(item)


def _encode_reasoning(part: Reasoning) -> JSON:
    info = meta(part, NS)
    summary = info.get("summary")
    if summary is None:
        summary = [{"type": "summary_text", "text": part.text}] if part.text else []
    item: JSON = {"type": "reasoning", "id": info["id"], "summary": summary}
    if "content" in info:
        item["content"] = info["content"]
    if part.data is not None:
        item["encrypted_content"] = part.data
    return item


def _encode_result(result: ToolResult, path: str, opts: Options) -> JSON:
    output: str | list[JSON]
    if isinstance(result.content, str):
        output = result.content
    else:
        output = []
        for k, item in enumerate(result.content):
            kpath = f"{path}.content[{k}]"
            match item:
                case TextPart():
                    output.append({"type": "input_text", "text": item.text})
                case ImagePart() | FilePart():
                    encoded = encode_input_media(item, kpath, opts)
                    if encoded is not None:
                        output.append(encoded)
                case AudioPart():
                    opts.unsupported("a function_call_output cannot carry audio", kpath)
                case _:
                    assert_never(item)
    item_out: JSON = {"type": "function_call_output", "call_id": result.call_id, "output": output}
    if "id" in meta(result, NS):
        item_out["id"] = meta(result, NS)["id"]
    return item_out


# ---------------------------------------------------------------- decode

_KNOWN = {
    "message": frozenset({"type", "role", "content", "id", "status", "phase"}),
    "function_call": frozenset({"type", "call_id", "name", "arguments", "id", "status",
                                "namespace"}),
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status", "name"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
    "compaction": frozenset({"type", "id", "encrypted_content", "created_by"}),
}


def from_openai_responses(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Messages from Responses ``input`` items (or ``response.output`` items as dicts).

    Raises ``InvalidMessage`` naming the path for an unsupported item type, content
    part or field (null and empty fields are ignored).
    """
    out: list[Message] = []
    pending: list[Part] = []  # the assistant message being gathered
    pending_path = "$"
    names: dict[str, str] = {}

    def flush() -> None:
        if pending:
            out.append(message("assistant", list(pending), pending_path))
            pending.clear()

    for i, raw in enumerate(items):
        path = f"$[{i}]"
        item = expect_dict(raw, path)
        kind = item.get("type", "message")
        if kind not in _KNOWN:
            raise InvalidMessage(f"unsupported item type {kind!r}", path + ".type")
        check_keys(item, _KNOWN[kind], path)
        if kind == "message" and item.get("role") != "assistant":
            flush()
            role = expect_str(item.get("role"), path + ".role")
            if role not in ("user", "system", "developer"):
                raise InvalidMessage(f"unsupported role {role!r}", path + ".role")
            out.append(message(role, _decode_content(item.get("content"), path), path))
            continue
        if kind == "compaction":  # a message of its own: a window can start at it
            flush()
            out.append(message("assistant", [_decode_compaction(item, path)], path))
            continue
        if kind == "function_call_output":
            flush()
            call_id = expect_str(item.get("call_id"), path + ".call_id")
            result = ToolResult(call_id=call_id, content=_decode_output(item.get("output"), path),
                                name=item.get("name") or names.get(call_id),
                                provider_metadata=with_meta(NS, id=item.get("id")))
            out.append(message("tool", [result], path))
            continue
        if not pending:
            pending_path = path
        if kind == "message":
            pending.extend(_decode_output_message(item, path))
        elif kind == "function_call":
            call = _decode_call(item, path)
            names[call.id] = call.name
            pending.append(call)
        else:
            pending.append(_decode_reasoning(item, path))
    flush()
    return out


def _decode_output_message(item: Mapping[str, Any], path: str) -> list[Part]:
    content = item.get("content")
    phase = item.get("phase")
    if isinstance(content, str):
        return [TextPart(text=content, provider_metadata=with_meta(NS, phase=phase))]
    status = item.get("status")
    parts: list[Part] = []
    for k, raw in enumerate(expect_list(content, path + ".content")):
        kpath = f"{path}.content[{k}]"
        block = expect_dict(raw, kpath)
        check_keys(block, {"type", "text", "refusal", "annotations", "logprobs"}, kpath)
        refusal = block.get("type") == "refusal"
        if block.get("type") not in ("output_text", "input_text", "refusal"):
            raise InvalidMessage(f"unsupported content type {block.get('type')!r}", kpath + ".type")
        text = expect_str(block.get("refusal" if refusal else "text"), kpath)
        parts.append(TextPart(text=text, provider_metadata=with_meta(
            NS, id=item.get("id"), status=None if status == "completed" else status,
            phase=phase, annotations=block.get("annotations") or None,
            refusal=True if refusal else None)))
    return parts


def _decode_call(item: Mapping[str, Any], path: str) -> ToolCall:
    return decode_call(item.get("arguments"), path + ".arguments",
                       id=expect_str(item.get("call_id"), path + ".call_id"),
                       name=expect_str(item.get("name"), path + ".name"),
                       provider_metadata=with_meta(NS, id=item.get("id"),
                                                   status=item.get("status"),
                                                   namespace=item.get("namespace")))


def _decode_reasoning(item: Mapping[str, Any], path: str) -> Reasoning:
    summary = expect_list(item.get("summary") or [], path + ".summary")
    texts = [expect_str(expect_dict(s, f"{path}.summary[{k}]").get("text"),
                        f"{path}.summary[{k}].text") for k, s in enumerate(summary)]
    data = item.get("encrypted_content")
    return Reasoning(
        text="\n\n".join(texts),
        data=expect_str(data, path + ".encrypted_content") if data is not None else None,
        provider_metadata={NS: {
            "id": expect_str(item.get("id"), path + ".id"),
            **({"summary": summary} if len(summary) > 1 else {}),
            **({"content": item["content"]} if item.get("content") else {}),
        }},
    )


def _decode_compaction(item: Mapping[str, Any], path: str) -> Compaction:
    item_id, created_by = item.get("id"), item.get("created_by")
    return Compaction(
        provider=NS,
        data=expect_str(item.get("encrypted_content"), path + ".encrypted_content"),
        provider_metadata=with_meta(
            NS, id=expect_str(item_id, path + ".id") if item_id is not None else None,
            created_by=(expect_str(created_by, path + ".created_by")
                        if created_by is not None else None)))


def _decode_content(content: Any, path: str) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    return list(_decode_parts(content, path + ".content"))


def _decode_parts(content: Any, path: str) -> list[ResultPart]:
    return [decode_input_part(raw, f"{path}[{k}]")
            for k, raw in enumerate(expect_list(content, path))]


def _decode_output(output: Any, path: str) -> str | list[ResultPart]:
    if output is None or isinstance(output, str):
        return output or ""
    return _decode_parts(output, path + ".output")
