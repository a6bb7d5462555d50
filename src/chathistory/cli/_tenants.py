"""Which tenant holds what, and which keys see it: the notes that ``keys create`` and
``import`` print, so that data never sits unseen behind a key of another tenant.

A server key acts as one tenant; a server without keys serves tenant ``default``
only; the first key created ends that open mode for every server on the store.
"""

from __future__ import annotations

import argparse
import functools
import sys

from ..stores.model import DEFAULT_TENANT
from ..stores.protocol import Store
from ..stores.sessions import Sessions, count_listed
from ._common import redact

__all__ = ["DEFAULT_TENANT", "command", "count_sessions", "key_tenants", "note"]


def note(text: str) -> None:
    """A line for the reader (stderr, so that stdout stays the command's output)."""
    sys.stdout.flush()  # after what the command printed, also when both go to one file
    print(f"note: {text}", file=sys.stderr)


def command(args: argparse.Namespace, words: str) -> str:
    """``chathistory WORDS``, with the ``--store`` this command was given (so the
    command runs against the same store; a password is shown as ``***``)."""
    url: str | None = getattr(args, "store", None)
    return f"chathistory {words}" + (f" --store {redact(url)}" if url else "")


def count_sessions(store: Store, tenant: str) -> int:
    """The sessions ``tenant`` holds (forks included, expired ones not): one count of
    the database for a store engine."""
    if isinstance(store, Sessions):
        return store.count_sessions(tenant=tenant)
    return count_listed(functools.partial(store.list_sessions, tenant=tenant))


def key_tenants(store: Store) -> set[str]:
    """The tenants that have a key not revoked."""
    from ..server import auth

    return {k.tenant for k in auth.list_keys(store) if not k.revoked}
