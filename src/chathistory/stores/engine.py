"""The engine every backend shares: sessions, appends and reads.

``Store`` is the public protocol. The engine implements it once on top of the
backend primitives (``backend.py``), so that the rules (idempotent appends,
optimistic concurrency, pair-safe reads, forks that share their prefix) live here
and each backend only moves rows. It is built in layers, each on the one before:
``Sessions`` (``sessions.py``: the counter, the clock, sessions and their
listing), ``Reads`` (``reads.py``: pair-safe reads through a fork's ancestors) and
``Appending`` (``append.py``: the append path); ``Browse`` (``browse.py``: a page's
first user messages and search matches) and ``Searching`` (``search.py``: word
search over the tenant's messages) sit beside ``Appending``. ``BaseStore`` (``base.py``) adds
the lifecycle and export/import. Backends are written on their natural (sync)
side; ``chathistory.stores.aio`` adapts any of them to ``AsyncStore``.

Every method takes ``tenant``; sessions are keyed by ``(tenant, session_id)``,
so one tenant can never name another's session.

The backend helpers that used to live here are importable from here still:
``recent_key`` (``backend.py``), ``regroup_spans`` and
``closed_spans`` (``regroup.py``).
"""

from __future__ import annotations

from .append import Appending
from .backend import recent_key
from .browse import Browse
from .regroup import closed_spans, regroup_spans
from .search import Searching

__all__ = ["Engine", "closed_spans", "recent_key", "regroup_spans"]


class Engine(Appending, Browse, Searching):
    """The engine: sessions, reads and appends over the ``_b_*`` primitives.
    ``BaseStore`` adds the lifecycle and export/import, and a backend subclasses
    that, implementing the primitives ``Backend`` declares."""
