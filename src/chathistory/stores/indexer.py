"""The thread that writes a store's search index after its appends (SQLite's and
PostgreSQL's, ``sqlite_search.py`` and ``postgres/search.py``): started by the first
append that leaves it work, woken by appends, stopped by ``close``."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["IndexerThread"]


class IndexerThread:
    """The indexer thread's handle: ``_indexer_lock`` guards starting and stopping it,
    ``_indexer_wake`` wakes it, ``_indexer_stop`` tells it to end."""

    def _init_indexer_thread(self) -> None:
        self._indexer: threading.Thread | None = None
        self._indexer_lock = threading.Lock()
        self._indexer_wake = threading.Event()
        self._indexer_stop = False

    def _ensure_indexer(self, run: Callable[[], None], name: str) -> bool:
        """Under ``_indexer_lock``: the thread running ``run``, started if it is not yet;
        False once the store has stopped it."""
        if self._indexer_stop:
            return False
        if self._indexer is None:
            self._indexer = threading.Thread(target=run, name=name, daemon=True)
            self._indexer.start()
        return True

    def _stop_indexer(self) -> None:
        """Stop the indexer thread (after its current batch)."""
        with self._indexer_lock:
            self._indexer_stop = True
            thread = self._indexer
        self._indexer_wake.set()
        if thread is not None:
            thread.join()
