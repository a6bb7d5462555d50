"""What a store must show after a crash or a crowd of writers, for one session.

The writers log every batch they send (its message ids, in order) and what came
back: the version that acknowledged it, a conflict, or nothing (killed before
the answer). `check_session` reads the session back through a fresh store and
lists every way it disagrees with that log.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chathistory.errors import NotFound

TENANT = "default"


@dataclass
class Batch:
    """One append as its writer saw it."""

    session_id: str
    ids: tuple[str, ...]
    acked: int | None = None
    """The version the store answered with; None when no answer came."""
    rejected: bool = False
    """The store refused it (a stale If-Match / expected_version): must not be stored."""
    answers: list[int] = field(default_factory=list)
    """Every version answered for it (a retry with the same ids must repeat the first)."""


@dataclass
class Findings:
    """Counts for the table and the problems found (empty when all held)."""

    acked_messages: int = 0
    found_once: int = 0
    stored: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Findings) -> None:
        self.acked_messages += other.acked_messages
        self.found_once += other.found_once
        self.stored += other.stored
        self.problems += other.problems


def check_session(store: Any, session_id: str, batches: list[Batch],
                  chains: list[list[int]] | None = None, rng: random.Random | None = None,
                  ) -> Findings:
    """Check one session against its writers' log.

    ``batches`` are every batch sent to this session; ``chains`` lists batch
    indices that must be stored in that order (one writer's batches; default:
    all of them, in log order). Checked: every acknowledged id present exactly
    once at the version that acknowledged it, no unknown or rejected id, every
    batch whole and contiguous (all or none of an unacknowledged one), positions
    0..n-1 without gaps, versions 1..k (one per stored append, increasing with
    position), running token totals, every message decodes, its attachments
    load, and tail, window and range agree.
    """
    rng = rng or random.Random(0)
    out = Findings()
    problems = out.problems
    name = f"session {session_id}"
    for b in batches:
        if b.acked is not None:
            out.acked_messages += len(b.ids)
    try:
        session = store.get_session(session_id, tenant=TENANT)
    except NotFound:
        if out.acked_messages:
            problems.append(f"{name}: missing, with {out.acked_messages} acknowledged messages")
        return out
    n = session.message_count
    rows = store._b_rows(TENANT, session_id, 0, n)
    messages = store.range(session_id, tenant=TENANT)  # decodes every stored message
    out.stored = len(rows)
    ids = [r.id for r in rows]
    if [r.seq for r in rows] != list(range(n)) or len(messages) != n:
        problems.append(f"{name}: message_count {n} but positions "
                        f"{[r.seq for r in rows][:5]}... ({len(rows)} rows, "
                        f"{len(messages)} messages)")
    if [m.id for m in messages] != ids:
        problems.append(f"{name}: range() and the stored rows disagree")
    cum = 0
    for r in rows:
        if r.cum_before != cum:
            problems.append(f"{name}: running token total broken at position {r.seq}")
            break
        cum += r.tokens
    if rows and session.token_count != cum:
        problems.append(f"{name}: token_count {session.token_count} != sum {cum}")

    count = Counter(ids)
    position = {mid: i for i, mid in enumerate(ids)}
    owner = {mid: k for k, b in enumerate(batches) for mid in b.ids}
    for mid, times in count.items():
        if times > 1:
            problems.append(f"{name}: message {mid} stored {times} times")
        if mid not in owner:
            problems.append(f"{name}: message {mid} was never sent")

    stored_batches: list[tuple[int, int]] = []  # (first position, batch index)
    for k, b in enumerate(batches):
        present = [mid for mid in b.ids if mid in position]
        if b.acked is not None:
            out.found_once += sum(1 for mid in b.ids if count.get(mid) == 1)
        if not present:
            if b.acked is not None:
                problems.append(f"{name}: acknowledged batch {k} (version {b.acked}) lost")
            continue
        if b.rejected:
            problems.append(f"{name}: batch {k} was refused (conflict) but is stored")
        if len(present) != len(b.ids):
            problems.append(f"{name}: batch {k} half-written: {len(present)} of {len(b.ids)}")
            continue
        first = position[b.ids[0]]
        if [position[mid] for mid in b.ids] != list(range(first, first + len(b.ids))):
            problems.append(f"{name}: batch {k} not contiguous and in order")
            continue
        versions = {rows[position[mid]].version for mid in b.ids}
        if len(versions) != 1:
            problems.append(f"{name}: batch {k} stored under versions {sorted(versions)}")
            continue
        version = versions.pop()
        for answer in [*([b.acked] if b.acked is not None else []), *b.answers]:
            if answer != version:
                problems.append(f"{name}: batch {k} answered version {answer}, stored at "
                                f"{version}")
                break
        stored_batches.append((first, k))

    stored_batches.sort()
    versions_in_order = [rows[first].version for first, _ in stored_batches]
    if versions_in_order != list(range(1, len(stored_batches) + 1)):
        problems.append(f"{name}: versions by position {versions_in_order[:8]}..., expected "
                        f"1..{len(stored_batches)}")
    if session.version != len(stored_batches):
        problems.append(f"{name}: version {session.version} but {len(stored_batches)} appends "
                        "stored")
    rank = {k: i for i, (_, k) in enumerate(stored_batches)}
    for chain in chains if chains is not None else [list(range(len(batches)))]:
        order = [rank[k] for k in chain if k in rank]
        if order != sorted(order):
            problems.append(f"{name}: a writer's batches stored out of order")

    problems += _reads_agree(store, session_id, messages, rng)
    return out


def _reads_agree(store: Any, session_id: str, messages: list[Any],
                 rng: random.Random) -> list[str]:
    problems: list[str] = []
    ids = [m.id for m in messages]
    n = len(ids)
    name = f"session {session_id}"
    for k in (1, 7, 60):
        tail = [m.id for m in store.tail(session_id, k, tenant=TENANT)]
        if len(tail) < min(k, n) or (tail and ids[-len(tail):] != tail):
            problems.append(f"{name}: tail({k}) is not the newest messages")
    for budget in (300, 3000):
        window = [m.id for m in store.window(session_id, budget, tenant=TENANT)]
        if window and ids[-len(window):] != window:
            problems.append(f"{name}: window({budget}) is not the newest messages")
    if n:
        start = rng.randrange(n)
        stop = rng.randrange(start, n + 1)
        part = [m.id for m in store.range(session_id, start, stop, tenant=TENANT)]
        # widened to whole groups: a contiguous stretch around [start, stop)
        first = ids.index(part[0]) if part and part[0] in ids else -1
        if stop > start and (first < 0 or first > start or first + len(part) < stop
                             or ids[first:first + len(part)] != part):
            problems.append(f"{name}: range({start}, {stop}) disagrees with range()")
    for m in messages:
        for attachment in m.attachments:
            data = store.get_asset(attachment.sha256, tenant=TENANT)
            if hashlib.sha256(data).hexdigest() != attachment.sha256:
                problems.append(f"{name}: attachment {attachment.sha256[:12]} corrupt")
    return problems


def check_listing(store: Any, session_ids: set[str]) -> list[str]:
    """Every session listed exactly once, in each order the store offers (an index
    left stale by a crash must be filtered out, never shown or missing)."""
    import inspect

    problems: list[str] = []
    orders: list[dict[str, str]] = [{}]
    if "order" in inspect.signature(store.list_sessions).parameters:
        orders.append({"order": "recent"})
    for order in orders:
        listed: list[str] = []
        cursor = None
        while True:
            page = store.list_sessions(tenant=TENANT, limit=7, cursor=cursor, **order)
            listed += [s.id for s in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        how = order.get("order", "created")
        twice = sorted(sid for sid, n in Counter(listed).items() if n > 1)
        if twice:
            problems.append(f"list_sessions({how}) lists {twice[:3]} more than once")
        missing = sorted(session_ids - set(listed))
        if missing:
            problems.append(f"list_sessions({how}) misses {missing[:3]}")
    return problems
