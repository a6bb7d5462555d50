"""``chathistory keys``: create, list and revoke API keys (one tenant per key)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..errors import NotFound
from ..stores.protocol import Store
from ._common import (
    EXIT_NOT_FOUND,
    add_command,
    add_store_option,
    fail,
    guarded,
    open_cli_store,
    store_url,
)
from ._output import Column, number, print_json, print_table
from ._tenants import DEFAULT_TENANT, command, count_sessions, key_tenants, note

HELP = "manage API keys: create, list, revoke"
EPILOG = """\
Keys are kept hashed in the store itself, so every server over the same store
accepts them. The secret is shown once, at creation. Manage keys on the store
directly (sqlite/postgresql/redis URL), not through a server's http(s) URL.

examples:
  chathistory keys create acme --name "acme backend"
  chathistory keys list --tenant acme
  chathistory keys revoke 3f9a0c2b7d1e4f60
"""
CREATE_EPILOG = """\
Prints the key id and the secret (chk_<id>_...): the secret cannot be shown again.
From the first key on, every server on this store requires a key for every
request, the running ones too. A key sees only its tenant's sessions: notes on
stderr say how many each tenant holds, and which command makes a key for data
this key cannot see (data imported without --tenant is in tenant 'default').

example:
  chathistory keys create acme --name "acme backend"
"""
LIST_EPILOG = """\
example:
  chathistory keys list --tenant acme --json
"""
REVOKE_EPILOG = """\
Servers stop accepting the key within a few seconds (their positive cache).

example:
  chathistory keys revoke 3f9a0c2b7d1e4f60
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "keys", HELP, EPILOG)

    def run_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(run=run_help)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")

    create = add_command(actions, "create", "create a key for a tenant (secret shown once)",
                         CREATE_EPILOG)
    create.add_argument("tenant", help="the tenant the key acts as")
    create.add_argument("--name", default="", help="a note saying what the key is for")
    create.add_argument("--json", action="store_true",
                        help='print {"id", "tenant", "name", "secret"}')
    add_store_option(create)
    create.set_defaults(run=run_create)

    listing = add_command(actions, "list", "list keys (never their secrets)", LIST_EPILOG)
    listing.add_argument("--tenant", help="only this tenant's keys")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    add_store_option(listing)
    listing.set_defaults(run=run_list)

    revoke = add_command(actions, "revoke", "revoke a key", REVOKE_EPILOG)
    revoke.add_argument("key_id", help="the key id (from keys list)")
    revoke.add_argument("--json", action="store_true", help="print the revoked key as JSON")
    add_store_option(revoke)
    revoke.set_defaults(run=run_revoke)


def _check_direct(args: argparse.Namespace) -> None:
    if store_url(args).lower().startswith(("http://", "https://")):
        raise ValueError("keys live in the store: use its sqlite/postgresql/redis URL, "
                         "not a server's http(s) URL")


@guarded("keys create")
def run_create(args: argparse.Namespace) -> int:
    from ..server import auth

    _check_direct(args)
    store = open_cli_store(args)
    try:
        first = not auth.has_keys(store)
        key_id, secret = auth.create_key(store, args.tenant, args.name)
        if args.json:
            print_json({"id": key_id, "tenant": args.tenant, "name": args.name,
                        "secret": secret})
        else:
            print(f"key {key_id} for tenant {args.tenant!r} created. Its secret, shown "
                  "only now:")
            print(secret)
        _notes_after_create(args, store, first)
    finally:
        store.close()
    return 0


def _notes_after_create(args: argparse.Namespace, store: Store, first: bool) -> None:
    """What the new key changes and what it cannot see: the servers' mode, and the
    sessions of the other known tenants ('default' and those with keys)."""
    tenant: str = args.tenant
    quoted = shlex.quote(tenant)
    if first:
        note("this is the store's first key: from now on every server on this store "
             "(a running one too) requires an API key for every request, and the viewer "
             "asks for one. A key sees only its own tenant's sessions.")
    own = count_sessions(store, tenant)
    note(f"this key sees tenant {tenant!r}: {number(own)} sessions"
         + ("" if own else f" so far (import into it with: "
            f"{command(args, f'import FILE --tenant {quoted}')})"))
    for other in sorted(({DEFAULT_TENANT} | key_tenants(store)) - {tenant}):
        held = count_sessions(store, other)
        if held:
            note(f"tenant {other!r} holds {number(held)} sessions that this key cannot see; "
                 f"a key for them: {command(args, f'keys create {shlex.quote(other)}')}")


@guarded("keys list")
def run_list(args: argparse.Namespace) -> int:
    from ..server import auth

    _check_direct(args)
    store = open_cli_store(args)
    try:
        keys = auth.list_keys(store, args.tenant)
    finally:
        store.close()
    if args.json:
        import msgspec

        print_json(msgspec.to_builtins(keys))
        return 0
    print_table([Column("id"), Column("tenant"), Column("name", wrap=True),
                 Column("created", optional=True), Column("revoked")],
                [[k.id, k.tenant, k.name, k.created_at[:19].replace("T", " "),
                  "yes" if k.revoked else ""] for k in keys],
                caption=f"{len(keys)} keys")
    return 0


@guarded("keys revoke")
def run_revoke(args: argparse.Namespace) -> int:
    from ..server import auth

    _check_direct(args)
    store = open_cli_store(args)
    try:
        info = auth.revoke_key(store, args.key_id)
    except NotFound:
        return fail("keys revoke", f"no key {args.key_id!r}", EXIT_NOT_FOUND)
    finally:
        store.close()
    if args.json:
        import msgspec

        print_json(msgspec.to_builtins(info))
        return 0
    print(f"key {info.id} (tenant {info.tenant!r}) revoked")
    return 0
