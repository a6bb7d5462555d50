"""Deleting items from the middle of a conversation while ``/v1`` appends and tail reads
run at once, against a real server on every store (issue 43): a deletion is one write
of the store, so no acknowledged append is lost or moved ahead of older messages, and
no read sees an older message as the newest.

Each check compares events by the order the clients saw them (an append acknowledged
before a read or another append was sent), never by how long anything took."""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from serverkit import EVERY_BACKEND, Served, messages, serving

P = "/openai/v1"
SEEDED = 30
DELETED = 10
APPENDERS = 2
PER_ROUND = 3
READERS = 2


@pytest.fixture(scope="module", params=EVERY_BACKEND)
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serving(request, tmp_path_factory)


@dataclass
class Log:
    """What the clients saw: each acknowledged append (id, sent, acknowledged), each tail
    read (sent, ids), each deletion; times from one monotonic clock, for order only."""

    appended: list[tuple[str, float, float]] = field(default_factory=list)
    reads: list[tuple[float, list[str]]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    round: int = 0
    """The deletion under way (from 1): each appender appends ``PER_ROUND`` messages a
    round, so a conversation stays within what the earlier releases could delete."""
    next_round: threading.Condition = field(default_factory=threading.Condition)

    def start_round(self) -> None:
        with self.next_round:
            self.round += 1
            self.next_round.notify_all()

    def wait_round(self, after: int) -> int:
        """The round after ``after``, once it starts (``after`` once the run is done)."""
        with self.next_round:
            self.next_round.wait_for(lambda: self.round > after or self.done.is_set())
            return self.round if self.round > after else after


def _client(served: Served) -> httpx.Client:
    """Tenant A's client, patient: the machine may be loaded (nothing here is timed)."""
    return httpx.Client(base_url=served.url, timeout=300,
                        headers={"Authorization": f"Bearer {served.keys['A']}"})


def _logged(log: Log, work: Callable[[httpx.Client], None], served: Served) -> None:
    """Run a client's work; an exception is a failure of the test, and ends the run."""
    try:
        with _client(served) as client:
            work(client)
    except Exception as exc:
        with log.lock:
            log.failures.append(repr(exc))
        log.done.set()


def _appender(served: Served, cid: str, log: Log, serial: int) -> None:
    def work(client: httpx.Client) -> None:
        k = 0
        round_ = log.wait_round(0)
        while not log.done.is_set():
            if k and k % PER_ROUND == 0:
                round_ = log.wait_round(round_)
            message = messages(f"appended {serial}-{k}")[0]
            k += 1
            sent = time.monotonic()
            answer = client.post(f"/v1/sessions/{cid}/messages", json={"messages": [message]})
            acknowledged = time.monotonic()
            with log.lock:
                if answer.status_code == 200:
                    log.appended.append((message["id"], sent, acknowledged))
                else:
                    log.failures.append(f"append: {answer.status_code} {answer.text}")

    _logged(log, work, served)


def _reader(served: Served, cid: str, log: Log) -> None:
    def work(client: httpx.Client) -> None:
        while not log.done.is_set():
            sent = time.monotonic()
            answer = client.get(f"/v1/sessions/{cid}/messages", params={"tail": 5})
            with log.lock:
                if answer.status_code == 200:
                    log.reads.append((sent, [m["id"] for m in answer.json()["messages"]]))
                else:
                    log.failures.append(f"read: {answer.status_code} {answer.text}")

    _logged(log, work, served)


def _deleter(served: Served, cid: str, targets: list[str], log: Log) -> None:
    """Each deletion sent as a round of appends starts, the next one once the round's
    appends and more reads are done (so each runs among them, however fast the store)."""
    def work(client: httpx.Client) -> None:
        for item_id in targets:
            with log.lock:
                appended, read = len(log.appended), len(log.reads)
            log.start_round()
            for _ in range(50):  # a 409 (the conversation kept changing) is retried
                answer = client.delete(f"{P}/conversations/{cid}/items/{item_id}")
                if answer.status_code != 409:
                    break
            with log.lock:
                if answer.status_code == 200:
                    log.deleted.append(item_id)
                else:
                    log.failures.append(f"delete: {answer.status_code} {answer.text}")
            _wait_for_more(log, appended + APPENDERS * PER_ROUND, read + READERS)

    try:
        _logged(log, work, served)
    finally:
        log.done.set()
        log.start_round()


def _wait_for_more(log: Log, appended: int, read: int) -> None:
    """Until that many appends and reads are logged (or a request failed)."""
    while not log.done.is_set():
        with log.lock:
            if log.failures or (len(log.appended) >= appended and len(log.reads) >= read):
                return
        time.sleep(0.001)


def test_deletes_beside_v1_appends_and_tail_reads(served: Served) -> None:
    with _client(served) as a:
        created = a.post(f"{P}/conversations", json={})
        assert created.status_code == 200, created.text
        cid = created.json()["id"]
        seeded = messages(*(f"seeded {i}" for i in range(SEEDED)))
        for k in range(0, SEEDED, 20):
            answer = a.post(f"/v1/sessions/{cid}/messages", json={"messages": seeded[k:k + 20]})
            assert answer.status_code == 200, answer.text
    seeded_ids = [m["id"] for m in seeded]
    # items deep in the conversation (never among the newest five), in a random order
    targets = random.Random(43).sample(seeded_ids[:SEEDED - 8], DELETED)
    log = Log()
    threads = [threading.Thread(target=_deleter, args=(served, cid, targets, log))]
    threads += [threading.Thread(target=_appender, args=(served, cid, log, k))
                for k in range(APPENDERS)]
    threads += [threading.Thread(target=_reader, args=(served, cid, log))
                for _ in range(READERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not any(thread.is_alive() for thread in threads)
    assert log.failures == []
    assert sorted(log.deleted) == sorted(targets)
    assert log.appended and log.reads

    with _client(served) as a:
        answer = a.get(f"/v1/sessions/{cid}/messages", params={"start": 0})
        assert answer.status_code == 200, answer.text
        final = [m["id"] for m in answer.json()["messages"]]
    position = {item_id: k for k, item_id in enumerate(final)}
    assert len(position) == len(final)
    # every acknowledged append is there once, after every older message, and an append
    # acknowledged before another was sent is before it
    kept = [i for i in seeded_ids if i not in set(targets)]
    appended_ids = [item_id for item_id, _, _ in log.appended]
    assert final[:len(kept)] == kept
    assert sorted(final[len(kept):]) == sorted(appended_ids)
    acks = _prefix_newest(sorted((ack, position[item_id]) for item_id, _, ack in log.appended))
    for item_id, sent, _ in log.appended:
        newest = _newest_acknowledged(acks, sent)
        assert newest < position[item_id], (item_id, newest, position[item_id])
    # a read holds consecutive messages of the final history, the newest of them no
    # older than any append acknowledged before the read was sent
    for sent, ids in log.reads:
        assert ids and all(i in position for i in ids), ids
        at = [position[i] for i in ids]
        assert at == list(range(at[0], at[0] + len(at))), ids
        assert at[-1] >= _newest_acknowledged(acks, sent), ids


def _prefix_newest(acks: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(acknowledged, highest final position of the appends acknowledged until then)."""
    out: list[tuple[float, int]] = []
    for ack, at in acks:
        out.append((ack, max(at, out[-1][1] if out else -1)))
    return out


def _newest_acknowledged(acks: list[tuple[float, int]], before: float) -> int:
    """The highest final position of an append acknowledged before ``before`` (-1: none);
    ``acks`` as ``_prefix_newest`` makes them."""
    at = bisect.bisect_left(acks, (before, -1))
    return acks[at - 1][1] if at else -1
