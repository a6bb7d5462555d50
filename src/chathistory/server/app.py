"""The ASGI app: ``create_app(store, ...)`` -> an ``App`` serving the v1 API.

The app is a thin shell over a ``Store``: each route decodes its request,
makes one or two store calls (stores are sync; ``call_store`` runs them on the
event loop's thread where they only wait on their database, else in a worker
thread) and encodes the answer. It holds no state of its own besides caches, so
any number of processes can serve one store.

Every request gets a request id (``X-Request-ID``, echoed or generated), an
access log line, and a place in the metrics under its route template. Routes,
their schemas and their documentation come from one table (``ROUTES``), which
``openapi.py`` turns into the OpenAPI document.
"""

from __future__ import annotations

import contextvars
import ipaddress
import itertools
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from starlette.applications import Starlette
from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..assets import FileAssetStore
from ..model.parts import MAX_ATTACHMENT_BYTES
from ..stores.base import Store
from ..tokens import share_counts
from . import OPENAI_PREFIX, auth
from .errors import HTTPError, error_body, error_headers
from .frontdoor import OpenModePolicy, credential
from .logging import access_log, logger
from .metrics import Metrics
from .wire import JSON_TYPE, json_body, json_body_counted
from .work import StoreHealth, Work, current_tenant, start_processes, store_call

__all__ = ["OPENAI_PREFIX", "App", "Context", "DirectRoutes", "Endpoint", "ErrorStyle", "Limits",
           "Param", "Service", "call_store", "create_app", "direct_routes",
           "route_without_starlette"]

P = ParamSpec("P")
T = TypeVar("T")
DEFAULT_TENANT = "default"
SWITCH_INTERVAL = 0.001
"""``sys.setswitchinterval`` while serving (seconds)."""


@dataclass(frozen=True)
class Limits:
    """Request limits (bytes and counts)."""

    json_bytes: int = 10 * 1024 * 1024
    """A JSON request body."""
    asset_bytes: int = MAX_ATTACHMENT_BYTES
    """An uploaded asset (413 past it, nothing kept)."""
    import_bytes: int = 1024 * 1024 * 1024
    """A whole ``/v1/import`` body (it is streamed; each line is held to ``json_bytes``)."""
    inline_bytes: int = 20 * 1024 * 1024
    """Attachment bytes one ``?format=`` read may inline (each stored asset once); past
    it a 422 that says to ask with ``assets=url``. 20 MiB: base64 makes it 26.7 MiB,
    within every provider's request limit (Anthropic's 32 MB is the smallest)."""


class Service:
    """What every route needs: the store, the asset directory, limits, keys."""

    def __init__(self, store: Store, *, keys_required: bool, asset_dir: str | Path,
                 limits: Limits, key_cache_seconds: float) -> None:
        self.store = store
        self.assets = FileAssetStore(asset_dir, max_bytes=limits.asset_bytes)
        self.limits = limits
        self.keys_required = keys_required
        self.key_cache = auth.KeyCache(key_cache_seconds)
        self.metrics = Metrics()
        self.work = Work()
        self.imports: dict[str, int] = {}
        """Tenant -> imports being received (touched on the loop only)."""
        self.health = StoreHealth(recover=getattr(store, "recover", None),
                                  where=str(getattr(store, "path", "") or ""))
        self._keys_checked = 0.0
        self.endpoints: list[Endpoint] = []
        """Every route the app serves (``create_app`` sets it; the OpenAPI document)."""
        self.openapi: bytes | None = None
        """The OpenAPI document of ``endpoints``, made on its first request."""

    async def open_mode(self) -> bool:
        """True while no key exists (and none is required): requests without a key
        are served as tenant ``default``. Once a key exists this stays False for
        the life of the process; until then it is checked at most once a second."""
        if self.keys_required:
            return False
        now = time.monotonic()
        if now - self._keys_checked > 1.0:
            self._keys_checked = now
            if await call_store(auth.has_keys, self.store):
                self.keys_required = True
        return not self.keys_required


_service: contextvars.ContextVar[Service | None] = contextvars.ContextVar(
    "chathistory_service", default=None)
_default_work: Work | None = None


def _work() -> tuple[Work, StoreHealth | None]:
    service = _service.get()
    if service is not None:
        return service.work, service.health
    global _default_work  # outside a request (a test calling a route helper directly)
    if _default_work is None:
        _default_work = Work()
    return _default_work, None


async def run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in the work pool, counted against the request's tenant:
    disk access and CPU work that must not run on the loop (``server.work``)."""
    work, _ = _work()
    return await work(fn, *args, **kwargs)


async def call_store(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """A store call in the work pool, counted against the request's tenant and
    through the store's circuit: an unreachable store is a fast 503, a full disk a
    507 (``server.work.store_call``)."""
    work, health = _work()
    if health is None:
        return await work(fn, *args, **kwargs)
    return await store_call(work, health, fn, *args, **kwargs)


@dataclass
class Context:
    """One request, authenticated: its tenant and the service."""

    request: Request
    service: Service
    tenant: str
    key_id: str | None = None

    @property
    def store(self) -> Store:
        return self.service.store

    def param(self, name: str) -> str:
        value: str = self.request.path_params[name]
        return value

    async def json(self, type: type[T]) -> T:
        return await json_body(self.request, type, self.service.limits.json_bytes)

    async def json_counted(self, type: type[T], counter: str | None
                           ) -> tuple[T, list[dict[str, int] | None] | None]:
        return await json_body_counted(self.request, type, self.service.limits.json_bytes,
                                       counter)


@dataclass(frozen=True)
class Param:
    """A query parameter, for the OpenAPI document."""

    name: str
    type: str = "string"
    description: str = ""
    required: bool = False
    schema: Mapping[str, Any] | None = None
    """More of its JSON Schema (enum, pattern, bounds): what the route accepts."""


@dataclass(frozen=True)
class ErrorStyle:
    """How a group of routes answers an error, when not in the API's own shape
    (``error_response``): the answer and, for the OpenAPI document, its body's type."""

    respond: Callable[[BaseException, str], Response]
    body: Any


@dataclass(frozen=True)
class Endpoint:
    """One row of the route table."""

    method: str
    path: str
    handler: Callable[[Context], Awaitable[Response]]
    summary: str
    body: Any = None
    """A struct type (JSON), a tuple of them (any of them: a query parameter says which),
    or a media type string (raw body)."""
    body_optional: bool = False
    """An empty body is served as ``{}`` (the document says the body is not required)."""
    responses: dict[int, Any] = field(default_factory=dict)
    """Status -> struct type, media type string, or None (no body)."""
    query: tuple[Param, ...] = ()
    public: bool = False
    """Served without a key (health, metrics, the OpenAPI document)."""
    if_match: bool = False
    tag: str = "sessions"
    errors: ErrorStyle | None = None
    """How errors answer (None: the API's own shape, ``error_response``)."""
    any_key_in_open_mode: bool = False
    """In open mode (no key exists), a credential that is no key is ignored rather
    than refused: for clients that must send one (the OpenAI SDK needs an api_key)."""


_LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_loopback or address in _LOOPBACK_V4


async def _authenticate(request: Request, service: Service, policy: OpenModePolicy,
                        any_key_in_open_mode: bool = False) -> tuple[str, str | None]:
    secret = credential(request.headers)
    if secret is not None:
        key = auth.cached(secret, service.key_cache)
        if key is None:
            key = await call_store(auth.lookup, service.store, secret, cache=service.key_cache)
        if key is not None:
            return key.tenant, key.id
        if not (any_key_in_open_mode and await service.open_mode()):
            raise HTTPError(401, "unauthorized", "unknown or revoked API key",
                            {"WWW-Authenticate": "Bearer"})
    if await service.open_mode():
        client = request.scope.get("client")
        if not _is_loopback(client[0] if client else None):
            raise HTTPError(403, "forbidden",
                            "this server has no API keys and answers loopback clients only")
        policy.check(request)  # a loopback Host; no write from another site
        return DEFAULT_TENANT, None
    raise HTTPError(401, "unauthorized", "an API key is required (Authorization: Bearer <key>)",
                    {"WWW-Authenticate": "Bearer"})


def error_response(exc: BaseException, request_id: str) -> Response:
    status, body = error_body(exc, request_id)
    headers = error_headers(exc)
    if status >= 500:
        logger.error("request failed", exc_info=exc, extra={"request_id": request_id})
    return Response(body, status_code=status, headers=headers, media_type=JSON_TYPE)


Handler = Callable[[Request], Awaitable[Response]]


def _endpoint(spec: Endpoint, service: Service, policy: OpenModePolicy) -> Handler:
    async def endpoint(request: Request) -> Response:
        request.scope["chathistory.route"] = spec.path
        _service.set(service)  # (each request is its own task: its own context)
        try:
            if spec.public:
                tenant, key_id = DEFAULT_TENANT, None
                current_tenant.set("(system)")
            else:
                current_tenant.set("(authentication)")
                tenant, key_id = await _authenticate(request, service, policy,
                                                     spec.any_key_in_open_mode)
                current_tenant.set(tenant)
            return await spec.handler(Context(request, service, tenant, key_id))
        except Exception as exc:
            respond = spec.errors.respond if spec.errors is not None else error_response
            return respond(exc, request.scope.get("chathistory.request_id", "-"))

    endpoint.__name__ = spec.handler.__name__
    return endpoint


_ID_PREFIX = uuid.uuid4().hex[:16]
_id_counter = itertools.count(1)


def _next_request_id() -> str:
    """A request id unique across processes (random per process, then a counter):
    no system call per request, unlike ``uuid4``."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


DirectRoutes = dict[str, list[tuple["re.Pattern[str]", dict[str, Convertor[Any]], Handler]]]
"""Method -> the routes taking it, in order: (path regex, convertors, endpoint)."""


def direct_routes(routes: Iterable[Route]) -> DirectRoutes:
    """The table ``route_without_starlette`` reads, from Starlette's routes (HEAD is
    left to Starlette)."""
    table: DirectRoutes = {}
    for route in routes:
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                table.setdefault(method, []).append(
                    (route.path_regex, route.param_convertors, route.endpoint))
    return table


def route_without_starlette(table: DirectRoutes, scope: Scope
                            ) -> tuple[Handler, dict[str, Any]] | None:
    """The endpoint and path parameters Starlette's router would pick for this request
    among ``table``'s routes (the first route whose method and path match, its
    convertors applied), or None: not ours to answer, Starlette's app does (the viewer,
    HEAD, a 404 or 405, a slash redirect, any request under a root path).

    Why: calling the endpoint directly skips Starlette's middleware, router and
    ``request_response`` wrappers of the request and of every message sent. Measured
    (callgrind: instructions per request of the server process, uvicorn with one worker
    and the access log; the service bench's window reads and appends): through
    Starlette costs 8.1% more per window read and 12.2% per append on SQLite, 9.9% and
    12.2% on PostgreSQL. ``tests/server/test_routing.py`` checks it against Starlette's
    router."""
    if scope.get("root_path"):
        return None
    routes = table.get(scope["method"])
    if not routes:
        return None
    path = scope["path"]
    for regex, convertors, endpoint in routes:
        found = regex.match(path)
        if found is not None:
            return endpoint, {name: convertors[name].convert(value)
                              for name, value in found.groupdict().items()}
    return None


class App:
    """The ASGI app: request id, access log, metrics, and a JSON 500 for anything
    that escaped. An API request goes straight to its route's endpoint when
    ``route_without_starlette`` finds it in ``direct``; anything else (the viewer,
    HEAD, a 404 or 405, a redirect, lifespan) goes to the Starlette app, which knows
    every route."""

    def __init__(self, app: ASGIApp, service: Service, direct: DirectRoutes | None = None
                 ) -> None:
        self.app, self.service = app, service
        self.direct = direct or {}
        self.state = getattr(app, "state", None)
        """The Starlette app's ``state`` (``state.service``: the ``Service``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        request_id = ""
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                text = value.decode("latin-1")[:100]
                if text.isprintable():
                    request_id = text
                break
        request_id = request_id or _next_request_id()
        scope["chathistory.request_id"] = request_id
        header = (b"x-request-id", request_id.encode("latin-1"))
        status = 500
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        try:
            matched = route_without_starlette(self.direct, scope)
            if matched is None:
                await self.app(scope, receive, send_with_id)
            else:
                endpoint, scope["path_params"] = matched
                response = await endpoint(Request(scope, receive))
                if type(response) is Response:  # its body is made: it starts as it is sent
                    response.raw_headers.append(header)
                    status, started = response.status_code, True
                    await response(scope, receive, send)
                else:  # a file or a stream may fail before it starts: a JSON 500 then
                    await response(scope, receive, send_with_id)
        except Exception as exc:
            if started:
                raise
            response = error_response(exc, request_id)
            await response(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - start
            route = scope.get("chathistory.route", "unmatched")
            self.service.metrics.observe(scope["method"], route, status, seconds)
            access_log(request_id, scope["method"], route, scope["path"], status, seconds)


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    message = "no such route" if status == 404 else "method not allowed for this route"
    kind = "not_found" if status == 404 else "method_not_allowed"
    headers = None
    if status == 405:  # RFC 9110: a 405 lists the methods the path has (all its routes')
        allowed = {method for route in request.app.router.routes if isinstance(route, Route)
                   and route.methods and route.matches(request.scope)[0] != Match.NONE
                   for method in route.methods}
        headers = {"Allow": ", ".join(sorted(allowed))}
    error = HTTPError(status, kind, message, headers)
    request_id = request.scope.get("chathistory.request_id", "-")
    prefix = getattr(request.app.state, "openai_prefix", None)
    # under the Conversations API's own prefix, an OpenAI client's path: OpenAI's shape
    # (with the prefix /v1 the path is as likely ours: ours)
    if prefix and prefix != "/v1" and request.url.path.startswith(prefix + "/"):
        from .conversations import openai_error

        return openai_error(error, request_id)
    return error_response(error, request_id)


def create_app(store: Store, *, keys_required: bool = False,
               asset_dir: str | Path = "chathistory-assets", limits: Limits | None = None,
               key_cache_seconds: float = 5.0, allowed_hosts: Iterable[str] = (),
               openai_prefix: str | None = OPENAI_PREFIX) -> App:
    """The v1 API over ``store``, and OpenAI's Conversations API under ``openai_prefix``
    (``server.conversations``; None or "" leaves it out).

    ``keys_required``: refuse requests without an API key even while no key
    exists. Otherwise, while the store holds no key, requests without one are
    served as tenant ``default`` and only from loopback clients.
    ``asset_dir``: where uploaded attachments are kept (content-addressed).
    ``key_cache_seconds``: how long an accepted key is trusted without reading
    the store again (the delay before a revocation takes effect).
    ``allowed_hosts``: in open mode, ``Host`` names served besides localhost,
    127.0.0.1 and [::1] (``"*"``: any); see ``server.frontdoor``.
    A malformed ``openai_prefix`` raises ``ValueError``.
    """
    from .routes import app_routes

    endpoints = app_routes(openai_prefix)

    service = Service(store, keys_required=keys_required, asset_dir=asset_dir,
                      limits=limits or Limits(), key_cache_seconds=key_cache_seconds)
    # counts stay bpe-openai's (tokens.share_counts): tiktoken's lets a process's other
    # threads run while one counts, but the workers are processes, one per CPU (no more
    # appends a second measured, bench service), and fastokens' is for a thread counting
    # alone, which a busy worker's are not; each would cost a worker 80-136 MB more
    share_counts(False)
    store.counter.count_text("warm up")  # loads the tokenizer's tables now, not on a request
    start_processes()  # long texts are counted there: the tokenizers hold the GIL
    # a worker thread in Python code gives the GIL up after this long: the loop waits at
    # most that long for it (Python's default, 5 ms, adds up over a request's steps)
    sys.setswitchinterval(SWITCH_INTERVAL)
    from .apidocs import apidocs_routes
    from .viewer import viewer_routes

    policy = OpenModePolicy.allowing(allowed_hosts)
    service.endpoints = endpoints
    api = [Route(spec.path, _endpoint(spec, service, policy), methods=[spec.method])
           for spec in endpoints]
    routes: list[BaseRoute] = [*api, *viewer_routes(), *apidocs_routes()]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
    app.state.service = service
    app.state.openai_prefix = openai_prefix or None
    return App(app, service, direct_routes(api))
