"""A write combiner for one Lua script: the calls that threads make while another
call is in flight go to Redis together, in one pipeline (one round trip).

A call alone is sent at once, as a plain ``EVALSHA``. While it is in flight, other
threads' calls queue; when it returns, the first queued thread sends the whole queue
as one pipeline and hands each caller its own reply (or its own error). Each script
call stays atomic on its own (Redis runs scripts one at a time), a caller returns only
once its own reply has arrived, and an error (a connection lost, a script error)
reaches exactly the callers whose calls it touched: combining changes the round trips,
not what a reply means.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .wire import Direct, run_script

__all__ = ["ScriptCombiner"]


def _held_lock() -> Any:
    lock = threading.Lock()
    lock.acquire()
    return lock


class _Call:
    __slots__ = ("args", "batch", "done", "error", "keys", "value")

    def __init__(self, keys: Sequence[Any], args: Sequence[Any]) -> None:
        self.keys, self.args = keys, args
        # a queued caller waits on a lock held for it, released once: by the caller
        # that answered it in a batch, or that hands it the queue to send (a lock, not
        # an Event: an Event's wait and set are Python code under the GIL, which 8
        # appending threads spent 9% of their GIL time in)
        self.done: Any = None
        self.batch: list[_Call] | None = None  # set when this caller is to send a batch
        self.value: Any = None
        self.error: BaseException | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class ScriptCombiner:
    """Calls ``script`` (a redis-py ``Script`` registered on ``client``) for many
    threads, combining the calls made while one is in flight (module docstring).
    One node only: a cluster's pipeline would split by slot."""

    def __init__(self, client: Any, script: Any, no_script: type[BaseException],
                 direct: Direct | None = None) -> None:
        self._client, self._script, self._no_script = client, script, no_script
        self._direct = direct  # a call alone goes this way (``wire.py``) when given
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._sending = False

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        call = _Call(keys, args)
        with self._lock:
            queued = self._sending
            if queued:
                call.done = _held_lock()
                self._queue.append(call)
            else:
                self._sending = True
        if queued:
            call.done.acquire()
            if call.batch is None:  # answered within another caller's batch
                return call.result()
        batch = call.batch or [call]
        try:
            self._send(batch)
        finally:
            for other in batch:
                if other is not call:
                    other.done.release()
            self._hand_over()
        return call.result()

    def _hand_over(self) -> None:
        """Wake the first queued caller to send the queue, or stop sending."""
        with self._lock:
            batch, self._queue = self._queue, []
            if not batch:
                self._sending = False
                return
        batch[0].batch = batch
        batch[0].done.release()

    def _send(self, batch: list[_Call]) -> None:
        if len(batch) == 1:
            self._one(batch[0])
            return
        sha = self._script.sha
        try:
            if self._direct is not None:
                replies = self._direct.pipeline([("EVALSHA", sha, len(c.keys), *c.keys, *c.args)
                                                 for c in batch])
            else:
                pipe = self._client.pipeline(transaction=False)
                for c in batch:
                    pipe.evalsha(sha, len(c.keys), *c.keys, *c.args)
                replies = pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection: every call of the batch failed
            for c in batch:
                c.error = exc
            return
        for c, reply in zip(batch, replies, strict=True):
            if isinstance(reply, self._no_script):  # a server that lost its scripts: the
                self._one(c)                        # script never ran; the Script loads it
            elif isinstance(reply, BaseException):
                c.error = reply
            else:
                c.value = reply

    def _one(self, c: _Call) -> None:
        try:
            c.value = run_script(self._direct, self._script, c.keys, c.args)
        except BaseException as exc:
            c.error = exc
