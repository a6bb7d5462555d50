"""Routes on a tenant's data as a whole: assets (upload, download), export and
import (NDJSON, streamed both ways), erasure and purging, and ``/v1/me``."""

from __future__ import annotations

import errno
import functools
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import IO

from starlette.responses import FileResponse, Response, StreamingResponse

from ..assets import AssetTooLarge, AssetWriter, check_digest
from ..errors import InvalidMessage, NotFound, StorageFull
from ..model import Attachment
from ..model._sniff import SUPPORTED_MIME_TYPES, UNKNOWN_MIME_TYPE, sniff_mime
from ..stores.base import BaseStore, Store
from .app import Context, Endpoint, Param, call_store, run
from .errors import BadRequest, HTTPError
from .schema import EraseBody, EraseOut, ImportOut, Me, PurgeOut
from .wire import body_chunks, json_response, query_str, too_large, url_safe_id

__all__ = ["ROUTES"]

NDJSON = "application/x-ndjson"
_NDJSON_TYPES = {NDJSON, "application/jsonl", "application/json-lines", "application/x-jsonlines",
                 "application/json", "text/plain"}
_EXPORT_CHUNK = 64 * 1024


# ---------------------------------------------------------------- assets


_MIME_TYPE = {"anyOf": [{"enum": ["", UNKNOWN_MIME_TYPE, *sorted(SUPPORTED_MIME_TYPES)]},
                        {"pattern": "^text/"}]}
"""The media types an upload may name (any ``text/``); a message refuses what it cannot
send to a model."""


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
        await _receive(ctx, writer.write)
        attachment = await run(writer.commit)
    except AssetTooLarge:
        raise too_large(limit) from None
    except InvalidMessage as exc:
        if exc.path == "$.mime_type":
            raise HTTPError(415, "unsupported_media_type", exc.reason) from None
        raise
    finally:
        await run(writer.abort)  # a no-op after commit; drops the file on any failure
    return json_response(attachment, 201)


async def _receive(ctx: Context, write: Callable[[bytes], object], limit: int | None = None
                   ) -> None:
    """The request body, read on the loop and handed to ``write`` in the work pool a
    megabyte at a time (the disk is never written from the loop); 413 past ``limit``."""
    pending: list[bytes] = []
    pending_size = total = 0
    async for chunk in body_chunks(ctx.request):
        total += len(chunk)
        if limit is not None and total > limit:
            raise too_large(limit)
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= _SPOOL_WRITE:
            await run(write, b"".join(pending))
            pending, pending_size = [], 0
    if pending:
        await run(write, b"".join(pending))


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

    async def chunks() -> AsyncIterator[bytes]:  # each chunk made in the work pool
        while (chunk := await call_store(next, lines, None)) is not None:
            yield chunk

    return StreamingResponse(chunks(), media_type=NDJSON)


_IMPORTS_PER_TENANT = 2
_SPOOL_MEMORY = 8 * 1024 * 1024  # an import body past this goes to a temporary file
_SPOOL_WRITE = 1024 * 1024


async def import_(ctx: Context) -> Response:
    """The body is received whole first (on the loop, each read with an idle timeout,
    spooled to a temporary file past 8 MiB by the work pool), then imported in the work
    pool: no worker thread ever waits on the client. At most two imports of a tenant
    at once (429 past that)."""
    declared = (ctx.request.headers.get("content-type") or NDJSON).split(";")[0].strip().lower()
    if declared not in _NDJSON_TYPES:
        raise HTTPError(415, "unsupported_media_type", f"send {NDJSON}, not {declared}")
    limits = ctx.service.limits
    size = ctx.request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > limits.import_bytes:
        raise too_large(limits.import_bytes)
    imports = ctx.service.imports
    if imports.get(ctx.tenant, 0) >= _IMPORTS_PER_TENANT:
        raise HTTPError(429, "too_many_requests",
                        f"at most {_IMPORTS_PER_TENANT} imports of a tenant at once",
                        {"Retry-After": "5"})
    imports[ctx.tenant] = imports.get(ctx.tenant, 0) + 1
    # nothing on disk until it rolls over; closed in the work pool below
    spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY)  # noqa: SIM115
    try:
        await _receive(ctx, functools.partial(_spool_write, spool), limits.import_bytes)

        def load() -> int:
            check = getattr(ctx.store, "check_import", None)
            if check is not None:  # a first pass: a bad line stores nothing
                spool.seek(0)
                check(_lines(spool, limits.json_bytes), tenant=ctx.tenant, check_id=url_safe_id)
            spool.seek(0)
            return ctx.store.import_(_lines(spool, limits.json_bytes), tenant=ctx.tenant)

        added = await call_store(load)  # a bad line: InvalidMessage naming it
    finally:
        left = imports[ctx.tenant] - 1
        if left:
            imports[ctx.tenant] = left
        else:
            del imports[ctx.tenant]
        await run(spool.close)
    return json_response(ImportOut(added))


def _spool_write(spool: IO[bytes], chunk: bytes) -> None:
    """``chunk`` into the import's spool; a full disk is ``StorageFull`` (507), as the
    store's own is."""
    try:
        spool.write(chunk)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = tempfile.gettempdir()
        raise StorageFull(f"no space left for the import's temporary file in {where} "
                          "(TMPDIR)", where=where) from None


def _lines(spool: IO[bytes], line_limit: int) -> Iterator[bytes]:
    """The spooled body's lines, each held to ``line_limit`` bytes."""
    pending = b""
    while chunk := spool.read(_SPOOL_WRITE):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if len(line) > line_limit:
                raise too_large(line_limit)
            yield line
        if len(pending) > line_limit:
            raise too_large(line_limit)
    if pending.strip():
        yield pending


# ---------------------------------------------------------------- retention


async def erase(ctx: Context) -> Response:
    body = await ctx.json(EraseBody)
    if body.user is None and not body.all:
        raise BadRequest("name a user, or pass \"all\": true to erase the whole tenant")
    deleted = await call_store(ctx.store.erase, tenant=ctx.tenant, user=body.user)
    if body.user is None:
        await run(ctx.service.assets.erase, ctx.tenant)
    return json_response(EraseOut(deleted))


def _purge_tenant(store: Store, tenant: str) -> int:
    """Delete this tenant's expired sessions (and their forks), by the store's clock.
    (``Store.purge_expired()`` without a tenant works across every tenant, which a
    tenant may neither trigger nor see.)"""
    if not isinstance(store, BaseStore):
        raise HTTPError(501, "not_available", "purging is not available on this store")
    return store.purge_expired(tenant=tenant)


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
                          "else sniffed)", schema=_MIME_TYPE)), tag="assets"),
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
