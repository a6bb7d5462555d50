"""Routes on a tenant's data as a whole: assets (upload, download), export and
import (NDJSON, streamed both ways), erasure and purging, and ``/v1/me``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

from starlette.concurrency import iterate_in_threadpool
from starlette.responses import FileResponse, Response, StreamingResponse

from ..assets import AssetTooLarge, AssetWriter, check_digest
from ..errors import InvalidMessage, NotFound
from ..model import Attachment
from ..model._sniff import sniff_mime
from ..stores.base import BaseStore, Store
from .app import Context, Endpoint, Param, call_store, run
from .errors import HTTPError
from .schema import EraseBody, EraseOut, ImportOut, Me, PurgeOut
from .wire import json_response, query_str, too_large

__all__ = ["ROUTES"]

NDJSON = "application/x-ndjson"
_NDJSON_TYPES = {NDJSON, "application/jsonl", "application/json-lines", "application/x-jsonlines",
                 "application/json", "text/plain"}
_EXPORT_CHUNK = 64 * 1024


# ---------------------------------------------------------------- assets


def _upload_mime(ctx: Context) -> str | None:
    given = query_str(ctx.request, "mime_type")
    if given:
        return given
    declared = (ctx.request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if declared in ("", "application/octet-stream", "application/x-www-form-urlencoded"):
        return None  # sniffed from the bytes
    return declared


async def upload_asset(ctx: Context) -> Response:
    limit = ctx.service.limits.asset_bytes
    declared = ctx.request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    try:
        writer: AssetWriter = await run(ctx.service.assets.writer, ctx.tenant,
                                        name=query_str(ctx.request, "name") or None,
                                        mime_type=_upload_mime(ctx))
    except InvalidMessage as exc:
        raise HTTPError(415, "unsupported_media_type", exc.reason) from None
    try:
        async for chunk in ctx.request.stream():
            if chunk:
                writer.write(chunk)  # page cache: fast; the fsync is in commit()
        attachment = await run(writer.commit)
    except AssetTooLarge:
        raise too_large(limit) from None
    except InvalidMessage as exc:
        if exc.path == "$.mime_type":
            raise HTTPError(415, "unsupported_media_type", exc.reason) from None
        raise
    finally:
        writer.abort()  # a no-op after commit; drops the file on any failure
    return json_response(attachment, 201)


async def download_asset(ctx: Context) -> Response:
    sha256 = ctx.param("sha256")
    try:
        check_digest(sha256)
    except InvalidMessage:
        raise NotFound(f"no asset {sha256!r}") from None
    assets, tenant = ctx.service.assets, ctx.tenant
    info = await run(assets.info, tenant, sha256)
    headers = {"Cache-Control": "private, max-age=31536000, immutable",
               "X-Content-Type-Options": "nosniff",
               # an uploaded HTML or SVG file opened from this origin runs nothing
               "Content-Security-Policy": "default-src 'none'; sandbox"}
    if info is not None:
        return FileResponse(assets.path(tenant, sha256), media_type=info.mime_type,
                            headers=headers)
    data = await call_store(ctx.store.get_asset, sha256, tenant=tenant)
    return Response(data, media_type=sniff_mime(data), headers=headers)


# ---------------------------------------------------------------- export / import


def _chunked(lines: Iterator[bytes]) -> Iterator[bytes]:
    buffer: list[bytes] = []
    size = 0
    for line in lines:
        buffer.append(line)
        size += len(line)
        if size >= _EXPORT_CHUNK:
            yield b"".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)


async def export(ctx: Context) -> Response:
    ids = ctx.request.query_params.getlist("session_id") or None
    for sid in ids or ():  # every unknown id is a 404 before the stream starts
        await call_store(ctx.store.get_session, sid, tenant=ctx.tenant)
    lines = _chunked(iter(ctx.store.export(tenant=ctx.tenant, session_ids=ids)))
    return StreamingResponse(iterate_in_threadpool(lines), media_type=NDJSON)


async def import_(ctx: Context) -> Response:
    declared = (ctx.request.headers.get("content-type") or NDJSON).split(";")[0].strip().lower()
    if declared not in _NDJSON_TYPES:
        raise HTTPError(415, "unsupported_media_type", f"send {NDJSON}, not {declared}")
    limits = ctx.service.limits
    stream: AsyncIterator[bytes] = ctx.request.stream().__aiter__()
    total = 0

    async def next_chunk() -> bytes | None:
        nonlocal total
        try:
            chunk = await stream.__anext__()
        except StopAsyncIteration:
            return None
        total += len(chunk)
        if total > limits.import_bytes:
            raise too_large(limits.import_bytes)
        return chunk

    loop = asyncio.get_running_loop()

    def receive() -> bytes | None:  # in the worker thread: the next chunk from the loop
        return asyncio.run_coroutine_threadsafe(next_chunk(), loop).result()

    def lines() -> Iterator[bytes]:
        pending = b""
        while (chunk := receive()) is not None:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield from complete
            if len(pending) > limits.json_bytes:
                raise too_large(limits.json_bytes)
        if pending.strip():
            yield pending

    try:
        added = await run(ctx.store.import_, lines(), tenant=ctx.tenant)
    except (KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, NotFound):
            raise
        # a line of the right kind with the wrong shape (the engine indexes it blindly)
        raise InvalidMessage(f"a line is not an export record: {exc!r}", "$") from None
    return json_response(ImportOut(added))


# ---------------------------------------------------------------- retention


async def erase(ctx: Context) -> Response:
    body = await ctx.json(EraseBody)
    if body.user is None and not body.all:
        raise ValueError("name a user, or pass \"all\": true to erase the whole tenant")
    deleted = await call_store(ctx.store.erase, tenant=ctx.tenant, user=body.user)
    if body.user is None:
        await run(ctx.service.assets.erase, ctx.tenant)
    return json_response(EraseOut(deleted))


def _purge_tenant(store: Store, tenant: str) -> int:
    """Delete this tenant's expired sessions (and their forks).

    ``Store.purge_expired`` works across every tenant and counts them all, which
    a tenant may neither trigger nor see; until the engine takes a ``tenant``,
    this uses the engine's own primitives, the way ``purge_expired`` does.
    """
    if not isinstance(store, BaseStore):
        raise HTTPError(501, "not_available", "purging is not available on this store")
    deleted = 0
    for owner, sid in store._b_expired(datetime.now(UTC)):
        if owner == tenant and store._b_get_session(tenant, sid) is not None:
            deleted += store._delete_tree(tenant, sid)
    if deleted:
        store._b_gc_assets(tenant)
    return deleted


async def purge(ctx: Context) -> Response:
    return json_response(PurgeOut(await run(_purge_tenant, ctx.store, ctx.tenant)))


async def me(ctx: Context) -> Response:
    return json_response(Me(tenant=ctx.tenant, counter=ctx.store.counter.name,
                            key_id=ctx.key_id, keys_required=not await ctx.service.open_mode()))


ROUTES = [
    Endpoint("POST", "/v1/assets", upload_asset,
             "Upload an attachment (raw body, streamed; content-addressed per tenant)",
             body="application/octet-stream", responses={201: Attachment},
             query=(Param("name", description="file name"),
                    Param("mime_type", description="media type (default: Content-Type, "
                          "else sniffed)")), tag="assets"),
    Endpoint("GET", "/v1/assets/{sha256}", download_asset,
             "Download an attachment's bytes (served as their own media type)",
             responses={200: "*/*"}, tag="assets"),
    Endpoint("GET", "/v1/export", export, "Export sessions and messages as JSON lines",
             responses={200: NDJSON}, tag="data",
             query=(Param("session_id", description="repeatable; default: every session"),)),
    Endpoint("POST", "/v1/import", import_, "Import JSON lines from an export (streamed)",
             body=NDJSON, responses={200: ImportOut}, tag="data"),
    Endpoint("POST", "/v1/erase", erase,
             "Delete every session, message and asset of a user, or of the whole tenant",
             body=EraseBody, responses={200: EraseOut}, tag="data"),
    Endpoint("POST", "/v1/purge-expired", purge, "Delete this tenant's expired sessions",
             responses={200: PurgeOut}, tag="data"),
    Endpoint("GET", "/v1/me", me, "The caller's tenant and the store's token counter",
             responses={200: Me}, tag="data"),
]
