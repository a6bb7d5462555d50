"""The execution model (``server.work``): tenant shares of the work pool, the store
circuit, and long texts counted in other processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chathistory import StoreUnavailable
from chathistory.server import wire, work
from chathistory.server.errors import HTTPError
from chathistory.server.schema import AppendBody
from chathistory.server.work import StoreHealth, Work, start_processes, store_call
from chathistory.tokens import (
    OFFLOAD_CHARS,
    EncodingCounter,
    cached_count,
    count_here,
    get_counter,
    offload_large_texts,
)


def test_a_tenant_past_its_share_is_answered_429_and_others_still_run() -> None:
    work = Work(threads=4, per_tenant=2, queue=3, wait_seconds=5)
    release = threading.Event()

    async def main() -> tuple[list[object], float]:
        hog = [asyncio.ensure_future(work.run_as("hog", release.wait, 30)) for _ in range(5)]
        await asyncio.sleep(0.1)  # 2 running, 3 waiting: the queue is full
        with pytest.raises(HTTPError) as refused:
            await work.run_as("hog", time.sleep, 0)
        assert refused.value.status == 429 and refused.value.headers["Retry-After"]
        started = time.perf_counter()
        assert await work.run_as("other", sum, [1, 2]) == 3  # its own share: no wait
        other_took = time.perf_counter() - started
        release.set()
        return await asyncio.gather(*hog), other_took

    results, other_took = asyncio.run(main())
    # queued behind the hog, it would wait for its release (30 s); 10 s holds at load 12
    assert results == [True] * 5 and other_took < 10.0
    assert work.load() == {"tenants": 0, "running": 0, "waiting": 0}  # nothing left behind
    work.shutdown()


def test_the_circuit_answers_at_once_while_the_store_is_down_and_closes_on_success() -> None:
    work = Work(threads=2)
    recovered: list[bool] = []
    health = StoreHealth(probe_every=0.2, recover=lambda: recovered.append(True))
    calls: list[str] = []
    down = True

    def store_method() -> str:
        calls.append("call")
        if down:
            raise ConnectionRefusedError("connection refused")
        return "ok"

    async def main() -> None:
        nonlocal down
        with pytest.raises(StoreUnavailable):
            await store_call(work, health, store_method)
        assert len(calls) == 1 and health.down is not None
        started = time.perf_counter()
        for _ in range(20):  # answered without calling the store
            with pytest.raises(StoreUnavailable):
                await store_call(work, health, store_method)
        # without the store (one call), and without waiting for a probe (0.2 s each):
        # a bound that holds at load 12
        assert len(calls) == 1 and time.perf_counter() - started < 2.0
        await asyncio.sleep(0.25)
        down = False  # the store is back: the next probe closes the circuit
        assert await store_call(work, health, store_method) == "ok"
        assert health.down is None and len(calls) == 2
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert recovered == [True]  # the store's recover() ran once, when it opened
    work.shutdown()


def test_a_refused_call_says_nothing_of_the_store() -> None:
    """A call refused for its tenant's share never reached the store: it neither closes
    an open circuit (as a probe that got through would) nor opens one."""
    work = Work(threads=2, per_tenant=1, queue=0)
    health = StoreHealth(probe_every=0.05)
    release = threading.Event()

    def refused() -> None:
        raise ConnectionRefusedError("connection refused")

    async def main() -> None:
        with pytest.raises(StoreUnavailable):
            await store_call(work, health, refused)
        hog = asyncio.ensure_future(work.run_as("(unauthenticated)", release.wait, 5))
        await asyncio.sleep(0.1)  # the tenant's one place is taken; a probe is due
        with pytest.raises(HTTPError) as busy:
            await store_call(work, health, sum, [1])
        assert busy.value.status == 429 and health.down is not None  # still open
        for _ in range(50):  # answered from the circuit: its traceback does not grow
            with pytest.raises(StoreUnavailable) as down:
                await store_call(work, health, sum, [1])
        assert len(traceback.extract_tb(down.value.__traceback__)) < 10
        release.set()
        await hog
        await asyncio.sleep(0.06)
        assert await store_call(work, health, sum, [1]) == 1 and health.down is None

    asyncio.run(main())
    work.shutdown()


def test_long_texts_counted_in_processes_equal_counts_here() -> None:
    start_processes()
    text = "Zażółć gęślą jaźń <|endoftext|> and some words. " * 8_000  # ~400 KB
    counter = EncodingCounter("o200k_base")
    offloaded = counter.count_text(text)
    offload_large_texts(None)
    try:
        assert offloaded == counter.count_text(text) == count_here("o200k_base", text)
    finally:
        start_processes_again()


def start_processes_again() -> None:
    from chathistory.server import work

    offload_large_texts(work._count_in_processes)


def test_the_counting_process_dies_with_the_server_process(tmp_path: object) -> None:
    """A server killed by SIGKILL leaves no counting process behind (each holds ~100 MB
    of tables; they piled up by the hundred before PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys

    script = (
        "import multiprocessing, sys, time\n"
        "from chathistory.server import work\n"
        "from chathistory.tokens import EncodingCounter\n"
        "work.start_processes()\n"
        "EncodingCounter('o200k_base').count_text('word ' * 100_000)\n"
        "print(*[p.pid for p in multiprocessing.active_children()], flush=True)\n"
        "time.sleep(60)\n")
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    children = [int(pid) for pid in server.stdout.readline().split()]
    assert children, "no counting process was started"
    os.kill(server.pid, signal.SIGKILL)
    server.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") and
                                              "Z" not in _state(p) for p in children):
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{p}") and "Z" not in _state(p) for p in children)


def _counting_children() -> list[int]:
    import multiprocessing

    return sorted(p.pid for p in multiprocessing.active_children() if p.pid is not None)


def test_the_counting_process_outlives_the_thread_that_started_it() -> None:
    """The pool starts its process from the thread that first needs one; that thread's
    end must not end the process (``PR_SET_PDEATHSIG`` did: its signal follows the
    thread), nor a count after it fail."""
    text = "word " * 60_000
    expected = count_here("o200k_base", text)
    if work._processes is not None:
        work._processes.shutdown()
        work._processes = None
    starter = threading.Thread(target=lambda: work._count_in_processes("o200k_base", text))
    starter.start()
    starter.join()
    children = _counting_children()
    assert children, "no counting process was started"
    time.sleep(0.5)
    assert all("Z" not in _state(pid) for pid in children)
    assert work._in_process(count_here, "o200k_base", text) == expected
    assert _counting_children() == children  # the same process: it was never replaced


def test_a_killed_counting_process_is_replaced() -> None:
    import signal

    text = "word " * 60_000
    expected = count_here("o200k_base", text)
    assert work._count_in_processes("o200k_base", text) == expected
    before = _counting_children()
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    assert work._count_in_processes("o200k_base", text) == expected
    after = _counting_children()
    assert after and not set(after) & set(before)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_the_server_counts_without_tiktoken_threads(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: object) -> None:
    """The workers are processes, one per CPU: the server turns the choice of tokenizer
    off (``tokens.share_counts``): a thread alone and a long text counted by two
    threads in turn are both bpe-openai's (neither fastokens nor tiktoken is built)."""
    from chathistory import tokens
    from chathistory.server.app import create_app
    from chathistory.stores import MemoryStore

    monkeypatch.setattr(tokens, "_sharing", True)
    monkeypatch.setattr(tokens, "SHARED_WINDOW", 60.0)
    warmed = EncodingCounter("o200k_base")  # not the process's shared counter
    create_app(MemoryStore(warmed), asset_dir=tmp_path)  # type: ignore[arg-type]
    assert tokens._sharing is False
    assert warmed._count is not None and warmed._fast_asked is False  # bpe-openai only
    counter = EncodingCounter("o200k_base")
    assert counter.count_text("hello world") == 2
    assert counter._fast_asked is False and counter._count is not None
    shared: list[str] = []
    counter._shared, counter._shared_asked = shared.append, True  # type: ignore[assignment]
    text = "word " * 200
    threads = [threading.Thread(target=counter.count_text, args=(text,)) for _ in range(2)]
    for t in threads:
        t.start()
        t.join()
    assert shared == []


@contextlib.contextmanager
def _heavy_server(tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of a server over a SQLite store with the default counter (o200k), no
    keys; the server stopped and the store closed after."""
    from serverkit import LiveServer

    from chathistory.server.app import create_app
    from chathistory.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "heavy.db")
    server = LiveServer(create_app(store, asset_dir=tmp_path / "assets")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client
    finally:
        server.stop()
        store.close()


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each body given to ``decode_elsewhere`` was decoded there."""
    out: list[bool] = []
    elsewhere = wire.decode_elsewhere

    def spied(*args: Any) -> Any:
        found = elsewhere(*args)
        out.append(found is not None)
        return found

    monkeypatch.setattr(wire, "decode_elsewhere", spied)
    return out


def test_a_heavy_append_is_decoded_and_counted_elsewhere_as_it_would_be_here(
        tmp_path: Path, answered: list[bool]) -> None:
    """A body of at least ``HEAVY_BODY`` bytes is decoded, and its messages counted, in
    the counting process: what is stored is what decoding and counting it here gives,
    the client's counts never kept."""
    text = "naïve café, «quoted» 😀 words\n" * 45_000
    body = json.dumps({"messages": [
        {"role": "user", "parts": [{"type": "text", "text": text}],
         "token_counts": {"o200k_base": 1}},  # a client's count: never kept
        {"role": "assistant", "name": "bot", "parts": [{"type": "text", "text": "ok"}]}],
        "reject_orphans": True}).encode()
    assert len(body) >= work.HEAVY_BODY
    with _heavy_server(tmp_path) as c:
        assert c.post("/v1/sessions", json={"id": "h"}).status_code == 201
        answer = c.post("/v1/sessions/h/messages", content=body,
                        headers={"Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
        stored = c.get("/v1/sessions/h/messages", params={"start": 0}).json()["messages"]
    assert answered == [True]
    here = wire.decode_json(body, AppendBody).messages
    counter = get_counter("o200k_base")
    for m in here:
        m.token_counts = None
    expected = [cached_count(m, counter) for m in here]
    assert expected[0] > 45_000
    assert [m["token_counts"] for m in stored] == [{"o200k_base": n} for n in expected]
    assert [(m["role"], m.get("name"), m["parts"]) for m in stored] == [
        (m.role, m.name, [{"type": "text", "text": p.text} for p in m.parts]) for m in here]


def test_a_heavy_body_that_fails_to_decode_is_answered_as_a_light_one(
        tmp_path: Path) -> None:
    """Decoded elsewhere or here, a body that fails gets the same answer: a 422 naming
    the field, a 400 for JSON that is not; nothing is stored."""
    pad = "x" * work.HEAVY_BODY
    bodies = {
        "unknown field": {"messages": [{"role": "user", "parts": [
            {"type": "text", "text": "{pad}", "colour": "red"}]}]},
        "wrong type": {"messages": [{"role": "user", "parts": [
            {"type": "text", "text": "{pad}"}], "name": 7}]},
        "no parts": {"messages": [{"role": "user", "content": "{pad}"}]},
    }
    with _heavy_server(tmp_path) as c:
        assert c.post("/v1/sessions", json={"id": "h"}).status_code == 201

        def post(raw: bytes) -> tuple[int, Any]:
            r = c.post("/v1/sessions/h/messages", content=raw,
                       headers={"Content-Type": "application/json"})
            error = r.json()["error"]
            error.pop("request_id")
            return r.status_code, error

        for name, shape in bodies.items():
            light = json.dumps(shape).replace("{pad}", "x").encode()
            heavy = json.dumps(shape).replace("{pad}", pad).encode()
            assert len(heavy) >= work.HEAVY_BODY > len(light)
            assert post(heavy) == post(light), name
            assert post(heavy)[0] in (400, 422), name
        status, error = post(b'{"messages": [' + pad.encode())
        assert status == 400 and error["type"] == "invalid_json"
        assert c.get("/v1/sessions/h/messages", params={"start": 0}).json() == {
            "messages": []}


def test_a_heavy_provider_append_is_decoded_elsewhere_too(
        tmp_path: Path, answered: list[bool]) -> None:
    text = "ünïcode and plain words " * 50_000
    body = json.dumps({"messages": [{"role": "user", "content": text},
                                    {"role": "assistant", "content": "ok"}]}).encode()
    assert len(body) >= work.HEAVY_BODY
    with _heavy_server(tmp_path) as c:
        assert c.post("/v1/sessions", json={"id": "p"}).status_code == 201
        answer = c.post("/v1/sessions/p/messages", params={"format": "openai_chat"},
                        content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
        stored = c.get("/v1/sessions/p/messages", params={"start": 0}).json()["messages"]
    assert answered == [True]
    assert [m["parts"][0]["text"] for m in stored] == [text, "ok"]
    assert stored[0]["token_counts"] == {"o200k_base": cached_count(
        wire.decode_json(json.dumps({"messages": [
            {"role": "user", "parts": [{"type": "text", "text": text}]}]}).encode(),
            AppendBody).messages[0], get_counter("o200k_base"))}


def test_a_tenants_long_counts_take_turns_with_another_tenants() -> None:
    """Tenant A counts four long texts at once (eight slices of ``OFFLOAD_CHARS`` each);
    tenant B counts one text over ``OFFLOAD_CHARS`` once A's have started. B's count is
    done first: A has one task at a time in the counting process, and B's slices wait
    for that one only. (Each long text was one task in a first-come queue: B's waited
    for all four of A's, as a 300 KB append waited 10-19 s behind 8 MiB of ``x``.)
    The order of completion, not time."""
    a_text = "word " * (8 * OFFLOAD_CHARS // 5)
    b_text = "other words " * (OFFLOAD_CHARS // 10)
    a, b = "tenant-a", next(f"tenant-b{i}" for i in range(64)
                            if work._turn(f"tenant-b{i}") is not work._turn("tenant-a"))
    expected = {a: count_here("o200k_base", a_text), b: count_here("o200k_base", b_text)}
    done: list[str] = []
    wrong: list[str] = []

    def count_as(tenant: str, text: str) -> None:
        work.current_tenant.set(tenant)  # (a thread's own context)
        if work._count_in_processes("o200k_base", text) != expected[tenant]:
            wrong.append(tenant)
        done.append(tenant)

    threads = [threading.Thread(target=count_as, args=(a, a_text)) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not work._turn(a).locked() and time.monotonic() < deadline:
        time.sleep(0.001)
    other = threading.Thread(target=count_as, args=(b, b_text))
    other.start()
    for thread in [*threads, other]:
        thread.join(120)
    assert not wrong and len(done) == 5
    assert done[0] == b, done
