"""Concurrency: many processes appending to ONE session, (a) through two
`chathistory serve` processes over one PostgreSQL schema (clients alternate
between them: no per-process state) and (b) directly through the library.

Three kinds of client, all at once:

- retrying: every third batch is sent again with the same ids (a lost answer;
  over HTTP to the other server), every fifth twice at the same moment (a retry
  racing the original); every answer must name the version that stored it.
- If-Match (every fourth client): reads the version, appends with `If-Match` /
  `expected_version`; a 200 must be exactly that version + 1, a lost race a
  412 (or 409) and nothing stored; every fourth attempt sends a stale version
  on purpose, which must be refused.

Then a fresh store checks the session (`verify.check_session`): every
acknowledged id once, nothing refused stored, positions 0..n-1, one version
per append in position order, each client's batches in its order.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from .common import Result
from .procs import ServerProcess, postgres_reachable, scratch_schema
from .verify import TENANT, Batch, Findings, check_session

SESSION = "shared"


def _messages(rng: random.Random, client: int, k: int) -> list[Any]:
    from chathistory import Message

    if k % 4 == 3:
        call = f"call_{client}_{k}"
        return [Message.assistant("", [{"id": call, "name": "f", "arguments": {"k": k}}]),
                Message.tool_result(call, f"result {client}/{k}")]
    batch = [Message.user(f"client {client} turn {k}")]
    if rng.random() < 0.5:
        batch.append(Message.assistant(f"reply {client}/{k}"))
    return batch


class _Http:
    """Appends over HTTP, alternating between servers."""

    def __init__(self, urls: list[str]) -> None:
        import httpx

        self.clients = [httpx.Client(base_url=u, timeout=60) for u in urls]

    def version(self, k: int) -> int:
        response = self.clients[k % len(self.clients)].get(f"/v1/sessions/{SESSION}")
        response.raise_for_status()
        return int(response.headers["etag"].strip('"'))

    def append(self, k: int, body: bytes, if_match: int | None = None) -> int | None:
        """The version, or None for a refused If-Match (412/409)."""
        headers = {"Content-Type": "application/json"}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        response = self.clients[k % len(self.clients)].post(
            f"/v1/sessions/{SESSION}/messages", content=body, headers=headers)
        if response.status_code in (409, 412) and if_match is not None:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"append answered {response.status_code}: {response.text[:200]}")
        return int(response.json()["version"])


class _Library:
    """Appends through a store of this process."""

    def __init__(self, url: str) -> None:
        from chathistory import open_store

        self.store = open_store(url, pool_size=3)

    def version(self, k: int) -> int:
        return int(self.store.get_session(SESSION, tenant=TENANT).version)

    def append(self, k: int, body: bytes, if_match: int | None = None) -> int | None:
        import json

        from chathistory import Message
        from chathistory.errors import Conflict

        messages = [Message.from_dict(m) for m in json.loads(body)["messages"]]
        try:
            return int(self.store.append(SESSION, messages, tenant=TENANT,
                                         expected_version=if_match))
        except Conflict:
            if if_match is None:
                raise
            return None


def client_main(mode: str, target: Any, client: int, batches: int, seed: int,
                start: Any, results: Any) -> None:
    """One client process; puts (client, batches, counts, errors) on ``results``."""
    import json

    rng = random.Random(seed)
    conn: Any = _Http(target) if mode == "http" else _Library(target)
    log: list[Batch] = []
    counts = {"requests": 0, "retries": 0, "racing": 0, "conflicts": 0, "stale": 0,
              "if_match_ok": 0}
    errors: list[str] = []
    if_match_client = client % 4 == 3
    start.wait(120)
    attempt = 0
    for k in range(batches):
        messages = _messages(rng, client, k)
        body = json.dumps({"messages": [m.to_dict() for m in messages]}).encode()
        batch = Batch(SESSION, tuple(m.id for m in messages))
        log.append(batch)
        try:
            if if_match_client:  # read, write If-Match; on a conflict, a new batch
                for _ in range(8):
                    attempt += 1
                    current = conn.version(attempt)
                    stale = attempt % 4 == 0 and current > 0
                    asked = current - 1 if stale else current
                    answer = conn.append(attempt + 1, body, asked)
                    counts["requests"] += 1
                    if answer is None:
                        batch.rejected = True
                        counts["conflicts"] += 1
                        counts["stale"] += stale
                        messages = _messages(rng, client, k)
                        body = json.dumps({"messages": [m.to_dict() for m in messages]}
                                          ).encode()
                        batch = Batch(SESSION, tuple(m.id for m in messages))
                        log.append(batch)
                        continue
                    batch.acked = answer
                    if stale or answer != asked + 1:
                        errors.append(f"If-Match {asked} answered {answer} (stale: {stale}): "
                                      "a silent merge")
                    else:
                        counts["if_match_ok"] += 1
                    break
                if batch.acked is None:  # gave up: this last batch was never sent
                    log.pop()
                continue
            if k % 5 == 2:  # the retry races the original
                answers: list[int | None] = [None, None]

                def send(i: int, body: bytes = body, answers: list[int | None] = answers,
                         k: int = k) -> None:
                    answers[i] = conn.append(k + i, body)  # over HTTP: both servers

                threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                counts["requests"] += 2
                counts["racing"] += 1
                if None in answers:
                    errors.append("a racing duplicate got no answer")
                    continue
                batch.acked = answers[0]
                batch.answers.append(answers[1])  # type: ignore[arg-type]
                continue
            batch.acked = conn.append(k, body)
            counts["requests"] += 1
            if k % 3 == 1:  # the answer was lost: send again, same ids
                batch.answers.append(conn.append(k + 1, body))  # type: ignore[arg-type]
                counts["requests"] += 1
                counts["retries"] += 1
        except Exception as exc:
            errors.append(f"client {client} batch {k}: {type(exc).__name__}: {exc}")
    results.put((client, log, counts, errors))


def one_run(mode: str, url: str, processes: int, batches: int, seed: int,
            servers: list[ServerProcess] | None = None) -> tuple[Findings, dict[str, int]]:
    from chathistory import open_store

    store = open_store(url)
    store.create_session(SESSION, tenant=TENANT)
    store.close()
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(processes)
    results = ctx.Queue()
    target: Any = [s.url for s in servers] if servers else url
    procs = [ctx.Process(target=client_main, args=(mode, target, c, batches, seed * 100 + c,
                                                   start, results))
             for c in range(processes)]
    for p in procs:
        p.start()
    gathered = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    everything: list[Batch] = []
    chains: list[list[int]] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    for _client, log, client_counts, client_errors in sorted(gathered, key=lambda g: g[0]):
        chains.append([len(everything) + i for i, b in enumerate(log) if b.acked is not None])
        everything += log
        errors += client_errors
        for name, value in client_counts.items():
            counts[name] = counts.get(name, 0) + value
    store = open_store(url)
    try:
        found = check_session(store, SESSION, everything, chains, random.Random(seed))
    finally:
        store.close()
    found.problems = errors + found.problems
    if found.stored != found.acked_messages:
        found.problems.append(f"{found.stored} messages stored, {found.acked_messages} "
                              "acknowledged: the totals differ")
    counts["sent_ids"] = sum(len(b.ids) for b in everything if not b.rejected)
    counts["rejected_ids"] = sum(len(b.ids) for b in everything if b.rejected)
    return found, counts


def run(quick: bool = False, processes: int | None = None, batches: int | None = None,
        seed: int | None = None, out: Callable[[str], None] = print) -> list[Result]:
    """``processes`` clients (default 16, 8 quick) x ``batches`` appends each
    (default 60, 12 quick), through two servers and through the library."""
    processes = processes or (8 if quick else 16)
    batches = batches or (12 if quick else 60)
    seed = seed if seed is not None else random.SystemRandom().randrange(10**6)
    reason = postgres_reachable()
    if reason:
        out(f"  skipped: {reason}")
        return [Result("concurrency", "postgres (skipped)", 0, 0, 0, 0.0, reason)]
    import tempfile
    from pathlib import Path

    results: list[Result] = []
    for mode in ("http", "library"):
        started = time.monotonic()
        with scratch_schema("conc") as url, \
                tempfile.TemporaryDirectory(prefix="chathistory-conc-") as tmp:
            servers: list[ServerProcess] = []
            try:
                if mode == "http":
                    servers = [ServerProcess(url, Path(tmp)) for _ in range(2)]
                    for s in servers:
                        s.wait_ready()
                found, counts = one_run(mode, url, processes, batches, seed, servers)
            finally:
                for s in servers:
                    s.stop()
        seconds = time.monotonic() - started
        label = ("postgres via 2 servers" if mode == "http" else "postgres (library)")
        label += f", {processes} procs"
        detail = (f"{found.stored} stored = {found.acked_messages} acknowledged "
                  f"(unique ids sent {counts['sent_ids']}); {counts['retries']} retries and "
                  f"{counts['racing']} racing duplicates answered the same version; "
                  f"{counts['if_match_ok']} If-Match writes at version+1, {counts['conflicts']} "
                  f"conflicts reported ({counts['stale']} stale on purpose), "
                  f"{counts['rejected_ids']} refused ids, none stored")
        if found.problems:
            detail += f"; {len(found.problems)} problems: {found.problems[0]}"
        out(f"  {label}: {detail} ({seconds:.0f} s)")
        results.append(Result("concurrency", label, counts["requests"],
                              counts["requests"] - min(counts["requests"], len(found.problems)),
                              len(found.problems), seconds, detail))
    return results
