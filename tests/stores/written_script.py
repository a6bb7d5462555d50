"""Random operations of two writers (two store objects) on a few sessions, for the
differential tests of a backend's one-round-trip append (planned on the session as
the process last wrote it) against its plain path: test_postgres and test_redis run
the same script through both and compare every answer and every stored row."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from chathistory import Attachment, KVStatus, Message
from chathistory.errors import ChatHistoryError

__all__ = ["assert_same_runs", "checked_sessions", "concurrent_work", "concurrent_writers",
           "count_as_written", "new_batch", "random_script", "run_script", "session_reads"]


def new_batch(rng: random.Random, k: int, open_calls: list[str], png: bytes
               ) -> list[Message]:
    """One to three messages: text of random length, now and then a system prompt, a
    tool call (answered in this batch or left for a later one), an answer to an open
    call, or an image (attachments go through the row lock)."""
    out: list[Message] = []
    for j in range(rng.randint(1, 3)):
        text = f"{k}.{j} " + "word " * rng.randint(0, 60)
        roll = rng.random()
        if roll < 0.08:
            out.append(Message.system(text))
        elif roll < 0.2:
            call = f"c{k}_{j}"
            out.append(Message.assistant("", [{"id": call, "name": "f", "arguments": {"k": k}}]))
            if rng.random() < 0.5:
                out.append(Message.tool_result(call, text))
            else:
                open_calls.append(call)
        elif roll < 0.3 and open_calls:
            out.append(Message.tool_result(open_calls.pop(0), text))
        elif roll < 0.36:
            image = Attachment.from_bytes(png + bytes([k % 7]), name="p.png")
            out.append(Message.user(text, image))
        else:
            out.append((Message.user if j % 2 == 0 else Message.assistant)(text))
    return out


def random_script(seed: int, n: int, png: bytes) -> list[tuple[Any, ...]]:
    """Operations of two writers (0 and 1, two store objects) on a few sessions, made in
    advance so that both runs get the very same messages."""
    rng = random.Random(seed)
    roots, forks = ["s0", "s1", "s2"], []
    batches: dict[str, list[list[Message]]] = {sid: [] for sid in roots}
    calls: dict[str, list[str]] = {sid: [] for sid in roots}
    ops: list[tuple[Any, ...]] = [("create", 0, sid) for sid in roots]
    w, sid = 0, "s0"
    for k in range(n):  # a writer and a session for a few operations in a row
        if rng.random() < 0.25:
            w = 1 - w
        if rng.random() < 0.3:
            sid = rng.choice(forks if forks and rng.random() < 0.25 else roots)
        roll = rng.random()
        earlier = batches[sid]
        if roll < 0.12 and earlier:  # a retry of an earlier batch (stored or refused)
            ops.append(("append", w, sid, rng.choice(earlier), None))
        elif roll < 0.18 and earlier:  # an earlier batch and new messages together
            batch = rng.choice(earlier) + new_batch(rng, k, calls[sid], png)
            earlier.append(batch)
            ops.append(("append", w, sid, batch, None))
        elif roll < 0.28:  # If-Match: the version this writer saw last, or an older one
            batch = new_batch(rng, k, calls[sid], png)
            earlier.append(batch)
            ops.append(("append", w, sid, batch, rng.choice(["seen", "stale"])))
        elif roll < 0.34:  # a fork at a message of an earlier batch, or at the end
            at = rng.choice(rng.choice(earlier)).id if earlier and rng.random() < 0.7 else None
            fork = f"f{k}"
            forks.append(fork)
            batches[fork], calls[fork] = [], list(calls[sid])
            ops.append(("fork", w, sid, at, fork))
        elif roll < 0.39:
            ops.append(("update", w, sid, {"k": k}))
        elif roll < 0.44:
            ops.append(("pop", w, sid))
        elif roll < 0.47 and earlier:
            ops.append(("mark", w, sid, [m.id for m in rng.choice(earlier)]))
        elif roll < 0.49:  # the same id again: a new incarnation
            batches[sid], calls[sid] = [], []
            ops.append(("recreate", w, sid))
        else:
            batch = new_batch(rng, k, calls[sid], png)
            earlier.append(batch)
            ops.append(("append", w, sid, batch, None))
    return ops


def run_script(writers: list[Any], ops: list[tuple[Any, ...]]) -> list[Any]:
    """Each operation's answer: a version, a session's counts, a message id, or the
    error raised (its class and text)."""
    seen: dict[tuple[int, str], int] = {}
    out: list[Any] = []
    for op in ops:
        kind, w, sid = op[:3]
        store = writers[w]
        try:
            if kind == "create":
                answer: Any = store.create_session(sid).version
            elif kind == "append":
                batch, expected = op[3], op[4]
                if expected is not None:
                    expected = seen.get((w, sid), 0) - (expected == "stale")
                answer = store.append(sid, batch, expected_version=expected)
            elif kind == "fork":
                fork = store.fork(sid, op[3], new_session_id=op[4])
                answer = (fork.message_count, fork.token_count, fork.fork_seq)
            elif kind == "update":
                answer = store.update_session(sid, metadata=op[3]).version
            elif kind == "pop":
                popped = store.pop(sid)
                answer = None if popped is None else popped.id
            elif kind == "mark":
                answer = store.mark(sid, op[3], KVStatus.MARKED)
            else:  # recreate
                store.delete_session(sid, cascade=True)
                answer = store.create_session(sid).version
            if kind in ("append", "update", "create", "recreate"):
                seen[w, sid] = answer
        except ChatHistoryError as exc:
            answer = (type(exc).__name__, str(exc))
        out.append(answer)
    return out


def concurrent_writers(writers: list[Any], work: list[list[Message]]) -> list[list[int]]:
    """Two threads per store object, all on sessions ``c0`` and ``c1``: each thread appends
    its messages one per call, every third append sent twice (a retry); the first
    store's threads back to back, the second's a few milliseconds apart (so the first
    often finds the session as it wrote it, and sometimes not)."""
    versions: list[list[int]] = [[] for _ in work]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(work))

    def writer(i: int) -> None:
        store, sid = writers[i % 2], f"c{i // 2 % 2}"
        barrier.wait()
        try:
            for k, m in enumerate(work[i]):
                versions[i].append(store.append(sid, [m]))
                if k % 3 == 0:
                    assert store.append(sid, [m]) == versions[i][-1]
                time.sleep(0.004 * (i % 2))
        except BaseException as exc:  # reported, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return versions


def count_as_written(monkeypatch: Any, store_class: type, missed: object) -> list[str]:
    """What each call of ``store_class._append_as_written`` comes to from now on:
    "written", or "missed" (it returned ``missed``: the append then goes the plain way)."""
    outcomes: list[str] = []
    as_written = store_class._append_as_written  # type: ignore[attr-defined]

    def counted(self: Any, *args: Any) -> Any:
        result = as_written(self, *args)
        outcomes.append("missed" if result is missed else "written")
        return result

    monkeypatch.setattr(store_class, "_append_as_written", counted)
    return outcomes


def assert_same_runs(fast: tuple[list[Any], dict[str, Any]],
                     plain: tuple[list[Any], dict[str, Any]], outcomes: list[str]) -> None:
    """The answers and stored rows of a script run through the stores that plan on their
    own copy (``fast``) equal those of the plain path; both paths were taken often, and
    most operations succeeded."""
    (fast_answers, fast_rows), (plain_answers, plain_rows) = fast, plain
    assert outcomes.count("written") > 30 and outcomes.count("missed") > 30, outcomes
    assert fast_answers == plain_answers
    assert fast_rows.keys() == plain_rows.keys()
    for key in fast_rows:
        assert fast_rows[key] == plain_rows[key], key
    assert sum(type(a) is int for a in fast_answers) > 150  # most operations succeeded


def concurrent_work() -> list[list[Message]]:
    """The messages of ``concurrent_writers``' four threads: 60, 15, 60 and 15."""
    return [[(Message.user if k % 2 else Message.assistant)(f"t{i} {k} " + "w " * (k % 13))
             for k in range(60 if i % 2 == 0 else 15)] for i in range(4)]


def checked_sessions(writers: list[Any], work: list[list[Message]], versions: list[list[int]],
                     also: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """After ``concurrent_writers``: each session's versions gapless, each thread's order
    kept (``also(session_id, session)`` checks more); what the sessions hold, to compare
    across paths (only the interleaving may differ)."""
    stored = {}
    for s, sid in enumerate(("c0", "c1")):
        mine = [i for i in range(len(work)) if i // 2 % 2 == s]
        assert sorted(v for i in mine for v in versions[i]) == list(
            range(1, 1 + sum(len(work[i]) for i in mine)))
        messages = writers[1].range(sid)
        for i in mine:  # each thread's order kept
            assert [m.id for m in messages if m.text.startswith(f"t{i} ")] == [
                m.id for m in work[i]]
        session = writers[1].get_session(sid)
        if also is not None:
            also(sid, session)
        stored[sid] = (sorted(m.id for m in messages), session.message_count,
                       session.token_count, session.version)
    return stored


def session_reads(store: Any, session_ids: list[str]) -> dict[str, Any]:
    """What the reads of each session answer (range, tail, window), or the error."""
    out: dict[str, Any] = {}
    for sid in session_ids:
        try:
            out[sid] = (store.range(sid), store.tail(sid, 5), store.window(sid, 300))
        except ChatHistoryError as exc:
            out[sid] = (type(exc).__name__, str(exc))
    return out
