"""The clock that judges expiry: the store's own, never the calling node's.

Several processes on several machines share one PostgreSQL or Redis store; their
wall clocks disagree (a node 2 h ahead purged another node's live 1 h session).
So a TTL's deadline is set, and compared, on the store's clock: ``StoreClock``
reads it (PostgreSQL ``now()``, Redis ``TIME``) once a minute at most and carries
it forward with this machine's monotonic clock, which no wall-clock step moves.
A store without a clock of its own (SQLite, memory: one machine) reads the local
wall clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from .model import utcnow

__all__ = ["CLOCK_REFRESH_SECONDS", "StoreClock"]

CLOCK_REFRESH_SECONDS = 60.0
"""How long a reading of the store's clock is carried forward (monotonic drift over a
minute is microseconds)."""


class StoreClock:
    """``now()``: the store's current time. ``read`` returns the store's clock (one
    round trip), or None when the store's clock is this machine's."""

    def __init__(self, read: Callable[[], datetime | None],
                 refresh_seconds: float = CLOCK_REFRESH_SECONDS) -> None:
        self._read = read
        self._refresh = refresh_seconds
        self._base: tuple[float, datetime] | None = None  # (monotonic, store time) then
        self._local = False
        self._lock = threading.Lock()

    def now(self, *, fresh: bool = False) -> datetime:
        """The store's time; ``fresh``: read it now (before a destructive decision such
        as a purge), else carry the last reading forward when it is recent."""
        if self._local:
            return utcnow()
        base = self._base
        mark = time.monotonic()
        if base is None or fresh or mark - base[0] > self._refresh:
            with self._lock:
                before = time.monotonic()
                read = self._read()
                after = time.monotonic()
                if read is None:
                    self._local = True
                    return utcnow()
                # the store read its clock somewhere within the round trip: its middle
                base = self._base = ((before + after) / 2, read)
                mark = after
        return base[1] + timedelta(seconds=mark - base[0])
