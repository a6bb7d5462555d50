"""Crash safety: SIGKILL a writer at random moments, restart it, check the store.

Two writers per backend:

- library: a child process appending to many sessions through the library; it
  logs each batch (`P`, the messages) before the call and the version (`A`)
  after the call returns, unbuffered, so the parent knows every acknowledged
  append. Restarted, it first retries the batch it was killed in (same ids).
- server: a `chathistory serve` process over the store, with client threads of
  the harness appending over HTTP; a 200 is the acknowledgement. The SERVER is
  killed; after the restart the clients retry what got no answer.

For Redis the private redis-server is killed too (it is what loses data), with
AOF `appendfsync always`, the setting docs/stores.md calls durable. After every
kill a fresh store checks every session (`verify.check_session`): acknowledged
appends present exactly once at their version, nothing half-written, positions
and versions without gaps, reads agree; and the store opens without repair
(SQLite `PRAGMA integrity_check`; no AOF truncation in the Redis log).

`everysec`, `no` and no persistence are measured too (informational rows): how
many acknowledged messages a kill of redis-server loses with each.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .common import Result
from .procs import (
    RedisServer,
    ServerProcess,
    child_env,
    die_with_parent,
    kill9,
    postgres_reachable,
    redis_available,
    scratch_schema,
)
from .verify import TENANT, Batch, Findings, check_listing, check_session

SESSIONS = 24
FULL_KILLS = 60  # per backend: 60% library writer, 40% server
QUICK_KILLS = 6
_PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000004000000030802000000")
_SENTENCE = ("the model reads every message and answers with care keeping tool calls next "
             "to their results so nothing is lost or split when history grows")
_WORDS = _SENTENCE.split(" ")


# ---------------------------------------------------------------- what writers send


def make_batch(rng: random.Random, open_call: str | None) -> tuple[list[Any], str | None]:
    """One append: plain turns, a call with its result, a call alone (its result
    comes first in the session's next batch), or a message with an attachment.
    Returns the messages and the call left open."""
    from chathistory import Attachment, Message

    def text() -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 60)))

    batch: list[Any] = []
    if open_call is not None:
        batch.append(Message.tool_result(open_call, text()))
        open_call = None
    roll = rng.random()
    if roll < 0.45:
        batch.append(Message.user(text()))
    elif roll < 0.65:
        batch += [Message.user(text()), Message.assistant(text())]
    elif roll < 0.82:
        call = f"call_{rng.getrandbits(48):x}"
        batch += [Message.assistant("", [{"id": call, "name": "lookup",
                                          "arguments": {"q": text()}}]),
                  Message.tool_result(call, text())]
    elif roll < 0.94:
        open_call = f"call_{rng.getrandbits(48):x}"
        batch.append(Message.assistant(text(), [{"id": open_call, "name": "search",
                                                 "arguments": {"k": rng.randint(1, 9)}}]))
    else:
        png = _PNG + rng.randbytes(rng.randint(8, 64))
        batch.append(Message.user(text(), Attachment.from_bytes(png, mime_type="image/png")))
    return batch, open_call


# ---------------------------------------------------------------- the library writer


def writer_main(store_url: str, log_path: str, seed: int, sessions: int) -> None:
    """The child: append forever; `P` line before each append, `A` line after."""
    from chathistory import Message, open_store
    from chathistory.errors import Conflict

    log = Path(log_path)
    text = log.read_bytes() if log.exists() else b""
    if text and not text.endswith(b"\n"):  # killed inside a write(): never appended
        text = text[:text.rfind(b"\n") + 1]
        log.write_bytes(text)
    lines = text.decode().splitlines()
    pending = json.loads(lines[-1][2:]) if lines and lines[-1].startswith("P ") else None
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = open_store(store_url)
    for k in range(sessions):
        with contextlib.suppress(Conflict):
            store.create_session(f"s{k}", tenant=TENANT)
    if pending is not None:  # the retry of a client that lost its answer
        os.write(fd, b"R\n")
        version = store.append(pending["s"], [Message.from_dict(m) for m in pending["m"]],
                               tenant=TENANT)
        os.write(fd, f"A {version}\n".encode())
    rng = random.Random(seed)
    open_calls: dict[str, str | None] = {}
    while True:
        sid = f"s{rng.randrange(sessions)}"
        batch, open_calls[sid] = make_batch(rng, open_calls.get(sid))
        record = {"s": sid, "m": [m.to_dict() for m in batch]}
        os.write(fd, b"P " + json.dumps(record).encode() + b"\n")
        version = store.append(sid, batch, tenant=TENANT)
        os.write(fd, f"A {version}\n".encode())


def read_log(log_path: Path) -> tuple[list[Batch], int]:
    """The batches a writer logged, and how many of them were retries after a kill."""
    batches: list[Batch] = []
    retries = 0
    if not log_path.exists():
        return batches, 0
    last_was_p = False
    for line in log_path.read_bytes().decode().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        if line.startswith("P "):
            record = json.loads(line[2:])
            batches.append(Batch(record["s"], tuple(m["id"] for m in record["m"])))
            last_was_p = True
        elif line.startswith("R"):  # the writer restarted and retries the last batch
            retries += 1
        elif line.startswith("A "):
            if not last_was_p:
                raise AssertionError(f"{log_path}: an A line without its P line")
            batches[-1].acked = int(line[2:])
            last_was_p = False
    return batches, retries


# ---------------------------------------------------------------- backends


@dataclass
class Backend:
    """A store URL for the writers, plus what a kill and a check need."""

    name: str
    url: str
    workdir: Path
    redis: RedisServer | None = None
    repairs: list[str] = field(default_factory=list)

    def crash_storage(self) -> None:
        """Redis: kill -9 the server too, then start it again from its AOF."""
        if self.redis is None:
            return
        self.redis.kill()
        before = len(self.redis.log())
        self.redis.start()
        loaded = self.redis.log()[before:]
        for marker in ("short read", "loaded anyway", "Bad file format", "truncated",
                       "corrupt"):
            if marker.lower() in loaded.lower():
                self.repairs.append(f"redis AOF needed repair on restart: {marker!r}")

    def opens_without_repair(self) -> list[str]:
        problems, self.repairs = self.repairs, []
        if self.url.startswith("sqlite"):
            path = self.url.removeprefix("sqlite:///")
            if Path(path).exists():
                conn = sqlite3.connect(path)
                try:
                    ok = conn.execute("PRAGMA integrity_check").fetchall()
                    keys = conn.execute("PRAGMA foreign_key_check").fetchall()
                finally:
                    conn.close()
                if ok != [("ok",)]:
                    problems.append(f"sqlite integrity_check: {ok[:3]}")
                if keys:
                    problems.append(f"sqlite foreign_key_check: {keys[:3]}")
        return problems


@contextlib.contextmanager
def backend(name: str, workdir: Path, redis_options: tuple[str, ...] = (
        "--appendonly", "yes", "--appendfsync", "always")) -> Iterator[Backend]:
    if name == "sqlite":
        yield Backend(name, f"sqlite:///{workdir / 'crash.db'}", workdir)
    elif name == "postgres":
        with scratch_schema("crash") as url:
            yield Backend(name, url, workdir)
    else:
        redis = RedisServer(workdir / "redis", *redis_options).start()
        try:
            yield Backend(name, redis.url + f"?prefix=crash{os.getpid()}", workdir, redis)
        finally:
            redis.stop()


def skip_reason(name: str) -> str | None:
    if name == "postgres":
        return postgres_reachable()
    if name == "redis":
        return redis_available()
    return None


def verify_all(target: Backend, batches: list[Batch], rng: random.Random) -> Findings:
    """Every session the writers touched, through a fresh store."""
    from chathistory import open_store

    found = Findings(problems=target.opens_without_repair())
    by_session: dict[str, list[Batch]] = {}
    for b in batches:
        by_session.setdefault(b.session_id, []).append(b)
    store = open_store(target.url)
    try:
        for sid, own in by_session.items():
            found.add(check_session(store, sid, own, rng=rng))
        found.problems += check_listing(store, set(by_session))
    finally:
        store.close()
    return found


WRITING_WAIT = 300.0
"""How long a kill waits for the writer's first acknowledgement (a wait, not a bound:
starting a writer took over 30 s on a machine at load 20, and a kill before it wrote
anything left a row with nothing acknowledged to check)."""


# ---------------------------------------------------------------- kill loops


def library_kills(target: Backend, kills: int, seed: int) -> tuple[Findings, int, int]:
    """Kill the library writer ``kills`` times; returns findings of the last check,
    kills after which a check failed, and the retries made."""
    rng = random.Random(seed)
    log = target.workdir / "library.log"
    failed_kills = 0
    found = Findings()
    for k in range(kills):
        lines_before = _count_acks(log)
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; from reliability.crash import writer_main; "
             "writer_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))",
             target.url, str(log), str(seed * 1000 + k), str(SESSIONS)],
            env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=die_with_parent)
        if k % 8 == 0:  # some kills land while the writer opens the store or retries
            time.sleep(rng.uniform(0.0, 0.5))
        else:
            deadline = time.monotonic() + WRITING_WAIT
            while _count_acks(log) <= lines_before and child.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.6))
        if child.poll() is not None:
            err = child.stderr.read().decode() if child.stderr else ""
            raise RuntimeError(f"the writer exited early ({child.returncode}): {err[-2000:]}")
        if target.redis is not None:
            target.redis.kill()  # the server first: it is what can lose acknowledged data
        kill9(child)  # type: ignore[arg-type]
        if child.stderr:
            child.stderr.close()
        target.crash_storage()
        batches, _ = read_log(log)
        found = verify_all(target, batches, rng)
        if found.problems:
            failed_kills += 1
            print(f"  {target.name} library kill {k}: {found.problems[:3]}", flush=True)
    return found, failed_kills, read_log(log)[1]


def _count_acks(log: Path) -> int:
    if not log.exists():
        return 0
    return log.read_bytes().count(b"\nA ")


def server_kills(target: Backend, kills: int, seed: int) -> tuple[Findings, int, int]:
    """Kill a `chathistory serve` process ``kills`` times under HTTP appends."""
    rng = random.Random(seed)
    clients = 3
    owned = [[f"h{c}-{k}" for k in range(SESSIONS // clients)] for c in range(clients)]
    batches: list[Batch] = []
    bodies: dict[int, bytes] = {}  # batch index -> request body, for retries
    open_calls: dict[str, str | None] = {}
    lock = threading.Lock()
    errors: list[str] = []
    failed_kills = retries = 0
    found = Findings()
    for k in range(kills):
        server = ServerProcess(target.url, target.workdir).wait_ready()
        http = httpx.Client(base_url=server.url, timeout=30)
        if k == 0:
            for sid in (s for own in owned for s in own):
                assert http.post("/v1/sessions", json={"id": sid}).status_code == 201
        for index, b in enumerate(batches):  # retry what got no answer, same ids
            if b.acked is None:
                response = http.post(f"/v1/sessions/{b.session_id}/messages",
                                     content=bodies[index],
                                     headers={"Content-Type": "application/json"})
                response.raise_for_status()
                b.acked = response.json()["version"]
                retries += 1
        http.close()
        stop, killing = threading.Event(), threading.Event()

        def client(c: int, client_seed: int, base_url: str, stop: threading.Event,
                   killing: threading.Event) -> None:
            crng = random.Random(client_seed)
            with httpx.Client(base_url=base_url, timeout=30) as conn:
                while not stop.is_set():
                    sid = crng.choice(owned[c])
                    messages, open_calls[sid] = make_batch(crng, open_calls.get(sid))
                    body = json.dumps({"messages": [m.to_dict() for m in messages]}).encode()
                    with lock:
                        batches.append(Batch(sid, tuple(m.id for m in messages)))
                        index = len(batches) - 1
                        bodies[index] = body
                    try:
                        response = conn.post(f"/v1/sessions/{sid}/messages", content=body,
                                             headers={"Content-Type": "application/json"})
                    except httpx.TransportError:
                        return  # the server died: no answer, retried after the restart
                    if response.status_code >= 500 and killing.is_set():
                        return  # its Redis was killed first: an error, not an acknowledgement
                    if response.status_code != 200:
                        errors.append(f"append answered {response.status_code}: "
                                      f"{response.text[:300]}")
                        return
                    batches[index].acked = response.json()["version"]

        threads = [threading.Thread(target=client,
                                    args=(c, seed * 1000 + k * 10 + c, server.url, stop,
                                          killing))
                   for c in range(clients)]
        acked_before = sum(1 for b in batches if b.acked is not None)
        for t in threads:
            t.start()
        deadline = time.monotonic() + WRITING_WAIT  # writing, then a random moment
        while (sum(1 for b in batches if b.acked is not None) <= acked_before
               and time.monotonic() < deadline and not errors):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.6))
        killing.set()  # from here an answer may be an error about the killed storage
        if target.redis is not None:
            target.redis.kill()
        server.kill()
        stop.set()
        for t in threads:
            t.join(60)
        target.crash_storage()
        found = verify_all(target, batches, rng)
        found.problems += errors
        errors.clear()
        if found.problems:
            failed_kills += 1
            print(f"  {target.name} server kill {k}: {found.problems[:3]}", flush=True)
    return found, failed_kills, retries


# ---------------------------------------------------------------- redis fsync policies


def redis_policy_loss(policy: str, kills: int, seed: int, workdir: Path) -> Result:
    """Acknowledged messages lost by kill -9 of redis-server (and the writer) with
    ``policy`` (an `appendfsync` value, or `none` for no persistence)."""
    from chathistory import open_store
    from chathistory.errors import NotFound

    options = (("--appendonly", "no") if policy == "none" else
               ("--appendonly", "yes", "--appendfsync", policy))
    started = time.monotonic()
    acked = lost = duplicated = 0
    newest = 0  # how far back from the kill the oldest lost acknowledged batch was
    with backend("redis", workdir / f"policy-{policy}", options) as target:
        assert target.redis is not None
        rng = random.Random(seed)
        for k in range(kills):
            log = target.workdir / f"policy-{k}.log"
            url = f"{target.redis.url}?prefix=p{k}"
            child = subprocess.Popen(
                [sys.executable, "-c", "import sys; from reliability.crash import writer_main;"
                 " writer_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))",
                 url, str(log), str(seed + k), str(SESSIONS)],
                env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent)
            deadline = time.monotonic() + WRITING_WAIT
            while _count_acks(log) < 20 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.1, 0.8))
            target.redis.kill()
            kill9(child)
            target.crash_storage()
            target.repairs.clear()
            done = [b for b in read_log(log)[0] if b.acked is not None]
            store = open_store(url)
            present: set[str] = set()
            for sid in {b.session_id for b in done}:
                with contextlib.suppress(NotFound):
                    ids = [m.id for m in store.range(sid, tenant=TENANT)]
                    duplicated += len(ids) - len(set(ids))
                    present.update(ids)
            store.close()
            missing = [i for i, b in enumerate(done) if not set(b.ids) <= present]
            acked += sum(len(b.ids) for b in done)
            lost += sum(len(set(done[i].ids) - present) for i in missing)
            if missing:
                newest = max(newest, len(done) - missing[0])
        slow = target.redis.log().count("fsync is taking too long")
    detail = f"kill -9 of redis-server x{kills}: {lost} of {acked} acknowledged messages lost"
    if lost and policy != "none":
        detail += (f", all among the newest {newest} acknowledged appends before a kill; "
                   f"{slow} 'AOF fsync is taking too long' warnings in the redis log")
    if duplicated:
        detail += f"; {duplicated} messages stored twice (a bug)"
    return Result("crash: redis fsync", f"redis AOF {policy}" if policy != "none"
                  else "redis no persistence", acked, acked - lost, lost,
                  time.monotonic() - started, detail, informational=True)


# ---------------------------------------------------------------- the check


def run(quick: bool = False, kills: int | None = None,
        backends: tuple[str, ...] = ("sqlite", "postgres", "redis"),
        policies: tuple[str, ...] | None = None, seed: int | None = None,
        out: Callable[[str], None] = print) -> list[Result]:
    """``kills`` per backend (default 60, 6 quick): 60% of the library writer, the
    rest of the server; then the Redis fsync policies (informational)."""
    kills = kills or (QUICK_KILLS if quick else FULL_KILLS)
    seed = seed if seed is not None else random.SystemRandom().randrange(10**6)
    if policies is None:
        policies = ("everysec", "no", "none")
    library_share = max(1, round(kills * 0.6))
    server_share = max(1, kills - library_share)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="chathistory-crash-") as tmp:
        for name in backends:
            reason = skip_reason(name)
            if reason:
                out(f"  {name}: skipped: {reason}")
                results.append(Result("crash", f"{name} (skipped)", 0, 0, 0, 0.0, reason))
                continue
            for mode, loop, share in (("library", library_kills, library_share),
                                      ("server", server_kills, server_share)):
                started = time.monotonic()
                workdir = Path(tmp) / f"{name}-{mode}"
                workdir.mkdir()
                with backend(name, workdir) as target:
                    found, failed, retries = loop(target, share, seed)
                seconds = time.monotonic() - started
                label = f"{name}" + (" AOF always" if name == "redis" else "") + f" ({mode})"
                out(f"  {label}: {share} kills, {found.acked_messages} acked, "
                    f"{found.found_once} found once, {retries} retried, {seconds:.0f} s")
                results.append(Result(
                    "crash: kills", label, share, share - failed, failed, seconds,
                    f"seed {seed}; {retries} unanswered appends retried with the same ids"
                    + (f"; {found.problems[0]}" if found.problems else "")))
                results.append(Result(
                    "crash: acked writes", label, found.acked_messages, found.found_once,
                    found.acked_messages - found.found_once, 0.0,
                    f"{found.stored} messages stored; {len(found.problems)} problems"))
        if "redis" in backends and redis_available() is None:
            for policy in policies:
                results.append(redis_policy_loss(policy, 2 if quick else 5, seed,
                                                 Path(tmp)))
                out(f"  redis {policy}: {results[-1].detail}")
    return results
