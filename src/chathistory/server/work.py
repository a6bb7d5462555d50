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
  unreachable (``StoreUnavailable``) opens the circuit: for ``retry_after``
  seconds calls are answered ``503 store_unavailable`` at once with
  ``Retry-After``, while one probe call every ``probe_every`` seconds tries the
  store; the first that succeeds closes it. So an outage is a fast, retryable
  answer, never a hang, and service resumes within ``probe_every`` seconds of
  the store being back (plus the driver's reconnect).

The loop's own state here (semaphores, counters) is touched only from the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from ..errors import StoreUnavailable
from ..stores.errors import translate_store_error
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


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid)
                       + WORKER_NICENESS)


class _Gate:
    __slots__ = ("running", "slots", "waiting")

    def __init__(self, size: int) -> None:
        self.slots = asyncio.Semaphore(size)
        self.waiting = 0
        self.running = 0


class Work:
    """The work pool: ``await work(fn, *args)`` runs ``fn`` in a worker thread on
    behalf of ``current_tenant``, within that tenant's share."""

    def __init__(self, threads: int = 16, per_tenant: int = 4, queue: int = 64,
                 wait_seconds: float = 10.0) -> None:
        if threads < 1 or per_tenant < 1 or queue < 0:
            raise ValueError("threads and per_tenant must be >= 1, queue >= 0")
        self.threads, self.per_tenant, self.queue = threads, per_tenant, queue
        self.wait_seconds = wait_seconds
        self._executor: ThreadPoolExecutor | None = None
        self._threads: asyncio.Semaphore | None = None
        self._gates: dict[str, _Gate] = {}

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run_as(current_tenant.get(), fn, *args, **kwargs)

    async def run_as(self, tenant: str, fn: Callable[P, T], /, *args: P.args,
                     **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in a worker thread, counted against ``tenant``."""
        gates = self._gates
        gate = gates.get(tenant)
        if gate is None:
            gate = gates[tenant] = _Gate(self.per_tenant)
        if gate.waiting >= self.queue and gate.slots.locked():
            raise HTTPError(429, "too_many_requests",
                            f"too many requests of this tenant at once (at most "
                            f"{self.per_tenant} running and {self.queue} waiting)",
                            {"Retry-After": "1"})
        if self._threads is None:
            self._threads = asyncio.Semaphore(self.threads)
            self._executor = ThreadPoolExecutor(self.threads,
                                                thread_name_prefix="chathistory-work",
                                                initializer=_lower_priority)
        threads = self._threads
        gate.waiting += 1
        held_gate = held_thread = False
        try:
            async with asyncio.timeout(self.wait_seconds):
                await gate.slots.acquire()
                held_gate = True
                await threads.acquire()
                held_thread = True
        except TimeoutError:
            raise HTTPError(503, "busy", "the server is busy; try again",
                            {"Retry-After": "1"}) from None
        finally:
            gate.waiting -= 1
            if not held_thread:
                if held_gate:
                    gate.slots.release()
                self._forget_if_idle(tenant, gate)
        gate.running += 1

        def done(_: object) -> None:  # on the loop, when the thread is done (even if
            threads.release()        # the request was cancelled meanwhile)
            gate.slots.release()
            gate.running -= 1
            self._forget_if_idle(tenant, gate)

        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        future.add_done_callback(done)
        return await asyncio.shield(future)

    def _forget_if_idle(self, tenant: str, gate: _Gate) -> None:
        if gate.running == 0 and gate.waiting == 0 and self._gates.get(tenant) is gate:
            del self._gates[tenant]  # the table holds only tenants with work under way

    def load(self) -> dict[str, int]:
        """Tenants with work under way, and their calls running and waiting (none of
        them once everything is done: a gate is forgotten when its tenant is idle)."""
        return {"tenants": len(self._gates),
                "running": sum(g.running for g in self._gates.values()),
                "waiting": sum(g.waiting for g in self._gates.values())}

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


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


class StoreHealth:
    """The store's circuit: closed while calls succeed; open for ``retry_after``
    seconds after a call found the store unreachable, letting one probe through
    every ``probe_every`` seconds."""

    def __init__(self, retry_after: float = 1.0, probe_every: float = 0.5,
                 recover: Callable[[], object] | None = None, where: str = "") -> None:
        self.retry_after, self.probe_every = retry_after, probe_every
        self.where = where
        """The store's file, named in its errors (SQLite)."""
        self.recover = recover
        """The store's ``recover()`` (PostgreSQL: replace broken pooled connections),
        run in the work pool when the circuit opens."""
        self.down: StoreUnavailable | None = None
        self._next_probe = 0.0
        self._recovering: asyncio.Future[object] | None = None

    def admit(self) -> None:
        """Raise ``StoreUnavailable`` at once while the circuit is open and no probe
        is due; otherwise let the call through (as the probe, when open)."""
        if self.down is None:
            return
        now = time.monotonic()
        if now < self._next_probe:
            raise self.down
        self._next_probe = now + self.probe_every

    def failed(self, exc: StoreUnavailable, work: Work) -> None:
        if self.recover is not None and (self._recovering is None or self._recovering.done()):
            self._recovering = asyncio.ensure_future(work.run_as("(system)", self.recover))
            self._recovering.add_done_callback(_ignore_result)
        self.down = exc
        self._next_probe = time.monotonic() + self.probe_every

    def succeeded(self) -> None:
        self.down = None


async def store_call(work: Work, health: StoreHealth, fn: Callable[P, T], /, *args: P.args,
                     **kwargs: P.kwargs) -> T:
    """A store call in the work pool, through the store's circuit; a driver's error
    that means "unreachable", "full" or "read-only" comes out as ours."""
    health.admit()
    try:
        result = await work(fn, *args, **kwargs)
    except Exception as exc:
        translated = translate_store_error(exc, health.where)
        if isinstance(translated, StoreUnavailable) and translated.unreachable:
            health.failed(translated, work)
        elif translated is None:
            health.succeeded()  # the store answered (a NotFound, a bad request...)
            raise
        raise translated from exc
    health.succeeded()
    return result


def _ignore_result(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: a failed recovery is only logged by the next call

