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

import contextvars
import logging
import multiprocessing
import os
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, ParamSpec, TypeVar

from ..dispatch import Dispatch, StoreHealth
from ..token_slices import slices
from ..tokens import OFFLOAD_CHARS, count_here, offload_large_texts
from .errors import HTTPError

__all__ = ["HEAVY_BODY", "PROCESSES", "SMALL_BODY", "StoreHealth", "Work", "current_tenant",
           "decode_elsewhere", "start_processes", "store_call"]

log = logging.getLogger("chathistory.server")

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


def _counting_process_init(parent: int) -> None:
    """In the counting process: niced, and gone within ``_ORPHAN_CHECK`` seconds of the
    server process (``parent``), however it died (a pool's workers otherwise outlive a
    SIGKILL, each holding its tables). Not ``PR_SET_PDEATHSIG``: its signal comes when
    the *thread* that started the process ends, and the pool starts its processes from
    whichever thread first needs one: a work thread's end killed the process, and
    every later count or decode failed (``BrokenProcessPool``)."""
    os.nice(10)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_ORPHAN_CHECK)
        os._exit(0)

    threading.Thread(target=watch, name="chathistory-orphan-check", daemon=True).start()


_ORPHAN_CHECK = 0.25


def _pool() -> ProcessPoolExecutor:
    """The counting processes, started by the first long text or heavy body: they cost
    their memory, ~100 MB with the tables, only where one comes."""
    global _processes
    with _processes_lock:
        if _processes is None:
            # niced: counting never takes a core from the serving threads
            _processes = ProcessPoolExecutor(
                PROCESSES, mp_context=multiprocessing.get_context("spawn"),
                initializer=_counting_process_init, initargs=(os.getpid(),))
        return _processes


_TURNS = tuple(threading.Lock() for _ in range(64))
"""A tenant's turn at the counting processes: one task of a tenant is there at a time
(tenants share a turn only when their names hash alike, one in 64)."""


def _turn(tenant: str | None = None) -> threading.Lock:
    """The turn of ``tenant`` (None: the request's)."""
    name = current_tenant.get() if tenant is None else tenant
    return _TURNS[zlib.crc32(name.encode("utf-8", "surrogatepass")) % len(_TURNS)]


def _in_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a counting process, in the turn of the request's tenant (so
    another tenant's task waits for at most one of this tenant's, not for all it
    sent); a pool whose process died (killed, out of memory) is replaced once, and
    ``BrokenProcessPool`` raised if that one dies too."""
    global _processes
    with _turn():
        pool = _pool()
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with _processes_lock:
                if _processes is pool:
                    _processes = None
            pool.shutdown(wait=False)
            return _pool().submit(fn, *args).result()


def _count_in_processes(encoding: str, text: str) -> int:
    """In a worker thread: count ``text`` in the counting process, a slice of at most
    ``tokens.OFFLOAD_CHARS`` characters at a time, cut where the encoding's
    pre-tokenizer cuts (the same total; a stretch without such a cut is sent whole and
    counted there by ``bpe-openai``, linear in its length): a long text takes turns
    with other tenants' counts rather than holding the process for all of it. Counted
    here, should that process die of it."""
    try:
        return sum(_in_process(count_here, encoding, text[start:end])
                   for start, end in slices(text, OFFLOAD_CHARS))
    except BrokenProcessPool:
        return count_here(encoding, text)


_decoding_here = False


def start_processes() -> None:
    """Count texts over ``tokens.OFFLOAD_CHARS``, and decode bodies over ``HEAVY_BODY``,
    in ``PROCESSES`` other processes from now on (once per process)."""
    global _decoding_here
    offload_large_texts(_count_in_processes)
    _decoding_here = True


HEAVY_BODY = 1024 * 1024
"""Bodies of this size or more are decoded (and an append's messages counted) in the
counting process (``decode_elsewhere``): decoding a body holds the GIL for all of it,
10-14 ms for 9 MB, twice over (the strict check decodes it again), and sending a long
text there to be counted pickled it under the GIL too. Measured with two clients
posting 9 MB appends back to back (``reliability/hostile.py``): those were half of the
server's time with the GIL held, in holds of up to 10 ms, while another tenant's reads
waited on them."""


def decode_elsewhere(body: bytes, type: type[T], counter: str | None
                     ) -> tuple[T, list[dict[str, int] | None] | None] | None:
    """In a worker thread, for a body of at least ``HEAVY_BODY`` bytes: ``body``
    decoded into ``type`` in the counting process (which waits without the GIL), and
    when ``type`` holds ``messages`` and ``counter`` names a counter, each message's
    counts by it, its own counts cleared first (counts are the server's to make). None
    when the server does not use processes, or when the body fails to decode there: the
    caller decodes it here, for the same answer as any body gets."""
    if not _decoding_here:
        return None
    try:
        return _in_process(_decode_here, body, type, counter)
    except Exception:  # the body killed two processes, or its type or value does not
        # pickle: decoded here, as any body
        log.exception("decoding a body of %d bytes in the counting process failed",
                      len(body))
        return None


def _decode_here(body: bytes, type: type[T], counter: str | None
                 ) -> tuple[T, list[dict[str, int] | None] | None] | None:
    """``decode_elsewhere`` in the counting process."""
    from ..tokens import cached_count, get_counter
    from .wire import decode_json

    try:
        value = decode_json(body, type)
    except Exception:  # the server decodes it again, for its own answer
        return None
    messages = getattr(value, "messages", None)
    if counter is None or not isinstance(messages, list):
        return value, None
    offload_large_texts(_defer)  # (this process's own setting: it counts nothing else so)
    try:
        by = get_counter(counter)
        counts: list[dict[str, int] | None] = []
        for message in messages:
            message.token_counts = None
            try:
                cached_count(message, by)
            except _Deferred:  # a text over OFFLOAD_CHARS: the worker thread counts the
                message.token_counts = None  # message, its long texts sent back here
                # in slices that take turns with other tenants' (_count_in_processes)
            counts.append(message.token_counts)
    except Exception:  # a counter this process cannot make, a message it cannot count:
        return value, None  # the append counts as it would have
    finally:
        offload_large_texts(None)
    return value, counts


class _Deferred(Exception):
    """A text too long to count inside a decoding task (``_decode_here``)."""


def _defer(encoding: str, text: str) -> int:
    raise _Deferred


async def store_call(work: Work, health: StoreHealth, fn: Callable[P, T], /, *args: P.args,
                     **kwargs: P.kwargs) -> T:
    """A store call in the work pool on behalf of ``current_tenant``, through the
    store's circuit (``Dispatch.call_store``)."""
    return await work.call_store(health, current_tenant.get(), fn, *args, **kwargs)
