"""The hot Redis commands past redis-py's dispatch (``stores/redis/wire.py``) against
redis-py's own client on the real server: the same replies and the same errors, one
command or a pipeline; a connection killed under it is replaced and the command runs
once; a forked child never reuses the parent's connections."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chathistory import Message
from chathistory.stores.redis import RedisStore
from chathistory.stores.redis.wire import Direct

redis = pytest.importorskip("redis")

REDIS_URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")

# nested replies of every kind: bulk, integer, status, nil, an array in an array
NESTED = "return {ARGV[1], tonumber(ARGV[2]), {ok = 'fine'}, false, {1, {ARGV[1]}}}"


@pytest.fixture
def client(redis_client: Any) -> Any:
    return redis_client


@pytest.fixture
def key(client: Any) -> Iterator[str]:
    name = f"wire-test:{uuid.uuid4().hex}"
    try:
        yield name
    finally:
        client.delete(name, name + ":h", name + ":s")


def _commands(client: Any, key: str) -> list[tuple[Any, ...]]:
    sha = client.script_load(NESTED)
    return [("APPEND", key + ":s", "é" * 3), ("GET", key + ":s"), ("INCR", key),
            ("HSET", key + ":h", "a", b"\x00\xff", "b", 7),
            ("HMGET", key + ":h", "a", "missing", "b"),
            ("EVALSHA", sha, 0, "word", "12"),
            ("HSET", key + ":s", "x", "y"),  # WRONGTYPE: an error reply
            ("EVALSHA", "0" * 40, 0),  # NOSCRIPT
            ("GET", key + ":none")]


def _outcome(run: Any) -> Any:
    try:
        return run()
    except redis.exceptions.ResponseError as exc:
        return (type(exc).__name__, str(exc))


def _same(reply: Any) -> Any:
    return (type(reply).__name__, str(reply)) if isinstance(reply, Exception) else reply


def test_replies_and_errors_are_the_clients(client: Any, key: str) -> None:
    """(Commands without a response callback: the client's reply is the parsed one,
    as for the commands the store sends this way.)"""
    direct = Direct.of(client)
    assert direct is not None
    assert not {"EVALSHA", "HMGET"} & set(client.response_callbacks)
    commands = _commands(client, key)
    assert not {c[0] for c in commands} & set(client.response_callbacks)
    ours = [_outcome(lambda c=c: direct.call(c)) for c in commands]
    client.delete(key, key + ":h", key + ":s")
    theirs = [_outcome(lambda c=c: client.execute_command(*c)) for c in commands]
    assert ours == theirs
    assert ours[6][0] == "ResponseError" and ours[7][0] == "NoScriptError"
    assert len(direct._stack) == 1  # an error reply left its connection clean, kept


def test_a_pipeline_answers_as_the_clients_pipeline(client: Any, key: str) -> None:
    direct = Direct.of(client)
    assert direct is not None
    commands = _commands(client, key)
    ours = [_same(r) for r in direct.pipeline(commands)]
    client.delete(key, key + ":h", key + ":s")
    pipe = client.pipeline(transaction=False)
    for c in commands:
        pipe.execute_command(*c)
    assert ours == [_same(r) for r in pipe.execute(raise_on_error=False)]


def _kill(client: Any, conn: Any) -> None:
    conn.send_command("CLIENT", "ID")
    client.client_kill_filter(_id=conn.read_response())


def test_a_killed_connection_is_replaced_and_the_command_runs_once(
        client: Any, key: str) -> None:
    direct = Direct.of(client)
    assert direct is not None
    assert direct.call(("GET", key)) is None
    (held,) = direct._stack
    _kill(client, held)
    assert direct.call(("INCR", key)) == 1  # the dead one failed, the client's path ran it
    assert direct._stack == []  # given back to the pool, which connects it again
    assert direct.call(("INCR", key)) == 2
    (fresh,) = direct._stack
    _kill(client, fresh)
    assert [_same(r) for r in direct.pipeline([("INCR", key), ("INCR", key)])] == [3, 4]
    assert int(client.get(key)) == 4


def test_a_forked_child_takes_connections_of_its_own(client: Any) -> None:
    direct = Direct.of(client)
    assert direct is not None
    direct.call(("ECHO", "x"))
    (parent,) = direct._stack
    direct._pid = -1  # as a child process sees it: the stack was the parent's
    direct.call(("ECHO", "x"))
    assert direct._stack and direct._stack[0] is not parent


def test_only_a_one_node_resp2_client_goes_this_way() -> None:
    assert Direct.of(redis.Redis.from_url(REDIS_URL, protocol=3)) is None
    assert Direct.of(object()) is None


def test_a_store_whose_connection_was_killed_appends_once(client: Any) -> None:
    try:
        store = RedisStore(REDIS_URL, counter="approx", prefix=f"w{uuid.uuid4().hex[:12]}",
                           flush_prefix_on_close=True)
    except redis.exceptions.ConnectionError as exc:  # pragma: no cover - fixture checked
        pytest.skip(str(exc))
    try:
        assert store._direct is not None
        store.create_session("s")
        store.append("s", [Message.user("one")])
        assert store.tail("s", 1)[0].text == "one"
        for conn in list(store._direct._stack):
            _kill(client, conn)
        store.append("s", [Message.user("two")])
        assert [m.text for m in store.range("s")] == ["one", "two"]
        assert store.get_session("s").message_count == 2
    finally:
        store.close()
