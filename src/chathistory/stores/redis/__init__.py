"""RedisStore: sessions in Redis or Redis Cluster (``redis://``, ``redis+cluster://``).

Every key of a session shares one hash tag, so a session lives in one cluster
slot and its writes are single-slot Lua scripts (atomic); the key layout is
drawn in ``keys``.

Cross-slot writes are ordered so a crash leaves only stale index entries,
which every read filters out, never a missing one: index entries are added
(idempotently) before the session is written, and removed after it is deleted.
The ``recent`` order's entries name the session's ``updated_at``, which every
save changes: a save adds the new entry before it writes and removes the old one
after (a failed save removes its own entry, unless the session has that time).
A listing keeps only entries that match the session as stored.
A search (``list_sessions(query=)``) reads the rows of each listed session
(``HSCAN``, stopping at the first match): its cost grows with the messages of
the sessions it passes over. Word search (``search``) has no index either: it
reads the tenant's newest messages, at most ``search_scan_limit`` of them
(``search``: why no index, and the byte test that spares most rows a decode).
An asset is written with its tenant reference before the append that uses it;
garbage collection removes an asset only when, atomically in the tenant's slot,
no reference of a live incarnation and epoch is left.

Appends are optimistic: read the session (version, incarnation, epoch) and
what the engine asks for, then one Lua script checks that nothing changed and
writes every row, index entry and the session (compare-and-set, one round
trip); on a race it retries with a jittered backoff.

Durability depends on the server's persistence settings, not on this module:

- no persistence: everything is lost when the server restarts;
- RDB snapshots: a restart goes back to the last snapshot;
- AOF ``appendfsync everysec`` (the usual choice): a crash of the server
  process or the OS loses at most about the last second of acknowledged writes;
- AOF ``appendfsync always``: every acknowledged write survives a crash
  (invariant 8 of docs/architecture.md holds only with this setting).

Replication is asynchronous; issue ``WAIT`` / ``WAITAOF`` (7.2+) yourself when a
write must reach replicas before you acknowledge it.

The package, by concern: ``keys`` (the key layout and how rows are packed),
``scripts`` (the Lua scripts), ``search`` (the bounded scan behind ``search``),
``store`` (``RedisStore``, its migrations).
"""

from __future__ import annotations

from .store import MIGRATIONS as MIGRATIONS
from .store import RedisStore

__all__ = ["RedisStore"]
