"""What the store commands share: ``--store`` / ``--tenant``, opening the store,
turning library errors into one line on stderr and an exit status."""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from ..errors import ChatHistoryError, MissingDependency, NotFound
from ..importers import TenantArg
from ..stores.protocol import Store

__all__ = [
    "DEFAULT_STORE",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "add_command",
    "add_store_option",
    "add_tenant_option",
    "fail",
    "guarded",
    "open_cli_store",
    "redact",
    "store_url",
    "tenant_kwargs",
]

DEFAULT_STORE = "sqlite:///chathistory.db"
EXIT_ERROR = 2
EXIT_NOT_FOUND = 1

Runner = Callable[[argparse.Namespace], int]


def add_command(commands: Any, name: str, help: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand whose help shows ``epilog`` (its examples) as written."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="URL", default=None,
        help="the store: sqlite:///path.db, postgresql://..., redis://..., memory://, "
             "http(s)://server (default: $CHATHISTORY_STORE or sqlite:///chathistory.db)")


def add_tenant_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tenant", default=None,
        help="the tenant whose data to use (default: 'default'; for an http(s) store, "
             "the API key's tenant)")


def store_url(args: argparse.Namespace) -> str:
    url: str | None = getattr(args, "store", None)
    return url or os.environ.get("CHATHISTORY_STORE") or DEFAULT_STORE


def redact(url: str) -> str:
    """``url`` without a password (for messages)."""
    scheme, sep, rest = url.partition("://")
    auth, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in auth:
        return url
    return f"{scheme}://{auth.split(':', 1)[0]}:***@{host}"


def open_cli_store(args: argparse.Namespace) -> Store:
    from ..stores import open_store

    return open_store(store_url(args))


def tenant_kwargs(args: argparse.Namespace) -> TenantArg:
    """``{"tenant": ...}`` when ``--tenant`` was given, else nothing (so that a
    remote store, whose key names the tenant, is never asked for another)."""
    tenant: str | None = getattr(args, "tenant", None)
    if tenant is None:
        return TenantArg()
    if tenant.startswith("__"):
        raise ValueError(f"tenant names starting with '__' are reserved: {tenant!r}")
    return TenantArg(tenant=tenant)


def fail(command: str, message: object, status: int = EXIT_ERROR) -> int:
    print(f"chathistory {command}: {message}", file=sys.stderr)
    return status


def guarded(command: str) -> Callable[[Runner], Runner]:
    """Run a command, reporting expected errors as one line and an exit status:
    1 for something not found, 2 for bad input or an unusable store."""

    def decorate(run: Runner) -> Runner:
        @functools.wraps(run)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except NotFound as exc:
                return fail(command, exc, EXIT_NOT_FOUND)
            except MissingDependency as exc:
                return fail(command, exc)
            except (ChatHistoryError, ValueError, OSError, sqlite3.Error) as exc:
                return fail(command, exc)
            except KeyboardInterrupt:
                return fail(command, "interrupted", 130)

        return wrapper

    return decorate
