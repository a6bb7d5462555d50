"""Reading requests and writing answers: bodies under a size limit, JSON decoded
with msgspec into the API's structs (bad input -> the path of the field),
query parameters, ``If-Match`` and ``ETag``."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import difflib
import functools
import operator
import re
import types
import typing
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from ..errors import InvalidMessage
from ..model import Message
from ..model.codec import invalid_from
from ..stores.model import Session
from .errors import BadRequest, HTTPError
from .work import HEAVY_BODY, SMALL_BODY, decode_elsewhere

__all__ = [
    "BODY_IDLE_SECONDS",
    "BODY_TIMEOUT",
    "IF_MATCH_PATTERN",
    "JSON_TYPE",
    "PARTS_HINT",
    "QUERY_COUNT",
    "body_chunks",
    "decode_json",
    "encode_session",
    "etag",
    "if_match",
    "json_response",
    "location",
    "query_bool",
    "query_int",
    "read_body",
    "session_response",
    "strict",
    "url_safe_id",
]

T = TypeVar("T")
JSON_TYPE = "application/json"
_encoder = msgspec.json.Encoder()
_decoders: dict[Any, tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]] = {}


def too_large(limit: int) -> HTTPError:
    return HTTPError(413, "payload_too_large", f"the request body is over {limit} bytes")


def check_json_type(request: Request) -> None:
    """415 unless the body is declared JSON (or not declared at all)."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";")[0].strip().lower()
    if media != JSON_TYPE and not media.endswith("+json"):
        raise HTTPError(415, "unsupported_media_type",
                        f"send {JSON_TYPE}, not {media or 'an empty content type'}")


BODY_COMPLETE = "chathistory.body_complete"
"""Scope key that the server's connection (``connections.Connection``) sets once a
request's whole body has been received: reading it then never waits, and
``body_chunks`` skips its idle timer (``asyncio.timeout``: 4 us a chunk, two or three
chunks a request)."""
BODY_IDLE_SECONDS = 15.0
"""A request body that sends nothing for this long is answered 408 (a slow client
holds only its own coroutine meanwhile, never a worker thread), unless the server's
connection says otherwise (``BODY_TIMEOUT``: ``chathistory serve --body-timeout``)."""
BODY_TIMEOUT = "chathistory.body_timeout"
"""Scope key: the seconds a request body may send nothing, set by the connection
(``connections.ConnectionLimits.body_timeout``) when not ``BODY_IDLE_SECONDS``."""


async def body_chunks(request: Request) -> AsyncIterator[bytes]:
    """The body's chunks as they come, each waited for at most ``BODY_IDLE_SECONDS``
    (or the scope's ``BODY_TIMEOUT``; without the timer once the server says the whole
    body is in: ``BODY_COMPLETE``)."""
    stream = request.stream().__aiter__()
    scope = request.scope
    idle = scope.get(BODY_TIMEOUT) or BODY_IDLE_SECONDS
    while True:
        try:
            # every byte is here once BODY_COMPLETE: the next chunk is too
            async with (contextlib.nullcontext() if scope.get(BODY_COMPLETE)
                        else asyncio.timeout(idle)):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise HTTPError(408, "request_timeout", "the request body sent nothing for "
                            f"{idle:g} s") from None
        yield chunk


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in body_chunks(request):
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def decode_json(body: bytes, type: type[T]) -> T:
    """``body`` decoded into ``type``: 400 for bytes that are not JSON (malformed,
    not UTF-8, nested too deeply), 422 with the path for a wrong field, and for an
    unknown field at any depth (the library's structs ignore fields they do not know,
    for documents of newer releases; the API refuses them: see ``strict``)."""
    decoders = _decoders.get(type)
    if decoders is None:
        decoders = _decoders[type] = (msgspec.json.Decoder(type),
                                      msgspec.json.Decoder(strict(type)))
    if not body.strip():
        raise HTTPError(400, "invalid_json", "the request needs a JSON body")
    try:
        value: T = decoders[0].decode(body)
        decoders[1].decode(body)
    except msgspec.ValidationError as exc:
        value = _with_integral_floats(body, decoders, exc)
        if value is None:
            raise _invalid(exc, type) from None
    except msgspec.DecodeError as exc:
        raise HTTPError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HTTPError(400, "invalid_json", "the JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise HTTPError(400, "invalid_json", "the body is not valid UTF-8") from None
    return value


_INT_GOT_FLOAT = re.compile(r"^Expected `int[^`]*`, got `float`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
MAX_INTEGRAL_FLOATS = 100
"""The most integral floats (``1.0``) one body may give for integer fields."""


def _with_integral_floats(body: bytes, decoders: tuple[msgspec.json.Decoder[Any], ...],
                          exc: msgspec.ValidationError) -> Any:
    """``body`` decoded with each integral float that msgspec refused for an integer
    field made an integer, or None when a refused value is not an integral float (or
    cannot be located). ``1.0`` is an integer to JSON Schema, so to the OpenAPI
    document, and it is what some clients' JSON encoders write for one; a float
    elsewhere (a metadata value) is left as it is."""
    document: Any = None
    for _ in range(MAX_INTEGRAL_FLOATS):
        error = invalid_from(exc)
        if not _INT_GOT_FLOAT.match(error.reason):
            return None
        if document is None:
            document = msgspec.json.decode(body)
        parent, key = None, None
        node = document
        rest = error.path[1:]
        for step in _STEP.finditer(rest):
            parent, key = node, step.group(1) if step.group(1) is not None else int(step.group(2))
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                return None
        if parent is None or "".join(s.group(0) for s in _STEP.finditer(rest)) != rest \
                or not isinstance(node, float) or not node.is_integer():
            return None
        parent[key] = int(node)
        again = msgspec.json.encode(document)
        try:
            value = decoders[0].decode(again)
            decoders[1].decode(again)
            return value
        except msgspec.ValidationError as next_exc:
            exc = next_exc
    return None


_UNKNOWN = re.compile(r"^Object contains unknown field `(.*)`$", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[\d+\]")
PARTS_HINT = ("a message's content goes in `parts`, a list of typed parts "
              '([{"type": "text", "text": "..."}])')
"""What an unknown ``content`` (or ``type``) of a message gets told: the shape of
OpenAI's, Anthropic's or the Responses API's messages was sent."""


def _invalid(exc: msgspec.ValidationError, type: Any) -> InvalidMessage:
    """The 422 of a validation error; an unknown field is named in the path
    (``$.messages[0].nmae``), with the known field it may be a typo of."""
    error = invalid_from(exc)
    unknown = _UNKNOWN.match(error.reason)
    if unknown is None:
        return error
    name = unknown.group(1)
    owner = _struct_at(type, error.path)
    if owner is Message and name in ("content", "type"):
        hint = f": {PARTS_HINT}"
    else:
        known = ([f.encode_name for f in msgspec.structs.fields(owner)] if owner is not None
                 else _field_names(type))
        close = difflib.get_close_matches(name, [k for k in known if k != name], n=1,
                                          cutoff=0.75)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
    return InvalidMessage(f"unknown field `{name}`{hint}", f"{error.path}.{name}")


def _struct_at(type: Any, path: str) -> Any:
    """The struct class a body of ``type`` has at ``path`` (``$.messages[0]``), or None
    when the path runs through a union of structs (which one is the value's tag)."""
    t = type
    for segment in _SEGMENT.finditer(path[1:]):
        t = _one(t)
        if t is None:
            return None
        if segment.group(1) is not None:
            if not (isinstance(t, builtins.type) and issubclass(t, msgspec.Struct)):
                return None
            by_name = {f.encode_name: f.type for f in msgspec.structs.fields(t)}
            if segment.group(1) not in by_name:
                return None
            t = by_name[segment.group(1)]
        elif typing.get_origin(t) is list:
            t = typing.get_args(t)[0]
        else:
            return None
    t = _one(t)
    return t if isinstance(t, builtins.type) and issubclass(t, msgspec.Struct) else None


def _one(type: Any) -> Any:
    """``type`` without ``Annotated`` and ``| None``; None for a union of several."""
    if typing.get_origin(type) is typing.Annotated:
        type = typing.get_args(type)[0]
    if typing.get_origin(type) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(type) if a is not builtins.type(None)]
        return _one(members[0]) if len(members) == 1 else None
    return type


# ---------------------------------------------------------------- strict twins

_twins: dict[Any, Any] = {}


def strict(type: Any) -> Any:
    """``type`` with every struct in it refusing unknown fields, for a second decode
    of a request body that only looks for them: each struct gets a twin with the same
    encoded field names, tags and shape (lists, dicts, unions of structs), every field
    optional and every other value ``msgspec.Raw`` (kept as bytes, never converted:
    the first decode, into the real type, checked values and required fields). The
    library's structs stay lenient (``docs/schema.md``: readers ignore fields they do
    not know), the API is strict at every depth."""
    origin = typing.get_origin(type)
    if origin is typing.Annotated:
        return strict(typing.get_args(type)[0])
    if not _has_struct(type):
        return msgspec.Raw
    if isinstance(type, builtins.type) and issubclass(type, msgspec.Struct):
        return _twin(type)
    args = typing.get_args(type)
    if origin is list:
        return list[strict(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict[args[0], strict(args[1])]  # type: ignore[misc,valid-type]
    if origin in (typing.Union, types.UnionType):
        members = tuple(strict(a) if _has_struct(a) else a for a in args)
        return functools.reduce(operator.or_, members)
    raise TypeError(f"no strict twin for {type!r}")


def _twin(struct: builtins.type[msgspec.Struct]) -> Any:
    twin = _twins.get(struct)
    if twin is None:
        config = struct.__struct_config__
        fields = [(f.name, strict(f.type), msgspec.field(default=None, name=f.encode_name))
                  for f in msgspec.structs.fields(struct)]
        twin = _twins[struct] = msgspec.defstruct(
            f"Strict{struct.__name__}", fields, kw_only=True, forbid_unknown_fields=True,
            tag_field=config.tag_field, tag=config.tag)
    return twin


def _has_struct(type: Any) -> bool:
    if isinstance(type, builtins.type) and issubclass(type, msgspec.Struct):
        return True
    return any(_has_struct(a) for a in typing.get_args(type)
               if not isinstance(a, msgspec.Meta))


@functools.cache
def _field_names(type: Any) -> tuple[str, ...]:
    """Every encoded field name of the structs in ``type`` (for "did you mean")."""
    names: set[str] = set()
    pending = [type]
    while pending:
        t = pending.pop()
        if isinstance(t, builtins.type) and issubclass(t, msgspec.Struct):
            for f in msgspec.structs.fields(t):
                if f.encode_name not in names:
                    names.add(f.encode_name)
                    pending.append(f.type)
        else:
            pending.extend(a for a in typing.get_args(t) if not isinstance(a, msgspec.Meta))
    return tuple(sorted(names))


async def json_body(request: Request, type: type[T], limit: int) -> T:
    """Check the content type, read under ``limit``, decode into ``type`` (a body
    larger than ``work.SMALL_BODY`` in the work pool, not on the loop; one of at least
    ``work.HEAVY_BODY`` in the counting process)."""
    value, _ = await json_body_counted(request, type, limit, None)
    return value


async def json_body_counted(request: Request, type: type[T], limit: int,
                            counter: str | None
                            ) -> tuple[T, list[dict[str, int] | None] | None]:
    """``json_body``, and for a body decoded in the counting process whose ``type``
    holds ``messages``, each message's counts by the counter named ``counter``, made
    there after clearing the client's (``work.decode_elsewhere``); None otherwise."""
    check_json_type(request)
    body = await read_body(request, limit)
    if len(body) <= SMALL_BODY:
        return decode_json(body, type), None
    from .app import run

    if len(body) >= HEAVY_BODY:
        done = await run(decode_elsewhere, body, type, counter)
        if done is not None:
            return done
    return await run(decode_json, body, type), None


def json_response(value: Any, status: int = 200, headers: Mapping[str, str] | None = None
                  ) -> Response:
    return Response(_encoder.encode(value), status_code=status, headers=headers,
                    media_type=JSON_TYPE)


def encode_session(session: Session) -> bytes:
    """``Session.to_dict()`` as JSON (schema_version first), without the detour via dicts."""
    return b'{"schema_version":1,' + _encoder.encode(session)[1:]


def etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def session_response(session: Session, status: int = 200) -> Response:
    return Response(encode_session(session), status_code=status, headers=etag(session.version),
                    media_type=JSON_TYPE)


IF_MATCH_PATTERN = r'^(?:\*|(?:W/)?"[0-9]{1,18}"|[0-9]{1,18})$'
"""The ``If-Match`` values a write takes (the OpenAPI document's pattern): ``*`` (any
version), a session version as an entity tag, ``"3"`` or ``W/"3"``, or bare, ``3``."""
_IF_MATCH = re.compile(IF_MATCH_PATTERN)


def if_match(request: Request) -> int | None:
    """The version named by ``If-Match`` (``IF_MATCH_PATTERN``); None without one or
    for ``*``."""
    raw = request.headers.get("if-match")
    if raw is None:
        return None
    if not _IF_MATCH.fullmatch(raw):
        raise BadRequest("If-Match must be a session version, e.g. \"3\"")
    return None if raw == "*" else int(raw.removeprefix("W/").strip('"'))


def query_str(request: Request, name: str) -> str | None:
    """The value of a query parameter that may be given once (given twice is ambiguous:
    a 400 naming it, never one of the values picked silently)."""
    if not request.scope.get("query_string"):  # none (most appends): nothing to parse
        return None
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise BadRequest(f"query parameter {name} is given {len(values)} times; give it once")
    return values[0] if values else None


QUERY_COUNT = {"minimum": 0, "maximum": 2**53}
"""The schema of an integer query parameter ``query_int`` reads with its default bounds."""


def query_int(request: Request, name: str, default: int | None = None, *, low: int = 0,
              high: int = 2**53) -> int | None:
    raw = query_str(request, name)
    if raw is None:
        return default
    try:  # "?tail=" is not an integer either
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name} must be an integer") from None
    if not low <= value <= high:
        raise BadRequest(f"query parameter {name} must be between {low} and {high}")
    return value


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    raw = query_str(request, name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"query parameter {name} must be true or false")


def query_json_value(raw: str) -> Any:
    """A ``metadata.<k>=`` filter value: JSON when it parses (``true``, ``3``,
    ``"x"``), else the string itself."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return raw


def metadata_filters(request: Request) -> dict[str, Any] | None:
    """The ``metadata.<key>=<value>`` parameters as a filter (``query_json_value``
    each), or None without any."""
    found = {k[len("metadata."):]: query_json_value(query_str(request, k) or "")
             for k in request.query_params if k.startswith("metadata.")}
    return found or None


def utf16_offsets(text: str) -> list[int]:
    """For every offset of ``text`` in code points (0 to ``len(text)``), that offset in
    UTF-16 code units: JavaScript's string indices, which the API's marks are in."""
    out = [0]
    for ch in text:
        out.append(out[-1] + (2 if ord(ch) > 0xFFFF else 1))
    return out


def utf16_marks(text: str, marks: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end)`` marks of ``text`` in code points, in UTF-16 code units."""
    units = utf16_offsets(text)
    return [(units[start], units[end]) for start, end in marks]


def url_safe_id(value: str | None, path: str) -> str | None:
    """``value`` if it can be a segment of the API's URLs: no ``/``, not ``.`` or ``..``
    (else a client could create a session it can never reach again)."""
    if value is not None and ("/" in value or value in (".", "..")):
        raise InvalidMessage("an id used in URLs may not contain '/' nor be '.' or '..'", path)
    return value


def location(path: str, *ids: str) -> str:
    """``path`` with ``{}`` filled by ``ids``, percent-encoded: a ``Location`` header
    (an id may hold spaces, non-ASCII or control characters that a header cannot)."""
    return path.format(*(quote(i, safe="") for i in ids))


def rerooted(exc: InvalidMessage, prefix: str) -> InvalidMessage:
    """An engine error about ``$[i]...`` re-rooted below the body's field ``prefix``."""
    return exc.under(prefix) if exc.path.startswith("$[") else exc
