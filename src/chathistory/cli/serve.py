"""``chathistory serve``: the stores behind the HTTP API and the web viewer."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import MissingDependency
from ..server import OPENAI_PREFIX
from ._common import add_command, add_store_option, fail, guarded, store_url

EXIT_CANNOT_LISTEN = 3
"""The port is in use or not permitted (uvicorn's own code for a failed start, should
the port be taken between the check and its bind)."""

HELP = "serve a store over HTTP (viewer at /, API under /v1, its interactive page at /docs)"
EPILOG = """\
Until an API key is created in the store (and without --require-keys) the
server serves tenant 'default' without authentication: only on a loopback
address (a public --host is refused until keys exist: chathistory keys create
TENANT), only to requests for Host localhost, 127.0.0.1 or [::1] (--allow-host
adds a name), and no write from another site. Once a key was created, even a
revoked one, keys are always required.
OpenAI's Conversations API is served under --openai-prefix (default
/openai/v1: OpenAI(base_url="http://127.0.0.1:8000/openai/v1", api_key=KEY));
without keys it accepts any api_key the SDK sends. --openai-prefix "" turns it off.
Request heads are limited to 64 KiB and --head-timeout (default 5 s: a connection
that sends part of a head, or nothing, is closed after it); an idle keep-alive
connection is closed after --keep-alive (5 s), a request body that sends nothing
after --body-timeout (15 s, 408), a client that reads none of its response after
--send-timeout (30 s). Past --max-connections (default: the open-files limit less a
quarter) the connection idle longest is closed.
Needs the server extra: pip install 'chathistory[server]'.
Exit status: 0 once stopped by Ctrl-C, 2 for bad options, a refused setup or an
unusable store, 3 when the address cannot be listened on (a port in use: --port).

examples:
  chathistory serve
  chathistory serve --allow-host chat.localhost
  chathistory serve --head-timeout 3 --keep-alive 2 --body-timeout 20
  chathistory serve --openai-prefix /v1
  chathistory serve --store postgresql://app@db/chat --host 0.0.0.0 --port 8080 --require-keys
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "serve", HELP, EPILOG)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--asset-dir", default="chathistory-assets",
                        help="directory for uploaded attachments (default ./chathistory-assets)")
    parser.add_argument("--require-keys", action="store_true",
                        help="refuse requests without a valid API key")
    parser.add_argument("--workers", type=int, default=1,
                        help="server processes (default 1; the server keeps no state)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="without keys, also serve requests for Host NAME (repeatable; "
                        "'*' for any)")
    parser.add_argument("--max-connections", type=int, default=None, metavar="N",
                        help="open connections per process (default: the open-files limit "
                        "less a quarter)")
    parser.add_argument("--head-timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds a connection may take to send a request's line and "
                        "headers, or stay silent outside a request, before it is closed "
                        "(default 5)")
    parser.add_argument("--keep-alive", type=int, default=None, metavar="SECONDS",
                        help="seconds an idle keep-alive connection is kept (default 5)")
    parser.add_argument("--body-timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds a request body may send nothing before a 408 "
                        "(default 15)")
    parser.add_argument("--send-timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds a response may wait on a client that reads nothing "
                        "before the connection is dropped (default 30)")
    parser.add_argument("--openai-prefix", default=OPENAI_PREFIX, metavar="PREFIX",
                        help="where OpenAI's Conversations API is served (default "
                        f"{OPENAI_PREFIX}; '' turns it off)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="log level (default info)")
    add_store_option(parser)
    parser.set_defaults(run=run)


@guarded("serve")
def run(args: argparse.Namespace) -> int:
    from ..server import PortUnavailable
    from ..server import run as serve

    if not 0 <= args.port <= 65535:
        raise ValueError("--port must be between 0 and 65535")
    if args.workers < 1:
        raise ValueError("--workers must be at least 1")
    limits = None
    given = {name: value for name, value in (
        ("max_connections", args.max_connections), ("head_timeout", args.head_timeout),
        ("keep_alive", args.keep_alive), ("body_timeout", args.body_timeout),
        ("send_timeout", args.send_timeout)) if value is not None}
    if args.max_connections is not None and args.max_connections < 1:
        raise ValueError("--max-connections must be at least 1")
    for name in ("head_timeout", "keep_alive", "body_timeout", "send_timeout"):
        if name in given and not 0 < given[name] <= 3600:
            raise ValueError(f"--{name.replace('_', '-')} must be more than 0 and at most "
                             "3600 seconds")
    if given:
        try:
            from ..server.connections import ConnectionLimits
        except ImportError as exc:
            raise MissingDependency(exc.name or "uvicorn", "server") from exc
        limits = ConnectionLimits(**given)
    try:
        serve(store_url(args), host=args.host, port=args.port, asset_dir=args.asset_dir,
              require_keys=args.require_keys, workers=args.workers, log_level=args.log_level,
              allowed_hosts=args.allow_host, connections=limits,
              openai_prefix=args.openai_prefix)
    except PortUnavailable as exc:
        return fail("serve", exc, EXIT_CANNOT_LISTEN)
    return 0
