"""Routes on a session's messages: append, read (tail, token window, range, since the
last compaction, in a provider's format), context, one message (read, delete), pop,
clear, mark, reduce, window."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import msgspec
from starlette.responses import Response

from ..assets import FileAssetStore
from ..errors import InvalidMessage, NotFound
from ..formats import from_anthropic, from_gemini, from_openai_chat, from_openai_responses
from ..model import Attachment, KVStatus, MediaPart, Message, Part, ToolCall, ToolResult
from ..model.message import check_described
from ..stores.engine import Engine
from ..stores.model import Session
from ..window import WindowPlan
from .app import Context, Endpoint, Param, call_store, run
from .errors import BadRequest, HTTPError
from .ops import QUERY_COUNTER, counter_for, plan_window, reduce_session
from .references import check_references, media
from .routes_sessions import SESSION, guarded
from .schema import (
    MAX_MESSAGES_PER_APPEND,
    MAX_PARTS_PER_MESSAGE,
    AnthropicAppendBody,
    AppendBody,
    GeminiAppendBody,
    MarkBody,
    MarkOut,
    MessagesOut,
    OpenAIChatAppendBody,
    OpenAIResponsesAppendBody,
    PopOut,
    ReduceBody,
    ReduceOut,
    VersionOut,
    WindowBody,
)
from .wire import (
    JSON_TYPE,
    QUERY_COUNT,
    etag,
    if_match,
    json_response,
    query_bool,
    query_int,
    query_str,
    rerooted,
    session_response,
    url_safe_id,
)

__all__ = ["FORMATS", "INPUT_FORMATS", "ROUTES"]

MESSAGES = SESSION + "/messages"
FORMATS = {
    "openai_chat": ("openai_chat", "to_openai_chat", "messages"),
    "openai_responses": ("openai_responses", "to_openai_responses", "input"),
    "anthropic": ("anthropic", "to_anthropic", None),
    "gemini": ("gemini", "to_gemini", None),
}
"""``?format=`` -> (module of chathistory.formats, function, key wrapping a list answer)."""


async def append(ctx: Context) -> Response:
    sid = ctx.param("session_id")
    expected = if_match(ctx.request)
    fmt = query_str(ctx.request, "format")
    if fmt:
        messages, body_key, options = await _provider_messages(ctx, fmt)
    else:
        messages, body_key, options = await _own_messages(ctx)
    try:
        version = await guarded(ctx, sid, expected, ctx.store.append, sid, messages,
                                tenant=ctx.tenant, **options)
    except InvalidMessage as exc:
        if not fmt or not exc.path.startswith("$["):
            raise rerooted(exc, "$.messages") from None
        # the path is into the converted messages, not the body's: say which
        raise InvalidMessage(f"{exc.reason} (at {exc.path} of the {len(messages)} messages "
                             f"the {fmt} {body_key} convert to)", f"$.{body_key}") from None
    return json_response(VersionOut(version), headers=etag(version))


async def _own_messages(ctx: Context) -> tuple[list[Message], str, dict[str, Any]]:
    """The body's chathistory messages, each checked against its inline bytes, and
    references to uploads completed from the upload."""
    counter = getattr(ctx.store, "counter", None)
    try:
        body, counts = await ctx.json_counted(AppendBody, getattr(counter, "name", None))
    except InvalidMessage as exc:
        raise _shape_hint(exc) from None
    for i, message in enumerate(body.messages):
        if len(message.parts) > MAX_PARTS_PER_MESSAGE:
            raise InvalidMessage(f"a message may have at most {MAX_PARTS_PER_MESSAGE} parts",
                                 f"$.messages[{i}].parts")
        try:
            check_described(message)
        except InvalidMessage as exc:
            raise exc.under(f"$.messages[{i}]") from None
        # counts are the server's to make, never the client's (a heavy body's were made
        # where it was decoded, the client's cleared first: json_body_counted)
        message.token_counts = None if counts is None else counts[i]
    if any(_incomplete(a) for m in body.messages for a in m.attachments):
        await run(_complete_references, body.messages, ctx.service.assets, ctx.tenant)
    if any(a.data is None for m in body.messages for a in m.attachments):
        await call_store(check_references, body.messages, "$.messages", ctx.service.assets,
                         ctx.store, ctx.tenant)
    return body.messages, "messages", {"state": body.state,
                                       "reject_orphans": body.reject_orphans}


_FORMAT_HINT = ("; or send the provider's messages as they are, with ?format=openai_chat "
                "(or openai_responses, anthropic, gemini)")
_MESSAGE_FIELD = re.compile(r"^\$\.messages\[\d+\]\.(content|type)$")
_PART = re.compile(r"^\$\.messages\[\d+\]\.parts\[\d+\]$")


def _shape_hint(exc: InvalidMessage) -> InvalidMessage:
    """``exc`` telling how to send a provider's shape, when the body looks like one:
    a message with ``content`` (OpenAI, Anthropic, Responses), a part without
    ``type`` (Gemini)."""
    if _MESSAGE_FIELD.match(exc.path) and exc.reason.startswith("unknown field"):
        return InvalidMessage(exc.reason + _FORMAT_HINT, exc.path)
    if _PART.match(exc.path) and "missing required field `type`" in exc.reason:
        return InvalidMessage(f"{exc.reason}: a part names its kind in `type` (text, image, "
                              "audio, file, tool_call, tool_result, reasoning, compaction)"
                              f"{_FORMAT_HINT}",
                              exc.path)
    return exc


def _incomplete(attachment: Attachment) -> bool:
    """A reference (no bytes) that leaves out what its upload knows."""
    return attachment.data is None and (
        attachment.size < 0 or not attachment.mime_type
        or (attachment.modality == "image" and attachment.width is None))


def _complete_references(messages: list[Message], assets: FileAssetStore, tenant: str) -> None:
    """Fill what references to uploads (``POST /v1/assets``) leave out (size, media type,
    name, an image's dimensions) from the upload, so that an image counts the same
    tokens referenced as inline; a given ``size`` or ``mime_type`` other than the
    upload's is a 422 naming it. (Work pool: reads the uploads' descriptions.)"""
    for i, message in enumerate(messages):
        message.parts = [_completed(part, f"$.messages[{i}].parts[{j}]", assets, tenant)
                         for j, part in enumerate(message.parts)]


def _completed(part: Part, path: str, assets: FileAssetStore, tenant: str) -> Any:
    if isinstance(part, ToolResult) and not isinstance(part.content, str):
        content = [_completed(item, f"{path}.content[{k}]", assets, tenant)
                   for k, item in enumerate(part.content)]
        return msgspec.structs.replace(part, content=content)
    att = part.attachment if isinstance(part, MediaPart) else None
    if att is None or not _incomplete(att):
        return part
    try:
        upload = assets.info(tenant, att.sha256)
    except InvalidMessage:  # not a digest: validation names the field
        return part
    if upload is None:
        return part  # not uploaded here: validation says what the reference lacks
    for field in ("size", "mime_type"):
        given, known = getattr(att, field), getattr(upload, field)
        if given not in (-1, "") and given != known:
            raise InvalidMessage(f"{field} is {known!r} for upload {att.sha256}, not "
                                 f"{given!r}", f"{path}.attachment.{field}")
    full = msgspec.structs.replace(
        upload, id=att.id, name=att.name or upload.name,
        width=att.width if att.width is not None else upload.width,
        height=att.height if att.height is not None else upload.height)
    return msgspec.structs.replace(part, attachment=full)


async def _provider_messages(ctx: Context, fmt: str
                             ) -> tuple[list[Message], str, dict[str, Any]]:
    """The body's provider messages (``?format=``) converted by ``chathistory.formats``'
    ``from_*`` (in the work pool), with ids from ``id_prefix`` when given."""
    if fmt not in INPUT_FORMATS:
        raise BadRequest(f"unknown format {fmt!r}: use {', '.join(INPUT_FORMATS)}")
    body_type, key, convert = INPUT_FORMATS[fmt]
    try:
        body = await ctx.json(body_type)
    except InvalidMessage as exc:
        if exc.path.count(".") == 1 and exc.reason.startswith("unknown field"):
            fields = ", ".join(f"`{f.encode_name}`" for f in msgspec.structs.fields(body_type))
            raise InvalidMessage(f"{exc.reason}: a {fmt} append carries {fields}",
                                 exc.path) from None
        raise
    url_safe_id(body.id_prefix, "$.id_prefix")
    try:
        messages: list[Message] = await run(convert, body)
    except InvalidMessage as exc:  # from_openai_chat/_responses name $[i] of their list
        raise rerooted(exc, f"$.{key}") from None
    if len(messages) > MAX_MESSAGES_PER_APPEND:
        raise InvalidMessage(f"the {key} convert to {len(messages)} messages; the limit of "
                             f"an append is {MAX_MESSAGES_PER_APPEND}", f"$.{key}")
    for k, message in enumerate(messages):
        if len(message.parts) > MAX_PARTS_PER_MESSAGE:
            raise InvalidMessage(f"message {k} of the {len(messages)} the {key} convert to "
                                 f"has {len(message.parts)} parts; the limit is "
                                 f"{MAX_PARTS_PER_MESSAGE}", f"$.{key}")
    if body.id_prefix is not None:
        for k, message in enumerate(messages):
            message.id = f"{body.id_prefix}-{k}"
        if fmt == "gemini":
            _name_unnamed_calls(messages)
    return messages, key, {"state": body.state, "reject_orphans": body.reject_orphans}


def _name_unnamed_calls(messages: list[Message]) -> None:
    """Give the Gemini calls sent without an id (which decode with a random one) ids
    named after their message's (``<id_prefix>-<k>.<j>``, ``j`` the part), and their
    results those: so that a retry decodes to the same messages as the append it
    repeats (the store refuses other content under a stored id)."""
    renamed: dict[str, str] = {}
    for message in messages:
        if not any((type(p) is ToolCall and _unnamed(p)) or type(p) is ToolResult
                   for p in message.parts):
            continue
        parts: list[Part] = []
        for j, part in enumerate(message.parts):
            if type(part) is ToolCall and _unnamed(part):
                renamed[part.id] = f"{message.id}.{j}"
                part = msgspec.structs.replace(part, id=renamed[part.id])
            elif type(part) is ToolResult and part.call_id in renamed:
                part = msgspec.structs.replace(part, call_id=renamed[part.call_id])
            parts.append(part)
        message.parts = parts


def _unnamed(call: ToolCall) -> bool:
    """A Gemini call decoded without an id (one with its id keeps it in its metadata)."""
    gemini = call.provider_metadata.get("gemini")
    return not (isinstance(gemini, dict) and gemini.get("id"))


def _from_anthropic(body: AnthropicAppendBody) -> list[Message]:
    return from_anthropic(body.system, body.messages)


def _from_gemini(body: GeminiAppendBody) -> list[Message]:
    request: dict[str, Any] = {"contents": body.contents}
    if body.system_instruction is not None:
        request["system_instruction"] = body.system_instruction
    return from_gemini(request)


INPUT_FORMATS: dict[str, tuple[Any, str, Callable[[Any], list[Message]]]] = {
    "openai_chat": (OpenAIChatAppendBody, "messages", lambda b: from_openai_chat(b.messages)),
    "openai_responses": (OpenAIResponsesAppendBody, "input",
                         lambda b: from_openai_responses(b.input)),
    "anthropic": (AnthropicAppendBody, "messages", _from_anthropic),
    "gemini": (GeminiAppendBody, "contents", _from_gemini),
}
"""``POST .../messages?format=`` -> (body type, the body's field of provider messages,
conversion). The body carries the request fields a read with the same format returns."""


SELECTORS = ("tail", "max_tokens", "start", "since")
_OPTIONS = {"include_marked": ("tail", "start"), "counter": ("max_tokens",),
            "keep_system": ("max_tokens", "since")}
"""The options of a read and the selectors each applies to."""
_NOT_WITH = {("include_marked", "max_tokens"): "marked messages never count toward a window",
             ("include_marked", "since"): "marked messages after the compaction are read, as "
                                          "a read by position reads them"}
SINCE = ("compaction",)
"""``?since=``: what a read starts from (the newest message holding a compaction)."""


def _exactly_one_selector(ctx: Context) -> str:
    """The read's selector, after checking that each option given applies to it."""
    params = ctx.request.query_params
    given = [name for name in SELECTORS if name in params]
    if "stop" in params and "start" not in given:
        given.append("start")
    if len(given) != 1:
        raise BadRequest("give exactly one selector: tail=N, max_tokens=N, start=I[&stop=J] "
                         "or since=compaction")
    selector = given[0]
    for option, selectors in _OPTIONS.items():
        if option in params and selector not in selectors:
            why = _NOT_WITH.get((option, selector))
            raise BadRequest(f"{option} does not apply to {selector} ({why})" if why else
                             f"{option} applies to {' and '.join(selectors)} only")
    if selector == "since" and (since := query_str(ctx.request, "since")) not in SINCE:
        raise BadRequest(f"query parameter since must be {' or '.join(SINCE)}, not {since!r}")
    return selector


async def read_messages(ctx: Context) -> Response:
    sid = ctx.param("session_id")
    request = ctx.request
    selector = _exactly_one_selector(ctx)
    fmt = query_str(request, "format")
    if "assets" in request.query_params and not fmt:
        raise BadRequest("assets applies to format only")
    store = ctx.store
    # without a format the stored JSON goes out as it is, never decoded (an Engine's *_json)
    engine = store if not fmt and isinstance(store, Engine) else None
    call: Callable[..., Any]
    found: Any  # bytes from an Engine's *_json, else list[Message]
    if selector == "max_tokens":
        max_tokens = query_int(request, "max_tokens")
        counter = counter_for(store, query_str(request, "counter") or None, "counter")
        call = engine.window_json if engine else store.window
        found = await call_store(call, sid, max_tokens or 0, counter, tenant=ctx.tenant,
                                 keep_system=query_bool(request, "keep_system"))
    elif selector == "since":
        call = engine.since_compaction_json if engine else store.since_compaction
        found = await call_store(call, sid, tenant=ctx.tenant,
                                 keep_system=query_bool(request, "keep_system"))
    elif selector == "tail":
        call = engine.tail_json if engine else store.tail
        found = await call_store(call, sid, query_int(request, "tail") or 0, tenant=ctx.tenant,
                                 include_marked=query_bool(request, "include_marked"))
    else:
        call = engine.range_json if engine else store.range
        found = await _range(ctx, call, sid, query_int(request, "start", 0) or 0,
                             query_int(request, "stop"),
                             query_bool(request, "include_marked", True))
    if engine is not None:
        return Response(b'{"messages":' + found + b"}", media_type=JSON_TYPE)
    if fmt:
        return json_response(await _formatted(ctx, fmt, found))
    return json_response(MessagesOut(found))


async def _range(ctx: Context, call: Callable[..., Any], sid: str, start: int,
                 stop: int | None, include_marked: bool) -> Any:
    """``call`` (``range`` or ``range_json``) over ``start..stop``: a 400 for a ``stop``
    before ``start``, and (the store's ``InvalidArgument``) a ``start`` past the end."""
    if stop is not None and stop < start:
        raise BadRequest(f"stop ({stop}) is before start ({start})")
    return await call_store(call, sid, start, stop, tenant=ctx.tenant,
                            include_marked=include_marked)


ASSET_MODES = ("inline", "url")
"""``?assets=``: stored attachments inlined as bytes (each at most once per response,
``Limits.inline_bytes`` in all), or as URLs of ``GET /v1/assets/{sha256}``."""


def _inline_error(message: str) -> HTTPError:
    return HTTPError(422, "inline_limit", message + ": ask with assets=url for each "
                     "attachment as the URL of GET /v1/assets/{sha256} instead of its bytes, "
                     "or without format= for the stored messages (references by sha256)")


def _check_inline(messages: list[Message], limit: int) -> None:
    """Refuse, before any asset is read, a response that would inline one stored asset
    twice or more than ``limit`` bytes of attachments (the sizes the messages record;
    the resolver checks the bytes it actually loads)."""
    first: dict[str, str] = {}
    total = 0
    for path, attachment in media(messages):
        if attachment.data is not None:  # inline in the message itself
            total += len(attachment.data)
        elif attachment.sha256 in first:
            raise _inline_error(f"attachment {attachment.sha256} at {path} was inlined at "
                                f"{first[attachment.sha256]} already (a response inlines "
                                "an asset's bytes once)")
        else:
            first[attachment.sha256] = path
            total += max(0, attachment.size)
        if total > limit:
            raise _inline_error(f"the attachments up to {path} come to over {limit} bytes, "
                                "the limit of one response")


async def _formatted(ctx: Context, fmt: str, messages: list[Message]) -> Any:
    if fmt not in FORMATS:
        raise BadRequest(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
    mode = query_str(ctx.request, "assets") or "inline"
    if mode not in ASSET_MODES:
        raise InvalidMessage(f"assets must be one of {', '.join(ASSET_MODES)}", "assets")
    module_name, function, key = FORMATS[fmt]
    try:
        module = importlib.import_module(f"chathistory.formats.{module_name}")
        convert = getattr(module, function)
    except (ImportError, AttributeError):
        raise BadRequest("format not available") from None
    store, assets, tenant = ctx.store, ctx.service.assets, ctx.tenant
    limit = ctx.service.limits.inline_bytes
    base = str(ctx.request.base_url).rstrip("/")
    loaded: set[str] = set()
    inlined = 0

    def resolver(attachment: Attachment) -> bytes | str:
        nonlocal inlined
        if mode == "url":
            return f"{base}/v1/assets/{attachment.sha256}"
        if attachment.sha256 in loaded:  # _check_inline refused it; never load twice
            raise _inline_error(f"attachment {attachment.sha256} is referenced again")
        info = assets.info(tenant, attachment.sha256)
        if info is not None and inlined + info.size > limit:
            raise _inline_error(f"attachment {attachment.sha256} takes the response over "
                                f"{limit} bytes")
        data = (assets.get(tenant, attachment.sha256) if info is not None
                else store.get_asset(attachment.sha256, tenant=tenant))
        loaded.add(attachment.sha256)
        inlined += len(data)
        if inlined > limit:
            raise _inline_error(f"attachment {attachment.sha256} takes the response over "
                                f"{limit} bytes")
        return data

    def build() -> Any:
        if mode == "inline":
            _check_inline(messages, limit)
        try:
            return convert(messages, resolver=resolver)
        except NotFound as exc:  # an attachment whose bytes are gone
            raise InvalidMessage(str(exc), "$.attachment") from None

    payload = await run(build)
    return {key: payload} if key is not None and isinstance(payload, list) else payload


async def context(ctx: Context) -> Response:
    head = query_int(ctx.request, "head", 0) or 0
    tail = query_int(ctx.request, "tail", 0) or 0
    messages = await call_store(ctx.store.context, ctx.param("session_id"), head, tail,
                                tenant=ctx.tenant)
    return json_response(MessagesOut(messages))


async def get_message(ctx: Context) -> Response:
    message = await call_store(ctx.store.get, ctx.param("session_id"), ctx.param("message_id"),
                               tenant=ctx.tenant)
    return json_response(message)


async def pop(ctx: Context) -> Response:
    sid = ctx.param("session_id")
    expected = if_match(ctx.request)
    message = await guarded(ctx, sid, expected, ctx.store.pop, sid, tenant=ctx.tenant)
    return json_response(PopOut(message))


async def delete_message(ctx: Context) -> Response:
    sid = ctx.param("session_id")
    expected = if_match(ctx.request)
    session = await guarded(ctx, sid, expected, ctx.store.delete_message, sid,
                            ctx.param("message_id"), tenant=ctx.tenant)
    return session_response(session)


async def clear(ctx: Context) -> Response:
    version = await call_store(ctx.store.clear, ctx.param("session_id"), tenant=ctx.tenant)
    return json_response(VersionOut(version), headers=etag(version))


async def mark(ctx: Context) -> Response:
    body = await ctx.json(MarkBody)
    changed = await call_store(ctx.store.mark, ctx.param("session_id"), body.ids,
                               KVStatus(body.status), tenant=ctx.tenant)
    return json_response(MarkOut(changed))


async def reduce(ctx: Context) -> Response:
    body = await ctx.json(ReduceBody)
    return json_response(await run(reduce_session, ctx.store, ctx.tenant,
                                   ctx.param("session_id"), body))


async def window(ctx: Context) -> Response:
    expected = if_match(ctx.request)
    body = await ctx.json(WindowBody)
    plan = await run(plan_window, ctx.store, ctx.tenant, ctx.param("session_id"), body,
                     expected)
    return json_response(plan)


_SELECTORS = (
    Param("tail", "integer", "the newest N messages, widened to whole groups",
          schema=QUERY_COUNT),
    Param("max_tokens", "integer", "the newest messages within N tokens (reply priming "
          "included), whole groups only", schema=QUERY_COUNT),
    Param("counter", description="with max_tokens: the tokenizer (default: the store's)",
          schema=QUERY_COUNTER),
    Param("since", schema={"enum": list(SINCE)},
          description="compaction: from the newest message holding a provider's "
          "compaction (a `compaction` part) on, widened back to whole groups, marked messages "
          "included; the whole session when it holds none"),
    Param("keep_system", "boolean", "with max_tokens or since: keep system and developer "
          "messages (with since: those before the compaction, first)"),
    Param("start", "integer", "messages at positions start..stop (0 = oldest)",
          schema=QUERY_COUNT),
    Param("stop", "integer", "with start: the end position (exclusive)", schema=QUERY_COUNT),
    Param("include_marked", "boolean", "with tail or start: include marked messages"),
    Param("format", schema={"enum": ["", *FORMATS]},
          description="openai_chat | openai_responses | anthropic | gemini: answer in that "
          "provider's request shape (empty: chathistory's)"),
    Param("assets", schema={"enum": ["", *ASSET_MODES]},
          description="with format: inline (default; each stored attachment's bytes at most "
          "once per response, Limits.inline_bytes in all, else 422) | url "
          "(the URL of GET /v1/assets/{sha256} instead)"),
)

ROUTES = [
    Endpoint("POST", MESSAGES, append, "Append messages (atomic; idempotent by message id)",
             body=(AppendBody, *(body for body, _, _ in INPUT_FORMATS.values())),
             responses={200: VersionOut}, if_match=True,
             query=(Param("format", schema={"enum": ["", *INPUT_FORMATS]}, description=(
                 "openai_chat | openai_responses | anthropic | gemini: the body carries that "
                 "provider's request fields instead of `messages` of chathistory's shape, as "
                 "a read with the same format returns them (openai_chat: `messages`; "
                 "openai_responses: `input`; anthropic: `system`, `messages`; gemini: "
                 "`contents`, `system_instruction`), with `state`, `reject_orphans` and "
                 "`id_prefix` (ids <id_prefix>-0, -1, ... in order: without it a retry "
                 "stores the messages again, as they carry no ids)")),)),
    Endpoint("GET", MESSAGES, read_messages, "Read messages with exactly one selector",
             responses={200: (MessagesOut, JSON_TYPE)}, query=_SELECTORS),
    Endpoint("DELETE", MESSAGES, clear, "Remove every message", responses={200: VersionOut}),
    Endpoint("GET", SESSION + "/context", context,
             "The first head positions, system/developer messages and the newest tail",
             responses={200: MessagesOut},
             query=(Param("head", "integer", schema=QUERY_COUNT),
                    Param("tail", "integer", schema=QUERY_COUNT))),
    Endpoint("GET", MESSAGES + "/{message_id}", get_message, "Read one message",
             responses={200: Message}),
    Endpoint("DELETE", MESSAGES + "/{message_id}", delete_message,
             "Delete one message, from anywhere in the session, at once: later messages "
             "move down a position; answers the session", responses={200: Session},
             if_match=True),
    Endpoint("POST", SESSION + "/pop", pop, "Remove and return the newest message",
             responses={200: PopOut}, if_match=True),
    Endpoint("POST", SESSION + "/mark", mark, "Set the KV status of messages (whole groups)",
             body=MarkBody, responses={200: MarkOut}),
    Endpoint("POST", SESSION + "/reduce", reduce,
             "Run a reducer and mark what it removes (nothing is deleted)",
             body=ReduceBody, responses={200: ReduceOut}),
    Endpoint("POST", SESSION + "/window", window,
             "Plan this turn's context window; evicted messages are marked",
             body=WindowBody, responses={200: WindowPlan}, if_match=True),
]
