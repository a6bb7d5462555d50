"""Routes on sessions: create, list, read, update, delete, fork, edit, lineage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from starlette.responses import Response

from ..errors import Conflict, IdReused, InvalidMessage
from ..model.message import check_described
from ..stores.model import Session
from .app import Context, Endpoint, Param, call_store
from .errors import PreconditionFailed
from .listing import SessionList, listing_json
from .references import check_references
from .schema import CreateSessionBody, EditBody, ForkBody, UpdateSessionBody
from .wire import (
    JSON_TYPE,
    encode_session,
    if_match,
    location,
    metadata_filters,
    query_bool,
    query_int,
    query_str,
    session_response,
    url_safe_id,
)

__all__ = ["ROUTES", "guarded"]

T = TypeVar("T")
SESSION = "/v1/sessions/{session_id}"


async def guarded(ctx: Context, session_id: str, expected: int | None,
                  fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a write with ``expected_version``; a conflict because the session moved
    past the ``If-Match`` version is a 412, any other conflict a 409 (``IdReused``
    too: a body that reuses an id is refused whatever the version)."""
    try:
        return await call_store(fn, *args, expected_version=expected, **kwargs)
    except IdReused:
        raise
    except Conflict as exc:
        if expected is not None:
            current = await call_store(ctx.store.get_session, session_id, tenant=ctx.tenant)
            if current.version != expected:
                raise PreconditionFailed(str(exc)) from None
        raise


def _sessions_json(sessions: list[Session]) -> bytes:
    return b"[" + b",".join(encode_session(s) for s in sessions) + b"]"


async def create_session(ctx: Context) -> Response:
    body = await ctx.json(CreateSessionBody)
    url_safe_id(body.id, "$.id")
    session = await call_store(ctx.store.create_session, body.id, tenant=ctx.tenant, user=body.user,
                               metadata=body.metadata, state=body.state, ttl=body.ttl_seconds)
    response = session_response(session, 201)
    response.headers["Location"] = location("/v1/sessions/{}", session.id)
    return response


_ORDERS = ("created", "recent")


async def list_sessions(ctx: Context) -> Response:
    request = ctx.request
    limit = query_int(request, "limit", 50, low=1, high=1000)
    assert limit is not None
    raw_order = query_str(request, "order") or "created"
    if raw_order not in _ORDERS:
        raise InvalidMessage(f"order must be one of {', '.join(_ORDERS)}", "order")
    order: Literal["created", "recent"] = "recent" if raw_order == "recent" else "created"
    # a cursor the store did not make, or made for the other order: InvalidArgument, a 400
    body = await call_store(listing_json, ctx.store, ctx.tenant, user=query_str(request, "user"),
                            metadata=metadata_filters(request), limit=limit,
                            cursor=query_str(request, "cursor") or None, order=order,
                            query=query_str(request, "q") or None)
    return Response(body, media_type=JSON_TYPE)


async def get_session(ctx: Context) -> Response:
    return session_response(await call_store(ctx.store.get_session, ctx.param("session_id"),
                                             tenant=ctx.tenant))


async def update_session(ctx: Context) -> Response:
    sid = ctx.param("session_id")
    expected = if_match(ctx.request)
    body = await ctx.json(UpdateSessionBody)
    session = await guarded(ctx, sid, expected, ctx.store.update_session, sid,
                            tenant=ctx.tenant, metadata=body.metadata, state=body.state,
                            ttl=body.ttl_seconds)
    return session_response(session)


async def delete_session(ctx: Context) -> Response:
    cascade = query_bool(ctx.request, "cascade")
    await call_store(ctx.store.delete_session, ctx.param("session_id"), tenant=ctx.tenant,
                     cascade=cascade)
    return Response(status_code=204)


async def fork_session(ctx: Context) -> Response:
    body = await ctx.json(ForkBody)
    url_safe_id(body.new_session_id, "$.new_session_id")
    session = await call_store(ctx.store.fork, ctx.param("session_id"), body.at_message_id,
                               tenant=ctx.tenant, new_session_id=body.new_session_id)
    return session_response(session, 201)


async def edit_session(ctx: Context) -> Response:
    body = await ctx.json(EditBody)
    body.message.token_counts = None  # counts are the server's to make
    try:
        check_described(body.message)  # as an append's messages are checked
        if any(a.data is None for a in body.message.attachments):
            await call_store(check_references, [body.message], "",
                             ctx.service.assets, ctx.store, ctx.tenant)
        session = await call_store(ctx.store.edit, ctx.param("session_id"), body.message_id,
                                   body.message, tenant=ctx.tenant)
    except InvalidMessage as exc:
        raise exc.under("$.message") if exc.path.startswith("$.") else exc from None
    return session_response(session, 201)


async def lineage(ctx: Context) -> Response:
    sessions = await call_store(ctx.store.lineage, ctx.param("session_id"), tenant=ctx.tenant)
    return Response(_sessions_json(sessions), media_type=JSON_TYPE)


ROUTES = [
    Endpoint("POST", "/v1/sessions", create_session, "Create a session", body=CreateSessionBody,
             responses={201: Session}),
    Endpoint("GET", "/v1/sessions", list_sessions,
             "List sessions: oldest first, or last changed first; filter, search. Each "
             "item has its title and preview (and with q a snippet); total counts them all",
             responses={200: SessionList},
             query=(Param("limit", "integer", "1 to 1000 (default 50)",
                          schema={"minimum": 1, "maximum": 1000}),
                    Param("cursor", description="next_cursor of the previous page (given "
                          "with the same order)"),
                    Param("order", schema={"enum": ["", *_ORDERS]},
                          description="created (default): oldest created first; "
                          "recent: last changed (updated_at) first"),
                    Param("q", description="only sessions one of whose own messages "
                          "matches this search (words, \"phrases\", prefix*: as GET "
                          "/v1/search), or whose id or a metadata value (as JSON) contains "
                          "its text, ASCII letters case-insensitive"),
                    Param("user", description="only this user's sessions"),
                    Param("metadata.{key}", description="only sessions whose metadata has "
                          "this value (JSON, or a plain string)"))),
    Endpoint("GET", SESSION, get_session, "Read a session", responses={200: Session}),
    Endpoint("PATCH", SESSION, update_session, "Replace metadata, state or TTL",
             body=UpdateSessionBody, responses={200: Session}, if_match=True),
    Endpoint("DELETE", SESSION, delete_session, "Delete a session and its messages",
             responses={204: None},
             query=(Param("cascade", "boolean", "also delete its forks"),)),
    Endpoint("POST", SESSION + "/fork", fork_session, "Fork a session (sharing its prefix)",
             body=ForkBody, responses={201: Session}),
    Endpoint("POST", SESSION + "/edit", edit_session,
             "Edit an earlier message: a branch that continues with the new message",
             body=EditBody, responses={201: Session}),
    Endpoint("GET", SESSION + "/lineage", lineage, "Every branch of the session's tree",
             responses={200: list[Session]}),
]
