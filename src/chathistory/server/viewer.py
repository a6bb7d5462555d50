"""The web viewer: a page and its scripts, served at ``/`` and ``/viewer/...``.

The viewer is static (HTML, CSS and ES modules in ``viewer/``, no build step):
it reads everything through the v1 API with the user's API key, so it sees
exactly what that key's tenant may see. The files carry a strict Content
Security Policy: scripts only from this origin, no inline script, images only
from this origin or ``blob:`` URLs the page made from attachments.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["CSP", "HEADERS", "viewer_routes"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
       "media-src 'self' blob:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, media type, ETag) of every file of the viewer."""
    out: dict[str, tuple[bytes, str, str]] = {}
    folder = resources.files(__package__).joinpath("viewer")
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            data = entry.read_bytes()
            tag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
            out[entry.name] = (data, _TYPES[suffix], tag)
    return out


def viewer_routes() -> list[BaseRoute]:
    """Routes for ``/`` (the page), ``/viewer/{name}`` and ``/favicon.ico``."""
    files = _files()

    def serve(name: str, request: Request) -> Response:
        request.scope["chathistory.route"] = "/viewer"
        found = files.get(name)
        if found is None:
            return Response(b'{"error":{"type":"not_found","message":"no such file"}}',
                            404, media_type="application/json")
        data, media_type, tag = found
        headers = {**HEADERS, "ETag": tag}
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers=headers)
        return Response(data, media_type=media_type, headers=headers)

    async def index(request: Request) -> Response:
        return serve("index.html", request)

    async def asset(request: Request) -> Response:
        return serve(request.path_params["name"], request)

    async def favicon(request: Request) -> Response:
        return RedirectResponse("/viewer/favicon.svg", 308)

    return [Route("/", index, methods=["GET", "HEAD"]),
            Route("/viewer/{name}", asset, methods=["GET", "HEAD"]),
            Route("/favicon.ico", favicon, methods=["GET", "HEAD"])]
