"""The hot commands (an append's script, the window's and the tail's probes, the rows'
``HMGET``) sent on connections of the client's own pool, past redis-py's per-command
dispatch (``Redis.execute_command``).

Worth its code because those commands are short: a one-message append spent some
20-25 us of this process's CPU in redis-py's dispatch alone (its connection checkout
and release with their lock, fork check, socket poll and metrics; its argument
filters and retry wrapper; its second walk over the arguments before ``hiredis``
packs them), a fifth of the append's CPU, and what 8 threads appending through one
store are bound by (the GIL). ``LPUSH`` of 800 bytes, one thread, this VM: 50-58 us
of CPU through the client, 32-37 on the pool's connection, 23 on a bare socket.

The connections are redis-py's own (``Connection``: its handshake, authentication,
TLS, timeouts and parsing, and its errors), taken from the pool once and kept on a
stack of this module's (``Direct``), most recently used first. Anything but a reply
(a connection lost, a timeout) disconnects the connection, gives it back to the pool,
and runs the command again through the client, whose ``Retry`` then applies as it
did before, so a command sent here fails or retries exactly as the client's would. A
reply that is an error (``ResponseError``) leaves the connection clean on the stack.
One node only (a cluster routes each command by its slot): ``Direct.of`` is None
for other clients."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Direct", "run_script"]


class Direct:
    """Commands on connections of ``client``'s pool kept on a stack of this object's
    (``of``). ``call`` sends one command and returns its reply as the client's
    ``execute_command`` would for a command without a response callback."""

    def __init__(self, client: Any, pack: Any) -> None:
        self.client = client
        self.pool = client.connection_pool
        self._pack = pack  # hiredis.pack_command
        self._stack: list[Any] = []
        self._pid = os.getpid()
        from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

        self._lost: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)
        self._answered = ResponseError
        self._no_script = NoScriptError

    @classmethod
    def of(cls, client: Any) -> Direct | None:
        """A ``Direct`` for a one-node client whose pool packs with ``hiredis`` and
        speaks RESP2 (what a ``redis://`` URL gives with hiredis installed); None
        otherwise (the commands then go through the client)."""
        try:
            import hiredis
        except ImportError:  # pragma: no cover - hiredis ships with the redis extra
            return None
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None)
        if pool is None or kwargs is None or kwargs.get("protocol") not in (None, 2, "2"):
            return None
        return cls(client, hiredis.pack_command)

    def call(self, args: Sequence[Any]) -> Any:
        """Send ``args`` (the command's name first) and return the reply; an error
        reply raises as redis-py raises it (``NoScriptError``, ``ResponseError``)."""
        (reply,) = self._exchange([args], lambda: [self.client.execute_command(*args)])
        if isinstance(reply, self._answered):
            raise reply
        return reply

    def script(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """A redis-py ``Script`` run on ``keys`` and ``args``: its ``EVALSHA`` sent here,
        or, on a server that lost the script (it never ran), through the ``Script``,
        which loads it."""
        try:
            return self.call(("EVALSHA", script.sha, len(keys), *keys, *args))
        except self._no_script:
            return script(keys=keys, args=args)

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` together and return their replies in order, an error reply
        as its exception (redis-py's ``execute(raise_on_error=False)``); a connection
        lost or a timeout raises, as the client's pipeline raises it, after the
        client's pipeline has tried them again (its retries)."""
        def through_client() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for args in commands:
                pipe.execute_command(*args)
            return list(pipe.execute(raise_on_error=False))

        return self._exchange(commands, through_client)

    def _exchange(self, commands: Sequence[Sequence[Any]],
                  through_client: Callable[[], list[Any]]) -> list[Any]:
        """``commands`` sent together on a connection of the stack, their replies in
        order (an error reply as its exception: the connection stays clean); on a lost
        connection or a timeout, the connection back to the pool and
        ``through_client()`` instead; on anything else (an interrupt mid-command: a
        reply may be unread), the connection back to the pool, disconnected."""
        conn = self._take()
        try:
            conn.send_packed_command([self._pack(tuple(args)) for args in commands])
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except self._answered as exc:
                    replies.append(exc)
        except self._lost:
            conn.disconnect()
            self.pool.release(conn)
            return through_client()  # the client's retries apply
        except BaseException:
            conn.disconnect()
            self.pool.release(conn)
            raise
        self._stack.append(conn)
        return replies

    def _take(self) -> Any:
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            self._stack = []
            self._pid = os.getpid()
        try:
            return self._stack.pop()
        except IndexError:
            return self.pool.get_connection()

    def close(self) -> None:
        """Give every connection of the stack back to the pool."""
        while self._stack:
            self.pool.release(self._stack.pop())


def run_script(direct: Direct | None, script: Any, keys: Sequence[Any], args: Sequence[Any]
               ) -> Any:
    """``script(keys=keys, args=args)``, past redis-py's dispatch through ``direct``
    when there is one (``Direct.script``), else through the client."""
    if direct is None:
        return script(keys=keys, args=args)
    return direct.script(script, keys, args)
