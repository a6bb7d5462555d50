"""PostgresStore: sessions and messages in PostgreSQL (psycopg 3, a connection pool).

Every table's primary key starts with ``(tenant, session_id)`` (assets with
``(tenant, sha256)``), so either column can serve as a distribution column
(Citus) or partition key; ``partitions=N`` creates the per-message tables
``PARTITION BY HASH (tenant, session_id)``.

Every read the engine makes is an index lookup or range on one session, and the
plans do not depend on table statistics: each per-session table has exactly one
index that fits (its primary key; messages by id, the kept system rows and the
calls live in tables of their own), multi-key lookups probe key by key, and
"the first row past N tokens" is a binary search of primary-key probes. (With
several ``(tenant, session_id, ...)`` indexes on one table, a table without
fresh statistics - new, bulk-loaded, or autovacuum off - lets the planner pick
any of them and filter the whole session.)

An append is one transaction: a statement that writes only if the session is
still at the version its plan read, or, when writers keep racing on a session or
attachments are written, one that locks the session row (``SELECT ... FOR
UPDATE``): writers to one session queue up, across processes too, while
different sessions never wait for each other. Acknowledged writes are committed
transactions, as durable as the server's ``fsync``/``synchronous_commit`` make them.

Sessions are listed by an index range (partial indexes whose condition only the
listings state, so a lookup by key can only use the primary key; schema m004):
``(tenant, created_iso, session_id)``, or
``(tenant, updated_iso, session_id)`` for ``order="recent"`` (``updated_iso`` is
``recent_key()``, written with every save). Messages are found by their words
through a GIN index over each row's words, written by the append (``search``: and
the listing's ``query=`` too); ``search=off`` turns it off, and a search then scans.

Message JSON is kept as ``bytea``, byte for byte what the engine wrote. The
session is kept as ``json`` (not ``jsonb``, which rewrites ``1e20`` as an
integer and refuses ``\\u0000``) beside the columns that are searched.

The package, by concern: ``schema`` (tables and migrations), ``queries`` (the
statements), ``pool`` (connections), ``wire`` (an append's statement through libpq's
prepared calls), ``search`` (the search index's statements and its fill), ``store``
(``PostgresStore``).
"""

from __future__ import annotations

from ...errors import MissingDependency

try:  # first: a missing extra is named before any module of ours uses it
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency(exc.name or "psycopg", "postgres") from exc

from .schema import MIGRATIONS
from .schema import migrate as migrate
from .schema import quote_schema as _quote  # noqa: F401 (reliability.isolation checks it)
from .store import PostgresStore

__all__ = ["MIGRATIONS", "PostgresStore"]
