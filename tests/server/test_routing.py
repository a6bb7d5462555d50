"""``route_without_starlette`` (an API request straight to its endpoint) against
Starlette's router: for every route of the table and the requests around them, the
same endpoint and path parameters as Starlette's router would pick, or "not mine"
(then Starlette's app answers); and the same answers through the whole app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import product
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.testclient import TestClient
from starlette.types import Scope

from chathistory.server.app import App, create_app, direct_routes, route_without_starlette
from chathistory.server.routes import ROUTES
from chathistory.stores import MemoryStore

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
SAMPLES = ("s1", "a b", "\u00fcn\u00efcode", "x.y", "..", "-", "%2F", "0" * 64, "a" * 300)
"""Path parameter values (as they are in ``scope["path"]``: decoded)."""
ELSEWHERE = ("/", "", "/viewer/app.js", "/viewer/", "/viewer", "/favicon.ico", "/v1", "/v1/",
             "/v2/sessions", "//v1/sessions", "/v1//sessions", "/v1/sessions//messages",
             "/V1/SESSIONS", "/healthz/", "/openapi.json/x", "/v1/sessions/s/messages/m/x",
             "/sessions", "/sessions/s1", "/assets/" + "0" * 64)
ROOTS = ("", "/api", "/v1")
"""``root_path``s: under one, the direct path leaves every request to Starlette."""


def _scope(method: str, path: str, root_path: str = "") -> Scope:
    return {"type": "http", "method": method, "path": path, "root_path": root_path,
            "headers": [], "query_string": b""}


def _starlette(routes: list[BaseRoute], scope: Scope) -> tuple[Any, dict[str, Any]] | None:
    """What Starlette's router calls: the first route matching fully (a partial match
    is its 405, none its slash redirect or 404)."""
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return child["endpoint"], child["path_params"]
    return None


def _paths() -> Iterator[str]:
    for spec in ROUTES:
        for value in SAMPLES:
            filled = re.sub(r"\{[^}]+\}", lambda _: value, spec.path)  # noqa: B023
            yield from (filled, filled + "/", filled + "/x", filled.rstrip("/") + "x")
    yield from ELSEWHERE


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    return create_app(MemoryStore(), asset_dir=tmp_path_factory.mktemp("assets"))


def test_the_direct_route_is_starlettes_route(app: App) -> None:
    routes = app.app.router.routes  # type: ignore[attr-defined]
    api = {route.endpoint for route in routes[:len(ROUTES)]}
    assert len(api) == len(ROUTES)
    served: set[Any] = set()
    for root, path, method in product(ROOTS, set(_paths()), METHODS):
        scope = _scope(method, root + path, root)  # (ASGI: path includes root_path)
        found = route_without_starlette(app.direct, scope)
        expected = _starlette(routes, scope)
        if found is None:  # Starlette answers: none of ours to call (HEAD is its own)
            assert expected is None or expected[0] not in api or method == "HEAD" or root, (
                method, root, path)
        else:
            served.add(found[0])
            assert found == expected, (method, root, path)
    assert served == api  # every route of the table is taken directly


def _numbered(i: int) -> Any:
    async def endpoint(request: Request) -> Response:
        return Response(str(i))

    return endpoint


def test_convertors_as_starlette_applies_them() -> None:
    """Route templates with every convertor, overlapping, several methods on one path."""
    templates = ["/n/{n:int}", "/n/{f:float}", "/n/{s}", "/u/{u:uuid}", "/p/{rest:path}",
                 "/p/{a}/{b:int}", "/m/{x}", "/m/{x}", "/m/fixed"]
    methods = [["GET"], ["GET", "POST"], ["DELETE"], ["PUT"], ["GET"], ["GET"], ["POST"],
               ["GET"], ["GET", "PATCH"]]
    routes: list[BaseRoute] = [Route(t, _numbered(i), methods=m)  # each its own endpoint
                               for i, (t, m) in enumerate(zip(templates, methods, strict=True))]
    table = direct_routes(r for r in routes if isinstance(r, Route))
    paths = ["/n/12", "/n/-3", "/n/1.5", "/n/abc", "/n/", "/n/12/", "/u/" + "1" * 8 + "-1111-"
             "1111-1111-" + "1" * 12, "/u/nope", "/p/a/b/c", "/p/x/7", "/p/", "/m/fixed",
             "/m/other", "/m/"]
    for path in paths:
        for method in METHODS:
            scope = _scope(method, path)
            direct = route_without_starlette(table, scope)
            expected = _starlette(routes, scope)
            assert direct == (None if method == "HEAD" else expected), (method, path)


def test_the_same_answers_with_and_without_the_direct_path(app: App) -> None:
    """Through the whole app: status, headers and body as the Starlette app alone gives."""
    plain = App(app.app, app.service)  # no direct routes: Starlette routes everything
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/healthz", {}), ("HEAD", "/healthz", {}), ("GET", "/healthz/", {}),
        ("GET", "/v1/sessions", {}), ("GET", "/v1/sessions/", {}),
        ("GET", "/v1/sessions/nope", {}), ("GET", "/v1/sessions/nope/messages?tail=1", {}),
        ("GET", "/v1/sessions/nope/messages/m1", {}), ("PUT", "/v1/sessions", {}),
        ("DELETE", "/v1/me", {}), ("POST", "/v1/sessions", {"json": {"id": 5}}),
        ("GET", "/v2/nothing", {}), ("GET", "/", {}), ("GET", "/viewer/nothing.js", {}),
        ("GET", "/favicon.ico", {}), ("GET", "/v1/assets/" + "0" * 64, {}),
        ("OPTIONS", "/v1/sessions", {}), ("GET", "/v1/me", {})]
    answers = []
    for target in (app, plain):
        client = TestClient(target, base_url="http://127.0.0.1", client=("127.0.0.1", 1),
                            follow_redirects=False)
        answers.append([_answer(client.request(method, path, headers={"X-Request-ID": "r"},
                                               **options))
                        for method, path, options in requests])
    for request, direct, through_starlette in zip(requests, *answers, strict=True):
        assert direct == through_starlette, request


def _answer(response: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = sorted((k, v) for k, v in response.headers.items() if k not in ("date",))
    return response.status_code, headers, response.content
