"""The interactive API page at ``/docs``: Swagger UI over this server's
``/openapi.json``, where each operation can be tried with an API key.

Swagger UI is npm's ``swagger-ui-dist`` (5.35.0), its bundle and stylesheet vendored
byte for byte in ``apidocs/`` beside its licences, so the page works offline (no
CDN). Its start-up code is a file of its own (``apidocs/init.js``) because the page
carries a strict Content Security Policy: scripts and styles from this origin only,
no inline script, requests to this origin only. The page, like the viewer, is
served without a key; every call it makes needs one (the "Authorize" button).
"""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .viewer import HEADERS as VIEWER_HEADERS

__all__ = ["CSP", "apidocs_routes"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
"""Swagger UI needs nothing more: its icons are ``data:`` SVGs in its stylesheet, and
the styles its scripts set go through the DOM, which ``style-src`` does not govern."""

SERVED = {
    "index.html": "text/html; charset=utf-8",
    "init.js": "text/javascript; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
"""The page's files and their media types; the licences ship in the wheel beside them."""

_HEADERS = {**VIEWER_HEADERS, "Content-Security-Policy": CSP}
"""The viewer's (no sniffing, no framing, no referrer, revalidated by ETag), with this
page's policy."""


class _File:
    """One file of the page: its bytes, media type and ETag (read once)."""

    def __init__(self, data: bytes, media_type: str) -> None:
        self.data, self.media_type = data, media_type
        self.etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'

    def response(self, request: Request) -> Response:
        request.scope["chathistory.route"] = "/docs"
        headers = {**_HEADERS, "ETag": self.etag}
        if request.headers.get("if-none-match") == self.etag:
            return Response(status_code=304, headers=headers)
        return Response(self.data, media_type=self.media_type, headers=headers)


def apidocs_routes() -> list[BaseRoute]:
    """Routes for ``/docs`` (the page) and ``/docs/{name}`` (its scripts and styles)."""
    folder = resources.files(__package__).joinpath("apidocs")
    files = {name: _File(folder.joinpath(name).read_bytes(), media_type)
             for name, media_type in SERVED.items()}

    async def page(request: Request) -> Response:
        return files["index.html"].response(request)

    async def asset(request: Request) -> Response:
        found = files.get(request.path_params["name"])
        if found is None:
            request.scope["chathistory.route"] = "/docs"
            return Response(b'{"error":{"type":"not_found","message":"no such file"}}',
                            404, media_type="application/json")
        return found.response(request)

    return [Route("/docs", page, methods=["GET", "HEAD"]),
            Route("/docs/{name}", asset, methods=["GET", "HEAD"])]
