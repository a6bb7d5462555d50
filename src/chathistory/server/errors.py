"""The one table from error classes to HTTP statuses, and the error body.

Every error answer has the body
``{"error": {"type": ..., "message": ..., "path": ...}}`` (``path`` for
invalid input only; ``message_id`` and ``field`` for an ``id_reused`` 409) and the
request's ``X-Request-ID``. A 404 says the same
for "does not exist" and "belongs to another tenant": the store is keyed by
tenant, so it cannot tell them apart either. An unexpected error answers 500
with the request id only; its details go to the log.

Only errors that say the client is at fault are 4xx: the library's own classes
(``InvalidMessage``, ``NotFound``, ...) and ``HTTPError`` (``BadRequest``: a 400),
raised where the request is read. A bare ``ValueError``, ``TypeError`` or
``KeyError`` from a store or the library is a bug on this side, so a 500 (a
library call that rejects a client's argument with ``ValueError`` is checked
or translated by its route).
"""

from __future__ import annotations

import msgspec

from ..assets import AssetTooLarge
from ..errors import (
    ChatHistoryError,
    Conflict,
    IdReused,
    InvalidArgument,
    InvalidMessage,
    MissingDependency,
    NotFound,
    StorageFull,
    StoreUnavailable,
)
from ..window import ContextOverflow

__all__ = ["STATUS", "BadRequest", "HTTPError", "PreconditionFailed", "error_body",
           "error_headers", "status_of"]


class HTTPError(ChatHistoryError):
    """An answer decided by the HTTP layer itself (401, 413, 415, ...)."""

    def __init__(self, status: int, type: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message = status, type, message
        self.headers = headers or {}


class BadRequest(HTTPError):
    """400 ``bad_request``: a query parameter, a combination of them or a body field
    the route refuses (a wrong field of a JSON body is ``InvalidMessage``, 422)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "bad_request", message)


class PreconditionFailed(Conflict):
    """``If-Match`` named a version the session is no longer at."""


STATUS: list[tuple[type[BaseException], int, str]] = [
    # first match wins: subclasses before their bases
    (InvalidMessage, 422, "invalid_message"),
    (InvalidArgument, 400, "bad_request"),
    (ContextOverflow, 422, "context_overflow"),
    (NotFound, 404, "not_found"),
    (PreconditionFailed, 412, "precondition_failed"),
    (IdReused, 409, "id_reused"),
    (Conflict, 409, "conflict"),
    (AssetTooLarge, 413, "payload_too_large"),
    (MissingDependency, 501, "not_available"),
    (StorageFull, 507, "storage_full"),
    (StoreUnavailable, 503, "store_unavailable"),
]
"""Error class -> (status, type). Anything not listed (``ValueError`` too) is a 500."""


def status_of(exc: BaseException) -> tuple[int, str]:
    """The status and error type for ``exc``; (500, "internal") when unexpected."""
    if isinstance(exc, HTTPError):
        return exc.status, exc.type
    for cls, status, kind in STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 500, "internal"


def error_headers(exc: BaseException) -> dict[str, str]:
    """Headers an error answer carries: its own (``HTTPError``), ``Retry-After`` for a
    store that cannot serve now."""
    if isinstance(exc, HTTPError):
        return dict(exc.headers)
    if isinstance(exc, StoreUnavailable):
        return {"Retry-After": str(max(1, round(exc.retry_after)))}
    return {}


def error_body(exc: BaseException, request_id: str) -> tuple[int, bytes]:
    """The status and JSON body answering ``exc``."""
    status, kind = status_of(exc)
    error: dict[str, str] = {"type": kind}
    if status == 500:
        error["message"] = f"internal error; quote request id {request_id}"
    elif isinstance(exc, InvalidMessage):
        error["message"] = exc.reason
        error["path"] = exc.path
    elif isinstance(exc, HTTPError):
        error["message"] = exc.message
    elif isinstance(exc, IdReused):
        error["message"] = str(exc)
        error["message_id"] = exc.message_id
        error["field"] = exc.field
    else:
        error["message"] = str(exc)
    error["request_id"] = request_id
    return status, msgspec.json.encode({"error": error})
