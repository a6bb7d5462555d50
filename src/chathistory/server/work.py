"""Where a request's work runs: the service's execution model.

- **The event loop** parses requests, routes them, authenticates from the key
  cache, reads request bodies (every read with an idle timeout), encodes small
  answers and sends them. It never calls a store, never touches a disk, never
  waits on a lock, and never decodes or encodes more than ``SMALL_BODY`` bytes
  (about a millisecond of CPU).
- **The work pool** (``Work``) runs everything else in a fixed set of worker
  threads: every store call, every disk access (assets, a spooled import), and
  the decoding, validating and encoding of large bodies. A request waits for a
  thread as a coroutine on the loop, never as a queued thread, and tenant by
  tenant: at most ``per_tenant`` calls of one tenant run at once and at most
  ``queue`` more wait; past that the tenant is answered ``429`` with
  ``Retry-After``, so one tenant can hold a bounded share of the threads and
  every other tenant keeps its own. Nothing waits on a client while it holds
  a thread: a body is read whole (or spooled) before its work is handed over.
- **Store health** (``StoreHealth``): a call that fails because the store is
  unreachable (``StoreUnavailable``) opens the circuit: while it is open calls
  are answered ``503 store_unavailable`` at once with ``Retry-After``, while one
  probe call every ``probe_every`` seconds tries the store; the first that
  succeeds closes it. So an outage is a fast, retryable answer, never a hang, and
  service resumes within ``probe_every`` seconds of the store being back (plus
  the driver's reconnect).

The pool and the circuit are the library's (``chathistory.dispatch``: the same
code runs ``AsyncStoreAdapter``'s and ``HistoryProvider``'s async calls); this
module holds what is the service's own: the settings above, refusals as HTTP
answers (429 ``too_many_requests``, 503 ``busy``), the request's tenant as the
key (``current_tenant``), and the counting processes for long texts.

The loop's own state here (semaphores, counters) is touched only from the loop.
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import ParamSpec, TypeVar

from ..dispatch import Dispatch, StoreHealth
from ..tokens import count_here, offload_large_texts
from .errors import HTTPError

__all__ = ["PROCESSES", "SMALL_BODY", "StoreHealth", "Work", "current_tenant",
           "start_processes", "store_call"]

P = ParamSpec("P")
T = TypeVar("T")

SMALL_BODY = 64 * 1024
"""Bodies up to this size are decoded and encoded on the loop (well under a
millisecond with msgspec); larger ones in the work pool."""

current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar(
    "chathistory_tenant", default="(unauthenticated)")
"""The tenant whose request this task serves (set once it is authenticated)."""


WORKER_NICENESS = 5
"""Worker threads run this much nicer than the event loop's thread (Linux niceness is
per thread): when they compete for the GIL and the CPU, the loop is scheduled first."""


class Work(Dispatch):
    """The work pool: ``await work(fn, *args)`` runs ``fn`` in a worker thread on
    behalf of ``current_tenant``, within that tenant's share (a ``Dispatch`` keyed
    by tenant, refusing with HTTP answers)."""

    def __init__(self, threads: int = 16, per_tenant: int = 4, queue: int = 64,
                 wait_seconds: float = 10.0) -> None:
        super().__init__(threads, per_tenant, queue, wait_seconds,
                         niceness=WORKER_NICENESS, name="chathistory-work")
        self.per_tenant = per_tenant

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run_as(current_tenant.get(), fn, *args, **kwargs)

    def refuse_full(self, key: str) -> Exception:
        return HTTPError(429, "too_many_requests",
                         f"too many requests of this tenant at once (at most "
                         f"{self.per_tenant} running and {self.queue} waiting)",
                         {"Retry-After": "1"})

    def refuse_busy(self) -> Exception:
        return HTTPError(503, "busy", "the server is busy; try again", {"Retry-After": "1"})


_processes: ProcessPoolExecutor | None = None
_processes_lock = threading.Lock()
PROCESSES = 1
"""Processes that count long texts (``tokens.offload_large_texts``), per server process."""


def _counting_process_init() -> None:
    """In the counting process: niced, and killed when the server process dies (even by
    SIGKILL: a pool's workers otherwise outlive it, each holding its tables)."""
    os.nice(10)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(0)


def _count_in_processes(encoding: str, text: str) -> int:
    """In a worker thread: count ``text`` in the counting process (started by the first
    long text: it costs its memory, ~100 MB with its tables, only where one comes)."""
    global _processes
    with _processes_lock:
        if _processes is None:
            # niced: counting never takes a core from the serving threads
            _processes = ProcessPoolExecutor(
                PROCESSES, mp_context=multiprocessing.get_context("spawn"),
                initializer=_counting_process_init)
    return _processes.submit(count_here, encoding, text).result()


def start_processes() -> None:
    """Count texts over ``tokens.OFFLOAD_CHARS`` in ``PROCESSES`` other processes from now
    on (once per process)."""
    offload_large_texts(_count_in_processes)


async def store_call(work: Work, health: StoreHealth, fn: Callable[P, T], /, *args: P.args,
                     **kwargs: P.kwargs) -> T:
    """A store call in the work pool on behalf of ``current_tenant``, through the
    store's circuit (``Dispatch.call_store``)."""
    return await work.call_store(health, current_tenant.get(), fn, *args, **kwargs)
