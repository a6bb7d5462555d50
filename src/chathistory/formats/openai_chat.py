"""OpenAI Chat Completions: the ``messages`` of ``client.chat.completions.create``.

Mapping, both directions:

- ``system``, ``developer``, ``user`` and ``assistant`` keep their role; ``Message.name``
  is the message's ``name``. Other roles go through ``role_map`` (see ``_common``).
- User content: ``text``, ``image_url`` (``detail`` kept), ``input_audio`` (wav or mp3
  bytes, base64), ``file`` (``file_data`` as a data URL with ``filename``, or
  ``file_id``; a part whose url is ``openai-file:<id>`` is a file id).
- Assistant: text (a single text part is sent as a string), ``refusal``, ``tool_calls``
  with ``arguments`` as a JSON string. The model's own string is re-sent byte for byte
  (``ToolCall.raw_arguments``), so the prompt prefix stays identical for the prompt
  cache, also when it is no JSON object: cut short at ``finish_reason="length"``, a
  trailing comma, an array, empty. Such a call is kept, never refused.
- An assistant message with nothing else to keep (only ``audio: {"id": ...}``,
  ``content: ""``, or neither) is stored with a placeholder reasoning part that no
  format sends; ``audio`` and an empty-string ``content`` are kept in the message's
  provider metadata and go back as they came. The audio id names audio OpenAI holds,
  so it goes to Chat Completions only.
- Every ``ToolResult`` part becomes one ``tool`` message with ``tool_call_id``, so a
  message holding several results (Anthropic style) becomes several; the message's
  other parts follow as a ``user`` message. Tool messages carry text only, and no
  error flag: ``is_error`` is not sent (the content says what went wrong).
- Reasoning parts are never sent: the request has no field for them, and OpenAI
  models keep their reasoning server-side (use the Responses API to replay it).
  A message left empty by this (reasoning only) is skipped. Decoding reads the
  ``reasoning_content`` field of OpenAI-compatible servers (DeepSeek, vLLM) into a
  ``Reasoning`` part, which is likewise not sent back.
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
    FileRef,
    Inline,
    Options,
    Remote,
    Resolver,
    RoleMap,
    arguments_json,
    canonical_role,
    check_keys,
    decode_call,
    expect_dict,
    expect_list,
    expect_str,
    media_source,
    message,
    meta,
    with_meta,
)
from ._openai import (
    decode_audio,
    decode_file_data,
    decode_file_id,
    decode_image_url,
    encode_audio,
    file_id,
)
from .cache_fields import check_cache_plan

if TYPE_CHECKING:
    from ..cache import CachePlan

__all__ = ["from_openai_chat", "to_openai_chat"]

NS = "openai_chat"

# ---------------------------------------------------------------- encode


def to_openai_chat(
    messages: Sequence[Message],
    *,
    resolver: Resolver | None = None,
    role_map: RoleMap | None = None,
    drop_unsupported: bool = False,
    cache_plan: CachePlan | None = None,
) -> list[JSON]:
    """The ``messages`` list for Chat Completions.

    Raises ``InvalidMessage`` naming the path (``$[3].parts[1]``) for an unknown role,
    a stored attachment without ``resolver``, or a part Chat Completions cannot carry
    (audio other than wav/mp3, media in a tool result or assistant message, a file
    by URL) unless ``drop_unsupported`` is true.
    ``cache_plan`` (from ``chathistory.cache.plan_cache``) only checks that the plan
    is OpenAI's and made for ``messages`` (else ``InvalidMessage`` at ``$.cache_plan``);
    its ``prompt_cache_key`` is a request field, which ``openai_chat_request`` adds.
    """
    if cache_plan is not None:
        check_cache_plan(cache_plan, messages, "openai")
    opts = Options(resolver, role_map, drop_unsupported)
    out: list[JSON] = []
    for i, msg in enumerate(messages):
        role = canonical_role(msg.role, i, role_map)
        out.extend(_encode_message(msg, role, f"$[{i}]", opts))
    return out


def _encode_message(msg: Message, role: ProviderRole, path: str, opts: Options) -> list[JSON]:
    tool_messages: list[JSON] = []
    content: list[JSON] = []
    calls: list[JSON] = []
    refusals: list[str] = []
    rest_role = Role.USER if role is Role.TOOL else role
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        match part:
            case TextPart():
                if not part.text:
                    continue
                if rest_role is Role.ASSISTANT and meta(part, NS).get("refusal"):
                    refusals.append(part.text)
                else:
                    content.append({"type": "text", "text": part.text})
            case ImagePart() | AudioPart() | FilePart():
                if rest_role is not Role.USER:
                    opts.unsupported(f"a {rest_role.value} message cannot carry media", ppath)
                    continue
                encoded = _encode_media(part, ppath, opts)
                if encoded is not None:
                    content.append(encoded)
            case ToolCall():
                if role is not Role.ASSISTANT:
                    raise InvalidMessage("only assistant messages can make tool calls", ppath)
                calls.append({
                    "id": part.id,
                    "type": "function",
                    "function": {"name": part.name, "arguments": arguments_json(part, NS)},
                })
            case ToolResult():
                if role not in (Role.TOOL, Role.USER):
                    raise InvalidMessage("tool results belong in a tool or user message", ppath)
                tool_messages.append(_encode_result(part, ppath, opts))
            case Reasoning():
                if role is not Role.ASSISTANT:
                    raise InvalidMessage("only assistant messages carry reasoning", ppath)
                # Not sent: Chat Completions has no request field for reasoning.
            case Compaction():
                pass  # not sent: only the provider that wrote it can read it
            case _:
                assert_never(part)
    out = tool_messages
    if rest_role is Role.ASSISTANT:
        info = meta(msg, NS)
        if (content or calls or refusals or "audio" in info or "content" in info
                or _is_placeholder(msg)):
            reply: JSON = {"role": "assistant"}
            if content:
                reply["content"] = _text_or_list(content)
            elif info.get("content") == "":
                reply["content"] = ""  # as given: the prompt prefix stays byte-identical
            if refusals:
                reply["refusal"] = "\n".join(refusals)
            if calls:
                reply["tool_calls"] = calls
            if "audio" in info:
                reply["audio"] = info["audio"]
            out.append(_named(reply, msg))
    elif content:
        out.append(_named({"role": rest_role.value, "content": _text_or_list(content)}, msg))
    return out


def _placeholder() -> Reasoning:
    """The part that lets an assistant message with nothing we model (only ``audio``,
    ``content: ""``, nothing at all) be stored: a message needs content, and reasoning
    holding only provider metadata reaches no model (see ``_common.reasoning_owner``)."""
    return Reasoning(provider_metadata={NS: {"placeholder": True}})


def _is_placeholder(msg: Message) -> bool:
    return any(type(p) is Reasoning and meta(p, NS).get("placeholder") for p in msg.parts)


def _named(item: JSON, msg: Message) -> JSON:
    if msg.name is not None:
        item["name"] = msg.name
    return item


def _text_or_list(content: list[JSON]) -> str | list[JSON]:
    if len(content) == 1 and content[0]["type"] == "text":
        text: str = content[0]["text"]
        return text
    return content


def _encode_media(part: ImagePart | AudioPart | FilePart, path: str, opts: Options) -> JSON | None:
    source = media_source(part, path, opts.resolver)
    match part:
        case ImagePart():
            match source:
                case Inline():
                    url = source.data_url
                case Remote():
                    url = source.url
                case FileRef():
                    opts.unsupported("Chat Completions takes images by URL or data, not file id",
                                     path)
                    return None
                case _:
                    assert_never(source)
            image: JSON = {"url": url}
            if part.detail is not None:
                image["detail"] = part.detail
            return {"type": "image_url", "image_url": image}
        case AudioPart():
            return encode_audio(part, source, path, opts)
        case FilePart():
            match source:
                case Inline():
                    return {"type": "file", "file": {"filename": part.filename,
                                                     "file_data": source.data_url}}
                case FileRef():
                    found = file_id(source, path, opts)
                    if found is not None:
                        ref: JSON = {"file_id": found}
                        if part.name:
                            ref["filename"] = part.name
                        return {"type": "file", "file": ref}
                case Remote():
                    opts.unsupported("Chat Completions takes files as data or file id, not URL",
                                     path)
                case _:
                    assert_never(source)
            return None
        case _:
            assert_never(part)


def _encode_result(result: ToolResult, path: str, opts: Options) -> JSON:
    content: str | list[JSON]
    if isinstance(result.content, str):
        content = result.content
    else:
        content = []
        for k, item in enumerate(result.content):
            if isinstance(item, TextPart):
                content.append({"type": "text", "text": item.text})
            else:
                opts.unsupported("a Chat Completions tool message carries text only",
                                 f"{path}.content[{k}]")
    return {"role": "tool", "tool_call_id": result.call_id, "content": content}


# ---------------------------------------------------------------- decode

_KNOWN = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "refusal", "tool_calls", "audio",
                            "annotations", "reasoning_content"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}


def from_openai_chat(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Messages from a Chat Completions ``messages`` list (or response messages as dicts).

    Raises ``InvalidMessage`` naming the path for an unsupported role, content part or
    field (null and empty fields are ignored).
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        path = f"$[{i}]"
        item = expect_dict(raw, path)
        role = expect_str(item.get("role"), path + ".role")
        if role not in _KNOWN:
            raise InvalidMessage(f"unsupported role {role!r}", path + ".role")
        check_keys(item, _KNOWN[role], path)
        name = item.get("name") or None
        if role == "tool":
            call_id = expect_str(item.get("tool_call_id"), path + ".tool_call_id")
            content = _decode_result_content(item.get("content"), path + ".content")
            result = ToolResult(call_id=call_id, content=content, name=names.get(call_id))
            out.append(message("tool", [result], path))
            continue
        parts: list[Part] = []
        pmeta: dict[str, Any] = {}
        if role == "assistant":
            if item.get("reasoning_content"):
                text = expect_str(item["reasoning_content"], path + ".reasoning_content")
                parts.append(Reasoning(text=text))
            pmeta = with_meta(NS, audio=item.get("audio") or None,
                              annotations=item.get("annotations") or None,
                              content="" if item.get("content") == "" else None)
        parts.extend(_decode_content(item.get("content"), path + ".content"))
        if role == "assistant":
            if item.get("refusal"):
                refusal = expect_str(item["refusal"], path + ".refusal")
                parts.append(TextPart(text=refusal, provider_metadata={NS: {"refusal": True}}))
            for k, call in enumerate(expect_list(item.get("tool_calls") or [], path)):
                tool_call = _decode_call(call, f"{path}.tool_calls[{k}]")
                names[tool_call.id] = tool_call.name
                parts.append(tool_call)
            if not parts:
                parts.append(_placeholder())
        out.append(message(role, parts, path, name=name, provider_metadata=pmeta))
    return out


def _decode_content(content: Any, path: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    return [_decode_part(p, f"{path}[{k}]") for k, p in enumerate(expect_list(content, path))]


def _decode_part(raw: Any, path: str) -> Part:
    part = expect_dict(raw, path)
    kind = part.get("type")
    check_keys(part, {"type", "text", "refusal", "image_url", "input_audio", "file"}, path)
    match kind:
        case "text":
            return TextPart(text=expect_str(part.get("text"), path + ".text"))
        case "refusal":
            text = expect_str(part.get("refusal"), path + ".refusal")
            return TextPart(text=text, provider_metadata={NS: {"refusal": True}})
        case "image_url":
            image = expect_dict(part.get("image_url"), path + ".image_url")
            check_keys(image, {"url", "detail"}, path + ".image_url")
            url = expect_str(image.get("url"), path + ".image_url.url")
            return decode_image_url(url, path + ".image_url.url", image.get("detail"))
        case "input_audio":
            return decode_audio(part, path)
        case "file":
            return _decode_file(expect_dict(part.get("file"), path + ".file"), path + ".file")
        case _:
            raise InvalidMessage(f"unsupported content part type {kind!r}", path + ".type")


def _decode_file(file: Mapping[str, Any], path: str) -> FilePart:
    check_keys(file, {"file_data", "file_id", "filename"}, path)
    name = file.get("filename") or None
    if file.get("file_id"):
        return decode_file_id(file["file_id"], path + ".file_id", name, {})
    raw = expect_str(file.get("file_data"), path + ".file_data")
    return decode_file_data(raw, path + ".file_data", name, {})


def _decode_call(raw: Any, path: str) -> ToolCall:
    call = expect_dict(raw, path)
    if call.get("type", "function") != "function":
        raise InvalidMessage(f"unsupported tool call type {call.get('type')!r}", path + ".type")
    check_keys(call, {"id", "type", "function"}, path)
    function = expect_dict(call.get("function"), path + ".function")
    return decode_call(function.get("arguments"), path + ".function.arguments",
                       id=expect_str(call.get("id"), path + ".id"),
                       name=expect_str(function.get("name"), path + ".function.name"))


def _decode_result_content(content: Any, path: str) -> str | list[ResultPart]:
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[ResultPart] = []
    for k, raw in enumerate(expect_list(content, path)):
        part = expect_dict(raw, f"{path}[{k}]")
        if part.get("type") != "text":
            raise InvalidMessage("a tool message carries text parts only", f"{path}[{k}].type")
        parts.append(TextPart(text=expect_str(part.get("text"), f"{path}[{k}].text")))
    return parts
