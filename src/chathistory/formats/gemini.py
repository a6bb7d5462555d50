"""Google Gemini: the ``contents`` and ``system_instruction`` of ``generateContent``.

``to_gemini`` returns ``{"contents": [...], "system_instruction": {"parts": [...]}}``
(``system_instruction`` only when there is one). Parts use the REST API's camelCase
(``inlineData``, ``fileData``, ``functionCall``, ``functionResponse``,
``thoughtSignature``), which both the REST API and ``google-genai`` accept; with the SDK:
``generate_content(model=..., contents=r["contents"],
config={"system_instruction": r.get("system_instruction")})``. ``from_gemini`` reads
the same dict (or a bare ``contents`` list) in camelCase or snake_case.

Mapping, both directions:

- Roles ``user`` and ``model``; ``tool`` messages are ``user`` turns. Consecutive turns
  of one role are merged (Gemini wants every response to a parallel call in the one
  turn after the call). Decoding splits a user turn into a ``tool`` message (its run
  of function responses) and a ``user`` message (the rest).
- System and developer messages go to ``system_instruction`` (text only).
- Media: ``inlineData`` (base64) or ``fileData`` (``fileUri`` with ``mimeType``; a
  resolver may return ``{"file_uri": ..., "mime_type": ...}``). File names are not sent.
- ``functionCall`` / ``functionResponse``. Gemini matches a response to its call by
  name (and order); it mints call ids only on some models and older models and
  Vertex AI reject an ``id`` field. So ``id`` is sent only for a call whose id Gemini
  minted (kept in ``provider_metadata["gemini"]["id"]``), or for every call with
  ``send_call_ids=True``. Decoding a call without id gives it a new UUID and pairs
  each response with the earliest unanswered call of that name. ``args`` must be an
  object: arguments that are none go as ``{"INVALID_JSON": "<string>"}`` and decode
  back to the string, as for Anthropic.
- A result's text is ``response: {"output": ...}`` (``{"error": ...}`` when
  ``is_error``); any other response object is decoded to its JSON text and kept in
  provider metadata so it goes back as it came. Media in a result goes in the
  response's ``parts`` (multimodal function responses).
- ``thought: true`` parts are ``Reasoning`` (``thoughtSignature`` as ``signature``);
  a ``thoughtSignature`` on any other part is kept in its provider metadata and sent
  back on the same part. Reasoning from other providers is not sent.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from ..errors import InvalidMessage
from ..model import (
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    MediaPart,
    Message,
    Part,
    Reasoning,
    ResultPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
    new_id,
)
from ._common import (
    JSON,
    FileRef,
    Inline,
    Options,
    Remote,
    Resolver,
    RoleMap,
    append_turn,
    arguments_object,
    attachment,
    b64decode,
    b64encode,
    call_from_object,
    canonical_role,
    check_keys,
    expect_dict,
    expect_list,
    expect_str,
    guess_mime,
    kind_of_mime,
    media_source,
    message,
    meta,
    reasoning_owner,
    split_user_turn,
    with_meta,
)
from .cache_fields import check_cache_plan

if TYPE_CHECKING:
    from ..cache import CachePlan

__all__ = ["from_gemini", "to_gemini"]

NS = "gemini"

# ---------------------------------------------------------------- encode


def to_gemini(
    messages: Sequence[Message],
    *,
    resolver: Resolver | None = None,
    role_map: RoleMap | None = None,
    drop_unsupported: bool = False,
    send_call_ids: bool = False,
    cache_plan: CachePlan | None = None,
) -> JSON:
    """``{"contents": [...], "system_instruction": {...}}`` for ``generateContent``.

    Raises ``InvalidMessage`` naming the path for an unknown role, a stored attachment
    without ``resolver``, media by URL without a known media type, a result whose tool
    name cannot be found, or media in the system instruction (unless
    ``drop_unsupported``). ``cache_plan`` (from ``chathistory.cache.plan_cache``) only
    checks that the plan is Gemini's and made for ``messages`` (else ``InvalidMessage``
    at ``$.cache_plan``): the implicit cache takes no field, and an explicit cache is
    named in the request's config, which ``gemini_request`` builds.
    """
    if cache_plan is not None:
        check_cache_plan(cache_plan, messages, NS)
    return encode_request(messages, Options(resolver, role_map, drop_unsupported), send_call_ids)


def encode_request(messages: Sequence[Message], opts: Options, send_call_ids: bool,
                   cached_ids: Collection[str] = ()) -> JSON:
    """``to_gemini``'s request, leaving out the messages named in ``cached_ids`` (an
    explicit cache holds them; the first of each id is left out), whose tool calls
    still give their results' function names."""
    calls = {p.id: p for m in messages for p in m.parts if isinstance(p, ToolCall)}
    left_out = set(cached_ids)
    system: list[JSON] = []
    contents: list[JSON] = []
    for i, msg in enumerate(messages):
        if msg.id in left_out:
            left_out.discard(msg.id)
            continue
        role = canonical_role(msg.role, i, opts.role_map)
        path = f"$[{i}]"
        match role:
            case Role.SYSTEM | Role.DEVELOPER:
                for j, part in enumerate(msg.parts):
                    if isinstance(part, TextPart):
                        if part.text:
                            system.append({"text": part.text})
                    else:
                        opts.unsupported("the system instruction carries text only",
                                         f"{path}.parts[{j}]")
            case Role.USER | Role.TOOL | Role.ASSISTANT:
                model = role is Role.ASSISTANT
                parts = _encode_parts(msg, model, path, opts, calls, send_call_ids)
                append_turn(contents, "model" if model else "user", parts, "parts")
            case _:
                assert_never(role)
    request: JSON = {"contents": contents}
    if system:
        request["system_instruction"] = {"parts": system}
    return request


def _encode_parts(msg: Message, model: bool, path: str, opts: Options,
                  calls: Mapping[str, ToolCall], send_ids: bool) -> list[JSON]:
    out: list[JSON] = []
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        encoded: JSON | None
        match part:
            case TextPart():
                keep = part.text or "thought_signature" in meta(part, NS)
                encoded = {"text": part.text} if keep else None
            case ImagePart() | AudioPart() | FilePart():
                encoded = _encode_media(part, ppath, opts)
            case ToolCall():
                if not model:
                    raise InvalidMessage("only assistant messages make tool calls", ppath)
                call: JSON = {"name": part.name, "args": arguments_object(part)}
                if send_ids or meta(part, NS).get("id") == part.id:
                    call["id"] = part.id
                encoded = {"functionCall": call}
            case ToolResult():
                if model:
                    raise InvalidMessage("tool results belong in a tool or user message", ppath)
                encoded = _encode_result(part, ppath, opts, calls, send_ids)
            case Reasoning():
                if not model:
                    raise InvalidMessage("only assistant messages carry reasoning", ppath)
                if reasoning_owner(part) != NS:
                    continue
                encoded = {"text": part.text, "thought": True} if part.text else {"thought": True}
                if part.signature is not None:
                    encoded["thoughtSignature"] = part.signature
            case Compaction():
                continue  # not sent: only the provider that wrote it can read it
            case _:
                assert_never(part)
        if encoded is None:
            continue
        signature = meta(part, NS).get("thought_signature")
        if signature is not None and not isinstance(part, Reasoning):
            encoded["thoughtSignature"] = signature
        out.append(encoded)
    return out


def _encode_media(part: MediaPart, path: str, opts: Options) -> JSON | None:
    source = media_source(part, path, opts.resolver)
    match source:
        case Inline():
            return {"inlineData": {"mimeType": source.mime_type, "data": source.b64}}
        case Remote():
            mime = source.mime_type or guess_mime(source.url)
            if mime is None:
                raise InvalidMessage("Gemini needs the media type of a file given by URL; "
                                     "set mime_type", path + ".mime_type")
            return {"fileData": {"mimeType": mime, "fileUri": source.url}}
        case FileRef():
            uri = source.get("file_uri", "fileUri") if source.provider is None else None
            if uri is None:
                opts.unsupported("Gemini takes files by fileUri, not by another provider's id",
                                 path)
                return None
            mime = source.get("mime_type", "mimeType") or source.mime_type
            return {"fileData": {"mimeType": mime, "fileUri": uri}}
        case _:
            assert_never(source)


def _encode_result(result: ToolResult, path: str, opts: Options,
                   calls: Mapping[str, ToolCall], send_ids: bool) -> JSON:
    call = calls.get(result.call_id)
    name = result.name or (call.name if call is not None else None)
    if name is None:
        raise InvalidMessage("Gemini needs the tool name of a result whose call is not in "
                             "the messages; set ToolResult.name", path + ".name")
    text = result.text
    kept = meta(result, NS).get("response")
    if kept is not None and _dump(kept) == text:
        response = kept
    else:
        response = {"error" if result.is_error else "output": text}
    body: JSON = {"name": name, "response": response}
    if call is not None and (send_ids or meta(call, NS).get("id") == call.id):
        body["id"] = call.id
    elif call is None and send_ids:
        body["id"] = result.call_id
    media: list[JSON] = []
    for k, item in enumerate(result.content if isinstance(result.content, list) else []):
        if isinstance(item, MediaPart):
            encoded = _encode_media(item, f"{path}.content[{k}]", opts)
            if encoded is not None:
                media.append(encoded)
    if media:
        body["parts"] = media
    return {"functionResponse": body}


def _dump(response: Any) -> str:
    return json.dumps(response, ensure_ascii=False)


# ---------------------------------------------------------------- decode

_PART_KEYS = frozenset({"text", "thought", "thoughtSignature", "thought_signature", "inlineData",
                        "inline_data", "fileData", "file_data", "functionCall", "function_call",
                        "functionResponse", "function_response"})


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A field in either spelling (REST camelCase or the SDK's snake_case)."""
    return obj[camel] if camel in obj else obj.get(snake)


def from_gemini(request: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[Message]:
    """Messages from ``{"contents": [...], "system_instruction": ...}`` or a ``contents``
    list, in camelCase or snake_case (``Content.model_dump(mode="json")`` works).

    Raises ``InvalidMessage`` naming the path for an unsupported part or field, or a
    function response that matches no earlier call.
    """
    out: list[Message] = []
    if isinstance(request, Mapping):
        check_keys(request, {"contents", "system_instruction", "systemInstruction"}, "$")
        system = _get(request, "systemInstruction", "system_instruction")
        if system:
            out.append(message("system", _decode_system(system), "$.system_instruction"))
        contents = expect_list(request.get("contents"), "$.contents")
        prefix = "$.contents"
    else:
        contents, prefix = list(request), "$"
    pending: list[ToolCall] = []  # calls not answered yet, in order
    for i, raw in enumerate(contents):
        path = f"{prefix}[{i}]"
        content = expect_dict(raw, path)
        check_keys(content, {"role", "parts"}, path)
        role = content.get("role") or "user"
        parts = [_decode_part(p, f"{path}.parts[{k}]", pending)
                 for k, p in enumerate(expect_list(content.get("parts") or [], path + ".parts"))]
        if role == "model":
            out.append(message("assistant", parts, path))
        elif role in ("user", "function"):
            out.extend(message(r, run, path) for r, run in split_user_turn(parts))
        else:
            raise InvalidMessage(f"unsupported role {role!r}", path + ".role")
    return out


def _decode_system(system: Any) -> list[Part]:
    if isinstance(system, str):
        return [TextPart(text=system)]
    content = expect_dict(system, "$.system_instruction")
    check_keys(content, {"role", "parts"}, "$.system_instruction")
    parts: list[Part] = []
    for k, raw in enumerate(expect_list(content.get("parts"), "$.system_instruction.parts")):
        path = f"$.system_instruction.parts[{k}]"
        part = expect_dict(raw, path)
        check_keys(part, {"text"}, path)
        parts.append(TextPart(text=expect_str(part.get("text"), path + ".text")))
    return parts


def _signature(part: Mapping[str, Any], path: str) -> str | None:
    value = _get(part, "thoughtSignature", "thought_signature")
    if isinstance(value, bytes):  # Part.model_dump() in python mode
        return b64encode(value)
    return expect_str(value, path + ".thoughtSignature") if value is not None else None


def _decode_part(raw: Any, path: str, pending: list[ToolCall]) -> Part:
    part = expect_dict(raw, path)
    check_keys(part, _PART_KEYS, path)
    signature = _signature(part, path)
    if part.get("thought"):
        return Reasoning(text=part.get("text") or "", signature=signature,
                         provider_metadata={NS: {"thought": True}})
    pmeta = with_meta(NS, thought_signature=signature)
    if part.get("text") is not None:
        return TextPart(text=expect_str(part["text"], path + ".text"), provider_metadata=pmeta)
    media = _decode_media(part, path, pmeta)
    if media is not None:
        return media
    if (call := _get(part, "functionCall", "function_call")) is not None:
        return _decode_call(expect_dict(call, path + ".functionCall"), path + ".functionCall",
                            pmeta, pending)
    if (resp := _get(part, "functionResponse", "function_response")) is not None:
        return _decode_response(expect_dict(resp, path + ".functionResponse"),
                                path + ".functionResponse", pmeta, pending)
    raise InvalidMessage("a part needs text, data, a function call or a function response", path)


def _decode_media(part: Mapping[str, Any], path: str,
                  pmeta: JSON) -> ImagePart | AudioPart | FilePart | None:
    if (blob := _get(part, "inlineData", "inline_data")) is not None:
        blob = expect_dict(blob, path + ".inlineData")
        check_keys(blob, {"mimeType", "mime_type", "data"}, path + ".inlineData")
        mime = expect_str(_get(blob, "mimeType", "mime_type"), path + ".inlineData.mimeType")
        data = blob.get("data")
        raw = data if isinstance(data, bytes) else b64decode(
            expect_str(data, path + ".inlineData.data"), path + ".inlineData.data")
        return kind_of_mime(mime)(attachment=attachment(raw, mime), provider_metadata=pmeta)
    if (file := _get(part, "fileData", "file_data")) is not None:
        file = expect_dict(file, path + ".fileData")
        check_keys(file, {"mimeType", "mime_type", "fileUri", "file_uri"}, path + ".fileData")
        uri = expect_str(_get(file, "fileUri", "file_uri"), path + ".fileData.fileUri")
        given = _get(file, "mimeType", "mime_type")
        file_mime = expect_str(given, path + ".fileData.mimeType") if given else guess_mime(uri)
        kind = kind_of_mime(file_mime) if file_mime else FilePart
        return kind(url=uri, mime_type=file_mime, provider_metadata=pmeta)
    return None


def _decode_call(call: Mapping[str, Any], path: str, pmeta: JSON,
                 pending: list[ToolCall]) -> ToolCall:
    check_keys(call, {"id", "name", "args"}, path)
    minted = call.get("id") or None
    args = call.get("args") or {}
    tool_call = call_from_object(
        expect_dict(args, path + ".args"),
        id=expect_str(minted, path + ".id") if minted else new_id(),
        name=expect_str(call.get("name"), path + ".name"),
        provider_metadata={NS: {**pmeta.get(NS, {}), "id": minted}} if minted else pmeta,
    )
    pending.append(tool_call)
    return tool_call


def _decode_response(resp: Mapping[str, Any], path: str, pmeta: JSON,
                     pending: list[ToolCall]) -> ToolResult:
    check_keys(resp, {"id", "name", "response", "parts"}, path)
    name = expect_str(resp.get("name"), path + ".name")
    given = resp.get("id") or None
    match = next((c for c in pending if (c.id == given if given else c.name == name)), None)
    if match is not None:
        pending.remove(match)
        call_id: str = match.id
    elif given:
        call_id = expect_str(given, path + ".id")
    else:
        raise InvalidMessage(f"no earlier unanswered functionCall named {name!r}", path + ".name")
    response = dict(expect_dict(resp.get("response") or {}, path + ".response"))
    is_error, text, kept = False, "", None
    if set(response) == {"output"} and isinstance(response["output"], str):
        text = response["output"]
    elif set(response) == {"error"} and isinstance(response["error"], str):
        is_error, text = True, response["error"]
    elif response:
        text, kept = _dump(response), response
    media: list[ResultPart] = []
    for k, raw in enumerate(expect_list(resp.get("parts") or [], path + ".parts")):
        kpath = f"{path}.parts[{k}]"
        item = expect_dict(raw, kpath)
        check_keys(item, {"inlineData", "inline_data", "fileData", "file_data"}, kpath)
        decoded = _decode_media(item, kpath, {})
        if decoded is None:
            raise InvalidMessage("a response part needs inlineData or fileData", kpath)
        media.append(decoded)
    content: str | list[ResultPart] = ([TextPart(text=text)] if text else []) + media if media \
        else text
    pm = {NS: {**pmeta.get(NS, {}), "response": kept}} if kept is not None else pmeta
    return ToolResult(call_id=call_id, content=content, is_error=is_error, name=name,
                      provider_metadata=pm)
