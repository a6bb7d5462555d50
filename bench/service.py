"""Service benchmark: `chathistory serve` under load, on loopback.

The server runs as it would in production (`chathistory.server.run`: uvicorn,
API keys required, JSON access log, the store's default o200k_base counter),
in its own process; the load generator runs in other processes: keep-alive
`http.client` connections, one per simulated client, each on its own session.

Cells: SQLite file and PostgreSQL (127.0.0.1:5432, db `test`, a schema of its
own, dropped after) x {append, window read} x {1, 16, 64} concurrent clients.

- append: `POST /v1/sessions/{id}/messages` with one message (~40 words, a
  fresh id): one append = one message, acknowledged after commit.
- window read: `GET /v1/sessions/{id}/messages?max_tokens=2000` on a session of
  200 messages (~10,000 tokens): the newest messages within 2,000 tokens.

Reported per cell: requests/s, p50 and p99 latency (client side: from sending
the request to the last byte of the answer), errors, and the server's RSS
(every process of it) at the start, at its peak and at the end.

The floor (``floor_app``): beside each cell, the same load on a minimal Starlette
app under uvicorn with the same workers, whose two routes run the statements the
store runs for that request through the same driver (psycopg's pool / sqlite3, in
Starlette's thread pool), with a plain JSON body and no auth, log, validation,
limits or error bodies. It writes and reads the same rows (checked: its window
answer is ours byte for byte; every acknowledged append of either is a stored
message), so ours/floor is what chathistory's Python costs on top of the database
work. The PostgreSQL floor writes each row's words as the store does (the same GIN
entries); the SQLite floor keeps no search index (no pending list, no FTS5 indexing),
so SQLite's ours/floor includes its index. The cells take turns: ours, then the floor,
for each row; a floor whose requests failed is said so, not divided by.

Targets (service issue), 2 cores, PostgreSQL, 16 clients: >= 2,000 appends/s and
>= 5,000 window reads/s, p99 < 50 ms. `--soak SECONDS` runs appends at 16
clients for that long on PostgreSQL (SQLite when unreachable) and reports the
server's RSS every 10% of the run (the issue's memory-flatness check: --soak 600).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PG_URL = os.environ.get("CHATHISTORY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
APP_NAME = "chathistory-bench"
FLOOR_APP_NAME = "chathistory-bench-floor"
FLOOR_ENV = "CHATHISTORY_BENCH_FLOOR"
TENANT = "bench"
CLIENTS = (1, 16, 64)
WINDOW_TOKENS = 2000
HISTORY = 200  # messages in a window-read session
TARGET_CLIENTS = 16
TARGETS = {"append": 2000.0, "window": 5000.0}
TARGET_P99_MS = 50.0
_SENTENCE = ("the model reads every message of the conversation and answers with care while "
             "keeping the tool calls next to their results so that nothing is lost or split "
             "across the window boundary when the history grows long")
WORDS = _SENTENCE.split(" ")


# ---------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) of ``pids`` and their descendants."""
    total = 0.0
    pending = list(pids)
    while pending:
        current = pending.pop()
        total += _cpu_seconds(current)
        pending.extend(_children(current))
    return total


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
        pending.extend(_children(current))
    return total


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the benchmark dies, never outlives it."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """`chathistory.server.run` in a subprocess, with a key of tenant ``bench``."""

    name = "chathistory"
    app_name = APP_NAME

    def __init__(self, store_url: str, workers: int) -> None:
        from chathistory.server import auth
        from chathistory.stores import open_store

        self.key: str | None = None
        if not store_url.startswith("memory"):  # a memory store lives in the server only
            store = open_store(store_url)
            try:
                _, self.key = auth.create_key(store, TENANT, "service benchmark")
            finally:
                store.close()
        self.assets = tempfile.mkdtemp(prefix="chathistory-bench-assets-")
        self.store_url = store_url
        self.port = _free_port()
        self._start(f"from chathistory.server import run; run({store_url!r}, '127.0.0.1', "
                     f"{self.port}, {self.assets!r}, require_keys={self.key is not None}, "
                     f"workers={workers})", "/readyz")

    def _start(self, script: str, ready: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                     cwd=Path(__file__).resolve().parent.parent,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", ready)
                if conn.getresponse().status == 200:
                    conn.close()
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the {self.name} server did not start")
            time.sleep(0.1)

    def rss(self) -> int:
        return rss_bytes(self.proc.pid)

    def cpu(self) -> float:
        return tree_cpu_seconds([self.proc.pid])

    def db_cpu(self) -> float | None:
        """CPU time of the PostgreSQL backends serving this server (by application_name)."""
        if not self.store_url.startswith("postgres"):
            return None
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            pids = [row[0] for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (self.app_name,))]
        return sum(_cpu_seconds(pid) for pid in pids)

    def analyze(self) -> None:
        """PostgreSQL: ANALYZE the schema's tables, as autovacuum does in a running
        deployment (a fresh schema has no statistics; PostgreSQL may then find a session
        through another (tenant, ...) index and filter the tenant's sessions)."""
        if not self.store_url.startswith("postgres"):
            return
        import psycopg

        schema = dict(p.split("=", 1) for p in self.store_url.split("?", 1)[1].split("&"))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"ANALYZE {schema['schema']}.sessions, {schema['schema']}.messages, "
                         f"{schema['schema']}.message_ids")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- the floor


class Floor(Server):
    """``floor_app`` under uvicorn in a subprocess, on the store of ``ours`` (whose
    server prepares the sessions): the same workers, no access log."""

    name = "floor"
    app_name = FLOOR_APP_NAME

    def __init__(self, ours: Server, workers: int) -> None:
        self.key, self.assets, self.store_url = ours.key, ours.assets, ours.store_url
        self.port = _free_port()
        url = self.store_url.replace(f"application_name={APP_NAME}",
                                     f"application_name={FLOOR_APP_NAME}")
        self._start("import uvicorn; uvicorn.run('bench.service:floor_app', factory=True, "
                    f"host='127.0.0.1', port={self.port}, workers={workers}, "
                    "access_log=False, log_level='warning')", "/floor/ready", {FLOOR_ENV: url})


def floor_app() -> Any:
    """The floor: a minimal Starlette app doing a cell's database work and nothing
    else. ``POST /v1/sessions/{id}/messages`` stores the messages of a plain JSON body
    (the bench's: user or assistant text) and ``GET ...?max_tokens=N`` answers the
    newest messages within N tokens, by the statements the store runs for them, in
    Starlette's thread pool. The session is tenant ``bench``'s; no key is checked."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    url = os.environ[FLOOR_ENV]
    db: _PostgresFloor | _SQLiteFloor = (
        _PostgresFloor(url) if url.startswith("postgres") else _SQLiteFloor(url))

    async def append(request: Request) -> Response:
        body = await request.json()
        version = await run_in_threadpool(db.append, request.path_params["session_id"],
                                          body["messages"])
        return Response(b'{"version":%d}' % version, media_type="application/json")

    async def window(request: Request) -> Response:
        found = await run_in_threadpool(db.window, request.path_params["session_id"],
                                        int(request.query_params["max_tokens"]))
        return Response(b'{"messages":' + found + b"}", media_type="application/json")

    async def ready(request: Request) -> Response:
        return Response(b"ok")

    path = "/v1/sessions/{session_id}/messages"
    return Starlette(routes=[Route(path, append, methods=["POST"]),
                             Route(path, window, methods=["GET"]),
                             Route("/floor/ready", ready)])


class _FloorStore:
    """What both floors share: the counter, the session as this process last wrote
    it (as the stores keep it), and the rows of an append and of a window."""

    def __init__(self) -> None:
        from chathistory.tokens import get_counter

        self.counter = get_counter("o200k_base")  # the store's default counter
        self.written: dict[str, dict[str, Any]] = {}

    def rows(self, session: dict[str, Any], messages: list[dict[str, Any]]
             ) -> list[tuple[Any, ...]]:
        """(seq, id, role, data, tokens, cum_before, cut_ok, orphan, status, version)
        of each message, and ``session`` moved to the new version: the store's counts
        (o200k_base, as ``count_message`` counts a text message), each message a group."""
        count = self.counter.count_text
        version = session.get("version", 0) + 1
        seq, total = session.get("message_count", 0), session.get("token_count", 0)
        out = []
        for m in messages:
            text = "".join(part["text"] for part in m["parts"])
            tokens = 3 + count(m["role"]) + count(text)
            out.append((seq, m["id"], m["role"], json.dumps(m).encode(), tokens, total,
                        True, False, 1, version))
            seq, total = seq + 1, total + tokens
        session.update(version=version, message_count=seq, token_count=total,
                       updated_at=datetime.now(UTC).isoformat(timespec="microseconds"))
        return out

    def window(self, rows: list[tuple[Any, ...]], max_tokens: int) -> bytes:
        """The newest whole groups of ``rows`` (ascending) within ``max_tokens``."""
        budget = max_tokens - self.counter.priming_tokens
        chosen: list[bytes] = []
        group: list[bytes] = []
        cost, usable = 0, True
        for _, _, _, data, tokens, _, cut_ok, orphan, status, _ in reversed(rows):
            group.append(data)
            cost += tokens
            usable = usable and not orphan and status == 1
            if not cut_ok:
                continue
            if usable:
                if cost > budget:
                    break
                budget -= cost
                chosen.extend(group)
            group, cost, usable = [], 0, True
        return b"[" + b",".join(reversed(chosen)) + b"]"


class _PostgresFloor(_FloorStore):
    """PostgresStore's statements (``Queries``): an append is the ``append_statement``
    the store picks for it (one row as plain parameters, no clear, kept or calls part),
    planned on the session as this process last wrote it (``get_session`` the first
    time) and run with psycopg's ``execute``; a window read is ``window_probe``."""

    def __init__(self, url: str) -> None:
        from psycopg_pool import ConnectionPool

        from chathistory.stores.postgres.queries import Queries

        super().__init__()
        base, _, query = url.partition("?")
        options = dict(p.split("=", 1) for p in query.split("&"))
        self.q = Queries(options.pop("schema"))
        conninfo = base + "?" + "&".join(f"{k}={v}" for k, v in options.items())
        self.pool: Any = ConnectionPool(conninfo, min_size=1, max_size=10,
                                        kwargs={"autocommit": True}, open=True)

    def append(self, session_id: str, messages: list[dict[str, Any]]) -> int:
        from chathistory.stores.model import make_row
        from chathistory.stores.postgres.queries import rows_params
        from chathistory.stores.postgres.search import row_words

        with self.pool.connection() as conn:
            session = self.written.pop(session_id, None)
            if session is None:
                (payload,) = conn.execute(self.q.get_session, (TENANT, session_id)).fetchone()
                session = json.loads(payload)
            expected = session.get("version", 0)
            rows = self.rows(session, messages)
            # the rows' words too (the store's own cut: the same GIN entries written)
            params, _one = rows_params([make_row(r) for r in rows], {},
                                       [row_words(r[3]) for r in rows])
            statement = self.q.append_statement(len(rows) == 1, False, False, False)
            (stored,) = conn.execute(statement.statement, {
                "tenant": TENANT, "session_id": session_id, "version": session["version"],
                "expires_at": None, "updated": session["updated_at"],
                "payload": json.dumps(session), "expected": expected,
                "created": datetime.fromisoformat(session["created_at"]).isoformat(),
                "clear_lo": 0, "clear_hi": 0, **params}).fetchone()
        if not stored:
            raise RuntimeError("the session moved: the floor is for one writer per session")
        self.written[session_id] = session
        return int(session["version"])

    def window(self, session_id: str, max_tokens: int) -> bytes:  # type: ignore[override]
        params = {"tenant": TENANT, "session_id": session_id,
                  "budget": max_tokens - self.counter.priming_tokens}
        with self.pool.connection() as conn:
            found = conn.cursor(binary=True).execute(self.q.window_probe, params).fetchall()
        return super().window([r[1:] for r in found if r[1] is not None], max_tokens)


class _SQLiteFloor(_FloorStore):
    """SQLiteStore's statements: an append is BEGIN IMMEDIATE, the session, the id's
    idempotency check, the row, the session bumped, COMMIT on the one write
    connection; a window read is the session, ``SEQ_AT_CUM`` and ``ROWS`` on a read
    connection of the thread's own."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.path = url.split("://", 1)[1][1:]
        self.lock = threading.Lock()
        self.local = threading.local()
        self.conn = self._connect()
        self.conn.execute("PRAGMA synchronous=NORMAL")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                               check_same_thread=False, cached_statements=256)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def append(self, session_id: str, messages: list[dict[str, Any]]) -> int:
        from chathistory.stores import sqlite as q

        key = (TENANT, session_id)
        with self.lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                session = json.loads(conn.execute(q._GET_SESSION, key).fetchone()[0])
                for m in messages:
                    if conn.execute(q._EXISTING_ONE, (*key, m["id"])).fetchone():
                        raise RuntimeError("the floor stores fresh ids only")
                for row in self.rows(session, messages):
                    conn.execute(q._INSERT_MESSAGE, (*key, *row))
                conn.execute(q._BUMP_SESSION, (session["version"], session["updated_at"],
                                               json.dumps(session), *key))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return int(session["version"])

    def window(self, session_id: str, max_tokens: int) -> bytes:  # type: ignore[override]
        from chathistory.stores import sqlite as q

        reader = getattr(self.local, "reader", None)
        if reader is None:
            reader = self.local.reader = self._connect()
        key = (TENANT, session_id)
        session = json.loads(reader.execute(q._GET_SESSION, key).fetchone()[0])
        n = session.get("message_count", 0)
        cum = session.get("token_count", 0) - (max_tokens - self.counter.priming_tokens)
        first = 0
        if cum > 0:  # as SQLiteStore._b_seq_at_cum for sessions shorter than its scan
            top, below, lowest = reader.execute(q.SEQ_AT_CUM, (*key, cum, q._SCAN)).fetchone()
            first = lowest if below is None else below + 1 if below < top else n
        rows = reader.execute(q.ROWS, (*key, max(0, min(first - 1, n - 1)), n)).fetchall()
        return super().window(rows, max_tokens)


# ---------------------------------------------------------------- the load generator


def _text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40))


def _message(i: int) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "role": "user" if i % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": _text(i)}]}


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
             headers: dict[str, str]) -> int:
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    return response.status


class _Client:
    """A keep-alive HTTP/1.1 connection that sends prepared request bytes and reads
    the status and body (``Content-Length`` answers only, as the server sends them).
    A tenth of ``http.client``'s CPU per request, which matters here: the load
    generator shares the machine's two cores with the server and the database."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, b""
        return sock

    def request(self, data: bytes) -> int:
        sock = self.sock or self._connect()
        sock.sendall(data)
        buffer = self.buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buffer += chunk
        head = buffer[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise ConnectionError("an answer without Content-Length")
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + 17:stop if stop > 0 else len(head)])
        total = end + 4 + length
        while len(buffer) < total:
            chunk = sock.recv(max(65536, total - len(buffer)))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buffer += chunk
        self.buffer = buffer[total:]
        return int(head[9:12])

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""


def _prepared(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1",
             *(f"{k}: {v}" for k, v in headers.items())]
    if method != "GET":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _client_process(port: int, key: str | None, op: str, sessions: list[str], duration: float,
                    start_at: float, results: Any) -> None:
    """Clients (threads) of one load process; each sends requests on its own
    keep-alive connection, to its own session, until the time is up."""
    headers = {**_auth(key), "Content-Type": "application/json", "Connection": "keep-alive"}
    # message bodies from a few templates: a fresh id costs the generator ~2 us
    templates = [json.dumps({"messages": [{**_message(i), "id": "@ID@"}]}).encode().split(
        b"@ID@") for i in range(16)]
    out: list[tuple[int, int, list[float]]] = [(0, 0, []) for _ in sessions]

    def client(k: int) -> None:
        conn = _Client(port)
        path = (f"/v1/sessions/{sessions[k]}/messages" if op == "append" else
                f"/v1/sessions/{sessions[k]}/messages?max_tokens={WINDOW_TOKENS}")
        get = _prepared("GET", path, headers)
        latencies: list[float] = []
        errors = done = 0
        while time.time() < start_at:
            time.sleep(0.001)
        end = start_at + duration
        i = 0
        while True:
            t0 = time.perf_counter()
            if time.time() >= end:
                break
            try:
                if op == "append":
                    head, tail = templates[i % len(templates)]
                    body = head + str(uuid.uuid4()).encode() + tail
                    status = conn.request(_prepared("POST", path, headers, body))
                else:
                    status = conn.request(get)
            except (OSError, ValueError):
                conn.close()
                status = 0
            latencies.append(time.perf_counter() - t0)
            if status == 200:
                done += 1
            else:
                errors += 1
            i += 1
        conn.close()
        out[k] = (done, errors, latencies)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(sessions))]
    cpu = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put((out, time.process_time() - cpu))


def _prepare_sessions(port: int, key: str | None, count: int, history: int) -> list[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {**_auth(key), "Content-Type": "application/json"}
    ids = []
    for _ in range(count):
        sid = f"bench-{uuid.uuid4().hex[:12]}"
        assert _request(conn, "POST", "/v1/sessions", json.dumps({"id": sid}).encode(),
                        headers) == 201
        for start in range(0, history, 100):
            batch = [_message(i) for i in range(start, min(history, start + 100))]
            assert _request(conn, "POST", f"/v1/sessions/{sid}/messages",
                            json.dumps({"messages": batch}).encode(), headers) == 200
        ids.append(sid)
    conn.close()
    return ids


def _stored_messages(port: int, key: str | None, sessions: list[str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    total = 0
    for sid in sessions:
        conn.request("GET", f"/v1/sessions/{sid}", headers=_auth(key))
        response = conn.getresponse()
        assert response.status == 200
        total += json.loads(response.read()).get("message_count", 0)
    conn.close()
    return total


def _same_window(ours: Server, floor: Server) -> None:
    """The floor's window answer is ours, byte for byte (the same rows read)."""
    (sid,) = _prepare_sessions(ours.port, ours.key, 1, HISTORY)
    answers = []
    for server in (ours, floor):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request("GET", f"/v1/sessions/{sid}/messages?max_tokens={WINDOW_TOKENS}",
                     headers=_auth(ours.key))
        response = conn.getresponse()
        answers.append((response.status, response.read()))
        conn.close()
    if answers[0] != answers[1] or answers[0][0] != 200:
        raise RuntimeError(f"the floor's window differs from ours: {answers[1][:200]!r}")


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_cell(server: Server, op: str, clients: int, duration: float, processes: int,
             sample: Callable[[], None] | None = None, via: Server | None = None
             ) -> dict[str, Any]:
    """One cell on ``server``, on sessions that ``via`` (default: ``server``) made."""
    maker = via or server
    sessions = _prepare_sessions(maker.port, maker.key, clients,
                                 HISTORY if op == "window" else 0)
    server.analyze()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    nproc = max(1, min(processes, clients))
    shares = [sessions[i::nproc] for i in range(nproc)]
    start_at = time.time() + 1.5 + 0.3 * nproc  # after every process has started
    procs = [ctx.Process(target=_client_process, args=(server.port, server.key, op, share,
                                                       duration, start_at, results))
             for share in shares]
    rss_start = server.rss()
    for p in procs:
        p.start()
    rss_peak = rss_start
    while time.time() < start_at:
        time.sleep(0.01)
    cpu_start, db_start = server.cpu(), server.db_cpu()
    while time.time() < start_at + duration:
        time.sleep(0.25)
        rss_peak = max(rss_peak, server.rss())
        if sample is not None:
            sample()
    cpu_used = server.cpu() - cpu_start
    db_end = server.db_cpu()
    db_used = None if db_start is None or db_end is None else db_end - db_start
    answers = [results.get(timeout=120) for _ in procs]
    collected = [part for part, _ in answers]
    client_cpu = sum(cpu for _, cpu in answers)
    for p in procs:
        p.join(30)
    rss_end = server.rss()
    done = sum(d for part in collected for d, _, _ in part)
    errors = sum(e for part in collected for _, e, _ in part)
    latencies = sorted(x for part in collected for _, _, lat in part for x in lat)
    if op == "append":  # every acknowledged append is a stored message, no more
        stored = _stored_messages(maker.port, maker.key, sessions)
        if stored != done:
            raise RuntimeError(f"{server.name}: {done} appends acknowledged, {stored} stored")
    return {
        "op": op, "clients": clients, "seconds": duration, "requests": done,
        "errors": errors, "per_second": done / duration,
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "rss_start_mb": rss_start / 2**20, "rss_peak_mb": rss_peak / 2**20,
        "rss_end_mb": rss_end / 2**20,
        # CPU per request: server (every process), load generator, database backends
        "server_cpu_ms": 1000 * cpu_used / max(done, 1),
        "client_cpu_ms": 1000 * client_cpu / max(done, 1),
        "db_cpu_ms": None if db_used is None else 1000 * db_used / max(done, 1),
    }


# ---------------------------------------------------------------- stores


def _stores(tmp: str) -> list[tuple[str, str, Callable[[], None]]]:
    """(name, URL, cleanup) of the stores to measure; PostgreSQL when reachable."""
    out: list[tuple[str, str, Callable[[], None]]] = [
        ("memory", "memory://", lambda: None),  # the HTTP layer alone, for comparison
        ("sqlite", f"sqlite:///{tmp}/bench.db", lambda: None)]
    try:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            row = conn.execute("SHOW autovacuum").fetchone()
        if row is not None and row[0] == "off":
            print("note: this PostgreSQL runs with autovacuum off: every append leaves a dead "
                  "session row and index entries that nothing cleans up, within a run and "
                  "across runs (a deployment's autovacuum would); numbers fall as they pile up")

        def drop() -> None:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

        sep = "&" if "?" in PG_URL else "?"
        out.append(("postgres", f"{PG_URL}{sep}schema={schema}&application_name={APP_NAME}",
                     drop))
    except Exception as exc:  # no server here: measure SQLite only, and say so
        print(f"PostgreSQL unreachable ({exc}); measuring SQLite only")
    return out


def run(quick: bool = False, duration: float | None = None, soak: float | None = None,
        workers: int = 1, clients: tuple[int, ...] = CLIENTS, processes: int = 2,
        stores: tuple[str, ...] = ("sqlite", "postgres"),
        out: Callable[[str], None] = print) -> dict[str, Any]:
    from .foundation import environment

    seconds = duration if duration is not None else (3.0 if quick else 10.0)
    env = environment()
    out(f"chathistory service benchmark: {workers} uvicorn worker(s), {seconds:g} s per cell, "
        f"load from {processes} process(es) on the same {os.cpu_count()} cpus")
    results: dict[str, Any] = {"environment": env, "workers": workers, "seconds": seconds,
                               "cells": [], "targets": {**TARGETS, "p99_ms": TARGET_P99_MS}}
    with tempfile.TemporaryDirectory(prefix="chathistory-bench-") as tmp:
        available = [s for s in _stores(tmp) if s[0] in stores]
        if soak:
            name, url, cleanup = available[-1]
            results["soak"] = _soak(name, url, workers, soak, processes, out)
            cleanup()
            return results
        for name, url, cleanup in available:
            servers: list[Server] = []
            try:
                servers.append(Server(url, workers))
                if name != "memory":  # a memory store lives in our server only
                    servers.append(Floor(servers[0], workers))
                for server in servers:  # warm-up (pools fill), not reported
                    run_cell(server, "append", 4, 2.0, 1, via=servers[0])
                if len(servers) > 1:
                    _same_window(*servers)
                for op in ("append", "window"):
                    for n in clients:
                        for server in servers:  # ours, then the floor
                            cell = run_cell(server, op, n, seconds, processes, via=servers[0])
                            cell["store"], cell["server"] = name, server.name
                            results["cells"].append(cell)
                            out(f"  {name:8} {server.name:11} {op:6} {n:3} clients: "
                                f"{cell['per_second']:8.0f}/s  p50 {cell['p50_ms']:6.1f} ms  "
                                f"p99 {cell['p99_ms']:6.1f} ms  errors {cell['errors']}  "
                                f"server CPU {cell['server_cpu_ms']:.3f} ms/req")
            finally:
                for server in reversed(servers):
                    server.stop()
                cleanup()
    _print(results, out)
    return results


def _soak(name: str, url: str, workers: int, seconds: float, processes: int,
          out: Callable[[str], None]) -> dict[str, Any]:
    out(f"soak: appends from {TARGET_CLIENTS} clients on {name} for {seconds:g} s")
    server = Server(url, workers)
    run_cell(server, "append", 4, 2.0, 1)  # warm-up, not reported
    samples: list[tuple[float, float]] = []
    started = time.time()
    step = max(1.0, seconds / 10)
    last = [0.0]

    def sample() -> None:
        now = time.time() - started
        if now - last[0] >= step:
            last[0] = now
            samples.append((round(now, 1), server.rss() / 2**20))
            out(f"  t={now:6.0f} s  server RSS {samples[-1][1]:7.1f} MB")

    try:
        cell = run_cell(server, "append", TARGET_CLIENTS, seconds, processes, sample)
    finally:
        server.stop()
    cell["store"] = name
    cell["rss_samples_mb"] = samples
    after_warmup = [mb for t, mb in samples if t >= seconds * 0.2] or [cell["rss_end_mb"]]
    cell["rss_growth_after_warmup_mb"] = after_warmup[-1] - after_warmup[0]
    out(f"  {cell['per_second']:.0f} appends/s, p99 {cell['p99_ms']:.1f} ms, RSS "
        f"{cell['rss_start_mb']:.0f} -> {cell['rss_end_mb']:.0f} MB (after warm-up: "
        f"{cell['rss_growth_after_warmup_mb']:+.1f} MB)")
    return cell


def _print(results: dict[str, Any], out: Callable[[str], None]) -> None:
    from .foundation import _verdict, print_table

    out("")
    out(f"requests/s and client-side latency, {results['workers']} worker(s), "
        f"{results['seconds']:g} s per cell")
    rows = []
    for c in results["cells"]:
        verdict: bool | None = None
        ours = c.get("server", "chathistory") == "chathistory"
        if ours and c["store"] == "postgres" and c["clients"] == TARGET_CLIENTS:
            verdict = c["per_second"] >= TARGETS[c["op"]] and c["p99_ms"] < TARGET_P99_MS
        db = "-" if c["db_cpu_ms"] is None else f"{c['db_cpu_ms']:.2f}"
        rows.append([c["store"], c.get("server", "chathistory"), c["op"], str(c["clients"]),
                     f"{c['per_second']:,.0f}", f"{c['p50_ms']:.1f}", f"{c['p99_ms']:.1f}",
                     str(c["errors"]),
                     f"{c['server_cpu_ms']:.3f}/{c['client_cpu_ms']:.3f}/{db}",
                     f"{c['rss_start_mb']:.0f}/{c['rss_peak_mb']:.0f}/{c['rss_end_mb']:.0f}",
                     _verdict(verdict) if ours else ""])
    print_table(["store", "server", "op", "clients", "req/s", "p50 ms", "p99 ms", "errors",
                 "CPU ms/req server/load/db", "RSS MB start/peak/end", "target"], rows, out)
    out(f"targets (postgres, {TARGET_CLIENTS} clients): >= {TARGETS['append']:,.0f} appends/s, "
        f">= {TARGETS['window']:,.0f} window reads/s, p99 < {TARGET_P99_MS:g} ms")
    ratios = []
    cells = {(c["store"], c.get("server"), c["op"], c["clients"]): c for c in results["cells"]}
    for (store, server, op, clients), ours in cells.items():
        floor = cells.get((store, "floor", op, clients))
        if server != "chathistory" or floor is None:
            continue
        if floor["errors"] or not floor["per_second"]:
            ratios.append([store, op, str(clients), "floor failed", "-", "-"])
            continue
        ratios.append([store, op, str(clients),
                       f"{ours['per_second'] / max(floor['per_second'], 1e-9):.2f}",
                       f"{ours['server_cpu_ms'] / max(floor['server_cpu_ms'], 1e-9):.2f}",
                       f"{ours['server_cpu_ms'] - floor['server_cpu_ms']:+.3f}"])
    if ratios:
        out("")
        out("chathistory against the floor (a minimal Starlette route doing the same SQL; "
            "req/s < 1 and CPU > 1: behind)")
        print_table(["store", "op", "clients", "req/s ours/floor", "server CPU ours/floor",
                     "server CPU ms/req ours - floor"], ratios, out)
