"""The engine's reads: pair-safe, through a fork's ancestors.

``Reads`` walks a session's segments (its own rows, then each ancestor's below the
fork point) with the fixups nearer sessions recorded (status overrides, joined
ranges), and serves ``tail``, ``window``, ``range``, ``context``, ``since_compaction``
and ``get`` from whole groups only, so a read never splits a tool call from its
results. The ``*_json`` reads pass the stored JSON through undecoded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from ..errors import InvalidArgument, NotFound
from ..model import KVStatus, Message
from ..model.codec import encode
from ..tokens import TokenCounter, cached_count, get_counter
from .model import DEFAULT_TENANT, MESSAGE_DECODER, Row, Session
from .sessions import Sessions

__all__ = ["Reads"]


class Reads(Sessions):
    """Reads; ``Appending`` (``append.py``) builds on it."""

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
            current, hi = parent, min(hi, lo)  # a fork below its parent's own fork point

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
            raise InvalidArgument("n must be >= 0")
        probe = self._b_tail_probe(tenant, session_id, n + 1) if n else None
        session, first_rows = self._probed(probe, session_id, tenant)
        chosen: list[Row] = []
        count = 0
        if n and session.message_count:
            first_lo = max(0, session.message_count - n - 1)
            if first_rows is None:  # the walk's first batch, read here to try the fast path
                first_rows = self._read(session, first_lo, session.message_count)
            fast = whole_tail(first_rows, n, session.message_count, include_marked)
            if fast is not None:
                return fast
            groups = self._groups_backward(session, first_lo, first_rows)
            for group in groups:
                if not _usable(group, include_marked):
                    continue
                chosen[:0] = group
                count += len(group)
                if count >= n:
                    break
        return chosen

    def _probed(self, probe: tuple[Session | None, list[Row]] | None, session_id: str,
                tenant: str) -> tuple[Session, list[Row] | None]:
        """The session and the newest rows a probe read with it (None: read them as
        usual, also for a fork, which reads through its ancestors); without a probe,
        the session alone."""
        if probe is None:
            return self.get_session(session_id, tenant=tenant), None
        found, rows = probe
        if found is None or found.is_expired(self.now()):
            raise NotFound(f"no session {session_id!r}")
        return found, (rows if rows and found.parent_id is None else None)

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
            raise InvalidArgument("max_tokens must be >= 0")
        c = self.counter if counter is None else get_counter(counter)
        own = c.name == self.counter.name
        budget = max_tokens - c.priming_tokens
        probe = None
        if own and not keep_system and budget >= 0:
            probe = self._b_window_probe(tenant, session_id, budget)
        session, first_rows = self._probed(probe, session_id, tenant)
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
        if own and not keep_system and session.message_count:
            if first_rows is None:  # the walk's first batch, read here to try the fast path
                lo = 0 if first_lo is None else max(0, min(first_lo - 1,
                                                           session.message_count - 1))
                first_rows = self._read(session, lo, session.message_count)
            fast = whole_window(first_rows, budget, session.message_count)
            if fast is not None:
                return fast
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
        return cached_count(MESSAGE_DECODER.decode(row.data), counter)

    def _kept_rows(self, session: Session, below: int | None = None) -> list[Row]:
        """The session's system and developer rows (only those below ``below``)."""
        out: list[Row] = []
        segments = self._segments(session)
        fixes = self._chain_fixups(session, segments)
        for (owner, lo, hi), (overrides, joined) in zip(segments, fixes, strict=True):
            if below is not None:
                hi = min(hi, below)
                if hi <= lo:
                    continue
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

    def since_compaction(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                         keep_system: bool = False) -> list[Message]:
        """What a provider reads after its last compaction, as ``History.since_compaction``
        gives it: the newest message holding a ``Compaction`` part and everything after
        it (widened back to whole groups, orphans left out, marked ones kept, as
        ``range``); the whole session when there is none. With ``keep_system`` the
        system and developer messages before it come first.

        The session records where its newest compactions are (``Session.compactions``),
        so this reads only the rows from there on: the cost does not grow with what
        the compaction stands for."""
        return self._decode(self._since_compaction_rows(session_id, tenant, keep_system))

    def since_compaction_json(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                              keep_system: bool = False) -> bytes:
        """``since_compaction()`` as a JSON array, the stored JSON passed through undecoded."""
        return _rows_json(self._since_compaction_rows(session_id, tenant, keep_system))

    def _since_compaction_rows(self, session_id: str, tenant: str, keep_system: bool
                               ) -> list[Row]:
        session = self.get_session(session_id, tenant=tenant)
        at = session.compactions[-1] if session.compactions else 0
        chosen: list[Sequence[Row]] = []  # newest group first
        start = at
        for group in self._groups_backward(session, at):
            start = group[0].seq
            if _usable(group, True):
                chosen.append(group)
            if start <= at:
                break
        rows = [r for group in reversed(chosen) for r in group]
        if keep_system and start > 0:
            rows[:0] = self._kept_rows(session, below=start)
        return rows

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
            for group in _groups(first):
                if _usable(group, False):
                    rows.update((r.seq, r) for r in group)
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
            if start > n:
                raise InvalidArgument(f"start ({start}) is past the session's end "
                                      f"({n} messages)")
            raise InvalidArgument("need 0 <= start <= stop")
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
        for group in _groups(selected):
            if _usable(group, include_marked):
                out.extend(group)
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

    def __init__(self, store: Reads, tenant: str) -> None:
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
    message = MESSAGE_DECODER.decode(row.data)
    if message.kv_status != row.status:  # an IntEnum: equal to its int
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


def _groups(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    """``rows`` cut before each row that starts a group (``cut_ok``), in order; the
    first row begins the first piece whatever its flag."""
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and not rows[j].cut_ok:
            j += 1
        yield rows[i:j]
        i = j


def whole_tail(rows: list[Row], n: int, count: int, include_marked: bool) -> list[Row] | None:
    """``tail``'s fast path: the newest ``n`` of ``rows`` (the newest rows of a session of
    ``count`` messages, in order) when each of them is a whole group of its own that
    the read keeps (plain chat: every message may start a selection, none is marked or
    an orphan), which is then what walking the groups gives; None otherwise, and the
    walk decides. It takes 3-4 us off every backend's ``tail(sid, 20)`` (Redis 125 ->
    122 us, SQLite 53 -> 50, memory 23 -> 20: bench/README.md, "Fast paths kept").
    ``tests/stores/test_tail_fast_path.py`` checks it against the walk."""
    start = len(rows) - n
    if start < 0:  # the whole session, if these rows are all of it
        if not rows or rows[0].seq != 0:
            return None
        start = 0
    if rows[-1].seq != count - 1 or rows[-1].seq - rows[start].seq != len(rows) - 1 - start:
        return None  # not the newest rows, or not one after the other
    tail = rows[start:]
    if not all(r.cut_ok for r in tail) or not _usable(tail, include_marked):
        return None
    return tail


def whole_window(rows: list[Row], budget: int, count: int) -> list[Row] | None:
    """``window``'s fast path (the store's own counts, no ``keep_system``): the newest
    of ``rows`` (the newest rows of a session of ``count`` messages, in order) within
    ``budget`` tokens, when every row it walks back over is a whole group of its own
    (plain chat), which is then what walking the groups gives: marked, unloaded and
    orphan rows left out, the walk stopped at the first row over what is left of the
    budget. None otherwise (a group of several rows, or every row fitting with more
    rows before them), and the walk decides. ``tests/stores/test_tail_fast_path.py``
    checks it against the walk."""
    if not rows or rows[-1].seq != count - 1 or rows[-1].seq - rows[0].seq != len(rows) - 1:
        return None  # not the newest rows, or not one after the other
    chosen: list[Row] = []
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i]
        if not row.cut_ok:
            return None
        if row.orphan or row.status != _LOADED:
            continue
        if row.tokens > budget:
            break
        budget -= row.tokens
        chosen.append(row)
    else:
        if rows[0].seq != 0:  # all of them fit: older rows might too
            return None
    chosen.reverse()
    return chosen


def _usable(group: Sequence[Row], include_marked: bool) -> bool:
    for r in group:  # noqa: SIM110 (a loop, not all(): this runs for every group read)
        if r.orphan or (r.status != _LOADED and not include_marked):
            return False
    return True


_LOADED = int(KVStatus.LOADED)
