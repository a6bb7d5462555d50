"""hostile: attacks on a real server while another tenant measures it (issue 17).

Each attack runs against `chathistory serve` (uvicorn, one process, API keys for two
tenants) on a loopback port, bounded in count and time. A time bound missed fails the
row here; in a test only when missed `common.GENEROUS` times over (`over_time`,
`Result.timing_only`): tests run on loaded machines. Meanwhile a probe, as the
*other* tenant, reads its session's tail and `/healthz` every 20 ms; a row reports
the probe's p99 and worst latency, its failures, and what the attack itself was
answered. Servers and databases that an attack kills or breaks are private to it
(a PostgreSQL cluster made with initdb, a redis-server, loop-mounted file systems),
and everything is removed afterwards.

Attacks (the issue's item numbers):
- trickle (3): 32 imports of one tenant that announce 100 MB, send one line, then
  nothing. Wanted: 2 are received (their coroutines only), the rest answered 429;
  the probe keeps p99 < 50 ms.
- big appends (11): two clients of one tenant post 9 MB appends back to back.
- unbroken text (issue 43, item 10): two clients of one tenant post 8 MiB of ``x``
  back to back while the other tenant appends 300 KB texts: each of those is
  answered, stored, and within ``UNBROKEN_LIMIT``.
- amplification, counter names (1, 2): 5 MB uploaded once and referenced by 100
  messages, read with ``format=`` (was a 666 MB answer); 200 made-up counter names of
  100 KB (each was cached for good). Wanted: 422s, server RSS within 100 MB.
- scan (11): a tenant with many sessions searches them (`q=`) back to back.
- store down (4, 10): PostgreSQL (SIGKILL of its postmaster) and Redis (SIGKILL)
  while a client appends: every answer during the outage is 503 with Retry-After in
  under 2 s, `/healthz` 200, `/readyz` 503; appends succeed again within 1 s of the
  database accepting connections; no acknowledged append is lost.
- disk full / read-only (10): SQLite on an 8 MB ext4 file system filled up (507
  naming the database; reads go on), then its files made immutable under the running
  server (503 naming the file, with Retry-After; reads go on).
- stalled disk (11): the SQLite file system frozen (fsfreeze) for 4 s: `/healthz`
  keeps answering at once.
Mounting needs root (CI runs as root); without it those rows are skipped.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .common import Result, over_time
from .procs import (
    RedisServer,
    ServerProcess,
    die_with_parent,
    free_port,
    postgres_reachable,
    redis_available,
    wait_until,
)

P99_LIMIT = 0.050
"""The other tenant's p99 during an attack (seconds)."""
PROBE_START_WAIT = 300.0
"""How long an attack waits for its probe's first read (a wait, not a bound)."""


def _probe_main(url: str, key: str, session_id: str, stop: Any, out: Any,
                measuring: Any) -> None:
    """The probe's loop, in a process of its own (so the harness's attack threads never
    hold the GIL it needs to measure): reads and /healthz until ``stop`` is set."""
    die_with_parent()
    latencies: list[float] = []
    health: list[float] = []
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {key}"}
    path = f"/v1/sessions/{session_id}/messages?tail=5"
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            for target, into in ((path, latencies), ("/healthz", health)):
                started = time.perf_counter()
                try:
                    status = client.get(target, headers=headers).status_code
                except httpx.HTTPError as exc:
                    status = 0
                    failures.append(f"{target}: {type(exc).__name__}")
                into.append(time.perf_counter() - started)
                if status != 200 and into is health:
                    failures.append(f"/healthz: {status}")
                elif status not in (200, 503):
                    failures.append(f"read: {status}")
            measuring.set()  # the attack may start
            stop.wait(0.02)
    out.send((latencies, health, failures))


@dataclass
class Probe:
    """Another tenant's reads and `/healthz`, every 20 ms, in a process of its own."""

    url: str
    key: str
    session_id: str
    latencies: list[float] = field(default_factory=list)
    health: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: Any = None
    _process: Any = None
    _pipe: Any = None

    def __enter__(self) -> Probe:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        started = context.Event()
        self._pipe, child = context.Pipe(duplex=False)
        self._process = context.Process(target=_probe_main, daemon=True, args=(
            self.url, self.key, self.session_id, self._stop, child, started))
        self._process.start()
        # until its first read and /healthz (the child imports for seconds on a loaded
        # machine: an attack then ran unmeasured, its probe at 0 reads)
        started.wait(PROBE_START_WAIT)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._pipe.poll(120):
            self.latencies, self.health, self.failures = self._pipe.recv()
        self._process.join(10)

    def p99(self) -> float:
        return _percentile(self.latencies, 0.99)

    def summary(self) -> str:
        return (f"probe p99 {self.p99() * 1000:.1f} ms, max "
                f"{max(self.latencies, default=0) * 1000:.0f} ms over {len(self.latencies)} "
                f"reads; /healthz max {max(self.health, default=0) * 1000:.0f} ms")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Served:
    server: ServerProcess
    keys: dict[str, str]
    probe_session: str

    @property
    def url(self) -> str:
        return self.server.url

    def headers(self, tenant: str = "attacker") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def probe(self) -> Probe:
        return Probe(self.url, self.keys["probe"], self.probe_session)


@contextlib.contextmanager
def served(store_url: str, workdir: Path, seed: Callable[[Any], None] | None = None
           ) -> Iterator[Served]:
    """A server over ``store_url`` with keys for tenants ``attacker`` and ``probe``
    (created in the store first, so the server requires keys); ``seed(store)`` fills
    the store before the server starts."""
    keys, probe_session = prepare_tenants(store_url, "hostile", seed)
    server = ServerProcess(store_url, workdir).wait_ready()
    try:
        yield Served(server, keys, probe_session)
    finally:
        server.stop()


def prepare_tenants(store_url: str, key_name: str, seed: Callable[[Any], None] | None = None
                    ) -> tuple[dict[str, str], str]:
    """In the store, before a server opens it: ``seed(store)``, API keys for tenants
    ``attacker`` and ``probe`` (so the server requires keys) and the probe's session of
    ten messages. Returns the keys by tenant and that session's id."""
    from chathistory import Message, open_store
    from chathistory.server import auth

    store = open_store(store_url)
    try:
        if seed is not None:
            seed(store)
        keys = {t: auth.create_key(store, t, key_name)[1] for t in ("attacker", "probe")}
        session = store.create_session(tenant="probe")
        store.append(session.id, [Message.user(f"probe {i}") for i in range(10)],
                     tenant="probe")
    finally:
        store.close()
    return keys, session.id


def _row(check: str, target: str, probe: Probe | None, problems: list[str], started: float,
         what: str, late: list[str] | None = None) -> Result:
    """A row: ``problems`` fail it anywhere; ``late`` (time bounds missed, ``over_time``)
    fail it in the harness only (``Result.timing_only``)."""
    late = list(late or [])
    if probe is not None:
        if not probe.latencies:
            problems.append("the other tenant's probe made no read")
        over_time("probe p99", probe.p99(), P99_LIMIT, problems, late)
        problems += sorted(set(probe.failures))[:3]
        what = f"{what}; {probe.summary()}"
    return timed_row(check, target, problems, late, started, what)


def timed_row(check: str, target: str, problems: list[str], late: list[str], started: float,
              what: str) -> Result:
    detail = what
    if problems or late:
        detail += "\n    " + "; ".join(problems + [f"late: {x}" for x in late])
    failed = bool(problems or late)
    return Result(check, target, 1, 0 if failed else 1, 1 if failed else 0,
                  time.monotonic() - started, detail,
                  timing_only=bool(late) and not problems)


# ---------------------------------------------------------------- attacks


def trickle(s: Served, target: str, hold: float) -> Result:
    started = time.monotonic()
    port = int(s.url.rsplit(":", 1)[1])
    head = (f"POST /v1/import HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {s.keys['attacker']}\r\n"
            "Content-Type: application/x-ndjson\r\nContent-Length: 100000000\r\n\r\n"
            '{"kind": "session"').encode()
    sockets: list[socket.socket] = []
    problems: list[str] = []
    with s.probe() as probe:
        for _ in range(32):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(head)
            sockets.append(sock)
        time.sleep(hold)
        refused = 0
        for sock in sockets:
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                if b" 429 " in sock.recv(200).split(b"\r\n")[0]:
                    refused += 1
            sock.close()
    if refused < 30:
        problems.append(f"{refused} of 32 trickling imports refused with 429 (wanted 30)")
    return _row("hostile: trickling imports", target, probe, problems, started,
                f"32 imports announcing 100 MB, {refused} answered 429, held {hold:g} s")


def big_appends(s: Served, target: str, seconds: float) -> Result:
    started = time.monotonic()
    text = "word " * (9 * 1024 * 1024 // 5)
    body = json.dumps({"messages": [{"role": "user", "parts": [{"type": "text",
                                                                "text": text}]}]}).encode()
    statuses: list[int] = []

    def client() -> None:
        with httpx.Client(base_url=s.url, timeout=60, headers=s.headers()) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                statuses.append(c.post(f"/v1/sessions/{sid}/messages", content=body, headers={
                    "Content-Type": "application/json"}).status_code)

    with s.probe() as probe:
        threads = [threading.Thread(target=client) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
    problems = [] if statuses else ["no append finished"]
    return _row("hostile: 9 MB appends", target, probe, problems, started,
                f"2 clients, {len(statuses)} appends of 9 MB ({sorted(set(statuses))})")


UNBROKEN_LIMIT = 0.5
"""The other tenant's slowest 300 KB append while one tenant posts 8 MiB of one letter
(seconds)."""


def unbroken_text(s: Served, target: str, seconds: float) -> Result:
    """Two clients of one tenant post appends of 8 MiB of ``x`` (no space: one piece for
    the pre-tokenizer, whose BPE fastokens counted in about 24 s) back to back, while
    the other tenant appends 300 KB texts (over ``tokens.OFFLOAD_CHARS``: counted in
    the counting process too) one after another, and the probe reads. Wanted: every
    append of both answered 200 and stored; the other tenant's slowest append quicker
    than the attacker's median (behind the long counts it waited as long as they took:
    10-22 s), and within ``UNBROKEN_LIMIT`` in the harness."""
    started = time.monotonic()
    body = json.dumps({"messages": [{"role": "user", "parts": [
        {"type": "text", "text": "x" * (8 * 1024 * 1024)}]}]}).encode()
    attacker: list[tuple[int, float]] = []
    stop = threading.Event()

    def attack() -> None:
        with httpx.Client(base_url=s.url, timeout=300, headers=s.headers()) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            while not stop.is_set():
                t0 = time.perf_counter()
                status = c.post(f"/v1/sessions/{sid}/messages", content=body, headers={
                    "Content-Type": "application/json"}).status_code
                attacker.append((status, time.perf_counter() - t0))

    other: list[tuple[int, float]] = []
    acknowledged: list[str] = []
    problems: list[str] = []
    late: list[str] = []
    text = "other words " * 25_000
    with httpx.Client(base_url=s.url, timeout=300, headers=s.headers("probe")) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        # the counting process starts at the first long text (seconds on a loaded
        # machine): started before the attack, which measures the waits behind it
        c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {"role": "user", "parts": [{"type": "text", "text": text}]}]}).raise_for_status()
    with s.probe() as probe:
        threads = [threading.Thread(target=attack, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the first long appends are under way
        with httpx.Client(base_url=s.url, timeout=300, headers=s.headers("probe")) as c:
            end = time.monotonic() + seconds
            while time.monotonic() < end or len(other) < 3:
                mid = str(uuid.uuid4())
                t0 = time.perf_counter()
                r = c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                    {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}]})
                other.append((r.status_code, time.perf_counter() - t0))
                if r.status_code == 200:
                    acknowledged.append(mid)
            stored = c.get(f"/v1/sessions/{sid}/messages", params={"start": 0}).json()
        stop.set()
        for t in threads:
            t.join(300)
    stored_ids = {m["id"] for m in stored.get("messages", [])}
    if {status for status, _ in other} != {200}:
        problems.append(f"the other tenant's appends answered {sorted({s for s, _ in other})}")
    if any(m not in stored_ids for m in acknowledged):
        problems.append("an acknowledged append of the other tenant is not stored")
    if not attacker or {status for status, _ in attacker} != {200}:
        problems.append(f"the long appends answered {sorted({s for s, _ in attacker})}")
    worst = max(t for _, t in other)
    mid_other = sorted(t for _, t in other)[len(other) // 2]
    mid_attacker = sorted(t for _, t in attacker)[len(attacker) // 2] if attacker else 0.0
    # queued behind the long counts, a short append waits as long as they take: the
    # other tenant's median append is then no quicker than the attacker's median (both
    # wait on the same niced counting process, on a machine of any speed or load). One
    # slow append of three (a pause of the machine) is a figure, not that fault.
    if attacker and mid_other >= mid_attacker:
        problems.append(f"the other tenant's median append ({mid_other:.2f} s) took as long "
                        f"as the attacker's median ({mid_attacker:.2f} s): queued behind it")
    elif attacker and worst >= mid_attacker:
        late.append(f"the other tenant's slowest append ({worst:.2f} s) took as long as the "
                    f"attacker's median ({mid_attacker:.2f} s)")
    if worst > UNBROKEN_LIMIT:  # the harness's figure (a loaded machine starves the
        # niced counting process for everyone: no multiple of it is a fault)
        late.append(f"the other tenant's slowest 300 KB append {worst * 1000:.0f} ms > "
                    f"{UNBROKEN_LIMIT * 1000:.0f} ms")
    return _row("hostile: 8 MiB without a space", target, probe, problems, started,
                f"{len(attacker)} appends of 8 MiB of x (median {mid_attacker:.2f} s); the "
                f"other tenant's {len(other)} appends of 300 KB: median "
                f"{mid_other * 1000:.0f} ms, max {worst * 1000:.0f} ms", late)


def seed_sessions(count: int) -> Callable[[Any], None]:
    """A seed of ``count`` sessions of tenant ``attacker`` (one SQLite transaction)."""

    def seed(store: Any) -> None:
        with store.atomic():
            for i in range(count):
                store.create_session(f"s{i:06d}", tenant="attacker", metadata={"n": i})

    return seed


def scan(s: Served, target: str, sessions: int, seconds: float) -> Result:
    """Two clients search (``q=``) the tenant's ``sessions`` sessions (seeded), back to
    back, for ``seconds`` (a search may take longer: its answer is not waited for)."""
    started = time.monotonic()
    done: list[int] = []
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=s.url, timeout=600, headers=s.headers()) as c:
            while not stop.is_set():
                try:
                    done.append(c.get("/v1/sessions", params={"q": "no such words",
                                                              "limit": 100}).status_code)
                except httpx.HTTPError:
                    return

    with s.probe() as probe:
        for _ in range(2):
            threading.Thread(target=client, daemon=True).start()
        time.sleep(seconds)
        stop.set()
    return _row("hostile: search scans", target, probe, [], started,
                f"{sessions} sessions, 2 clients, {len(done)} searches finished in "
                f"{seconds:g} s ({sorted(set(done))})")


def amplification(s: Served, target: str, seconds: float) -> Result:
    """5 MB uploaded once, 100 messages referencing it, then formatted reads (which
    inlined it 100 times: 666 MB answers) and counter names made up by the thousand
    (each was cached for good), in rounds for ``seconds`` (at least one): the server's
    memory stays put. (One round lasts about 0.3 s, 15 of the probe's reads, whose
    "p99" would then be their slowest; the rounds give it the samples of the other
    attacks.)"""
    import os as _os

    from .procs import rss_bytes

    started = time.monotonic()
    problems: list[str] = []
    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
    with (httpx.Client(base_url=s.url, timeout=60, headers=s.headers()) as c, s.probe() as probe):
        up = c.post("/v1/assets", params={"mime_type": "image/png"},
                    content=png + _os.urandom(5 * 1024 * 1024))
        attachment = up.json()
        sid = c.post("/v1/sessions", json={}).json()["id"]
        message = {"role": "user", "parts": [{"type": "text", "text": "look"},
                                             {"type": "image", "attachment": attachment}]}
        c.post(f"/v1/sessions/{sid}/messages", json={"messages": [message] * 1}
               ).raise_for_status()
        c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
            {**message, "parts": [{"type": "text", "text": f"look {i}"}, message["parts"][1]]}
            for i in range(99)]}).raise_for_status()
        rss_before = rss_bytes(s.server.pid)
        statuses: list[int] = []
        names = []
        until = time.monotonic() + seconds
        while True:  # rounds until ``seconds`` have passed, at least one
            for _ in range(10):
                r = c.get(f"/v1/sessions/{sid}/messages", params={"start": 0,
                                                                   "format": "openai_chat"})
                statuses.append(r.status_code)
                if len(r.content) > 50 * 1024 * 1024:
                    problems.append(f"a formatted read answered {len(r.content) >> 20} MB")
            for i in range(200):
                r = c.post(f"/v1/sessions/{sid}/window", json={
                    "max_tokens": 1000, "counter": f"gpt-4o-{uuid.uuid4()}" + "x" * 100_000})
                names.append(r.status_code)
                if i % 50 == 0:
                    c.get(f"/v1/sessions/{sid}/messages", params={
                        "max_tokens": 100, "counter": "gpt-4o-" + uuid.uuid4().hex * 1000})
            if time.monotonic() >= until:
                break
        grown = (rss_bytes(s.server.pid) - rss_before) / 2**20
    if set(statuses) != {422}:
        problems.append(f"formatted reads of 100 references answered {sorted(set(statuses))}")
    if set(names) != {422}:
        problems.append(f"made-up counter names answered {sorted(set(names))}")
    if grown > 100:
        problems.append(f"server RSS grew {grown:.0f} MB")
    return _row("hostile: amplification, counter names", target, probe, problems, started,
                f"{len(statuses)} formatted reads of 100 references to 5 MB: "
                f"{sorted(set(statuses))}; {len(names)} made-up counter names: "
                f"{sorted(set(names))}; server RSS {grown:+.0f} MB")


def store_down(s: Served, target: str, kill: Callable[[], None], restart: Callable[[], None],
               down_for: float) -> Result:
    """A client appends (as the probe tenant) through an outage; every answer is
    timed; acknowledged appends are counted back afterwards."""
    started = time.monotonic()
    problems: list[str] = []
    log: list[tuple[float, float, int, str]] = []  # (sent, seconds, status, retry-after)
    acknowledged: list[str] = []
    stop = threading.Event()
    session = s.probe_session

    def writer() -> None:
        with httpx.Client(base_url=s.url, timeout=30, headers=s.headers("probe")) as c:
            while not stop.is_set():
                mid = str(uuid.uuid4())
                sent = time.monotonic()
                try:
                    r = c.post(f"/v1/sessions/{session}/messages",
                               json={"messages": [{"id": mid, "role": "user", "parts": [
                                   {"type": "text", "text": "during the outage"}]}]})
                    status, retry = r.status_code, r.headers.get("retry-after", "")
                except httpx.HTTPError:
                    status, retry = 0, ""
                log.append((sent, time.monotonic() - sent, status, retry))
                if status in (200, 201):
                    acknowledged.append(mid)
                stop.wait(0.05)

    health: list[tuple[float, int, int]] = []  # (seconds, /healthz, /readyz)
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(0.5)
    kill()
    killed = time.monotonic()
    with httpx.Client(base_url=s.url, timeout=10) as c:
        while time.monotonic() < killed + down_for:
            t0 = time.monotonic()
            h = c.get("/healthz").status_code
            h_seconds = time.monotonic() - t0
            ready = c.get("/readyz").status_code
            health.append((h_seconds, h, ready))
            time.sleep(0.1)
    restart()
    back = time.monotonic()
    wait_until(lambda: any(sent > back and status in (200, 201)
                           for sent, _, status, _ in log), "appends after the restart", 20)
    first_ok = min(sent + took for sent, took, status, _ in log
                   if sent > back and status in (200, 201))
    stop.set()
    thread.join(30)
    during = [e for e in log if killed + 0.2 < e[0] < back]
    # a 503 with Retry-After, or (a request that waited for a connection while the
    # database came back) a success, each within 2 s
    late: list[str] = []
    bad = [e for e in during if e[2] not in (200, 201, 503) or (e[2] == 503 and not e[3])]
    if not during:
        problems.append("no request during the outage")
    if bad:
        problems.append(f"{len(bad)} of {len(during)} answers during the outage were not a "
                        f"503 with Retry-After or a success (e.g. {bad[0][2]} in "
                        f"{bad[0][1]:.1f} s)")
    over_time("the slowest answer during the outage", max((e[1] for e in during), default=0),
              2.0, problems, late)
    if any(h != 200 for _, h, _ in health):
        problems.append("/healthz did not answer 200 during the outage")
    over_time("the slowest /healthz during the outage", max((t for t, _, _ in health),
                                                            default=0), 0.5, problems, late)
    if not any(ready == 503 for _, _, ready in health):
        problems.append("/readyz never answered 503 during the outage")
    resumed = first_ok - back
    over_time("appends resumed after the store was back", resumed, 1.0, problems, late)
    from chathistory.server import auth  # noqa: F401  (the same package the server runs)

    with httpx.Client(base_url=s.url, timeout=30, headers=s.headers("probe")) as c:
        answer = c.get(f"/v1/sessions/{session}/messages", params={"start": 0})
    if answer.status_code != 200:
        problems.append(f"reading the session back: {answer.status_code} {answer.text[:200]}")
    stored = ({m["id"] for m in answer.json()["messages"]} if answer.status_code == 200
              else set())
    lost = [m for m in acknowledged if m not in stored]
    if lost:
        problems.append(f"{len(lost)} acknowledged appends lost")
    worst = max((took for _, took, _, _ in during), default=0.0)
    what = (f"{len(during)} answers while down (worst {worst:.2f} s), resumed "
            f"{resumed:.2f} s after the restart, {len(acknowledged)} acknowledged, "
            f"{len(lost)} lost")
    return timed_row("hostile: store down", target, problems, late, started, what)


# ---------------------------------------------------------------- private databases


class PrivatePostgres:
    """A PostgreSQL cluster of its own (initdb as the ``postgres`` user), to kill."""

    def __init__(self) -> None:
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bins or shutil.which("runuser") is None:
            raise RuntimeError("PostgreSQL server binaries or runuser not found")
        self.bin = bins[-1]
        # a directory the postgres user can reach (a temporary directory is root's only)
        self.dir = Path(tempfile.mkdtemp(prefix="hostile-pg-"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust",
                          "-U", "postgres", "--no-sync")

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                       capture_output=True, timeout=120)

    def start(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-w", "-l",
                          str(self.dir / "log"), "-o",
                          f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                          "-c fsync=off", "start")

    def kill(self) -> None:
        pid = int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 9)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), "postmaster gone", 10)
        with contextlib.suppress(OSError):  # the backends die with it (or soon after)
            subprocess.run(["pkill", "-9", "-u", "postgres", "-f", str(self.dir)], timeout=10)
        time.sleep(0.2)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m",
                              "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def mounted(kind: str, size_mb: int) -> Iterator[Path]:
    """A file system of its own: ``tmpfs`` or a loop-mounted ext4 image."""
    base = Path(tempfile.mkdtemp(prefix=f"hostile-{kind}-"))
    point = base / "mnt"
    point.mkdir()
    image = base / "image"
    try:
        if kind == "tmpfs":
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                            str(point)], check=True, capture_output=True, timeout=30)
        else:
            subprocess.run(["truncate", "-s", f"{size_mb}M", str(image)], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True,
                           capture_output=True, timeout=60)
            subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True,
                           capture_output=True, timeout=30)
        yield point
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["fsfreeze", "-u", str(point)], capture_output=True, timeout=10)
        with contextlib.suppress(Exception):
            subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def can_mount() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot mount the file systems these attacks break"
    try:
        with mounted("tmpfs", 1):
            pass
    except Exception as exc:
        return f"cannot mount a tmpfs here: {exc}"
    return None


def disk_full(workdir: Path) -> Result:
    started = time.monotonic()
    problems: list[str] = []
    with (mounted("ext4", 8) as point,
          served(f"sqlite:///{point}/full.db", workdir) as s,
          s.probe() as probe,
          httpx.Client(base_url=s.url, timeout=30, headers=s.headers()) as c):
        sid = c.post("/v1/sessions", json={}).json()["id"]
        filler = "x" * 200_000
        seen: list[int] = []
        acknowledged: list[str] = []
        for _ in range(60):
            mid = str(uuid.uuid4())
            r = c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                {"id": mid, "role": "user", "parts": [{"type": "text", "text": filler}]}]})
            seen.append(r.status_code)
            if r.status_code in (200, 201):
                acknowledged.append(mid)
            if r.status_code == 507:
                body = r.json()["error"]
                if "full.db" not in body["message"]:
                    problems.append(f"the 507 does not name the database: {body}")
                break
        if 507 not in seen:
            problems.append(f"no 507 while filling the disk ({sorted(set(seen))})")
        if any(code not in (200, 201, 507) for code in seen):
            problems.append(f"answers while filling: {sorted(set(seen))}")
        stored = {m["id"] for m in c.get(f"/v1/sessions/{sid}/messages",
                                         params={"start": 0}).json()["messages"]}
        if any(m not in stored for m in acknowledged):
            problems.append("an acknowledged append was lost")
        # the file made unwritable under the running server (immutable: root can't
        # write it either; the -shm file stays writable, SQLite maps it)
        files = [str(point / "full.db"), str(point / "full.db-wal")]
        subprocess.run(["chattr", "+i", *files], check=True, capture_output=True, timeout=30)
        try:
            r = c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                {"role": "user", "parts": [{"type": "text", "text": "read-only"}]}]})
            if r.status_code != 503 or "full.db" not in r.text or not r.headers.get(
                    "retry-after"):
                problems.append(f"a write to the unwritable file answered {r.status_code} "
                                f"{r.text[:200]}")
            reread = c.get(f"/v1/sessions/{sid}/messages", params={"tail": 1})
            if reread.status_code != 200:
                problems.append(f"a read of the unwritable file answered {reread.status_code}")
        finally:
            subprocess.run(["chattr", "-i", *files], capture_output=True, timeout=30)
    return _row("hostile: disk full, unwritable", "sqlite", probe, problems, started,
                f"{len(acknowledged)} appends acknowledged, then {seen[-1]}; unwritable "
                f"file: {r.status_code}")


def stalled_disk(workdir: Path, freeze: float) -> Result:
    started = time.monotonic()
    problems: list[str] = []
    with mounted("ext4", 64) as point, served(f"sqlite:///{point}/frozen.db", workdir) as s:
        writer_done = threading.Event()

        def writer() -> None:
            with httpx.Client(base_url=s.url, timeout=30, headers=s.headers()) as c:
                sid = c.post("/v1/sessions", json={}).json()["id"]
                while not writer_done.is_set():
                    c.post(f"/v1/sessions/{sid}/messages", json={"messages": [
                        {"role": "user", "parts": [{"type": "text", "text": "frozen"}]}]})

        thread = threading.Thread(target=writer, daemon=True)
        health: list[float] = []
        thread.start()
        time.sleep(0.3)
        subprocess.run(["fsfreeze", "-f", str(point)], check=True, timeout=30)
        try:
            with httpx.Client(base_url=s.url, timeout=10) as c:
                end = time.monotonic() + freeze
                while time.monotonic() < end:
                    t0 = time.monotonic()
                    if c.get("/healthz").status_code != 200:
                        problems.append("/healthz failed during the freeze")
                    health.append(time.monotonic() - t0)
                    time.sleep(0.05)
        finally:
            subprocess.run(["fsfreeze", "-u", str(point)], check=True, timeout=30)
        writer_done.set()
        thread.join(30)
    worst = max(health, default=0.0)
    late: list[str] = []
    over_time("/healthz during the freeze", worst, 0.1, problems, late)
    return timed_row("hostile: stalled disk", "sqlite", problems, late, started,
                     f"fsfreeze {freeze:g} s; /healthz max {worst * 1000:.0f} ms over "
                     f"{len(health)} requests")


def skipped(check: str, target: str, why: str) -> Result:
    return Result(check, target, 0, 0, 0, 0.0, f"skipped: {why}", informational=True)


def run(quick: bool = False, only: set[tuple[str, str]] | None = None,
        skip: set[tuple[str, str]] | None = None) -> list[Result]:
    """Every attack (``only``: those of these (check, target) pairs; ``skip``: not
    those)."""
    results: list[Result] = []
    hold = 3.0 if quick else 10.0
    seconds = 3.0 if quick else 10.0

    def wanted(check: str, target: str) -> bool:
        pair = (f"hostile: {check}", target)
        return (only is None or pair in only) and pair not in (skip or set())

    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        workdir = Path(tmp)
        sessions = 5_000 if quick else 50_000
        attacks: dict[str, Callable[[Served], Result]] = {
            "trickling imports": lambda s: trickle(s, "sqlite", hold),
            "9 MB appends": lambda s: big_appends(s, "sqlite", seconds),
            "8 MiB without a space": lambda s: unbroken_text(s, "sqlite", seconds),
            "amplification, counter names": lambda s: amplification(s, "sqlite", seconds),
            "search scans": lambda s: scan(s, "sqlite", sessions, seconds)}
        sqlite = [attack for name, attack in attacks.items() if wanted(name, "sqlite")]
        if sqlite:
            with served(f"sqlite:///{workdir}/h.db", workdir, seed_sessions(sessions)) as s:
                results.extend(attack(s) for attack in sqlite)
        why = postgres_reachable()
        if not wanted("store down", "postgres"):
            pass
        elif why is None and os.geteuid() == 0:
            pg = PrivatePostgres()
            pg.start()
            try:
                with served(pg.url, workdir) as s:
                    results.append(store_down(s, "postgres", pg.kill, pg.start,
                                              2.0 if quick else 5.0))
            finally:
                pg.stop()
        else:
            results.append(skipped("hostile: store down", "postgres",
                                   why or "not root: cannot run a private PostgreSQL"))
        why = redis_available()
        if not wanted("store down", "redis"):
            pass
        elif why is None:
            redis = RedisServer(workdir / "redis", "--appendonly", "yes", "--appendfsync",
                                "always").start()
            try:
                with served(redis.url, workdir) as s:
                    results.append(store_down(s, "redis", redis.kill, redis.start,
                                              2.0 if quick else 5.0))
            finally:
                redis.stop()
        else:
            results.append(skipped("hostile: store down", "redis", why))
        why = can_mount()
        if not (wanted("disk full, unwritable", "sqlite") or wanted("stalled disk", "sqlite")):
            pass
        elif why is None:
            if wanted("disk full, unwritable", "sqlite"):
                results.append(disk_full(workdir))
            if wanted("stalled disk", "sqlite"):
                results.append(stalled_disk(workdir, 4.0))
        else:
            results.append(skipped("hostile: disk full, unwritable", "sqlite", why))
            results.append(skipped("hostile: stalled disk", "sqlite", why))
    return results
