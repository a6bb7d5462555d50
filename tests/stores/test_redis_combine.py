"""The Redis write combiner (``stores/redis/combine.py``) on the real server: every
caller gets its own reply or its own error, calls made while one is in flight share
a pipeline, a server that lost its scripts loads them again, and a lost connection
fails the callers it touched without leaving any waiting; each through redis-py's
client and through ``wire.Direct``, as the store sends them."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest

from chathistory.stores.redis import combine
from chathistory.stores.redis.combine import ScriptCombiner
from chathistory.stores.redis.wire import Direct

redis = pytest.importorskip("redis")

REDIS_URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")

# KEYS[1]: a counter.  ARGV[1]: a word; "boom" raises inside the script.
ECHO = """
if ARGV[1] == 'boom' then return redis.error_reply('boom: ' .. ARGV[2]) end
local n = redis.call('INCR', KEYS[1])
return {ARGV[1], ARGV[2], n}
"""


THROUGH = pytest.mark.parametrize("through", ["client", "direct"])


def _combiner(client: Any, script: Any, through: str) -> ScriptCombiner:
    direct = Direct.of(client) if through == "direct" else None
    assert (direct is None) == (through == "client")
    return ScriptCombiner(client, script, redis.exceptions.NoScriptError, direct)


@pytest.fixture
def client(redis_client: Any) -> Any:
    return redis_client


def _hammer(combiner: ScriptCombiner, key: str, threads: int, calls: int
            ) -> list[list[Any]]:
    """``threads`` threads, each making ``calls`` calls; every third call of thread 2
    is one the script refuses. Each thread's answers, in its order."""
    answers: list[list[Any]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def run(t: int) -> None:
        barrier.wait()
        for k in range(calls):
            word = "boom" if t == 2 and k % 3 == 0 else f"t{t}"
            try:
                answers[t].append(combiner([key], [word, str(k)]))
            except redis.exceptions.ResponseError as exc:
                answers[t].append(("error", str(exc)))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert not w.is_alive(), "a caller never got its reply"
    return answers


@THROUGH
def test_every_caller_gets_its_own_reply_and_calls_share_pipelines(
        client: Any, monkeypatch: pytest.MonkeyPatch, through: str) -> None:
    sizes: list[int] = []
    send = ScriptCombiner._send

    def counted(self: ScriptCombiner, batch: list[Any]) -> None:
        sizes.append(len(batch))
        send(self, batch)

    monkeypatch.setattr(ScriptCombiner, "_send", counted)
    key = f"combine-test:{uuid.uuid4().hex}"
    combiner = _combiner(client, client.register_script(ECHO), through)
    try:
        answers = _hammer(combiner, key, threads=8, calls=200)
        ran = 0
        for t, mine in enumerate(answers):
            assert len(mine) == 200
            for k, answer in enumerate(mine):
                if t == 2 and k % 3 == 0:  # only the refused calls fail, each with its own text
                    assert answer == ("error", f"boom: {k}")
                else:
                    assert answer[:2] == [f"t{t}".encode(), str(k).encode()]
                    ran += 1
        # each call that ran, ran once: the counter saw every one, each number once
        assert int(client.get(key)) == ran
        assert sorted(a[2] for mine in answers for a in mine if type(a) is list) == list(
            range(1, ran + 1))
        assert sum(sizes) == 8 * 200
        assert max(sizes) > 1  # calls made while one was in flight went together
    finally:
        client.delete(key)


@THROUGH
def test_a_server_that_lost_its_scripts_loads_them_again(client: Any, through: str) -> None:
    key = f"combine-test:{uuid.uuid4().hex}"
    script = client.register_script(ECHO)
    combiner = _combiner(client, script, through)
    try:
        client.script_flush()  # a call alone finds no script
        assert combiner([key], ["a", "1"]) == [b"a", b"1", 1]
        call = [combine._Call([key], [f"b{i}", "2"]) for i in range(3)]
        client.script_flush()
        combiner._send(call)  # a pipeline of three whose every EVALSHA finds no script
        assert [c.result() for c in call] == [[f"b{i}".encode(), b"2", 2 + i]
                                              for i in range(3)]
    finally:
        client.delete(key)


@THROUGH
def test_a_lost_connection_fails_the_callers_it_touched_and_none_waits_forever(
        through: str) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5,
                       retry_on_error=[], retry=None)
    combiner = _combiner(dead, dead.register_script(ECHO), through)
    failures: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        for k in range(5):
            try:
                combiner(["k"], ["w", str(k)])
            except redis.exceptions.ConnectionError as exc:
                with lock:
                    failures.append(exc)

    workers = [threading.Thread(target=run) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert not w.is_alive(), "a caller never got its error"
    assert len(failures) == 20
    assert not combiner._sending and combiner._queue == []
