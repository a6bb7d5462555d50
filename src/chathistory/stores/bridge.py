"""Run a sync store on an event loop without threads (greenlets).

A store call made from async code normally goes to a worker thread, which on a
small machine costs more than the call: every hand-off and every blocking wait
of the thread is a context switch, and the threads fight over the GIL.
``call(fn, ...)`` instead runs ``fn`` in a greenlet on the loop's own thread;
where the store's driver would block on its socket, it calls ``await_only``,
which hands the wait to the event loop and comes back with the result. The
store's code stays the same sync code (one copy, as SQLAlchemy's asyncio
support does it); only its driver's wait changes (``PostgresStore``'s
connections, see ``in_bridge``).

Needs the ``greenlet`` package (the ``server`` extra installs it).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenlet  # type: ignore[import-untyped]

__all__ = ["await_only", "call", "in_bridge"]

T = TypeVar("T")


class _Bridged(greenlet.greenlet):  # type: ignore[misc]
    """A greenlet started by ``call``: its parent runs the event loop."""


def in_bridge() -> bool:
    """Whether this code runs inside ``call`` (so ``await_only`` may be used)."""
    return isinstance(greenlet.getcurrent(), _Bridged)


def await_only(awaitable: Awaitable[T]) -> T:
    """From sync code running inside ``call``: await ``awaitable`` on the loop."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridged):
        raise RuntimeError("await_only() outside chathistory.stores.bridge.call()")
    result: T = current.parent.switch(awaitable)
    return result


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a greenlet; each ``await_only`` in it is awaited
    here, on the running loop, while other tasks run."""
    child = _Bridged(fn, greenlet.getcurrent())
    request = child.switch(*args, **kwargs)
    while not child.dead:
        try:
            value = await request
        except BaseException:
            request = child.throw(*sys.exc_info())
        else:
            request = child.switch(value)
    result: T = request
    return result
