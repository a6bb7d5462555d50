"""What a request must show before a route runs: at most one credential, and in
open mode a loopback ``Host`` and, for a write, this server's own origin.

Open mode (no API key was ever created, keys not required) serves tenant
``default`` to loopback clients without a key. A browser on the same machine is
such a client, so a page of any other site could otherwise use the server: by
DNS rebinding (a name of the attacker's that resolves to 127.0.0.1, the page then
reads everything as same-origin) or by cross-site requests that need no CORS
preflight (a form, a no-cors ``fetch`` with a text or Blob body). Hence, in open
mode only:

- ``Host`` must name this machine: ``localhost``, ``127.0.0.1`` or ``[::1]``, any
  port, or a name allowed by ``--allow-host`` (``*``: any);
- a write (any method but GET, HEAD, OPTIONS) is refused when ``Sec-Fetch-Site``
  says another site or ``Origin`` is not this server's own origin, and its body
  must declare a type that a page of another site cannot send without a preflight
  (not text/plain, a form, or none): ``application/json``, an import's
  ``application/x-ndjson``, an upload's own type or ``application/octet-stream``.

With keys, a page of another site cannot send a key (it does not have it, and a
header carrying one needs a preflight), so none of this applies. The web viewer
only reads, from the server's own origin, and is unaffected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request

from .errors import HTTPError

__all__ = ["LOOPBACK_NAMES", "OpenModePolicy", "credential", "host_name"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names served in open mode without ``--allow-host``."""
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_SIMPLE_TYPES = frozenset({"", "text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data"})
"""Body types a page may send to another origin without a CORS preflight (and none)."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _one(headers: Headers, name: str, shown: str) -> str | None:
    values = headers.getlist(name)
    if len(values) > 1:
        raise HTTPError(400, "bad_request", f"the request has {len(values)} {shown} headers; "
                        "send one")
    return values[0] if values else None


def credential(headers: Headers) -> str | None:
    """The API key a request carries, from ``Authorization: Bearer <key>`` or
    ``X-API-Key``; 400 naming the header when it comes twice, or when both come with
    different keys (which one would be meant is anyone's guess)."""
    authorization = _one(headers, "authorization", "Authorization")
    api_key = _one(headers, "x-api-key", "X-API-Key")
    bearer = None
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise HTTPError(401, "unauthorized", "use Authorization: Bearer <key>",
                            {"WWW-Authenticate": "Bearer"})
        bearer = value.strip()
    if bearer is not None and api_key is not None and api_key.strip() != bearer:
        raise HTTPError(400, "bad_request", "the request has both Authorization and "
                        "X-API-Key headers, with different keys; send one")
    return bearer if bearer is not None else api_key


def host_name(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a ``Host`` header value (``[::1]:8000`` -> ``("::1", 8000)``),
    the name lowercased; None when it is not a host name with an optional port."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if rest and (not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6):
        return None
    if not name or any(c in name for c in "/@?#\\ "):
        return None
    return name, int(rest[1:]) if rest else None


@dataclass(frozen=True)
class OpenModePolicy:
    """The checks of open mode (see the module docstring)."""

    allowed_hosts: frozenset[str] = frozenset()
    """Host names served besides ``LOOPBACK_NAMES`` (lowercase; ``*``: any)."""

    @classmethod
    def allowing(cls, hosts: Iterable[str] = ()) -> OpenModePolicy:
        names = set()
        for host in hosts:
            parsed = host_name(host) if host.strip() != "*" else ("*", None)
            if parsed is None:
                raise ValueError(f"not a host name: {host!r}")
            names.add(parsed[0])
        return cls(frozenset(names))

    def check(self, request: Request) -> None:
        """Raise ``HTTPError`` unless ``request`` may be served in open mode."""
        headers = request.headers
        host = _one(headers, "host", "Host")
        parsed = host_name(host) if host is not None else None
        if parsed is None or not (parsed[0] in LOOPBACK_NAMES or parsed[0] in self.allowed_hosts
                                  or "*" in self.allowed_hosts):
            shown = "no Host" if host is None else f"Host {host[:100]!r}"
            raise HTTPError(403, "forbidden", f"{shown}: this server has no API keys and "
                            "serves only localhost, 127.0.0.1 and [::1] (chathistory serve "
                            "--allow-host NAME serves NAME too)")
        if request.method in _READS:
            return
        site = headers.get("sec-fetch-site")
        if site is not None and site.lower() not in ("same-origin", "none"):
            raise HTTPError(403, "forbidden", f"a write from another site (Sec-Fetch-Site: "
                            f"{site[:30]}) is refused: this server has no API keys")
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin, request.url.scheme, parsed):
            raise HTTPError(403, "forbidden", f"a write from another origin ({origin[:100]}) "
                            "is refused: this server has no API keys")
        length = headers.get("content-length")
        has_body = (length is not None and length.strip() != "0") or \
            "transfer-encoding" in headers
        declared = (headers.get("content-type") or "").split(";")[0].strip().lower()
        if has_body and declared in _SIMPLE_TYPES:
            raise HTTPError(415, "unsupported_media_type",
                            f"send the body as application/json (an import: application/"
                            "x-ndjson; an upload: its own type or application/octet-stream), "
                            f"not {declared or 'without a Content-Type'}: this server has no "
                            "API keys, and other sites' pages can send that type")

    @staticmethod
    def _own_origin(origin: str, scheme: str, host: tuple[str, int | None]) -> bool:
        try:
            parts = urlsplit(origin.strip())
            port = parts.port
        except ValueError:
            return False
        if parts.scheme != scheme or parts.hostname is None or parts.path not in ("", "/"):
            return False
        default = _DEFAULT_PORTS.get(scheme)
        return (parts.hostname, port or default) == (host[0], host[1] or default)
