"""What is specific to RedisStore: key layout, cross-slot safety, Redis Cluster
(the whole conformance suite again, on a three-master cluster started here) and
durability with AOF ``appendfsync always`` across a ``kill -9``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pair_shapes
import pytest
import test_conformance as conformance  # the suite's functions, rerun here on a cluster
from written_script import (
    assert_same_runs,
    checked_sessions,
    concurrent_work,
    concurrent_writers,
    count_as_written,
    random_script,
    run_script,
)

from chathistory import Attachment, KVStatus, Message, MissingDependency, NotFound
from chathistory.errors import ChatHistoryError
from chathistory.stores.engine import recent_key
from chathistory.stores.redis import RedisStore
from chathistory.stores.redis import store as redis_module
from chathistory.stores.redis.combine import ScriptCombiner
from chathistory.stores.redis.keys import escape
from chathistory.stores.redis.store import _parse_url
from chathistory.stores.redis.wire import Direct

redis = pytest.importorskip("redis")
key_slot = pytest.importorskip("redis.cluster").key_slot

IN_CI = os.environ.get("CI", "").lower() == "true"
REDIS_URL = os.environ.get("CHATHISTORY_TEST_REDIS", "redis://127.0.0.1:6379/0")
SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")


def need_binaries() -> None:
    if SERVER and CLI:
        return
    message = "redis-server / redis-cli not installed"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: the Redis Cluster tests must run)")
    pytest.skip(message)


def free_port() -> int:
    """A loopback port that is free, and so is its cluster bus port (+10000)."""
    for _ in range(200):
        port = 20000 + int(uuid.uuid4().int % 20000)
        if all(_free(p) for p in (port, port + 10000)):
            return port
    raise RuntimeError("no free port")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready after {timeout} s")


def cli(port: int, *args: str) -> str:
    assert CLI is not None
    return subprocess.run([CLI, "-p", str(port), *args], capture_output=True, text=True,
                          timeout=30).stdout


def png_sha(data: bytes) -> str:
    return Attachment.from_bytes(data).sha256


def new_store(url: str, **options: Any) -> RedisStore:
    return RedisStore(url, counter="approx", prefix=f"t{uuid.uuid4().hex[:12]}",
                      flush_prefix_on_close=True, **options)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A three-master Redis Cluster on loopback, no persistence, shut down after."""
    need_binaries()
    assert SERVER is not None and CLI is not None
    workdir = tmp_path_factory.mktemp("redis-cluster")
    ports: list[int] = []
    try:
        for _ in range(3):
            port = free_port()
            subprocess.run([SERVER, "--port", str(port), "--bind", "127.0.0.1",
                            "--cluster-enabled", "yes", "--cluster-config-file",
                            f"nodes-{port}.conf", "--save", "", "--appendonly", "no",
                            "--daemonize", "yes", "--dir", str(workdir),
                            "--logfile", f"redis-{port}.log"], check=True, timeout=30)
            ports.append(port)
        for port in ports:
            wait_for(lambda p=port: cli(p, "ping").strip() == "PONG", f"node {port}")
        subprocess.run([CLI, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True,
                       capture_output=True, timeout=60)
        for port in ports:
            wait_for(lambda p=port: "cluster_state:ok" in cli(p, "cluster", "info"),
                     f"cluster state at {port}")
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for port in ports:
            cli(port, "shutdown", "nosave")


@pytest.fixture
def store(cluster_url: str) -> Iterator[RedisStore]:
    """Overrides the conftest ``store``: the conformance functions below run on the cluster."""
    s = new_store(cluster_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def redis_store() -> Iterator[RedisStore]:
    """A store on the shared test server (``CHATHISTORY_TEST_REDIS``)."""
    try:
        s = new_store(REDIS_URL)
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"Redis unreachable: {exc} (CI=true: server backends must be tested)")
        pytest.skip(f"Redis unreachable: {exc}")
    try:
        yield s
    finally:
        s.close()


for _name in dir(conformance):
    if _name.startswith("test_"):
        globals()[f"test_cluster_{_name[5:]}"] = getattr(conformance, _name)


# ---------------------------------------------------------------- key layout


def test_every_key_of_a_session_shares_one_slot(redis_store: RedisStore,
                                                png_bytes: bytes) -> None:
    tenant, sid = "acme:{eu}", "chat}:{1"  # ids that would break a naive tag
    redis_store.create_session(sid, tenant=tenant, user="u:1")
    turn = conformance.tool_turn(0)
    redis_store.append(sid, [Message.system("s"), *turn,
                             Message.user("pic", Attachment.from_bytes(png_bytes))],
                       tenant=tenant)
    fork = redis_store.fork(sid, turn[2].id, tenant=tenant)
    redis_store.append(fork.id, [Message.tool_result("c0a", "x")], tenant=tenant)
    redis_store.mark(fork.id, [turn[0].id], 0, tenant=tenant)
    keys = {k.decode() for k in redis_store._r.scan_iter(match=f"{redis_store.prefix}:*")}
    own = [k for k in redis_store._keys(tenant, sid) if k in keys]
    assert len(own) >= 7  # session, rows, ids, cum, kept, calls, refs
    assert len({key_slot(k.encode()) for k in own}) == 1
    tenant_keys = [k for k in keys if k.startswith(redis_store._tenant_key(tenant, ""))]
    assert {k.rsplit("}:", 1)[1] for k in tenant_keys} == {
        "sessions", "user:u%3A1", "recent", "recent:u%3A1", "assets", "asset_types",
        f"refs:{png_sha(png_bytes)}",
        f"tree:{escape(sid)}", f"children:{escape(sid)}"}  # no TTL: no expiry entry
    assert len({key_slot(k.encode()) for k in tenant_keys}) == 1
    # every key is one of this session's, its fork's, the tenant's, the tenant list or
    # the record of the data steps applied
    fork_keys = set(redis_store._keys(tenant, fork.id))
    assert keys == set(own) | (fork_keys & keys) | set(tenant_keys) | {
        f"{redis_store.prefix}:tenants", f"{redis_store.prefix}:migrations"}


def test_escaped_ids_do_not_collide(redis_store: RedisStore) -> None:
    redis_store.create_session("b:c", tenant="a")
    redis_store.create_session("c", tenant="a:b")
    redis_store.append("b:c", [Message.user("one")], tenant="a")
    assert redis_store.tail("c", 5, tenant="a:b") == []
    assert [s.id for s in redis_store.list_sessions(tenant="a").items] == ["b:c"]
    assert [s.id for s in redis_store.list_sessions(tenant="a:b").items] == ["c"]


# ---------------------------------------------------------------- cross-slot safety


def test_stale_index_entries_are_filtered(redis_store: RedisStore) -> None:
    """A crash between the session's slot and the tenant's leaves index entries
    behind; every read ignores them and deletes still work."""
    s = redis_store.create_session("s", user="alice", ttl=0.05)
    redis_store.append("s", conformance.chat(2))
    fork = redis_store.fork("s")
    redis_store.create_session("live", user="alice")
    for sid in ("s", fork.id):  # the session's keys go, its index entries stay
        redis_store._r.delete(*redis_store._keys("default", sid))
    assert [x.id for x in redis_store.list_sessions().items] == ["live"]
    assert [x.id for x in redis_store.list_sessions(user="alice").items] == ["live"]
    assert redis_store._b_children("default", s.id) == []
    assert redis_store._b_tree("default", s.id) == []
    time.sleep(0.1)
    assert redis_store.purge_expired() == 0
    assert redis_store._r.zcard(redis_store._tenant_key("default", "expiry")) == 0
    redis_store.create_session("s")  # the same id again: a new incarnation, not the old entries
    assert [x.id for x in redis_store.lineage("s")] == ["s"]
    assert redis_store.erase(tenant="default", user="alice") == 1  # "live"
    assert [x.id for x in redis_store.list_sessions().items] == ["s"]


def test_stale_recent_entries_are_filtered(redis_store: RedisStore) -> None:
    """A crash between a save's steps leaves an extra ``recent`` entry (the new one
    added before a save that never happened, or the old one not yet removed); a
    listing shows each session once, where its stored ``updated_at`` puts it."""
    for sid in ("x", "y", "z"):
        redis_store.create_session(sid, user="alice")
        time.sleep(0.002)
    redis_store.append("x", conformance.chat(1))
    x = redis_store.get_session("x")
    keys = [redis_store._recent_key("default", None), redis_store._recent_key("default", "alice")]
    for key in keys:
        redis_store._r.zadd(key, {"2999-01-01T00:00:00.000000+00:00\x00y": 0,  # never saved
                                  "2000-01-01T00:00:00.000000+00:00\x00z": 0,  # left behind
                                  f"{recent_key(x)}\x00x": 0})  # x's own: no duplicate
    for user in (None, "alice"):
        listed = [s.id for s in redis_store.list_sessions(order="recent", user=user).items]
        assert listed == ["x", "z", "y"]
        pages: list[str] = []
        cursor = None
        while True:
            page = redis_store.list_sessions(order="recent", user=user, limit=1, cursor=cursor)
            pages += [s.id for s in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert pages == ["x", "z", "y"]
    for key in keys:  # a save keeps one live entry per session and leaves others alone
        assert redis_store._r.zcard(key) == 5
    redis_store.update_session("y", metadata={"k": 1})
    assert [s.id for s in redis_store.list_sessions(order="recent").items] == ["y", "x", "z"]
    assert redis_store._r.zcard(keys[0]) == 5


def test_asset_gc_and_references_in_flight(redis_store: RedisStore, png_bytes: bytes) -> None:
    att = Attachment.from_bytes(png_bytes)
    s = redis_store.create_session("s")
    redis_store.append("s", [Message.user("pic", att)])
    r = redis_store._r
    refs = redis_store._tenant_key("default", f"refs:{att.sha256}")
    assets = redis_store._tenant_key("default", "assets")
    # an append that wrote its tenant reference but has not run its script yet
    other = redis_store.create_session("other")
    epoch = r.hget(redis_store._keys("default", other.id).session, "r").decode()
    r.sadd(refs, f"{epoch}|other")
    redis_store.delete_session(s.id)  # gc runs: the in-flight reference keeps the asset
    assert redis_store.get_asset(att.sha256) == png_bytes
    redis_store.clear("other")  # a new epoch: that reference is stale now
    assert r.hexists(assets, att.sha256) == 0
    assert r.scard(refs) == 0


# ---------------------------------------------------------------- cost model


def _long_session(store: RedisStore, turns: int, chat: int) -> tuple[str, list[Message]]:
    """A session of a system message and ``turns`` turns of ``chat`` messages and a
    tool call with its result, appended 500 messages at a time."""
    s = store.create_session()
    msgs = [Message.system("sys")]
    for i in range(turns):
        msgs += conformance.chat(chat, f"t{i}") + conformance.tool_turn(i)
    for a in range(0, len(msgs), 500):
        store.append(s.id, msgs[a:a + 500])
    return s.id, msgs


def test_reads_touch_only_the_rows_they_need(redis_store: RedisStore) -> None:
    sid, _ = _long_session(redis_store, 300, 4)
    fields: list[int] = []
    real = redis_store._r

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def hmget(self, key: str, names: list[str], *args: Any) -> Any:
            fields.append(len(names))
            return real.hmget(key, names, *args)

    redis_store._r = Counting()
    try:
        got = redis_store.window(sid, 400, keep_system=True)
        tail = redis_store.tail(sid, 20)
    finally:
        redis_store._r = real
    assert got[0].role == "system" and 20 <= len(tail) < 30
    assert sum(fields) < 250, fields  # of 3,001 rows


def _appends_keep_one_recent_entry_per_session(store: RedisStore) -> None:
    a = store.create_session(user="alice")
    b, c = store.create_session(), store.create_session()
    for session in (a, b, c, a):
        for message in conformance.chat(2, session.id[:4]):
            store.append(session.id, [message])
            time.sleep(0.002)  # recent order is by time: keep the appends apart
    everyone = store._r.zrange(store._recent_key("default", None), 0, -1)
    alice = store._r.zrange(store._recent_key("default", "alice"), 0, -1)
    assert len(everyone) == 3 and len(alice) == 1  # no stale entry left by any append
    assert [s.id for s in store.list_sessions(order="recent").items] == [a.id, c.id, b.id]
    assert [s.id for s in store.list_sessions(order="recent", user="alice").items] == [a.id]


def test_appends_keep_one_recent_entry_per_session(redis_store: RedisStore) -> None:
    """One node: the append script moves the session's recent-order entry with the
    write itself (atomically); every append leaves exactly one entry per session."""
    _appends_keep_one_recent_entry_per_session(redis_store)


def test_cluster_appends_keep_one_recent_entry_per_session(store: RedisStore) -> None:
    """A cluster: the recent-order sets live in the tenant's slot, so the entry moves
    in steps around the write (new one first, old one after)."""
    assert store.cluster
    _appends_keep_one_recent_entry_per_session(store)


def test_window_probe_is_one_read_and_agrees_with_the_step_by_step_path(
        redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's one-script read: the same answer as the reads made one by one,
    for budgets that take a few rows, everything (more rows than the script returns:
    the engine reads further back) and nothing; with a mark and tool groups inside."""
    sid, msgs = _long_session(redis_store, 650, 2)
    redis_store.mark(sid, [msgs[-10].id], KVStatus.MARKED)
    budgets = (0, 50, 400, 10**9)
    probed = [redis_store.window_json(sid, b) for b in budgets]
    scripts: list[int] = []
    real = redis_store._scripted

    def counted(script: Any, keys: list[Any], args: list[Any]) -> Any:
        scripts.append(script is redis_store._probe_script)
        return real(script, keys, args)

    monkeypatch.setattr(redis_store, "_scripted", counted)
    redis_store.window_json(sid, 400)
    assert scripts == [True]
    monkeypatch.setattr(redis_store, "_b_window_probe", lambda *args: None)
    assert probed == [redis_store.window_json(sid, b) for b in budgets]
    assert probed[-1].count(b'"role":"user"') > 1000  # past the script's 2,000 rows


def test_window_reads_step_by_step_when_the_script_fails(
        redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script error (a session JSON that Lua's cjson cannot read: nesting past its
    limit) is not the caller's: the probe gives way to the reads made one by one."""
    s = redis_store.create_session()
    msgs = conformance.chat(6, "deep")
    redis_store.append(s.id, msgs)

    failing = redis_store._r.register_script(  # the error reply such a script gives
        "return redis.error_reply('cjson: too many nested data structures')")
    monkeypatch.setattr(redis_store, "_probe_script", failing)
    assert redis_store._b_window_probe("default", s.id, 100) is None
    assert [m.id for m in redis_store.window(s.id, 10**6)] == [m.id for m in msgs]


# ---------------------------------------------------------------- connecting


def test_unreachable_server_fails_fast() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            RedisStore(f"redis://127.0.0.1:{port}/0")
    assert time.monotonic() - started < 10


def test_silent_server_times_out() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel accepts; nobody answers
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            RedisStore(f"redis://127.0.0.1:{s.getsockname()[1]}/0", socket_timeout=0.5)
    assert time.monotonic() - started < 5


def test_urls_and_prefixes() -> None:
    assert _parse_url("redis://h:1/2") == ("redis://h:1/2", False)
    assert _parse_url("redis+cluster://h:1") == ("redis://h:1", True)
    assert _parse_url("rediss://h:1?cluster=true&ssl_cert_reqs=none") == (
        "rediss://h:1?ssl_cert_reqs=none", True)
    with pytest.raises(ValueError):
        _parse_url("http://h")
    for bad in ("", "a:b", "x{y}", "a*", "a b"):
        with pytest.raises(ValueError):
            RedisStore(REDIS_URL, prefix=bad)


def test_cluster_urls(cluster_url: str) -> None:
    plain = cluster_url.replace("redis+cluster://", "redis://")
    for url in (cluster_url, plain + "?cluster=true"):
        s = RedisStore.from_url(url, prefix=f"t{uuid.uuid4().hex[:12]}",
                                flush_prefix_on_close=True)
        assert s.cluster
        s.create_session("x")
        s.append("x", conformance.chat(3))
        assert s.count("x") == 3
        s.close()


def test_close_flushes_only_its_prefix(redis_store: RedisStore) -> None:
    other = new_store(REDIS_URL)
    other.create_session("keep")
    mine = new_store(REDIS_URL)
    mine.create_session("gone")
    mine.append("gone", conformance.chat(2))
    mine.close()
    assert list(redis_store._r.scan_iter(match=f"{mine.prefix}:*")) == []
    assert other.get_session("keep").id == "keep"
    other.close()


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingDependency, match=r"chathistory\[redis\]"):
        RedisStore(REDIS_URL)


# ---------------------------------------------------------------- durability


def start_server(port: int, workdir: Path, *options: str) -> subprocess.Popen[bytes]:
    assert SERVER is not None
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                             str(workdir), "--save", "", *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: cli(port, "ping").strip() == "PONG", f"redis-server at {port}")
    return proc


@pytest.mark.parametrize("persistence", ["aof-always", "none"])
def test_acknowledged_appends_survive_kill_9(tmp_path: Path, persistence: str) -> None:
    need_binaries()
    options = (["--appendonly", "yes", "--appendfsync", "always"]
               if persistence == "aof-always" else ["--appendonly", "no"])
    port = free_port()
    proc = start_server(port, tmp_path, *options)
    try:
        store = RedisStore(f"redis://127.0.0.1:{port}/0", counter="approx")
        store.create_session("s")
        acknowledged: list[str] = []
        for i in range(50):
            batch = [Message.user(f"q{i}"), Message.assistant(f"a{i}")]
            store.append("s", batch)
            acknowledged += [m.id for m in batch]
        store._r.close()
    finally:
        proc.kill()  # SIGKILL: no shutdown, no final fsync
        proc.wait(timeout=30)
    proc = start_server(port, tmp_path, *options)
    try:
        store = RedisStore(f"redis://127.0.0.1:{port}/0", counter="approx")
        if persistence == "none":
            assert store._b_get_session("default", "s") is None  # the test can tell
        else:
            assert [m.id for m in store.range("s")] == acknowledged
            assert store.get_session("s").version == 50
        store.close()
    finally:
        cli(port, "shutdown", "nosave")
        proc.wait(timeout=30)


def _m003_mends(store: RedisStore) -> None:
    pair_shapes.write_old_release_scenario(store)
    for sid, seqs in pair_shapes.OLD_RELEASE_WRONG_FLAGS.items():  # as 0.1.0 stored them
        rows = store._keys("default", sid).rows
        for seq in seqs:
            value = store._r.hget(rows, str(seq))
            store._r.hset(rows, str(seq), value[:1] + b"1" + value[2:])
    store._r.srem(f"{store.prefix}:migrations", "m003_regroup")
    with pytest.raises(AssertionError):  # the old flags split the call group
        pair_shapes.check_old_release_scenario(store)
    store._migrate()  # what opening the store does
    pair_shapes.check_old_release_scenario(store)
    assert store._r.sismember(f"{store.prefix}:migrations", "m003_regroup")


def test_m003_mends_group_flags_written_by_0_1_0(redis_store: RedisStore) -> None:
    """Rows holding the group flags that 0.1.0's batch append stored (a group start
    between parallel calls answered in the same batch) are mended by m003."""
    _m003_mends(redis_store)


def test_cluster_m003_mends_group_flags_written_by_0_1_0(store: RedisStore) -> None:
    _m003_mends(store)


# ---------------------------------------------------------------- the one-round-trip path


class _LongWayOnly(RedisStore):
    """A store that never plans on its own copy of a session (``_append_as_written``)
    nor guesses a session's length (``_tail_at``): every append reads the session and
    the batch's ids first, every tail read goes through the script."""

    def _remember(self, key: Any, written: Any) -> None:
        return None

    def _keep_length(self, key: Any, length: int) -> None:
        return None


def _stored_rows(store: RedisStore, session_ids: list[str]) -> dict[str, Any]:
    """Every key of each session (the session hash without its incarnation, epoch and
    timestamps), the tenant's assets, and what the reads of each session answer."""
    import msgspec

    from chathistory.stores import Session

    stamp = "2000-01-01T00:00:00Z"
    out: dict[str, Any] = {}
    r = store._r
    for sid in session_ids:
        keys = store._keys("default", sid)
        j = r.hget(keys.session, "j")
        session = None if j is None else msgspec.json.decode(j, type=Session)
        out[f"{sid}:session"] = (r.hget(keys.session, "v"), None if session is None else
                                 msgspec.structs.replace(session, created_at=stamp,
                                                         updated_at=stamp))
        rows = r.hgetall(keys.rows)
        copy = rows.pop(b"j", None)  # the session JSON's copy: the same as the session's
        assert copy == j
        out[f"{sid}:rows"] = sorted(rows.items())
        out[f"{sid}:over"] = sorted(r.hgetall(keys.over).items())
        for name in ("ids", "cum", "kept", "calls"):
            out[f"{sid}:{name}"] = r.zrange(getattr(keys, name), 0, -1, withscores=True)
        out[f"{sid}:refs"] = sorted(r.smembers(keys.refs))
        try:
            out[sid] = (store.range(sid), store.tail(sid, 5), store.window(sid, 300))
        except ChatHistoryError as exc:
            out[sid] = (type(exc).__name__, str(exc))
    out["assets"] = sorted(r.hgetall(store._tenant_key("default", "assets")).items())
    return out


def _two_pairs(*makes: type[RedisStore]) -> list[RedisStore]:
    """Two store objects on one prefix for each class of ``makes``, in that order (the
    first of each pair deletes the prefix's keys when closed)."""
    stores: list[RedisStore] = []
    try:
        for make in makes:
            prefix = f"t{uuid.uuid4().hex[:12]}"
            stores += [make(REDIS_URL, counter="approx", prefix=prefix,
                            flush_prefix_on_close=True),
                       make(REDIS_URL, counter="approx", prefix=prefix)]
    except BaseException:
        for s in stores:
            s.close()
        raise
    return stores


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_appends_planned_on_the_written_copy_store_what_the_long_way_stores(
        seed: int, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch,
        redis_store: RedisStore) -> None:
    """The same random operations (retries of stored ids, If-Match, two store objects
    writing one session in turn, forks, pops, marks, attachments, a session deleted and
    made again) through stores that plan on their own copy of a session when they can,
    and through stores that always read it first: the same answers, the same rows."""
    ops = random_script(seed, 300, png_bytes)
    names = sorted({op[2] for op in ops} | {op[4] for op in ops if op[0] == "fork"})
    outcomes = count_as_written(monkeypatch, RedisStore, redis_module._MISSED)
    stores = _two_pairs(RedisStore, _LongWayOnly)
    try:
        fast, plain = stores[:2], stores[2:]
        fast_run = run_script(fast, ops), _stored_rows(fast[0], names)
        plain_run = run_script(plain, ops), _stored_rows(plain[0], names)
        assert plain[0]._written == {} and plain[1]._written == {}
        assert plain[0]._lengths == {} and fast[0]._lengths != {}
        assert_same_runs(fast_run, plain_run, outcomes)
    finally:
        for s in stores:
            s.close()


class _ThroughClient(RedisStore):
    """A store whose appends and tail reads go through redis-py's client, never past its
    dispatch (``wire.Direct``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._direct = None
        self._append_combined = ScriptCombiner(self._r, self._append_script,
                                               redis.exceptions.NoScriptError)


@pytest.mark.parametrize("seed", [4, 5])
def test_appends_and_tails_past_the_clients_dispatch_store_and_read_what_it_does(
        seed: int, png_bytes: bytes, monkeypatch: pytest.MonkeyPatch,
        redis_store: RedisStore) -> None:
    """The same random operations through stores that send their appends' scripts and
    tail reads past redis-py's dispatch (``wire.Direct``) and through stores that send
    everything through the client: the same answers, the same rows."""
    ops = random_script(seed, 300, png_bytes)
    names = sorted({op[2] for op in ops} | {op[4] for op in ops if op[0] == "fork"})
    sent: list[str] = []
    for name in ("call", "pipeline"):
        method = getattr(Direct, name)

        def counted(self: Any, *args: Any, _method: Any = method, _name: str = name) -> Any:
            sent.append(f"{_name} {args[0][0] if _name == 'call' else 'batch'}")
            return _method(self, *args)

        monkeypatch.setattr(Direct, name, counted)
    stores = _two_pairs(RedisStore, _ThroughClient)
    try:
        direct, plain = stores[:2], stores[2:]
        direct_run = run_script(direct, ops), _stored_rows(direct[0], names)
        calls = len(sent)
        plain_run = run_script(plain, ops), _stored_rows(plain[0], names)
        assert len(sent) == calls  # the plain stores sent nothing past the client
        assert sent.count("call EVALSHA") > 100 and sent.count("call HMGET") >= 3, sent
        assert direct_run[0] == plain_run[0]
        assert direct_run[1] == plain_run[1]
        assert sum(type(a) is int for a in direct_run[0]) > 150
    finally:
        for s in stores:
            s.close()


def test_concurrent_appends_planned_on_the_written_copy_store_every_message_once(
        redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two store objects, four threads, two sessions, every third append sent twice (a
    retry), with and without the one-round-trip path: every message once, in each
    writer's order, versions gapless, the same messages and totals either way."""
    work = concurrent_work()
    outcomes = count_as_written(monkeypatch, RedisStore, redis_module._MISSED)
    results = []
    for make in (RedisStore, _LongWayOnly):
        prefix = f"t{uuid.uuid4().hex[:12]}"
        writers = [make(REDIS_URL, counter="approx", prefix=prefix, flush_prefix_on_close=True),
                   make(REDIS_URL, counter="approx", prefix=prefix)]
        try:
            for sid in ("c0", "c1"):
                writers[0].create_session(sid)
            versions = concurrent_writers(writers, work)
            results.append(checked_sessions(writers, work, versions))
        finally:
            for w in writers:
                w.close()
    assert "written" in outcomes and "missed" in outcomes, outcomes
    assert results[0] == results[1]


def test_tail_reads_on_a_guessed_length_equal_the_script_and_notice_other_writers(
        redis_store: RedisStore) -> None:
    """A tail read on the length this process saw last (one HMGET, no script)
    answers what the script answers; when another store object appended, popped,
    marked or deleted meanwhile, the guess is wrong and the script reads instead."""
    other = RedisStore(REDIS_URL, counter="approx", prefix=redis_store.prefix)
    plain = _LongWayOnly(REDIS_URL, counter="approx", prefix=redis_store.prefix)
    guessed: list[bool] = []
    tail_at = redis_store._tail_at

    def counted(*args: Any) -> Any:
        found = tail_at(*args)
        guessed.append(found is not None)
        return found

    redis_store._tail_at = counted  # type: ignore[method-assign]
    try:
        redis_store.create_session("g")
        call = Message.assistant("", [{"id": "c1", "name": "f", "arguments": {}}])
        redis_store.append("g", [Message.user(f"m{k}") for k in range(30)])
        for n in (1, 5, 20, 40):
            assert redis_store.tail("g", n) == plain.tail("g", n)
        assert guessed == [True] * 4
        other.append("g", [call])  # another writer: the guess is stale, then right again
        assert redis_store.tail("g", 3) == plain.tail("g", 3)
        assert redis_store.tail("g", 3) == plain.tail("g", 3)
        assert guessed[-2:] == [False, True]
        other.append("g", [Message.tool_result("c1", "r"), Message.user("after")])
        other.pop("g")
        other.mark("g", [redis_store.tail("g", 1)[0].id], KVStatus.MARKED)
        for n in (1, 2, 4):  # the call comes with its result, the marked message is left out
            assert redis_store.tail("g", n) == plain.tail("g", n)
            assert redis_store.tail("g", n, include_marked=True) == plain.tail(
                "g", n, include_marked=True)
        assert [m.role for m in redis_store.tail("g", 1, include_marked=True)] == [
            "assistant", "tool"]
        other.delete_session("g")
        with pytest.raises(NotFound):
            redis_store.tail("g", 2)
    finally:
        other.close()
        plain.close()


def test_the_rows_hash_copy_of_the_session_is_never_read_as_a_row(
        redis_store: RedisStore) -> None:
    """The rows hash holds the session's JSON under ``j`` beside the rows: search and
    the m003 mend skip it (a needle only in the session's state finds nothing), and a
    session whose copy is missing (last written by an older release) reads through
    the script until its next write makes the copy again."""
    redis_store.create_session("q", metadata={"m": 1})
    redis_store.append("q", [Message.user("hello"), Message.assistant("there")])
    redis_store.update_session("q", state={"note": "xylophone", "tool_result": 1})
    rows = redis_store._keys("default", "q").rows
    assert redis_store._r.hget(rows, "j") == redis_store._r.hget(
        redis_store._keys("default", "q").session, "j")
    assert redis_store.list_sessions(query="xylophone").items == []
    assert [s.id for s in redis_store.list_sessions(query="hello").items] == ["q"]
    redis_store._regroup()  # reads every row of every session that names a tool result
    redis_store._r.hdel(rows, "j")  # as an older release left it
    fresh = RedisStore(REDIS_URL, counter="approx", prefix=redis_store.prefix)
    try:
        assert [m.text for m in fresh.tail("q", 1)] == ["there"]  # the script
        assert [m.text for m in fresh.tail("q", 2)] == ["hello", "there"]  # guessed: no copy
        assert fresh._r.hget(rows, "j") is None
        fresh.append("q", [Message.user("again")])
        assert fresh._r.hget(rows, "j") is not None
        assert [m.text for m in fresh.tail("q", 2)] == ["there", "again"]
    finally:
        fresh.close()


def test_a_held_session_takes_appends_after_the_hold(redis_store: RedisStore) -> None:
    """While a deletion holds a session (``_b_held``: field ``h``), the append script
    refuses to write and the append tries again; it lands once the hold ends. A hold
    whose time ran out (a crashed deletion) holds nothing."""
    import threading

    msgs = [Message.user(f"m{i}") for i in range(4)]
    s = redis_store.create_session()
    redis_store.append(s.id, msgs)
    late = Message.user("late")
    appender = threading.Thread(target=redis_store.append, args=(s.id, [late]))
    with redis_store._b_held("default", s.id):
        appender.start()
        appender.join(0.3)
        assert appender.is_alive()  # refused while held (unheld, it takes milliseconds)
        assert redis_store.count(s.id) == 4
    appender.join(30)
    assert [m.id for m in redis_store.range(s.id)] == [*(m.id for m in msgs), late.id]
    key = redis_store._keys("default", s.id).session
    redis_store._r.hset(key, "h", 1)  # a hold that ended long ago
    redis_store.append(s.id, [Message.user("after an old hold")])
    assert redis_store.count(s.id) == 6
