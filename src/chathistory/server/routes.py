"""The route table: every route of the API, in one list (``ROUTES``), plus the
routes that serve the process itself (health, readiness, metrics, OpenAPI).
``app_routes(prefix)`` adds OpenAI's Conversations API under its prefix
(``server.conversations``)."""

from __future__ import annotations

import asyncio

from starlette.responses import Response

from ..errors import NotFound
from . import routes_assets, routes_messages, routes_preview, routes_search, routes_sessions
from .app import OPENAI_PREFIX, Context, Endpoint, call_store, run
from .errors import HTTPError
from .schema import Health
from .wire import JSON_TYPE, json_response

__all__ = ["ROUTES", "app_routes"]


async def healthz(ctx: Context) -> Response:
    return json_response(Health("ok"))


READY_SECONDS = 2.0
"""``/readyz`` waits this long for the store at most."""


async def readyz(ctx: Context) -> Response:
    try:  # a read of a session that cannot exist: one round trip to the store
        async with asyncio.timeout(READY_SECONDS):
            await call_store(ctx.store.get_session, "__readyz__", tenant="__health__")
    except NotFound:
        return json_response(Health("ready"))
    except Exception as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        raise HTTPError(503, "unavailable", f"the store is unreachable: {reason}",
                        {"Retry-After": "1"}) from None
    return json_response(Health("ready"))


async def metrics(ctx: Context) -> Response:
    service = ctx.service
    body = await run(service.metrics.render)
    return Response(body, media_type=service.metrics.content_type)


async def openapi(ctx: Context) -> Response:
    service = ctx.service
    if service.openapi is None:  # the app's routes: the Conversations API's prefix varies
        from .openapi import document_json

        service.openapi = document_json(service.endpoints or ROUTES)
    return Response(service.openapi, media_type=JSON_TYPE)


SYSTEM = [
    Endpoint("GET", "/healthz", healthz, "The process is up", responses={200: Health},
             public=True, tag="system"),
    Endpoint("GET", "/readyz", readyz, "The store answers", responses={200: Health},
             public=True, tag="system"),
    Endpoint("GET", "/metrics", metrics, "Prometheus metrics (no tenant labels)",
             responses={200: "text/plain"}, public=True, tag="system"),
    Endpoint("GET", "/openapi.json", openapi, "This API's OpenAPI 3.1 document",
             responses={200: "application/json"}, public=True, tag="system"),
]

ROUTES: list[Endpoint] = [*SYSTEM, *routes_sessions.ROUTES, *routes_messages.ROUTES,
                          *routes_search.ROUTES, *routes_assets.ROUTES, *routes_preview.ROUTES]


def app_routes(openai_prefix: str | None = OPENAI_PREFIX) -> list[Endpoint]:
    """``ROUTES`` and the Conversations API's routes under ``openai_prefix`` (None or
    "": none); ``ValueError`` for a prefix that is no path (``conversations.endpoints``)."""
    if not openai_prefix:
        return list(ROUTES)
    from .conversations import endpoints

    return [*ROUTES, *endpoints(openai_prefix)]
