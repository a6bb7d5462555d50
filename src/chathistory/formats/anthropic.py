"""Anthropic Messages API: the ``system`` and ``messages`` of ``client.messages.create``.

``to_anthropic`` returns ``{"system": ..., "messages": [...]}`` (``system`` only when
there is one), ready for ``client.messages.create(model=..., max_tokens=..., **request)``;
``from_anthropic(system, messages)`` reads the same two fields back.

Mapping, both directions:

- System and developer messages, wherever they stand, are taken out to the top-level
  ``system`` in order: a string when it is one text, else a list of text blocks.
  Decoding gives one ``system`` message (so developer comes back as system).
- Consecutive turns of one role are merged into one turn, as the API requires
  alternating roles (``tool`` messages are user turns, so parallel results share a
  turn); in a user turn the ``tool_result`` blocks are moved first, as the API
  requires. Decoding splits a user turn into a ``tool`` message holding its run of
  tool results (several ``ToolResult`` parts) and a ``user`` message for the rest.
- Images (jpeg, png, gif, webp) and documents (PDF, plain text) as base64, URL or
  file sources (a url ``anthropic-file:<id>`` is a Files API id); ``FilePart.name`` is
  the document ``title``. Audio and other media raise (or are dropped on request).
- ``tool_use`` / ``tool_result`` (``is_error`` kept); ``thinking`` with its
  ``signature`` and ``redacted_thinking`` with its ``data`` are ``Reasoning`` parts
  and go back unchanged. Reasoning from another provider is not sent.
- A ``compaction`` block (server-side compaction, beta) is a ``Compaction`` part with
  ``provider`` ``anthropic``: ``text`` its ``content`` (None when compaction failed),
  ``data`` its ``encrypted_content``, ``signature``; ``tool_changes`` and
  ``cache_control`` are kept in provider metadata. It goes back as the same block in
  an assistant turn; another provider's compaction is not sent.
- ``input`` must be an object: arguments that are not one (a model's string cut short,
  an array, ...; see ``ToolCall.raw_arguments``) go as ``{"INVALID_JSON": "<string>"}``,
  so the call still pairs with its result and the model sees what it wrote; decoding
  reads that one-key object back as the string.
- ``cache_control`` on a block (system text, text, image, document, tool_use,
  tool_result, and blocks inside a tool result) is kept in the part's
  ``provider_metadata["anthropic"]`` and goes back on the same block, so a decoded
  request is re-sent with its cache layout (``keep_cache_control=False`` drops it).
  ``cache_breakpoint_id`` adds ``{"type": "ephemeral"}`` on the last block (not a
  thinking block) of each message it names, keeping a block's own. ``cache_plan`` (a
  ``chathistory.cache.CachePlan`` for Anthropic) adds its breakpoints the same way,
  each with its TTL (``"ttl": "1h"`` where the plan chose one hour). More than four breakpoints
  raise. ``Message.name`` has no field and is not sent.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from ..errors import InvalidMessage
from ..model import (
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ResultPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)
from ._common import (
    FILE_ID_SCHEMES,
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
    call_from_object,
    canonical_role,
    check_keys,
    expect_dict,
    expect_list,
    expect_str,
    file_ref_id,
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

__all__ = ["from_anthropic", "to_anthropic"]

NS = "anthropic"
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})
MAX_CACHE_BREAKPOINTS = 4
"""Blocks with ``cache_control`` the Messages API takes in one request."""

# ---------------------------------------------------------------- encode


def to_anthropic(
    messages: Sequence[Message],
    *,
    resolver: Resolver | None = None,
    role_map: RoleMap | None = None,
    cache_breakpoint_id: str | Collection[str] | None = None,
    cache_plan: CachePlan | None = None,
    keep_cache_control: bool = True,
    drop_unsupported: bool = False,
) -> JSON:
    """``{"system": ..., "messages": [...]}`` for the Messages API.

    ``cache_breakpoint_id`` (one id or several) names the messages whose last block
    gets ``cache_control: {"type": "ephemeral"}``; an id not among ``messages`` raises.
    The ``cache_control`` that ``from_anthropic`` kept on a part goes back on its block
    unless ``keep_cache_control=False`` (then only ``cache_breakpoint_id`` places
    breakpoints). ``cache_plan`` (from ``chathistory.cache.plan_cache``) places its
    ``breakpoint_ids`` too, each with its TTL (``breakpoint_ttls``:
    ``{"type": "ephemeral", "ttl": "1h"}`` for ``1h``, the 1-hour ones first as the API
    requires); a plan for another provider or for other
    messages raises (``$.cache_plan``). More than four breakpoints in all raise, as
    the API refuses them.
    Raises ``InvalidMessage`` naming the path for an unknown role, a stored
    attachment without ``resolver``, or a part Anthropic cannot carry (audio, video,
    media in an assistant turn) unless ``drop_unsupported``.
    """
    opts = Options(resolver, role_map, drop_unsupported, keep_cache_control)
    breakpoints = ({cache_breakpoint_id} if isinstance(cache_breakpoint_id, str)
                   else set(cache_breakpoint_id or ()))
    ttls: dict[str, str] = {}  # a plan's breakpoints: their TTL
    if cache_plan is not None:
        check_cache_plan(cache_plan, messages, NS)
        breakpoints.update(cache_plan.breakpoint_ids)
        ttls = dict(zip(cache_plan.breakpoint_ids, cache_plan.breakpoint_ttls
                        or [cache_plan.ttl] * len(cache_plan.breakpoint_ids), strict=True))
    system: list[JSON] = []
    turns: list[JSON] = []
    marked: list[str] = []  # where a block carries cache_control, in order
    for i, msg in enumerate(messages):
        role = canonical_role(msg.role, i, role_map)
        path = f"$[{i}]"
        match role:
            case Role.SYSTEM | Role.DEVELOPER:
                blocks = _system_blocks(msg, path, opts)
                system.extend(blocks)
            case Role.USER | Role.TOOL:
                blocks = _user_blocks(msg, path, opts)
                append_turn(turns, "user", blocks, "content")
            case Role.ASSISTANT:
                blocks = _assistant_blocks(msg, path, opts)
                append_turn(turns, "assistant", blocks, "content")
            case _:
                assert_never(role)
        if msg.id in breakpoints:
            cacheable = [b for b in blocks if b["type"] not in _UNCACHEABLE]
            if not cacheable:
                raise InvalidMessage("the cache breakpoint message has no block to mark", path)
            ttl = ttls.get(msg.id, "5m")
            cacheable[-1].setdefault("cache_control", {"type": "ephemeral"} if ttl == "5m"
                                     else {"type": "ephemeral", "ttl": ttl})
            breakpoints.discard(msg.id)
        marked.extend(path for _ in range(_breakpoints(blocks)))
    if breakpoints:
        raise InvalidMessage(f"no message has id {sorted(breakpoints)[0]!r}",
                             "$.cache_breakpoint_id")
    if len(marked) > MAX_CACHE_BREAKPOINTS:
        raise InvalidMessage(
            f"{len(marked)} blocks carry cache_control; Anthropic takes at most "
            f"{MAX_CACHE_BREAKPOINTS} (pass keep_cache_control=False to place only "
            "cache_breakpoint_id's)", marked[MAX_CACHE_BREAKPOINTS])
    for turn in turns:
        if turn["role"] == "user":  # tool results must open the turn
            content = turn["content"]
            turn["content"] = ([b for b in content if b["type"] == "tool_result"]
                               + [b for b in content if b["type"] != "tool_result"])
    request: JSON = {"messages": turns}
    if len(system) == 1 and "cache_control" not in system[0]:
        request["system"] = system[0]["text"]
    elif system:
        request["system"] = system
    return request


def _system_blocks(msg: Message, path: str, opts: Options) -> list[JSON]:
    blocks: list[JSON] = []
    for j, part in enumerate(msg.parts):
        if isinstance(part, TextPart):
            if part.text:
                blocks.append(_cached({"type": "text", "text": part.text}, part, opts))
        else:
            opts.unsupported("the Anthropic system prompt carries text only",
                             f"{path}.parts[{j}]")
    return blocks


def _user_blocks(msg: Message, path: str, opts: Options) -> list[JSON]:
    blocks: list[JSON] = []
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        match part:
            case TextPart():
                if part.text:
                    blocks.append(_cached({"type": "text", "text": part.text}, part, opts))
            case ImagePart() | AudioPart() | FilePart():
                block = _encode_media(part, ppath, opts)
                if block is not None:
                    blocks.append(block)
            case ToolResult():
                blocks.append(_encode_result(part, ppath, opts))
            case ToolCall() | Reasoning():
                raise InvalidMessage("only assistant messages carry tool calls and reasoning",
                                     ppath)
            case Compaction():
                if part.provider == NS:
                    raise InvalidMessage("an Anthropic compaction belongs in an assistant turn",
                                         ppath)
            case _:
                assert_never(part)
    return blocks


def _assistant_blocks(msg: Message, path: str, opts: Options) -> list[JSON]:
    blocks: list[JSON] = []
    for j, part in enumerate(msg.parts):
        ppath = f"{path}.parts[{j}]"
        match part:
            case TextPart():
                if part.text:
                    text: JSON = {"type": "text", "text": part.text}
                    if "citations" in meta(part, NS):
                        text["citations"] = meta(part, NS)["citations"]
                    blocks.append(_cached(text, part, opts))
            case ToolCall():
                blocks.append(_cached({"type": "tool_use", "id": part.id, "name": part.name,
                                       "input": arguments_object(part)}, part, opts))
            case Reasoning():
                if reasoning_owner(part) != NS:
                    continue  # another provider's reasoning: Anthropic cannot verify it
                if part.signature is not None:
                    blocks.append({"type": "thinking", "thinking": part.text,
                                   "signature": part.signature})
                elif part.data is not None:
                    blocks.append({"type": "redacted_thinking", "data": part.data})
            case ImagePart() | AudioPart() | FilePart():
                opts.unsupported("an Anthropic assistant turn cannot carry media", ppath)
            case ToolResult():
                raise InvalidMessage("tool results belong in a tool or user message", ppath)
            case Compaction():
                if part.provider == NS:
                    blocks.append(_cached(_encode_compaction(part), part, opts))
            case _:
                assert_never(part)
    return blocks


def _encode_compaction(part: Compaction) -> JSON:
    block: JSON = {"type": "compaction", "content": part.text}
    if part.data is not None:
        block["encrypted_content"] = part.data
    if part.signature is not None:
        block["signature"] = part.signature
    if "tool_changes" in meta(part, NS):
        block["tool_changes"] = meta(part, NS)["tool_changes"]
    return block


def _encode_media(part: ImagePart | AudioPart | FilePart, path: str, opts: Options) -> JSON | None:
    if isinstance(part, AudioPart):
        opts.unsupported("Anthropic does not take audio", path)
        return None
    source = media_source(part, path, opts.resolver)
    mime = (source.mime_type if not isinstance(source, FileRef) else part.media_type) or ""
    is_image = isinstance(part, ImagePart) or kind_of_mime(mime) is ImagePart
    src: JSON
    match source:
        case Inline():
            if mime in (_IMAGE_TYPES if is_image else {"application/pdf"}):
                src = {"type": "base64", "media_type": mime, "data": source.b64}
            elif not is_image and mime.startswith("text/"):
                try:
                    src = {"type": "text", "media_type": "text/plain",
                           "data": source.data.decode("utf-8")}
                except UnicodeDecodeError:
                    opts.unsupported("a text document must be UTF-8", path)
                    return None
            else:
                opts.unsupported(f"Anthropic does not take {mime or 'this media'}", path)
                return None
        case Remote():
            src = {"type": "url", "url": source.url}
        case FileRef():
            file_id = file_ref_id(source, "anthropic", path)
            if file_id is None:
                opts.unsupported(f"a {source.provider} file id cannot go to Anthropic", path)
                return None
            src = {"type": "file", "file_id": file_id}
        case _:
            assert_never(source)
    if is_image:
        return _cached({"type": "image", "source": src}, part, opts)
    block: JSON = {"type": "document", "source": src}
    if isinstance(part, FilePart) and part.name:
        block["title"] = part.name
    block.update({k: v for k, v in meta(part, NS).items() if k in ("context", "citations")})
    return _cached(block, part, opts)


def _cached(block: JSON, part: Part, opts: Options) -> JSON:
    """``block`` with the ``cache_control`` decoding kept on ``part``, if any (and kept)."""
    cache_control = meta(part, NS).get("cache_control")
    if cache_control is not None and opts.keep_cache_control:
        block["cache_control"] = cache_control
    return block


def _breakpoints(blocks: list[JSON]) -> int:
    """Blocks carrying ``cache_control``, those inside tool results too."""
    count = 0
    for block in blocks:
        count += "cache_control" in block
        content = block.get("content") if block["type"] == "tool_result" else None
        if isinstance(content, list):
            count += _breakpoints(content)
    return count


def _encode_result(result: ToolResult, path: str, opts: Options) -> JSON:
    block: JSON = {"type": "tool_result", "tool_use_id": result.call_id}
    if isinstance(result.content, str):
        if result.content:
            block["content"] = result.content
    else:
        content: list[JSON] = []
        for k, item in enumerate(result.content):
            if isinstance(item, TextPart):
                content.append(_cached({"type": "text", "text": item.text}, item, opts))
                continue
            encoded = _encode_media(item, f"{path}.content[{k}]", opts)
            if encoded is not None:
                content.append(encoded)
        block["content"] = content
    if result.is_error:
        block["is_error"] = True
    return _cached(block, result, opts)


# ---------------------------------------------------------------- decode


def from_anthropic(
    system: str | Iterable[Mapping[str, Any]] | None = None,
    messages: Iterable[Mapping[str, Any]] = (),
) -> list[Message]:
    """Messages from a request's ``system`` and ``messages`` (``from_anthropic(**request)``
    also works); response content can be passed as an assistant turn.

    Raises ``InvalidMessage`` naming the path (``$.messages[2].content[0]``) for an
    unsupported block type or field.
    """
    out: list[Message] = []
    if system:
        out.append(message("system", _decode_system(system, "$.system"), "$.system"))
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        path = f"$.messages[{i}]"
        turn = expect_dict(raw, path)
        check_keys(turn, {"role", "content"}, path)
        role = expect_str(turn.get("role"), path + ".role")
        content = turn.get("content")
        if role == "system":
            out.append(message("system", _decode_system(content, path + ".content"), path))
            continue
        if role not in ("user", "assistant"):
            raise InvalidMessage(f"unsupported role {role!r}", path + ".role")
        if isinstance(content, str):
            parts: list[Part] = [TextPart(text=content)]
        else:
            parts = [_decode_block(b, f"{path}.content[{k}]", names)
                     for k, b in enumerate(expect_list(content, path + ".content"))]
        if role == "assistant":
            out.append(message("assistant", parts, path))
        else:
            out.extend(message(r, run, path) for r, run in split_user_turn(parts))
    return out


def _decode_system(system: Any, path: str) -> list[Part]:
    if isinstance(system, str):
        return [TextPart(text=system)]
    parts: list[Part] = []
    for k, raw in enumerate(expect_list(system, path)):
        block = expect_dict(raw, f"{path}[{k}]")
        check_keys(block, {"type", "text", "cache_control"}, f"{path}[{k}]")
        if block.get("type") != "text":
            raise InvalidMessage("system blocks must be text", f"{path}[{k}].type")
        parts.append(TextPart(text=expect_str(block.get("text"), f"{path}[{k}].text"),
                              provider_metadata=_kept(block)))
    return parts


def _kept(block: Mapping[str, Any], **values: Any) -> JSON:
    """The provider metadata of a decoded block: ``values`` and its ``cache_control``."""
    return with_meta(NS, **values, cache_control=block.get("cache_control"))


_BLOCK_KEYS = {
    "text": {"type", "text", "citations", "cache_control"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "title", "context", "citations", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
    "compaction": {"type", "content", "encrypted_content", "signature", "tool_changes",
                   "cache_control"},
}


def _decode_block(raw: Any, path: str, names: dict[str, str]) -> Part:
    block = expect_dict(raw, path)
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in _BLOCK_KEYS:
        raise InvalidMessage(f"unsupported block type {kind!r}", path + ".type")
    check_keys(block, _BLOCK_KEYS[kind], path)
    match kind:
        case "text":
            return TextPart(text=expect_str(block.get("text"), path + ".text"),
                            provider_metadata=_kept(block, citations=block.get("citations")))
        case "image" | "document":
            return _decode_media(block, path)
        case "tool_use":
            call = call_from_object(expect_dict(block.get("input"), path + ".input"),
                                    id=expect_str(block.get("id"), path + ".id"),
                                    name=expect_str(block.get("name"), path + ".name"),
                                    provider_metadata=_kept(block))
            names[call.id] = call.name
            return call
        case "tool_result":
            call_id = expect_str(block.get("tool_use_id"), path + ".tool_use_id")
            return ToolResult(call_id=call_id, content=_decode_result(block.get("content"), path),
                              is_error=bool(block.get("is_error")), name=names.get(call_id),
                              provider_metadata=_kept(block))
        case "thinking":
            return Reasoning(text=expect_str(block.get("thinking"), path + ".thinking"),
                             signature=expect_str(block.get("signature"), path + ".signature"))
        case "compaction":
            return _decode_compaction(block, path)
        case _:  # redacted_thinking
            return Reasoning(data=expect_str(block.get("data"), path + ".data"))


def _decode_compaction(block: Mapping[str, Any], path: str) -> Compaction:
    def optional(key: str) -> str | None:
        value = block.get(key)
        return None if value is None else expect_str(value, f"{path}.{key}")

    changes = block.get("tool_changes")
    return Compaction(provider=NS, text=optional("content"), data=optional("encrypted_content"),
                      signature=optional("signature"),
                      provider_metadata=_kept(block, tool_changes=None if changes is None
                                              else expect_list(changes, path + ".tool_changes")))


def _decode_result(content: Any, path: str) -> str | list[ResultPart]:
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[ResultPart] = []
    for k, raw in enumerate(expect_list(content, path + ".content")):
        kpath = f"{path}.content[{k}]"
        block = expect_dict(raw, kpath)
        if block.get("type") == "text":
            check_keys(block, _BLOCK_KEYS["text"] - {"citations"}, kpath)
            parts.append(TextPart(text=expect_str(block.get("text"), kpath + ".text"),
                                  provider_metadata=_kept(block)))
        elif block.get("type") in ("image", "document"):
            check_keys(block, _BLOCK_KEYS[block["type"]], kpath)
            parts.append(_decode_media(block, kpath))
        else:
            raise InvalidMessage(f"unsupported block type {block.get('type')!r}", kpath + ".type")
    return parts


def _decode_media(block: Mapping[str, Any], path: str) -> ImagePart | FilePart:
    source = expect_dict(block.get("source"), path + ".source")
    spath = path + ".source"
    kind = source.get("type")
    check_keys(source, {"type", "data", "media_type", "url", "file_id"}, spath)
    image = block.get("type") == "image"
    name = None if image else block.get("title") or None
    pmeta = _kept(block) if image else _kept(block, context=block.get("context"),
                                             citations=block.get("citations"))
    if kind == "base64":
        mime = expect_str(source.get("media_type"), spath + ".media_type")
        data = expect_str(source.get("data"), spath + ".data")
        att = attachment(b64decode(data, spath + ".data"), mime, name)
    elif kind == "text" and not image:
        text = expect_str(source.get("data"), spath + ".data")
        att = attachment(text.encode("utf-8"), "text/plain", name)
    elif kind in ("url", "file"):
        url = (expect_str(source.get("url"), spath + ".url") if kind == "url"
               else FILE_ID_SCHEMES["anthropic"] + expect_str(source.get("file_id"),
                                                              spath + ".file_id"))
        if image:
            return ImagePart(url=url, provider_metadata=pmeta)
        return FilePart(url=url, name=name, provider_metadata=pmeta)
    else:
        raise InvalidMessage(f"unsupported source type {kind!r}", spath + ".type")
    if image:
        return ImagePart(attachment=att, provider_metadata=pmeta)
    return FilePart(attachment=att, name=name, provider_metadata=pmeta)
