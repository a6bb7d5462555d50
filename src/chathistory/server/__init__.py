"""The chathistory service: the stores behind an HTTP API (``chathistory serve``).

``create_app(store, ...)`` (in ``chathistory.server.app``) builds the ASGI app;
``run(store_url, host, port, asset_dir, require_keys)`` serves it with uvicorn.
``chathistory.server.auth`` creates, lists and revokes API keys. Importing
this package needs no server dependency; ``run`` and ``create_app`` need
``pip install 'chathistory[server]'``.

Where each kind of work runs (``server.work`` has the details):

- the event loop: parsing, routing, authentication from the key cache, reading
  bodies (idle timeout), decoding bodies up to 64 KB, sending. Never a store call,
  a disk access, a lock, or more than about a millisecond of one request's CPU;
- the work pool (16 threads): store calls, disk access, large bodies; each tenant
  gets at most 4 running and 64 waiting (429 past that), so no tenant can take the
  pool; no thread ever waits on a client;
- a niced counting process (started by the first long text): token counts of texts
  over 256 KB (the tokenizers hold the GIL);
- the store circuit: an unreachable store is a 503 with ``Retry-After`` at once, one
  probe every half second, service back as soon as a probe succeeds.

The front door, before any route runs:

- connections (``server.connections``, a subclass of uvicorn's httptools protocol):
  a request line and headers of at most 64 KiB (431 past it, cut as it streams in)
  that arrive within 5 s (408; a connection that sends nothing is closed after
  5 s, an idle keep-alive one after 5 s; a body silent for 15 s is a 408; a
  client reading none of its response for 30 s is reset; each a ``chathistory
  serve`` option); at most ``max_connections`` open
  connections per process (default: the soft open-files limit less a quarter), past
  which the connection that has waited longest for a request is closed (503 for the
  new one when every connection is in a request), with a warning at most every 10 s;
- requests (``server.frontdoor``): one ``Authorization`` / ``X-API-Key`` credential
  (400 for two); in open mode (no key ever created) a ``Host`` of localhost,
  127.0.0.1, [::1] or an ``allowed_hosts`` name (403), and no write from another
  site (403 for a foreign ``Origin`` / ``Sec-Fetch-Site``, 415 for a body of a type
  a page can send without a preflight).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import ChatHistoryError, MissingDependency

OPENAI_PREFIX = "/openai/v1"
"""The default prefix of OpenAI's Conversations API (``app.OPENAI_PREFIX`` too)."""

if TYPE_CHECKING:
    from .connections import ConnectionLimits

__all__ = ["OPENAI_PREFIX", "PortUnavailable", "ServerConfigError", "is_loopback_host", "run"]

_APP_FACTORY = "chathistory.server:_app_from_env"
_ENV = "CHATHISTORY_SERVE_CONFIG"


class ServerConfigError(ChatHistoryError, ValueError):
    """The server cannot start as configured (e.g. a public address without keys)."""


class PortUnavailable(ServerConfigError):
    """The address cannot be listened on: the port is in use, or not permitted."""


def _check_listenable(host: str, port: int) -> None:
    """Raise ``PortUnavailable`` unless ``host:port`` can be bound now, every address
    ``host`` names (as uvicorn binds them, with ``SO_REUSEADDR``), so that a busy
    port is one clear line before anything says "serving"."""
    shown = f"[{host}]" if ":" in host else host
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot listen on {host}: {exc.strerror}; pick another "
                              "address with --host") from None
    bound = 0
    unavailable: OSError | None = None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio does: the IPv6 socket, IPv6 only
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                bound += 1
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:  # a family not enabled: asyncio skips it
                    unavailable = exc
                    continue
                raise PortUnavailable(_cannot_listen(shown, port, exc)) from None
    if not bound and unavailable is not None:
        raise PortUnavailable(_cannot_listen(shown, port, unavailable))


def _cannot_listen(shown: str, port: int, exc: OSError) -> str:
    where = f"cannot listen on {shown}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"{where}: the port is in use (another chathistory serve?); stop that "
                f"server or pick another port with --port, e.g. --port {port + 1}")
    if exc.errno == errno.EACCES:
        return (f"{where}: permission denied (ports below 1024 need privileges); pick "
                "another port with --port, e.g. --port 8000")
    return f"{where}: {exc.strerror}; pick another address with --host or port with --port"


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` is reachable from this machine only."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _need_server_extra() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(exc.name or "starlette", "server") from exc


def _config(store_url: str, asset_dir: str, require_keys: bool, log_level: str,
            access_log: bool, allowed_hosts: Sequence[str] = (),
            connections: ConnectionLimits | None = None,
            openai_prefix: str = OPENAI_PREFIX) -> dict[str, Any]:
    return {"store_url": store_url, "asset_dir": asset_dir, "require_keys": require_keys,
            "log_level": log_level, "access_log": access_log,
            "allowed_hosts": list(allowed_hosts), "connections": connections,
            "openai_prefix": openai_prefix}


def _app_from_env() -> Any:
    """The app for a uvicorn worker process (configuration from the environment)."""
    import msgspec

    from ..stores import open_store
    from . import connections
    from .app import create_app
    from .logging import configure

    config = msgspec.json.decode(os.environ[_ENV])
    configure(config["log_level"], access_log=config["access_log"])  # worker processes too
    if config.get("connections"):  # before the first connection of this worker
        connections.configure(msgspec.convert(config["connections"],
                                              connections.ConnectionLimits))
    store = open_store(config["store_url"])
    return create_app(store, keys_required=config["require_keys"],
                      asset_dir=config["asset_dir"],
                      allowed_hosts=config.get("allowed_hosts", ()),
                      openai_prefix=config.get("openai_prefix", OPENAI_PREFIX))


def run(store_url: str = "sqlite:///chathistory.db", host: str = "127.0.0.1",
        port: int = 8000, asset_dir: str = "chathistory-assets", require_keys: bool = False,
        *, workers: int = 1, log_level: str = "info", access_log: bool = True,
        allowed_hosts: Sequence[str] = (), connections: ConnectionLimits | None = None,
        openai_prefix: str = OPENAI_PREFIX, out: TextIO | None = None) -> None:
    """Serve ``store_url`` on ``host:port`` until interrupted.

    Without any API key ever created in the store and without ``require_keys``,
    the server serves tenant ``default`` without authentication, and so only on a
    loopback address (a public ``host`` is refused with ``ServerConfigError``),
    only to requests whose ``Host`` is localhost, 127.0.0.1, [::1] or one of
    ``allowed_hosts``, and no write from another site (``server.frontdoor``).
    ``connections``: head size and time limits and the connection cap
    (``server.connections``; the defaults: 64 KiB, 5 s, the open-files limit less
    a quarter). ``openai_prefix``: where OpenAI's Conversations API is served
    (``server.conversations``; "" leaves it out). The server holds no state, so
    ``workers`` > 1 runs that many processes. An address that cannot be listened on
    (a port in use) raises ``PortUnavailable`` before anything is printed.
    """
    _need_server_extra()
    import msgspec
    import uvicorn

    from ..stores import open_store
    from . import auth
    from .connections import configure, server_options
    from .frontdoor import OpenModePolicy

    try:
        OpenModePolicy.allowing(allowed_hosts)
    except ValueError as exc:
        raise ServerConfigError(f"--allow-host: {exc}") from None
    if openai_prefix:
        from .conversations import endpoints

        try:
            endpoints(openai_prefix)
        except ValueError as exc:
            raise ServerConfigError(f"--openai-prefix: {exc}") from None
    out = out or sys.stderr
    store = open_store(store_url)
    try:
        keys = auth.has_keys(store)
        if not keys and not require_keys and not is_loopback_host(host):
            raise ServerConfigError(
                f"refusing to serve {host}: the store has no API keys, so anyone who can "
                "reach the server would read and write every conversation. Create a key "
                "(chathistory keys create TENANT) and start with --require-keys, or bind "
                "127.0.0.1")
    finally:
        store.close()
    _check_listenable(host, port)
    shown = f"[{host}]" if ":" in host else host
    openai = f", OpenAI's Conversations API under {openai_prefix}" if openai_prefix else ""
    print(f"chathistory serving {store_url} at http://{shown}:{port}/ "
          f"(the viewer at /, the API under /v1{openai}, tried out at /docs, described at "
          f"/openapi.json)", file=out, flush=True)
    if not keys and not require_keys:
        print("warning: no API keys: serving tenant 'default' without authentication, "
              "to loopback clients only. Create a key with `chathistory keys create "
              "TENANT` to require keys.", file=out, flush=True)
    elif not keys:
        print("warning: --require-keys but no key exists yet: every request is refused "
              "until one is created (chathistory keys create TENANT)", file=out, flush=True)
    config = _config(store_url, asset_dir, require_keys, log_level, access_log,
                     allowed_hosts, connections, openai_prefix)
    os.environ[_ENV] = msgspec.json.encode(config).decode()
    if workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="chathistory-metrics-")
    if connections is not None:  # here; a worker process does it as it makes the app
        configure(connections)
    uvicorn.run(_APP_FACTORY, factory=True, host=host, port=port, workers=workers,
                log_level=log_level, access_log=False, server_header=False,
                **server_options())
