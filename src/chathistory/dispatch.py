"""One way to call a sync store from async code: ``Dispatch`` and ``StoreHealth``.

Stores are written once, on their natural (sync) side. Whatever calls one from an
event loop goes through this module: the HTTP service (``server.work.Work`` is a
``Dispatch`` with the service's settings), ``AsyncStoreAdapter`` and
``HistoryProvider``'s async methods (``default_dispatch()``, or a ``Dispatch`` of
your own). The model is the service's:

- **A bounded pool of worker threads** runs the calls. A call waits for a thread as a
  coroutine on the loop, never as a queued thread, so ``threads`` bounds the
  threads and the waiting costs nothing but a coroutine.
- **Fairness per key** (optional; the service's key is the tenant): at most
  ``per_key`` calls of one key run at once and at most ``queue`` more wait; past
  that a call is refused at once (``refuse_full``), and one that waited
  ``wait_seconds`` for a thread is refused too (``refuse_busy``). So one key holds
  a bounded share of the threads and every other key keeps its own.
- **The store's circuit** (``StoreHealth``): a call that finds the store unreachable
  (``StoreUnavailable``, or a driver error ``stores.errors`` translates to one)
  opens it; while it is open calls fail at once with that ``StoreUnavailable``
  (``retry_after`` says when to try again), and one probe call every
  ``probe_every`` seconds tries the store; the first that succeeds closes it. An
  outage is a fast, retryable error, never a hang, and calls resume within
  ``probe_every`` seconds of the store being back (plus the driver's reconnect).

A ``Dispatch`` serves any number of event loops: its threads are shared, its
admission state (what runs and waits, per key) is kept per loop. A call runs in a
copy of the caller's context (``contextvars``), as with ``asyncio.to_thread``; a
cancelled call's thread finishes its work, and only then is its place released.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from .errors import StoreUnavailable
from .stores.errors import translate_store_error

__all__ = ["SYSTEM_KEY", "Dispatch", "StoreHealth", "default_dispatch"]

P = ParamSpec("P")
T = TypeVar("T")

SYSTEM_KEY = "(system)"
"""The key of calls made on no one's behalf (a store's ``recover()``, ``close()``)."""


def _lower_priority(niceness: int) -> None:
    """In a new worker thread: run ``niceness`` nicer than the thread that made it
    (Linux niceness is per thread)."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + niceness)


class _Gate:
    """One key's calls on one loop: a place each to run (None: no per-key limit)."""

    __slots__ = ("running", "slots", "waiting")

    def __init__(self, size: int | None) -> None:
        self.slots = asyncio.Semaphore(size) if size is not None else None
        self.waiting = 0
        self.running = 0


class _Loop:
    """A ``Dispatch``'s state on one event loop (asyncio's semaphores belong to one)."""

    __slots__ = ("gates", "threads")

    def __init__(self, threads: int) -> None:
        self.threads = asyncio.Semaphore(threads)
        self.gates: dict[str, _Gate] = {}


class Dispatch:
    """Sync calls from async code: ``await dispatch.run_as(key, fn, *args)`` runs
    ``fn(*args)`` in one of ``threads`` worker threads, within ``key``'s share
    (``per_key`` running and ``queue`` waiting; None: no limit). ``wait_seconds``:
    how long a call may wait for a thread (None: as long as it takes).
    ``niceness``: the worker threads run this much nicer than the loop's, so the
    loop is scheduled first when they compete for the CPU and the GIL."""

    def __init__(self, threads: int = 16, per_key: int | None = None,
                 queue: int | None = None, wait_seconds: float | None = None, *,
                 niceness: int = 0, name: str = "chathistory-dispatch") -> None:
        if threads < 1 or (per_key is not None and per_key < 1) or (queue or 0) < 0:
            raise ValueError("threads and per_key must be >= 1, queue >= 0")
        self.threads, self.per_key, self.queue = threads, per_key, queue
        self.wait_seconds = wait_seconds
        self.niceness, self.name = niceness, name
        self._executor: ThreadPoolExecutor | None = None
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ refusals

    def refuse_full(self, key: str) -> Exception:
        """The error for a call of ``key`` while ``per_key`` of its calls run and
        ``queue`` more wait (the service answers 429)."""
        return StoreUnavailable(f"too many calls of {key!r} at once (at most {self.per_key} "
                                f"running and {self.queue} waiting)", retry_after=1.0,
                                unreachable=False)

    def refuse_busy(self) -> Exception:
        """The error for a call that found no thread within ``wait_seconds``."""
        return StoreUnavailable(f"no worker thread within {self.wait_seconds} s: every one "
                                "is busy", retry_after=1.0, unreachable=False)

    # ------------------------------------------------------------------ calls

    async def run_as(self, key: str, fn: Callable[P, T], /, *args: P.args,
                     **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in a worker thread, counted against ``key``."""
        place = await self._enter(key)
        return await self._run(place, functools.partial(fn, *args, **kwargs))

    async def call_store(self, health: StoreHealth, key: str, fn: Callable[P, T], /,
                         *args: P.args, **kwargs: P.kwargs) -> T:
        """A store call (``fn(*args, **kwargs)``), as ``run_as``, through the store's
        circuit: a driver's error that means "unreachable", "full" or "read-only"
        comes out as ``StoreUnavailable`` / ``StorageFull``, and an unreachable
        store opens the circuit. A refused call (``refuse_full``, ``refuse_busy``)
        never reached the store: it says nothing of the store's health."""
        health.admit()
        place = await self._enter(key)
        try:
            result = await self._run(place, functools.partial(fn, *args, **kwargs))
        except Exception as exc:
            translated = translate_store_error(exc, health.where)
            if translated is None:
                health.succeeded()  # the store answered (a NotFound, a bad request...)
                raise
            if isinstance(translated, StoreUnavailable) and translated.unreachable:
                health.failed(translated, self)
            if translated is exc:
                raise
            raise translated from exc
        health.succeeded()
        return result

    # ------------------------------------------------------------------ the inside

    def _here(self) -> _Loop:
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop)
        if here is None:
            with self._lock:
                here = self._loops.get(loop)
                if here is None:
                    here = _Loop(self.threads)
                    # (copied, not changed in place: other loops' threads read it)
                    self._loops = {**{k: v for k, v in self._loops.items()
                                      if not k.is_closed()}, loop: here}
                    if self._executor is None:
                        initializer = (functools.partial(_lower_priority, self.niceness)
                                       if self.niceness else None)
                        self._executor = ThreadPoolExecutor(
                            self.threads, thread_name_prefix=self.name,
                            initializer=initializer)
        return here

    async def _enter(self, key: str) -> tuple[_Loop, str, _Gate]:
        """Wait for a place of ``key`` and a thread (refused when the key's queue is
        full or no thread comes within ``wait_seconds``)."""
        here = self._here()
        gate = here.gates.get(key)
        if gate is None:
            gate = here.gates[key] = _Gate(self.per_key)
        slots = gate.slots
        if (slots is not None and self.queue is not None and gate.waiting >= self.queue
                and slots.locked()):
            raise self.refuse_full(key)
        gate.waiting += 1
        held_gate = held_thread = False
        try:
            async with asyncio.timeout(self.wait_seconds):
                if slots is not None:
                    await slots.acquire()
                    held_gate = True
                await here.threads.acquire()
                held_thread = True
        except TimeoutError:
            raise self.refuse_busy() from None
        finally:
            gate.waiting -= 1
            if not held_thread:
                if held_gate and slots is not None:
                    slots.release()
                self._forget_if_idle(here, key, gate)
        gate.running += 1
        return here, key, gate

    async def _run(self, place: tuple[_Loop, str, _Gate], call: Callable[[], T]) -> T:
        here, key, gate = place

        def done(_: object) -> None:  # on the loop, when the thread is done (even if
            here.threads.release()   # the caller was cancelled meanwhile)
            if gate.slots is not None:
                gate.slots.release()
            gate.running -= 1
            self._forget_if_idle(here, key, gate)

        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, contextvars.copy_context().run,
                                          call)
        except BaseException:  # the pool is shut down
            done(None)
            raise
        future.add_done_callback(done)
        return await asyncio.shield(future)

    @staticmethod
    def _forget_if_idle(here: _Loop, key: str, gate: _Gate) -> None:
        if gate.running == 0 and gate.waiting == 0 and here.gates.get(key) is gate:
            del here.gates[key]  # the table holds only keys with work under way

    # ------------------------------------------------------------------ the pool

    def load(self) -> dict[str, int]:
        """Keys with work under way, and their calls running and waiting (none of
        them once everything is done: a key is forgotten when it is idle)."""
        gates = [g for here in list(self._loops.values()) for g in list(here.gates.values())]
        return {"tenants": len(gates), "running": sum(g.running for g in gates),
                "waiting": sum(g.waiting for g in gates)}

    def shutdown(self) -> None:
        """Stop the threads (calls not started are cancelled; running ones finish)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


class StoreHealth:
    """A store's circuit: closed while calls succeed; open after a call found the
    store unreachable, failing calls at once with that ``StoreUnavailable`` while
    letting one probe through every ``probe_every`` seconds."""

    def __init__(self, retry_after: float = 1.0, probe_every: float = 0.5,
                 recover: Callable[[], object] | None = None, where: str = "") -> None:
        self.retry_after, self.probe_every = retry_after, probe_every
        self.where = where
        """The store's file, named in its errors (SQLite)."""
        self.recover = recover
        """The store's ``recover()`` (PostgreSQL: replace broken pooled connections),
        run in the pool when the circuit opens."""
        self.down: StoreUnavailable | None = None
        self._next_probe = 0.0
        self._recovering: asyncio.Future[object] | None = None

    @classmethod
    def of(cls, store: object) -> StoreHealth:
        """The circuit of ``store``: its ``recover()`` and its file, where it has them."""
        return cls(recover=getattr(store, "recover", None),
                   where=str(getattr(store, "path", "") or ""))

    def admit(self) -> None:
        """Raise ``StoreUnavailable`` at once while the circuit is open and no probe
        is due; otherwise let the call through (as the probe, when open)."""
        down = self.down
        if down is None:
            return
        now = time.monotonic()
        if now < self._next_probe:
            raise down.with_traceback(None)  # (each raise would add to its traceback)
        self._next_probe = now + self.probe_every

    def failed(self, exc: StoreUnavailable, dispatch: Dispatch) -> None:
        if self.recover is not None and (self._recovering is None or self._recovering.done()):
            self._recovering = asyncio.ensure_future(dispatch.run_as(SYSTEM_KEY, self.recover))
            self._recovering.add_done_callback(_ignore_result)
        self.down = exc
        self._next_probe = time.monotonic() + self.probe_every

    def succeeded(self) -> None:
        self.down = None


def _ignore_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: a failed recovery is only logged by the next call


_default: Dispatch | None = None
_default_lock = threading.Lock()


def default_dispatch() -> Dispatch:
    """The process's own ``Dispatch`` (made on first use, its threads stopped at exit):
    as many threads as ``asyncio.to_thread``'s pool has (the CPUs + 4, at most 32), no
    per-key limit, no wait limit. ``AsyncStoreAdapter`` and ``HistoryProvider`` use it
    unless given one of their own."""
    global _default
    if _default is not None:
        return _default
    with _default_lock:
        if _default is None:
            _default = Dispatch(min(32, (os.cpu_count() or 1) + 4))
            atexit.register(_default.shutdown)
        return _default
