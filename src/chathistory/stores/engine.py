"""The engine every backend shares: sessions, appends and reads.

``Store`` is the public protocol. ``BaseStore`` implements it once on top of a
few backend primitives (the ``_b_*`` methods), so that the rules (idempotent
appends, optimistic concurrency, pair-safe reads, forks that share their
prefix, retention) live here and each backend only moves rows. Backends are
written on their natural (sync) side; ``chathistory.stores.aio`` adapts any
of them to ``AsyncStore``.

Every method takes ``tenant``; sessions are keyed by ``(tenant, session_id)``,
so one tenant can never name another's session.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..groups import Groups
from ..model import KVStatus, Message, ToolCall, ToolResult, new_id
from ..model.codec import encode, strip_part
from ..tokens import TokenCounter, cached_count, get_counter
from .clock import StoreClock
from .model import DEFAULT_TENANT, Page, Row, Session, utcnow
from .protocol import AppendTxn

__all__ = ["Engine", "recent_key"]

_message_decoder = msgspec.json.Decoder(Message)
T = TypeVar("T")



def _ttl_deadline(ttl: timedelta | float | None, now: datetime) -> datetime | None:
    """``now`` (the store's clock) plus ``ttl``."""
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not seconds > 0:  # NaN too
        raise ValueError("ttl must be positive")
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"ttl of {seconds:g} seconds ends after the year 9999") from None


def _check_id(value: str, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200 or "\x00" in value:
        raise InvalidMessage(f"{field} must be a non-empty string of at most 200 characters "
                             "without NUL", f"$.{field}")
    return value


def _check_user(user: str | None) -> None:
    if user is not None and (not isinstance(user, str) or "\x00" in user):
        raise InvalidMessage("user must be a string without NUL", "$.user")


class Engine:
    """The engine; ``BaseStore`` adds the lifecycle (branches, retention, export)
    and a backend subclasses that, implementing the ``_b_*`` primitives."""

    def __init__(self, counter: str | TokenCounter | None = None) -> None:
        self.counter: TokenCounter = get_counter(counter)
        self._clock = StoreClock(self._b_clock)

    def now(self, *, fresh: bool = False) -> datetime:
        """The current time by the store's clock, which judges every TTL (``clock.py``):
        PostgreSQL's ``now()``, Redis's ``TIME``; this machine's for SQLite and memory."""
        return self._clock.now(fresh=fresh)

    # ================================================================ backend primitives

    def _b_insert_session(self, session: Session) -> None:
        """Insert; raise ``Conflict`` when ``(tenant, id)`` exists."""
        raise NotImplementedError

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        raise NotImplementedError

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        """Replace the stored session if its version is still ``expected_version``."""
        raise NotImplementedError

    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        """Sessions of ``tenant`` ordered by ``(created_at.isoformat(), id)`` ascending,
        after ``after``; with ``recent``, by ``(recent_key(s), id)`` descending, below
        ``after``. Expired sessions may be included (the engine drops them)."""
        raise NotImplementedError

    def _b_matching(self, tenant: str, session_ids: Sequence[str], needle: str) -> set[str]:
        """Of ``session_ids``, those with an own row whose stored JSON contains
        ``needle`` (ASCII letters compared case-insensitively, everything else exactly)."""
        raise NotImplementedError

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        """Sessions forked directly from this one."""
        raise NotImplementedError

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        """Every session whose ``root_id`` is ``root_id``."""
        raise NotImplementedError

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        """Delete the session, its own rows, calls, status overrides and asset references."""
        raise NotImplementedError

    def _b_append(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                  ids: Sequence[str] = ()) -> T:
        """Run ``fn`` in a transaction on the session (retrying it on a write race).
        ``ids``: the batch's message ids, which ``fn`` will ask ``existing()`` about
        (a backend may read them together with the session)."""
        raise NotImplementedError

    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        """Own rows with ``lo <= seq < hi``, ascending."""
        raise NotImplementedError

    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        """Smallest own seq whose ``cum_before >= cum``, or None."""
        raise NotImplementedError

    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        """Own rows with role system or developer and ``seq < hi``, ascending."""
        raise NotImplementedError

    def _b_window_probe(self, tenant: str, session_id: str, budget: int
                        ) -> tuple[Session | None, list[Row]] | None:
        """Optional, for backends where a round trip costs: in one read, the session
        (None when unknown) and, for a session that is not a fork, its rows from
        ``seq_at_cum(token_count - budget) - 1`` (0 when that is not positive, the last
        row when no row qualifies) to the end; the rows of a fork are not used.
        None: not implemented, the engine makes the reads one by one."""
        return None

    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        raise NotImplementedError

    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        """Of ``call_ids``, calls made by own rows with ``seq < hi``: id -> seq."""
        raise NotImplementedError

    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        """Set the status of own rows at ``seqs``, and record overrides for the
        inherited positions ``overrides`` (rows of an ancestor)."""
        raise NotImplementedError

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        """Status overrides this session recorded for inherited positions."""
        raise NotImplementedError

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        """Delete own rows (and their calls) with ``seq >= seq``, set the group-start
        flag of own rows at ``restore``, and save ``session``, all at once and only
        if the stored version is still ``expected_version``."""
        raise NotImplementedError

    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        raise NotImplementedError

    def _b_gc_assets(self, tenant: str) -> int:
        """Delete the tenant's assets no session references; return how many."""
        raise NotImplementedError

    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        """(tenant, id) of sessions whose ``expires_at`` is past."""
        raise NotImplementedError

    def _b_clock(self) -> datetime | None:
        """The store's own clock (one round trip), or None when it is this machine's."""
        return None

    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ================================================================ sessions

    def create_session(self, session_id: str | None = None, *, tenant: str = DEFAULT_TENANT,
                       user: str | None = None, metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None) -> Session:
        """A new empty session; ``Conflict`` when the id is taken in this tenant."""
        sid = _check_id(session_id or new_id(), "session_id")
        _check_id(tenant, "tenant")
        _check_user(user)
        now = utcnow()
        session = Session(id=sid, tenant=tenant, user=user, metadata=dict(metadata or {}),
                          state=dict(state or {}), created_at=now, updated_at=now,
                          expires_at=_ttl_deadline(ttl, self.now()), root_id=sid)
        _check_json(session.metadata, "metadata")
        _check_json(session.state, "state")
        self._b_insert_session(session)
        return session

    def get_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> Session:
        """The session; ``NotFound`` when unknown or expired."""
        session = self._b_get_session(tenant, session_id)
        if session is None or session.is_expired(self.now()):
            raise NotFound(f"no session {session_id!r}")
        return session

    def list_sessions(self, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
                      metadata: Mapping[str, Any] | None = None, limit: int = 50,
                      cursor: str | None = None, order: Literal["created", "recent"] = "created",
                      query: str | None = None) -> Page[Session]:
        """Sessions ``limit`` at a time; pass ``next_cursor`` for more (a cursor is only
        good for the ``order`` that made it: another raises ``ValueError``).

        ``order="created"``: oldest created first; ``"recent"``: last changed
        (``updated_at``) first, ties by id descending. ``metadata`` keeps sessions
        whose metadata has those keys with those values. ``query`` keeps sessions
        whose id, a metadata value (as JSON text) or the stored JSON of one of their
        own messages contains it, ASCII letters case-insensitively (a fork is found
        by its own messages; a match in a shared prefix lists the session that owns it).
        """
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        if order not in ("created", "recent"):
            raise ValueError(f"order must be 'created' or 'recent', not {order!r}")
        recent = order == "recent"
        after = _parse_cursor(cursor, order)
        needle = _Needle(query) if query else None
        size = limit if needle is None else max(limit, 100)  # a search reads larger batches
        out: list[Session] = []
        now = self.now()
        while True:
            batch = self._b_list_sessions(tenant, after, size, user, recent=recent)
            kept = [s for s in batch if not s.is_expired(now) and (
                not metadata or all(s.metadata.get(k) == v for k, v in metadata.items()))]
            if needle is not None and kept:
                found = {s.id for s in kept if needle.in_session(s)}
                rest = [s.id for s in kept if s.id not in found]
                if rest:
                    found |= self._b_matching(tenant, rest, needle.json)
                kept = [s for s in kept if s.id in found]
            for s in kept:
                out.append(s)
                if len(out) == limit:
                    return Page(items=out, next_cursor=_make_cursor(order, s))
            if len(batch) < size:
                return Page(items=out, next_cursor=None)
            after = _order_key(batch[-1], recent)

    def update_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                       metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None,
                       expected_version: int | None = None) -> Session:
        """Replace metadata and/or state (whole dicts) or the TTL; bumps the version."""
        if metadata is not None:
            _check_json(metadata, "metadata")
        if state is not None:
            _check_json(state, "state")
        for _ in range(100):
            current = self.get_session(session_id, tenant=tenant)
            if expected_version is not None and current.version != expected_version:
                raise Conflict(f"session {session_id!r} is at version {current.version}, "
                               f"not {expected_version}")
            changes: dict[str, Any] = {"version": current.version + 1, "updated_at": utcnow()}
            if metadata is not None:
                changes["metadata"] = dict(metadata)
            if state is not None:
                changes["state"] = dict(state)
            if ttl is not None:
                changes["expires_at"] = _ttl_deadline(ttl, self.now())
            updated = msgspec.structs.replace(current, **changes)
            if self._b_save_session(updated, current.version):
                return updated
        raise Conflict(f"session {session_id!r} kept changing; try again")

    # ================================================================ appending

    def append(self, session_id: str, messages: Iterable[Message], *,
               tenant: str = DEFAULT_TENANT, expected_version: int | None = None,
               state: dict[str, Any] | None = None, reject_orphans: bool = False) -> int:
        """Append atomically; returns the session's new version.

        Idempotent by message id: a retried append stores nothing twice and
        returns the version of the append that stored the messages. A stale
        ``expected_version`` raises ``Conflict``; an invalid message raises
        ``InvalidMessage`` (path ``$[i]...``) and nothing is stored.
        ``state`` replaces the session's state in the same transaction.
        ``reject_orphans`` refuses a tool result whose ``call_id`` matches no
        call earlier in the conversation (``InvalidMessage`` naming the id).
        """
        if state is not None:
            _check_json(state, "state")
        batch = _validated(messages)
        if not batch:
            return self.get_session(session_id, tenant=tenant).version
        counter = self.counter
        tokens = [cached_count(m, counter) for m in batch]  # outside the transaction
        now = self.now()  # (it may read the store's clock: not inside the transaction)

        def run(tx: AppendTxn) -> int:
            session = tx.session
            if session is None or session.is_expired(now):
                raise NotFound(f"no session {session_id!r}")
            ids = [m.id for m in batch]
            existing = tx.existing(ids)
            inherited = self._inherited_ids(session, [i for i in ids if i not in existing])
            if len(existing) + len(inherited) == len(ids):
                return max(existing.values(), default=session.version)
            if expected_version is not None and expected_version != session.version:
                raise Conflict(f"session {session_id!r} is at version {session.version}, "
                               f"not {expected_version}")
            fresh = [(m, t) for m, t in zip(batch, tokens, strict=True)
                     if m.id not in existing and m.id not in inherited]
            own_calls = {p.id for m, _ in fresh for p in m.parts if type(p) is ToolCall}
            wanted = sorted({p.call_id for m, _ in fresh for p in m.parts
                             if type(p) is ToolResult and p.call_id not in own_calls})
            earlier = tx.calls(wanted) if wanted else {}
            missing = [c for c in wanted if c not in earlier]
            if missing and session.parent_id is not None:
                earlier.update(self._inherited_calls(session, missing))
            groups = Groups(earlier_calls=earlier, prev_reasoning_only=session.ends_reasoning_only)
            version = session.version + 1
            first = session.message_count
            cum = session.token_count
            rows: list[Row] = []
            assets: dict[str, tuple[bytes, str]] = {}
            for k, (m, _t) in enumerate(fresh):
                groups.append(m)
                if reject_orphans and groups.is_orphan(k):
                    unknown = next(p.call_id for p in m.tool_results
                                   if p.call_id not in earlier and p.call_id not in groups.calls())
                    index = batch.index(m)
                    raise InvalidMessage(
                        f"tool result answers call {unknown!r}, which is not earlier in the "
                        "conversation", f"$[{index}].parts")
            # Rows are made once the whole batch is grouped: a later result in the batch
            # clears the group start of every message back to its call (parallel calls
            # stored as consecutive messages are one group).
            for k, (m, t) in enumerate(fresh):
                rows.append(Row(first + k, m.id, m.role, _stored_json(m, assets), t, cum,
                                groups.starts_group(k), groups.is_orphan(k),
                                int(m.kv_status), version))
                cum += t
            calls = {cid: first + k for cid, k in groups.calls().items()}
            clear: tuple[int, int] | None = None
            joined = session.joined
            if groups.clear_from is not None:
                lo = groups.clear_from
                clear = (max(lo, session.fork_seq), first)
                if lo < session.fork_seq:
                    joined = [*joined, [lo, session.fork_seq]]
            updated = msgspec.structs.replace(
                session, version=version, updated_at=utcnow(), message_count=first + len(rows),
                token_count=cum, ends_reasoning_only=groups.ends_reasoning_only, joined=joined,
                state=session.state if state is None else dict(state))
            tx.write(rows, calls, clear, updated, assets)
            return version

        return self._b_append(tenant, session_id, run, [m.id for m in batch])

    # ================================================================ lineage

    def _segments(self, session: Session) -> list[tuple[Session, int, int]]:
        """``(owner, lo, hi)`` for each stretch of positions, newest first: the
        session's own rows, then each ancestor's rows below the fork point."""
        out: list[tuple[Session, int, int]] = []
        current, hi = session, session.message_count
        seen = {session.id}
        while True:
            lo = current.fork_seq if current.parent_id is not None else 0
            if hi > lo:
                out.append((current, lo, hi))
            if current.parent_id is None or lo == 0:
                return out
            if current.parent_id in seen:  # stored by an import of 0.1 (now refused)
                raise NotFound(f"session {session.id!r}: its chain of parents loops back to "
                               f"{current.parent_id!r}")
            seen.add(current.parent_id)
            parent = self._b_get_session(current.tenant, current.parent_id)
            if parent is None:
                raise NotFound(f"session {current.id!r} lost its parent {current.parent_id!r}")
            current, hi = parent, lo

    def _inherited_ids(self, session: Session, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for owner, lo, hi in self._segments(session) if ids else []:
            if owner.id == session.id:
                continue
            for i in ids:
                row = self._b_row_by_id(owner.tenant, owner.id, i)
                if row is not None and lo <= row.seq < hi:
                    found.add(i)
        return found

    def _inherited_calls(self, session: Session, call_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for owner, _lo, hi in self._segments(session):
            if owner.id == session.id:
                continue
            rest = [c for c in call_ids if c not in found]
            if not rest:
                break
            found.update(self._b_find_calls(owner.tenant, owner.id, rest, hi))
        return found

    def _chain_fixups(self, reader: Session, segments: list[tuple[Session, int, int]]
                      ) -> list[tuple[dict[int, int], list[list[int]]]]:
        """For each segment, the status overrides and joined ranges that sessions
        nearer the reader recorded over it (nearest first)."""
        fixes: list[tuple[dict[int, int], list[list[int]]]] = []
        overrides: list[dict[int, int]] = []
        joined: list[list[int]] = []
        if (segments and segments[0][0].id != reader.id and reader.parent_id is not None
                and reader.fork_seq):
            # a fork with no messages of its own has no segment, but its marks and
            # joined ranges still apply to what it inherits
            overrides.append(self._b_overrides(reader.tenant, reader.id))
            joined.extend(reader.joined)
        for owner, _lo, _hi in segments:
            merged: dict[int, int] = {}
            for o in reversed(overrides):  # nearest wins: apply farthest first
                merged.update(o)
            fixes.append((merged, list(joined)))
            if owner.parent_id is not None and owner.fork_seq:
                overrides.append(self._b_overrides(owner.tenant, owner.id))
                joined.extend(owner.joined)
        return fixes

    def _read(self, session: Session, lo: int, hi: int) -> list[Row]:
        """Rows at positions ``[lo, hi)`` as this session sees them, ascending."""
        segments = self._segments(session)
        fixes = self._chain_fixups(session, segments)
        out: list[Row] = []
        for (owner, s_lo, s_hi), (overrides, joined) in zip(segments, fixes, strict=True):
            a, b = max(lo, s_lo), min(hi, s_hi)
            if a >= b:
                continue
            rows = self._b_rows(owner.tenant, owner.id, a, b)
            if overrides or joined:
                rows = [_fix(r, overrides, joined) for r in rows]
            out[:0] = rows
        return out

    def _groups_backward(self, session: Session, first_lo: int | None = None,
                         first_rows: list[Row] | None = None) -> Iterator[list[Row]]:
        """Whole groups, newest first, read in growing batches (the first batch is
        ``first_rows`` when given: rows from some position to the end)."""
        hi = session.message_count
        batch = 64
        lo = max(0, hi - batch) if first_lo is None else max(0, min(first_lo, hi - 1))
        if first_rows is not None:
            lo = first_rows[0].seq if first_rows else hi
        pending: list[Row] = []
        while hi > 0:
            if first_rows is not None:
                seq, first_rows = first_rows, None
            else:
                seq = self._read(session, lo, hi) + pending
            i = len(seq)
            while i > 0:
                j = i - 1
                while j > 0 and not seq[j].cut_ok:
                    j -= 1
                if not seq[j].cut_ok and lo > 0:
                    break  # this group starts before the batch: read further back
                yield seq[j:i]
                i = j
            pending = seq[:i]
            hi, batch = lo, batch * 2
            lo = max(0, hi - batch)

    # ================================================================ reading

    def tail(self, session_id: str, n: int, *, tenant: str = DEFAULT_TENANT,
             include_marked: bool = False) -> list[Message]:
        """The newest ``n`` messages, widened to whole groups (a tool call comes with
        its results); marked and unloaded messages are left out unless asked for."""
        return self._decode(self._tail_rows(session_id, n, tenant, include_marked))

    def tail_json(self, session_id: str, n: int, *, tenant: str = DEFAULT_TENANT,
                  include_marked: bool = False) -> bytes:
        """``tail()`` as a JSON array, the stored JSON passed through undecoded."""
        return _rows_json(self._tail_rows(session_id, n, tenant, include_marked))

    def _tail_rows(self, session_id: str, n: int, tenant: str, include_marked: bool
                   ) -> list[Row]:
        if n < 0:
            raise ValueError("n must be >= 0")
        session = self.get_session(session_id, tenant=tenant)
        chosen: list[Row] = []
        count = 0
        if n:
            for group in self._groups_backward(session, max(0, session.message_count - n - 1)):
                if not _usable(group, include_marked):
                    continue
                chosen[:0] = group
                count += len(group)
                if count >= n:
                    break
        return chosen

    def window(self, session_id: str, max_tokens: int,
               counter: str | TokenCounter | None = None, *, tenant: str = DEFAULT_TENANT,
               keep_system: bool = False) -> list[Message]:
        """The newest messages within ``max_tokens`` (reply priming included), whole
        groups only, never over the budget. With the store's own counter this is an
        indexed read of stored counts; another counter counts what it reads."""
        return self._decode(self._window_rows(session_id, max_tokens, counter, tenant,
                                              keep_system))

    def window_json(self, session_id: str, max_tokens: int,
                    counter: str | TokenCounter | None = None, *,
                    tenant: str = DEFAULT_TENANT, keep_system: bool = False) -> bytes:
        """``window()`` as a JSON array, the stored JSON passed through undecoded."""
        return _rows_json(self._window_rows(session_id, max_tokens, counter, tenant,
                                            keep_system))

    def _window_rows(self, session_id: str, max_tokens: int,
                     counter: str | TokenCounter | None, tenant: str, keep_system: bool
                     ) -> list[Row]:
        if max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        c = self.counter if counter is None else get_counter(counter)
        own = c.name == self.counter.name
        budget = max_tokens - c.priming_tokens
        probe = None
        if own and not keep_system and budget >= 0:
            probe = self._b_window_probe(tenant, session_id, budget)
        first_rows: list[Row] | None = None
        if probe is None:
            session = self.get_session(session_id, tenant=tenant)
        else:
            found, first_rows = probe
            if found is None or found.is_expired(self.now()):
                raise NotFound(f"no session {session_id!r}")
            session = found
            if session.parent_id is not None:  # a fork reads through its ancestors
                first_rows = None
        kept: list[Row] = []
        if keep_system:
            kept = [r for r in self._kept_rows(session) if _usable([r], False)]
            budget -= sum(self._cost(r, c, own) for r in kept)
        if budget < 0:
            return []
        kept_seqs = {r.seq for r in kept}
        first_lo = None
        if own and first_rows is None:
            first_lo = self._seq_at_cum(session, session.token_count - budget)
        chosen: list[list[Row]] = []  # newest group first
        loaded = int(KVStatus.LOADED)
        groups = self._groups_backward(session, None if first_lo is None else first_lo - 1,
                                       first_rows)
        for group in groups:
            if len(group) == 1:  # the common case, without the generic loops
                row = group[0]
                if row.orphan or row.status != loaded:
                    continue
                cost = 0 if row.seq in kept_seqs else self._cost(row, c, own)
            else:
                if not _usable(group, False):
                    continue
                cost = sum(self._cost(r, c, own) for r in group if r.seq not in kept_seqs)
            if cost > budget:
                break
            budget -= cost
            chosen.append(group)
        rows = [r for group in reversed(chosen) for r in group]
        if not kept:
            return rows
        chosen_seqs = {r.seq for r in rows}
        return sorted([r for r in kept if r.seq not in chosen_seqs] + rows, key=lambda r: r.seq)

    def _cost(self, row: Row, counter: TokenCounter, own: bool) -> int:
        if own:
            return row.tokens
        return cached_count(_message_decoder.decode(row.data), counter)

    def _kept_rows(self, session: Session) -> list[Row]:
        out: list[Row] = []
        segments = self._segments(session)
        fixes = self._chain_fixups(session, segments)
        for (owner, lo, hi), (overrides, joined) in zip(segments, fixes, strict=True):
            rows = [r for r in self._b_kept_rows(owner.tenant, owner.id, hi) if r.seq >= lo]
            out[:0] = [_fix(r, overrides, joined) for r in rows]
        return out

    def _seq_at_cum(self, session: Session, cum: int) -> int | None:
        if cum <= 0:
            return 0
        for owner, lo, hi in self._segments(session):
            seq = self._b_seq_at_cum(owner.tenant, owner.id, cum)
            if seq is not None and lo <= seq < hi:
                return seq
            if seq is None or seq >= hi:
                return hi  # the tail of this segment is all that fits
        return 0

    def context(self, session_id: str, head: int, tail: int, *,
                tenant: str = DEFAULT_TENANT) -> list[Message]:
        """What a context window keeps of a session, in order: the first ``head``
        positions, every system and developer message, and the newest ``tail``
        messages (widened to whole groups); marked ones and orphans left out.
        Indexed reads only: the cost does not grow with the session's length."""
        session = self.get_session(session_id, tenant=tenant)
        rows: dict[int, Row] = {}
        if head > 0:
            n = session.message_count
            end = min(head, n)
            first = self._read(session, 0, end)
            while end < n:  # a group that crosses the head's end is read whole
                more = self._read(session, end, min(n, end + 16))
                k = 0
                while k < len(more) and not more[k].cut_ok:
                    k += 1
                first += more[:k]
                end += k
                if k < len(more):
                    break
            i = 0
            while i < len(first):
                j = i + 1
                while j < len(first) and not first[j].cut_ok:
                    j += 1
                if _usable(first[i:j], False):
                    rows.update((r.seq, r) for r in first[i:j])
                i = j
        for r in self._kept_rows(session):
            if _usable([r], False):
                rows[r.seq] = r
        count = 0
        if tail > 0:
            for group in self._groups_backward(session, max(0, session.message_count - tail - 1)):
                if not _usable(group, False):
                    continue
                rows.update((r.seq, r) for r in group)
                count += len(group)
                if count >= tail:
                    break
        return self._decode([rows[k] for k in sorted(rows)])

    def range(self, session_id: str, start: int = 0, stop: int | None = None, *,
              tenant: str = DEFAULT_TENANT, include_marked: bool = True) -> list[Message]:
        """Messages at positions ``[start, stop)`` (0 = oldest), widened to whole
        groups; orphan results are left out, and marked ones unless asked for."""
        return self._decode(self._range_rows(session_id, start, stop, tenant, include_marked))

    def range_json(self, session_id: str, start: int = 0, stop: int | None = None, *,
                   tenant: str = DEFAULT_TENANT, include_marked: bool = True) -> bytes:
        """``range()`` as a JSON array, the stored JSON passed through undecoded."""
        return _rows_json(self._range_rows(session_id, start, stop, tenant, include_marked))

    def _range_rows(self, session_id: str, start: int, stop: int | None, tenant: str,
                    include_marked: bool) -> list[Row]:
        session = self.get_session(session_id, tenant=tenant)
        n = session.message_count
        stop = n if stop is None else min(stop, n)
        if start < 0 or stop < start:
            raise ValueError("need 0 <= start <= stop")
        if start == stop:
            return []
        rows = self._read(session, max(0, start - 64), min(n, stop + 64))
        by_seq = {r.seq: i for i, r in enumerate(rows)}
        a, b = by_seq[start], by_seq[stop - 1] + 1
        while a > 0 and not rows[a].cut_ok:
            a -= 1
        while b < len(rows) and not rows[b].cut_ok:
            b += 1
        if (a == 0 and rows[0].seq > 0 and not rows[0].cut_ok) or (
                b == len(rows) and rows[-1].seq < n - 1):
            rows = self._read(session, 0, n)  # a group longer than the margin: read it all
            a, b = start, stop
            while a > 0 and not rows[a].cut_ok:
                a -= 1
            while b < len(rows) and not rows[b].cut_ok:
                b += 1
        selected = rows[a:b]
        out: list[Row] = []
        i = 0
        while i < len(selected):
            j = i + 1
            while j < len(selected) and not selected[j].cut_ok:
                j += 1
            if _usable(selected[i:j], include_marked):
                out.extend(selected[i:j])
            i = j
        return out

    def get(self, session_id: str, message_id: str, *, tenant: str = DEFAULT_TENANT) -> Message:
        """One message by id; ``NotFound`` when it is not in this session."""
        row = self._find_row(self.get_session(session_id, tenant=tenant), message_id)
        if row is None:
            raise NotFound(f"no message {message_id!r} in session {session_id!r}")
        return self._decode([row])[0]

    def _find_row(self, session: Session, message_id: str) -> Row | None:
        segments = self._segments(session)
        fixes = self._chain_fixups(session, segments)
        for (owner, lo, hi), (overrides, joined) in zip(segments, fixes, strict=True):
            row = self._b_row_by_id(owner.tenant, owner.id, message_id)
            if row is not None and lo <= row.seq < hi:
                return _fix(row, overrides, joined)
        return None

    def count(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        """Messages in the session (marked ones included)."""
        return self.get_session(session_id, tenant=tenant).message_count

    def _decode(self, rows: Sequence[Row]) -> list[Message]:
        return [_decoded(r) for r in rows]

    def get_asset(self, sha256: str, *, tenant: str = DEFAULT_TENANT) -> bytes:
        """The bytes of an attachment stored by this tenant's messages."""
        data = self._b_get_asset(tenant, sha256)
        if data is None:
            raise NotFound(f"no asset {sha256!r}")
        return data

    def resolve(self, messages: Sequence[Message], *, tenant: str = DEFAULT_TENANT
                ) -> list[Message]:
        """Copies of ``messages`` with attachment bytes filled in from the asset storage."""
        from ..model.codec import attach_part

        cache: dict[str, Any] = {}
        assets = _AssetLookup(self, tenant)
        out = []
        for m in messages:
            if m.has_media:
                parts = [attach_part(p, assets, cache) for p in m.parts]
                m = msgspec.structs.replace(m, parts=parts)
            out.append(m)
        return out


# ==================================================================== helpers


class _AssetLookup(Mapping[str, bytes]):
    """A lazy ``sha256 -> bytes`` view of a tenant's assets (for ``attach_part``)."""

    def __init__(self, store: Engine, tenant: str) -> None:
        self.store, self.tenant = store, tenant
        self._cache: dict[str, bytes | None] = {}

    def _load(self, key: str) -> bytes | None:
        if key not in self._cache:
            self._cache[key] = self.store._b_get_asset(self.tenant, key)
        return self._cache[key]

    def __getitem__(self, key: str) -> bytes:
        data = self._load(key)
        if data is None:
            raise KeyError(key)
        return data

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._load(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, v in self._cache.items() if v is not None)

    def __len__(self) -> int:
        return sum(1 for v in self._cache.values() if v is not None)


def _decoded(row: Row) -> Message:
    """The row's message, with the KV status the row records (``mark()`` changes the
    status column, not the stored JSON)."""
    message = _message_decoder.decode(row.data)
    if int(message.kv_status) != row.status:
        message.kv_status = KVStatus(row.status)
    return message


def _rows_json(rows: Sequence[Row]) -> bytes:
    """The rows' messages as a JSON array: what ``encode(self._decode(rows))`` gives,
    without decoding the rows whose stored JSON already has their status. (The stored
    JSON is ``encode(message)``; ``kv_status`` is left out when it is the default, so
    where the joined JSON never names it and every row is loaded, it is the answer.)"""
    loaded = int(KVStatus.LOADED)
    joined = b"[" + b",".join([r.data for r in rows]) + b"]"
    if b'"kv_status":' not in joined and all(r.status == loaded for r in rows):
        return joined
    parts = []
    for r in rows:
        if r.status == loaded and b'"kv_status":' not in r.data:
            parts.append(r.data)
        else:
            parts.append(encode(_decoded(r)))
    return b"[" + b",".join(parts) + b"]"


def _fix(row: Row, overrides: Mapping[int, int], joined: Sequence[Sequence[int]]) -> Row:
    status = overrides.get(row.seq, row.status)
    cut_ok = row.cut_ok and not any(lo <= row.seq < hi for lo, hi in joined)
    if status == row.status and cut_ok == row.cut_ok:
        return row
    return row._replace(status=status, cut_ok=cut_ok)


def _usable(group: Sequence[Row], include_marked: bool) -> bool:
    loaded = int(KVStatus.LOADED)
    return not any(r.orphan or (not include_marked and r.status != loaded) for r in group)


def recent_key(session: Session) -> str:
    """``updated_at`` as fixed-width UTC text: the ``order="recent"`` key every
    backend stores and compares (text order is time order)."""
    return session.updated_at.astimezone(UTC).isoformat(timespec="microseconds")


def _order_key(session: Session, recent: bool) -> tuple[str, str]:
    if recent:
        return recent_key(session), session.id
    return session.created_at.isoformat(), session.id


_cursor_decoder = msgspec.json.Decoder(tuple[str, str, str])


def _make_cursor(order: str, session: Session) -> str:
    """An opaque cursor: base64url of ``[order, key, id]``."""
    key, sid = _order_key(session, order == "recent")
    return base64.urlsafe_b64encode(msgspec.json.encode((order, key, sid))).decode().rstrip("=")


def _parse_cursor(cursor: str | None, order: str) -> tuple[str, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, key, sid = _cursor_decoder.decode(raw)
    except (ValueError, msgspec.DecodeError):
        created, sep, sid = cursor.partition("|")
        if sep and created[:1].isdigit():  # the cursor of older releases: created order
            made_for, key = "created", created
        else:
            raise ValueError(f"bad cursor {cursor!r}") from None
    if made_for != order:
        raise ValueError(f"this cursor is for order={made_for}, not order={order}")
    return key, sid


def like_pattern(needle: str) -> str:
    """A SQL ``LIKE ... ESCAPE '\\'`` pattern: ``needle`` anywhere, taken literally."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class _Needle:
    """A search text: the raw bytes (matched against ids) and the JSON string body
    (matched against stored JSON), ASCII-lowercased like SQL ``LIKE``."""

    __slots__ = ("json", "raw", "raw_json")

    def __init__(self, query: str) -> None:
        if not isinstance(query, str):
            raise ValueError("query must be a string")
        self.json = msgspec.json.encode(query)[1:-1].decode()
        self.raw = query.encode().lower()  # bytes.lower(): ASCII letters only
        self.raw_json = self.json.encode().lower()

    def in_session(self, session: Session) -> bool:
        return self.raw in session.id.encode().lower() or any(
            self.raw_json in msgspec.json.encode(v).lower() for v in session.metadata.values())


def _check_json(value: object, field: str) -> None:
    if not isinstance(value, dict):
        raise InvalidMessage(f"{field} must be a JSON object", f"$.{field}")
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"{field} is not JSON-serializable: {exc}", f"$.{field}") from None


def _validated(messages: Iterable[Message]) -> list[Message]:
    batch: list[Message] = []
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise InvalidMessage(f"expected a Message, got {type(m).__name__}", f"$[{i}]")
        try:
            m.validate()
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        if m.id not in seen:
            seen.add(m.id)
            batch.append(m)
    return batch


def _stored_json(message: Message, assets: dict[str, tuple[bytes, str]]) -> bytes:
    """The message's JSON with attachment bytes moved into ``assets``."""
    if message.has_media:
        found: dict[str, bytes] = {}
        parts = [strip_part(p, found) for p in message.parts]
        if found:
            for att in message.attachments:
                if att.sha256 in found:
                    assets[att.sha256] = (found[att.sha256], att.mime_type)
            message = msgspec.structs.replace(message, parts=parts)
    return encode(message)


_RESULT_MARK = b'"tool_result"'


def closed_spans(own_from: int, rows: Iterable[tuple[int, bytes]],
                 chain: Sequence[tuple[Mapping[str, int], int]]) -> list[tuple[int, int]]:
    """Where the group-start flag of a session's own rows must be clear: ``[lo, hi]``
    position ranges, one per tool result, from just after its call (or the session's
    first own position ``own_from``) to the result. ``rows`` are the session's own
    ``(seq, stored JSON)``; ``chain`` holds the calls of the session and then of each
    ancestor (call id -> position), each with the end of the positions this session
    sees of it. What the stores' schema steps use to mend flags that releases before
    the batch grouping fix stored (a result in a batch did not join the batch's
    earlier messages to its call)."""
    spans: list[tuple[int, int]] = []
    for seq, data in rows:
        if _RESULT_MARK not in data:
            continue
        for part in _message_decoder.decode(data).parts:
            if type(part) is not ToolResult:
                continue
            for calls, end in chain:
                call = calls.get(part.call_id)
                if call is not None and call < min(end, seq):
                    lo = max(call + 1, own_from)
                    if lo <= seq:
                        spans.append((lo, seq))
                    break
    return spans


def regroup_spans(sessions: Mapping[tuple[str, str], Session],
                  rows_of: Callable[[tuple[str, str]], list[tuple[int, bytes]]],
                  calls_of: Callable[[tuple[str, str]], dict[str, int]]
                  ) -> Iterator[tuple[tuple[str, str], int, int]]:
    """``(session key, lo, hi)``: every own position range ``[lo, hi]`` whose group-start
    flag must be clear, over all ``sessions`` (``(tenant, id)`` -> session). A store's
    schema step supplies the reads: ``rows_of`` a session's own rows that carry a tool
    result, ``calls_of`` its calls. Forks look their calls up through their ancestors."""
    cache: dict[tuple[str, str], dict[str, int]] = {}

    def calls(key: tuple[str, str]) -> dict[str, int]:
        if key not in cache:
            cache[key] = calls_of(key)
        return cache[key]

    for key, session in sessions.items():
        rows = rows_of(key)
        if not rows:
            continue
        chain = [(calls(key), session.message_count)]
        current, end = session, session.fork_seq
        seen = {key}
        while current.parent_id is not None and (key[0], current.parent_id) in sessions:
            parent_key = (key[0], current.parent_id)
            if parent_key in seen:  # parent links that loop (an import of 0.1): stop
                break
            seen.add(parent_key)
            chain.append((calls(parent_key), end))
            current = sessions[parent_key]
            if current.parent_id is not None:
                end = min(end, current.fork_seq)
        own_from = session.fork_seq if session.parent_id is not None else 0
        for lo, hi in closed_spans(own_from, rows, chain):
            yield key, lo, hi
