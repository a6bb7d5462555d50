"""``BaseStore``: what every backend subclasses.

The rules (idempotent appends, optimistic concurrency, pair-safe reads, forks
that share their prefix, retention) live in the engine (``engine.py``) and in the
layers ``BaseStore`` adds to it: ``Lifecycle`` (``lifecycle.py``: changes,
branches, retention) and ``Transfer`` (``transfer.py``: export and import). A
backend subclasses ``BaseStore`` and implements the primitives of ``Backend``
(``backend.py``), so that it only moves rows. Backends are written on their
natural (sync) side; ``chathistory.stores.aio`` adapts any of them to
``AsyncStore``.

Every method takes ``tenant``; sessions are keyed by ``(tenant, session_id)``,
so one tenant can never name another's session.
"""

from __future__ import annotations

from .backend import AppendTxn
from .protocol import Store
from .transfer import Transfer

__all__ = ["AppendTxn", "BaseStore", "Store"]


class BaseStore(Transfer):
    """A store: the engine plus changes, branches, retention, export and import.
    Abstract until a backend implements the ``Backend`` primitives."""
