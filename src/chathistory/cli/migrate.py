"""``chathistory migrate``: bring a store's schema up to date and report its version."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from typing import Any

from ..stores.protocol import Store
from ._common import add_command, add_store_option, guarded, open_cli_store, redact, store_url
from ._output import print_json

HELP = "apply the store's schema migrations and report its schema version"
EPILOG = """\
Opening a store applies the migrations it lacks (each in one transaction with
its record), so this is safe to run any time, from several processes at once.
SQLite and PostgreSQL report their applied migrations; Redis and memory stores
have no schema to migrate. A search index that a store has not built yet (SQLite
builds a small database's when it opens, a large one's here) is built in batches,
with its progress on stderr; stopped, it resumes where it was.

examples:
  chathistory migrate
  chathistory migrate --store postgresql://app@db/chat?schema=chathistory --json
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "migrate", HELP, EPILOG)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_store_option(parser)
    parser.set_defaults(run=run)


def _sqlite_applied(path: str) -> list[str] | None:
    """Migrations recorded in a SQLite file (None when it has no record yet)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = conn.execute("SELECT name FROM migrations ORDER BY name").fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return [name for (name,) in rows]


def _postgres_applied(store: Any) -> list[str]:
    # The store keeps its pool private; reading the migrations table needs one
    # connection of it (see the report: a public Store.migrations() would do).
    from psycopg import sql

    with store._pool.connection() as conn:
        query = sql.SQL("SELECT name FROM {}.migrations ORDER BY name").format(
            sql.Identifier(store.schema))
        return [name for (name,) in conn.execute(query).fetchall()]


def inspect(store: Store, before: list[str] | None) -> dict[str, Any]:
    """The schema report of an open store."""
    from ..model.codec import SCHEMA_VERSION as MESSAGE_SCHEMA
    from ..stores.model import SESSION_SCHEMA_VERSION

    backend = type(store).__name__
    known: list[str] = []
    applied: list[str] | None = None
    if backend == "SQLiteStore":
        from ..stores.sqlite import MIGRATIONS as SQLITE_MIGRATIONS

        known = [name for name, _ in SQLITE_MIGRATIONS]
        path = str(getattr(store, "path", ""))
        # a private in-memory database cannot be read from a second connection
        applied = list(known) if path == ":memory:" else _sqlite_applied(path)
    elif backend == "PostgresStore":
        from ..stores.postgres import MIGRATIONS as PG_MIGRATIONS

        known = [name for name, _ in PG_MIGRATIONS]
        applied = _postgres_applied(store)
    elif backend == "RedisStore":  # data steps only, recorded in the P:migrations set
        from ..stores.redis import MIGRATIONS as REDIS_MIGRATIONS

        known = list(REDIS_MIGRATIONS)
        client: Any = getattr(store, "_r")  # noqa: B009  (the store's own client)
        done = {m.decode() if isinstance(m, bytes) else str(m)
                for m in client.smembers(f"{getattr(store, 'prefix')}:migrations")}  # noqa: B009
        applied = [name for name in known if name in done]
    report: dict[str, Any] = {
        "backend": backend,
        "schema_version": len(applied) if applied is not None else None,
        "migrations": applied,
        "latest": known[-1] if known else None,
        "up_to_date": applied is None or set(known) <= set(applied),
        "applied_now": [m for m in (applied or []) if before is not None and m not in before],
        "session_schema_version": SESSION_SCHEMA_VERSION,
        "message_schema_version": MESSAGE_SCHEMA,
    }
    return report


def build_search_index(store: Store, show_progress: bool) -> int | None:
    """Finish the store's search index if it has one to build (``build_search_index``:
    SQLite), printing progress to stderr; the rows it indexed, or None (no index)."""
    build = getattr(store, "build_search_index", None)
    if build is None or not getattr(store, "search_indexed", False):
        return None

    def progress(done: int, total: int) -> None:
        print(f"\rsearch index: {done:,} of {total:,} rows", end="", file=sys.stderr,
              flush=True)

    indexed = int(build(progress=progress if show_progress else None))
    if show_progress and indexed:
        print(file=sys.stderr)
    return indexed


@guarded("migrate")
def run(args: argparse.Namespace) -> int:
    url = store_url(args)
    before: list[str] | None = None
    if url.lower().startswith("sqlite:///"):
        from urllib.parse import unquote

        location = unquote(url[len("sqlite:///"):].partition("?")[0])
        before = _sqlite_applied(location) or []
    store = open_cli_store(args)
    try:
        indexed = build_search_index(store, show_progress=True)
        report = inspect(store, before)
    finally:
        store.close()
    report["store"] = redact(url)
    report["search_index_built_now"] = indexed
    if args.json:
        print_json(report)
        return 0
    if report["backend"] == "RemoteStore":
        print(f"{report['store']}: a server; migrate the store it serves where it runs "
              "(chathistory migrate --store THAT_URL)")
    elif report["migrations"] is None:
        print(f"{report['store']}: {report['backend']} has no schema migrations "
              "(nothing to do)")
    else:
        now = report["applied_now"]
        done = f"applied {', '.join(now)}" if now else "nothing to apply"
        print(f"{report['store']}: schema version {report['schema_version']} "
              f"({report['latest']}), {done}")
        if indexed:
            print(f"search index: built, {indexed:,} rows indexed now")
    print(f"serialized forms: session v{report['session_schema_version']}, "
          f"messages v{report['message_schema_version']}")
    return 0
