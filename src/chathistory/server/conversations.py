"""OpenAI's Conversations API, served over the stores (``create_app(openai_prefix=...)``).

Any OpenAI SDK client uses chathistory by pointing its ``base_url`` at
``<server>/openai/v1`` (the default prefix): ``client.conversations`` and
``client.conversations.items``, and the Agents SDK's ``OpenAIConversationsSession``.

The mapping (docs/api.md, "OpenAI Conversations API", says it for users):

- a conversation is a session (id ``conv_`` + 48 hex), its metadata the session's;
  ``created_at`` in Unix seconds;
- an item is one message whose id is the item's id, stored through
  ``formats.responses_items`` (the item kept exactly, role and parts decoded for
  everything else that reads the session); ``conversations_items`` completes and
  checks items and shows messages written elsewhere as items (under ids that
  cannot collide: ``conversations_items.listed_id``);
- ``items.create`` answers the items the conversation then holds under the batch's
  ids, each once: an id already held is a no-op answered as held, never as sent;
- lists page by item over positions (the store's row reads, never the whole
  session per page); pages may part a call from its output, as OpenAI's do;
- errors in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``) with
  OpenAI's statuses (bad input 400 with ``param`` naming the field); the key,
  tenants, limits and the work pool as for ``/v1``; in open mode a credential that
  is no key is ignored (the SDK must send one).

Where the work runs: every store call and every conversion of items (CPU) in the
work pool (``call_store``, ``run``), counted against the tenant; the loop only
parses, routes and sends.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from ..assets import FileAssetStore
from ..errors import InvalidMessage, NotFound
from ..model import Attachment, Message
from ..stores.base import Store
from ..stores.engine import Engine
from ..stores.lifecycle import BOOKKEEPING_KEY
from ..stores.model import Session
from .app import Context, Endpoint, ErrorStyle, Param, call_store, run
from .conversations_items import (
    INCLUDABLE,
    MAX_ITEMS,
    check_include,
    check_metadata,
    is_reserved,
    listed_items,
    locate_id,
    reserved_id,
    stored_items,
)
from .errors import HTTPError, error_headers, status_of
from .logging import logger
from .wire import JSON_TYPE, json_response, query_str

__all__ = ["endpoints"]

TAG = "OpenAI Conversations"
JOURNAL = BOOKKEEPING_KEY + ".conversations"
"""``Session.state`` key of an item deletion by an earlier release, which took the later
messages off and put them back (the messages to put back): one a crash interrupted is
finished by the conversation's next request (``_restored``), so databases it left heal.
Deletions write none now (the store deletes a message at once: ``delete_message``)."""


_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")


# ---------------------------------------------------------------- bodies and answers


class ConversationCreateBody(msgspec.Struct, kw_only=True):
    """``POST /conversations``: up to 20 initial items and metadata."""

    items: list[Any] | None = None
    metadata: dict[str, Any] | None = None


class ConversationUpdateBody(msgspec.Struct, kw_only=True):
    """``POST /conversations/{id}``: the new metadata (replaces the old; null clears it)."""

    metadata: dict[str, Any] | None


class ItemsCreateBody(msgspec.Struct, kw_only=True):
    """``POST /conversations/{id}/items``: up to 20 Responses items."""

    items: list[Any]


class OpenAIConversation(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    metadata: dict[str, Any]
    object: str = "conversation"


class OpenAIConversationDeleted(msgspec.Struct, kw_only=True):
    id: str
    deleted: bool = True
    object: str = "conversation.deleted"


class OpenAIItemList(msgspec.Struct, kw_only=True):
    """A page of items: ``first_id`` / ``last_id`` are null when ``data`` is empty."""

    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


class OpenAIErrorDetail(msgspec.Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(msgspec.Struct):
    error: OpenAIErrorDetail


# ---------------------------------------------------------------- errors


def _param(path: str) -> str | None:
    """``$.items[0].content`` -> ``items[0].content``; ``$`` -> None."""
    if path in ("", "$"):
        return None
    return path[2:] if path.startswith("$.") else path


def openai_error(exc: BaseException, request_id: str) -> Response:
    """``exc`` answered as OpenAI answers: invalid input is a 400 naming the field in
    ``param``; statuses otherwise as for ``/v1`` (``errors.STATUS``)."""
    status, kind = status_of(exc)
    param = None
    if isinstance(exc, InvalidMessage):
        status, param = 400, _param(exc.path)
        message = exc.reason
    elif isinstance(exc, HTTPError):
        message = exc.message
    else:
        message = str(exc)
    if status >= 500:
        logger.error("request failed", exc_info=exc, extra={"request_id": request_id})
        if status == 500:
            message = f"internal error; quote request id {request_id}"
    code = "invalid_api_key" if status == 401 else kind
    detail = OpenAIErrorDetail(
        message=message, param=param, code=code,
        type="server_error" if status >= 500 else "invalid_request_error")
    return json_response(OpenAIErrorBody(detail), status, error_headers(exc))


ERRORS = ErrorStyle(openai_error, OpenAIErrorBody)


def _no_conversation(session_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{session_id}' not found.")


def _no_item(item_id: str, session_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found in conversation '{session_id}'.")


# ---------------------------------------------------------------- store side (work pool)


def _conversation(session: Session) -> OpenAIConversation:
    return OpenAIConversation(id=session.id, created_at=int(session.created_at.timestamp()),
                              metadata=session.metadata)


def _session(store: Store, session_id: str, tenant: str) -> Session:
    """The session, with a deletion an older release left unfinished finished first
    (``JOURNAL``)."""
    try:
        session = store.get_session(session_id, tenant=tenant)
    except NotFound:
        raise _no_conversation(session_id) from None
    return _restored(store, session)


class _Reader:
    """A conversation's messages by position. An engine store reads the rows at the
    positions asked (``range()`` widens to whole groups and leaves orphan results out:
    a list pages by item); another store (an HTTP client) is read whole, once."""

    def __init__(self, store: Store, session: Session,
                 resolver: Callable[[Attachment], bytes | str]) -> None:
        self.store, self.session, self.resolver = store, session, resolver
        self.count = session.message_count
        self._all: list[Message] | None = None
        self._items: dict[str, list[dict[str, Any]]] = {}
        if not isinstance(store, Engine):
            self._everything()

    def _everything(self) -> list[Message]:
        if self._all is None:
            self._all = self.store.range(self.session.id, tenant=self.session.tenant)
            self.count = len(self._all)
        return self._all

    def read(self, lo: int, hi: int) -> list[Message]:
        if isinstance(self.store, Engine):
            return self.store._decode(self.store._read(self.session, lo, hi))
        return self._everything()[lo:hi]

    def find(self, message_id: str) -> tuple[int, Message] | None:
        if isinstance(self.store, Engine):
            row = self.store._find_row(self.session, message_id)
            return None if row is None else (row.seq, self.store._decode([row])[0])
        return next(((i, m) for i, m in enumerate(self._everything()) if m.id == message_id),
                    None)

    def items(self, message: Message) -> list[dict[str, Any]]:
        """The items ``message`` shows (made once per request: attachments are read)."""
        found = self._items.get(message.id)
        if found is None:
            found = self._items[message.id] = listed_items(message, self.resolver)
        return found

    def locate(self, item_id: str) -> tuple[int, Message, int | None] | None:
        """The position and message of item ``item_id``, and which of the message's
        items it is (None: its only one)."""
        place = locate_id(item_id)
        if place is None:
            return None
        message_id, k = place
        found = self.find(message_id)
        if found is None:
            return None
        count = len(self.items(found[1]))
        if (k is None and count == 1) or (k is not None and count > 1 and k < count):
            return found[0], found[1], k
        return None

    def item(self, item_id: str) -> dict[str, Any] | None:
        """Item ``item_id`` as listed, or None."""
        found = self.locate(item_id)
        if found is None:
            return None
        _, message, k = found
        return self.items(message)[k or 0]


def _page(reader: _Reader, after: str | None, limit: int, descending: bool
          ) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` items after item ``after`` in the order asked, and whether more
    follow: ``limit + 1`` items are gathered, reading ``limit + 1`` messages at a time."""
    want = limit + 1
    out: list[dict[str, Any]] = []
    if after is None:
        next_pos = reader.count - 1 if descending else 0
    else:
        found = reader.locate(after)
        if found is None:
            raise InvalidMessage(f"no item {after!r} in this conversation", "after")
        pos, message, k = found
        items = reader.items(message)
        index = k if k is not None else (0 if descending else len(items) - 1)
        out.extend(reversed(items[:index]) if descending else items[index + 1:])
        next_pos = pos - 1 if descending else pos + 1
    while len(out) < want:
        if descending:
            if next_pos < 0:
                break
            lo = max(0, next_pos + 1 - want)
            for message in reversed(reader.read(lo, next_pos + 1)):
                out.extend(reversed(reader.items(message)))
            next_pos = lo - 1
        else:
            if next_pos >= reader.count:
                break
            hi = min(reader.count, next_pos + want)
            for message in reader.read(next_pos, hi):
                out.extend(reader.items(message))
            next_pos = hi
    return out[:limit], len(out) > limit


def _resolver(store: Store, assets: FileAssetStore, tenant: str, limit: int, base: str
              ) -> Callable[[Attachment], bytes | str]:
    """Stored attachments of messages written elsewhere: their bytes, up to ``limit``
    bytes in one answer; past it, the URL of ``GET /v1/assets/{sha256}``. A reference
    whose bytes nothing holds (written before writes checked references, or imported
    without its upload) is that URL too, which answers 404 until the bytes are uploaded:
    the item is listed with its reference and no content, rather than the whole
    conversation failing."""
    inlined = 0

    def resolve(attachment: Attachment) -> bytes | str:
        nonlocal inlined
        url = f"{base}/v1/assets/{attachment.sha256}"
        if inlined + max(0, attachment.size) > limit:
            return url
        try:
            info = assets.info(tenant, attachment.sha256)
            data = (assets.get(tenant, attachment.sha256) if info is not None
                    else store.get_asset(attachment.sha256, tenant=tenant))
        except NotFound:
            return url
        inlined += len(data)
        return data

    return resolve


def _create(store: Store, tenant: str, messages: list[Message],
            metadata: dict[str, str]) -> Session:
    session = store.create_session(f"conv_{secrets.token_hex(24)}", tenant=tenant,
                                   metadata=metadata)
    if messages:
        try:
            store.append(session.id, messages, tenant=tenant)
        except BaseException:
            store.delete_session(session.id, tenant=tenant)  # nothing of a refused request
            raise
    return session


def _append(store: Store, session_id: str, tenant: str, messages: list[Message]) -> None:
    try:
        store.append(session_id, messages, tenant=tenant)
    except NotFound:
        raise _no_conversation(session_id) from None


def _added(open_reader: Callable[[], _Reader], messages: list[Message]
           ) -> list[dict[str, Any]]:
    """Store the batch's items the conversation lacks, and answer the items it then
    holds under the batch's ids, each once, in the batch's order: an id already held
    is answered as held, never as the copy sent (the store keeps the first of an id).

    Checked before anything is stored (a batch is atomic): an id of the reserved
    form must name an item listed, and an id may not be that of a message that
    shows as several items (it names none of them)."""
    reader = open_reader()
    firsts: dict[str, int] = {}
    for i, message in enumerate(messages):
        firsts.setdefault(message.id, i)
    held: dict[str, dict[str, Any]] = {}
    fresh: list[Message] = []
    for item_id, i in firsts.items():
        path = f"$.items[{i}].id"
        if is_reserved(item_id):
            item = reader.item(item_id)
            if item is None:
                raise reserved_id(item_id, path)
            held[item_id] = item
            continue
        existing = reader.find(item_id)
        if existing is None:
            fresh.append(messages[i])
            continue
        items = reader.items(existing[1])
        if len(items) > 1:
            raise InvalidMessage(
                f"id {item_id!r} is that of a message written through /v1 that shows as "
                f"{len(items)} items ({', '.join(item['id'] for item in items)}), not an "
                "item's; choose another", path)
        held[item_id] = items[0]
    if fresh:
        session = reader.session
        _append(reader.store, session.id, session.tenant, fresh)
        held.update(_read_back(open_reader(), [message.id for message in fresh]))
    return [held[item_id] for item_id in firsts if item_id in held]


def _read_back(reader: _Reader, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The items listed under ``ids`` (ids of items just appended, each its message's
    only item), as stored: read from the end, where the append put them, and any not
    there (a write landed after them) found one by one; one deleted since is left out."""
    wanted = set(ids)
    out: dict[str, dict[str, Any]] = {}
    for message in reader.read(max(0, reader.count - len(ids)), reader.count):
        items = reader.items(message) if message.id in wanted else []
        if len(items) == 1:
            out[message.id] = items[0]
    for item_id in wanted - out.keys():
        item = reader.item(item_id)
        if item is not None:
            out[item_id] = item
    return out


def _delete_item(reader: _Reader, item_id: str) -> Session:
    """Remove item ``item_id`` (a message's only item) from wherever it is: the store
    deletes its message at once (``delete_message``), so a write or a read of the
    conversation meanwhile, through this API or ``/v1``, sees it before or after,
    never half-way, and nothing written meanwhile is reordered."""
    store, session = reader.store, reader.session
    sid, tenant = session.id, session.tenant
    found = reader.locate(item_id)
    if found is None:
        raise _no_item(item_id, sid)
    _, message, k = found
    if k is not None:
        raise InvalidMessage(f"item {item_id!r} is one of the items of message "
                             f"{message.id!r}, written through /v1; remove the message "
                             "there", "item_id")
    try:
        return store.delete_message(sid, message.id, tenant=tenant)
    except NotFound:  # deleted meanwhile (or the conversation)
        raise _no_item(item_id, sid) from None


def _restored(store: Store, session: Session) -> Session:
    """``session`` with the messages a deletion of an older release took off put back
    (those still there are skipped: appends are idempotent by id) and its journal gone."""
    journal = session.state.get(JOURNAL)
    if not isinstance(journal, dict):
        return session
    state = {key: value for key, value in session.state.items() if key != JOURNAL}
    later = msgspec.json.decode(journal["restore"], type=list[Message])
    store.append(session.id, later, tenant=session.tenant, state=state)
    current = store.get_session(session.id, tenant=session.tenant)
    if JOURNAL in current.state:  # every message was there: the append changed nothing
        current = store.update_session(session.id, tenant=session.tenant, state=state)
    return current


# ---------------------------------------------------------------- routes


def _reader_for(ctx: Context, session_id: str) -> Callable[[], _Reader]:
    """A function (for the work pool) reading the session and making its ``_Reader``."""
    store, tenant = ctx.store, ctx.tenant
    resolver = _resolver(store, ctx.service.assets, tenant, ctx.service.limits.inline_bytes,
                         str(ctx.request.base_url).rstrip("/"))
    return lambda: _Reader(store, _session(store, session_id, tenant), resolver)


def _include(request: Request) -> None:
    params = request.query_params
    check_include([*params.getlist("include"), *params.getlist("include[]")])


def _limit(request: Request) -> int:
    raw = query_str(request, "limit")
    if raw is None:
        return 20
    try:
        value = int(raw)
    except ValueError:
        raise InvalidMessage("limit must be an integer from 1 to 100", "limit") from None
    if not 1 <= value <= 100:
        raise InvalidMessage("limit must be from 1 to 100", "limit")
    return value


async def _body(ctx: Context, type: type[Any]) -> Any:
    """The JSON body; an empty one (no ``Content-Length``, or 0) is ``{}``."""
    headers = ctx.request.headers
    if headers.get("content-length", "0" if "transfer-encoding" not in headers else "") == "0":
        return msgspec.convert({}, type)
    return await ctx.json(type)


def _list(items: Sequence[dict[str, Any]], has_more: bool = False) -> Response:
    first = items[0]["id"] if items else None
    last = items[-1]["id"] if items else None
    return json_response(OpenAIItemList(data=list(items), first_id=first, last_id=last,
                                        has_more=has_more))


async def create_conversation(ctx: Context) -> Response:
    body = await _body(ctx, ConversationCreateBody)
    metadata = check_metadata(body.metadata)
    messages = await run(stored_items, body.items or []) if body.items else []
    session = await call_store(_create, ctx.store, ctx.tenant, messages, metadata)
    return json_response(_conversation(session))


async def get_conversation(ctx: Context) -> Response:
    session = await call_store(_session, ctx.store, ctx.param("conversation_id"), ctx.tenant)
    return json_response(_conversation(session))


async def update_conversation(ctx: Context) -> Response:
    sid = ctx.param("conversation_id")
    body = await ctx.json(ConversationUpdateBody)
    metadata = check_metadata(body.metadata)

    def update() -> Session:
        try:
            return ctx.store.update_session(sid, tenant=ctx.tenant, metadata=metadata)
        except NotFound:
            raise _no_conversation(sid) from None

    return json_response(_conversation(await call_store(update)))


async def delete_conversation(ctx: Context) -> Response:
    sid = ctx.param("conversation_id")

    def delete() -> None:
        try:
            ctx.store.delete_session(sid, tenant=ctx.tenant)
        except NotFound:
            raise _no_conversation(sid) from None

    await call_store(delete)
    return json_response(OpenAIConversationDeleted(id=sid))


async def create_items(ctx: Context) -> Response:
    sid = ctx.param("conversation_id")
    _include(ctx.request)
    body = await ctx.json(ItemsCreateBody)
    if not body.items:  # OpenAI's minimum; and an empty answer has no first_id to give
        raise InvalidMessage(f"items must hold 1 to {MAX_ITEMS} items, not none", "$.items")
    messages = await run(stored_items, body.items, reserved_ok=True)
    reader = _reader_for(ctx, sid)
    return _list(await call_store(_added, reader, messages))


async def list_items(ctx: Context) -> Response:
    request = ctx.request
    _include(request)
    limit = _limit(request)
    order = query_str(request, "order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidMessage("order must be asc or desc", "order")
    after = query_str(request, "after") or None
    reader = _reader_for(ctx, ctx.param("conversation_id"))
    items, has_more = await call_store(lambda: _page(reader(), after, limit, order == "desc"))
    return _list(items, has_more)


async def get_item(ctx: Context) -> Response:
    _include(ctx.request)
    sid, item_id = ctx.param("conversation_id"), ctx.param("item_id")
    reader = _reader_for(ctx, sid)

    def find() -> dict[str, Any]:
        item = reader().item(item_id)
        if item is None:
            raise _no_item(item_id, sid)
        return item

    return json_response(await call_store(find))


async def delete_item(ctx: Context) -> Response:
    sid, item_id = ctx.param("conversation_id"), ctx.param("item_id")
    reader = _reader_for(ctx, sid)
    session = await call_store(lambda: _delete_item(reader(), item_id))
    return json_response(_conversation(session))


_INCLUDE = Param("include", "array", "accepted values of the SDK's ResponseIncludable "
                 "(also as include[]); every stored field is always returned",
                 schema={"items": {"enum": sorted(INCLUDABLE)}})


def endpoints(prefix: str) -> list[Endpoint]:
    """The Conversations API's routes under ``prefix`` (``/openai/v1``: a path of one or
    more segments, no trailing slash); ``ValueError`` for anything else."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"the OpenAI prefix must be a path such as /openai/v1 (segments of "
                         f"letters, digits, '.', '_', '~', '-'), not {prefix!r}")
    conversations = prefix + "/conversations"
    conversation = conversations + "/{conversation_id}"
    items = conversation + "/items"
    item = items + "/{item_id}"
    common: dict[str, Any] = {"tag": TAG, "errors": ERRORS, "any_key_in_open_mode": True}
    return [
        Endpoint("POST", conversations, create_conversation,
                 "Create a conversation (a session), with up to 20 items and metadata",
                 body=ConversationCreateBody, body_optional=True,
                 responses={200: OpenAIConversation}, **common),
        Endpoint("GET", conversation, get_conversation, "Retrieve a conversation",
                 responses={200: OpenAIConversation}, **common),
        Endpoint("POST", conversation, update_conversation,
                 "Replace a conversation's metadata", body=ConversationUpdateBody,
                 responses={200: OpenAIConversation}, **common),
        Endpoint("DELETE", conversation, delete_conversation,
                 "Delete a conversation and its items",
                 responses={200: OpenAIConversationDeleted}, **common),
        Endpoint("POST", items, create_items,
                 "Add 1 to 20 items (idempotent by item id); answers the items held under "
                 "their ids", body=ItemsCreateBody,
                 responses={200: OpenAIItemList}, query=(_INCLUDE,), **common),
        Endpoint("GET", items, list_items, "List items, a page at a time",
                 responses={200: OpenAIItemList},
                 query=(Param("after", description="the id of the item the page starts after"),
                        Param("limit", "integer", "1 to 100 (default 20)",
                              schema={"minimum": 1, "maximum": 100}),
                        Param("order", schema={"enum": ["", "asc", "desc"]},
                              description="asc | desc (default desc: newest first)"),
                        _INCLUDE), **common),
        Endpoint("GET", item, get_item, "Retrieve an item", responses={200: JSON_TYPE},
                 query=(_INCLUDE,), **common),
        Endpoint("DELETE", item, delete_item,
                 "Delete an item (from anywhere in the conversation, at once); answers the "
                 "conversation",
                 responses={200: OpenAIConversation}, **common),
    ]
