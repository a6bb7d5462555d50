"""The lifecycle of sessions and their messages: changes, branches, retention.

``Lifecycle`` adds to the engine what changes or ends stored history: ``pop``,
``delete_message``, ``clear``, ``mark``; ``fork``, ``edit``, ``lineage``;
``delete_session``, ``erase``, ``purge_expired``; and the reuse of an expired session's
id. A fork shares its parent's rows, so a change that would alter what a live fork sees
is refused.
A branch (a fork, an edit) starts without the parent's bookkeeping about its
messages (``branch_state``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..groups import Groups, is_reasoning_only
from ..model import KVStatus, Message, ToolCall, ToolResult, new_id
from ..model.parts import holds_compaction
from .checks import check_id
from .engine import Engine
from .errors import translate_store_error
from .model import DEFAULT_TENANT, MESSAGE_DECODER, Row, Session, utcnow

__all__ = ["BOOKKEEPING_KEY", "Lifecycle", "branch_state"]

log = logging.getLogger("chathistory.stores")

BOOKKEEPING_KEY = "chathistory"
"""``Session.state`` under this key and keys starting ``chathistory.`` is the library's
bookkeeping about the session's messages: the context window's layout
(``chathistory.window``, with message ids and token positions) and a
``HistoryProvider``'s (``chathistory`` by default: head and live counts, the window,
the summary, evicted ids). Every other key is the application's."""


def branch_state(state: dict[str, Any]) -> dict[str, Any]:
    """The state a fork or an edit's branch starts with: the parent's without its
    bookkeeping (``BOOKKEEPING_KEY``), which names messages the branch may lack and
    counts that are the parent's; the branch's first window plan or provider turn
    makes its own. The application's keys are copied."""
    return {key: value for key, value in state.items()
            if key != BOOKKEEPING_KEY and not key.startswith(BOOKKEEPING_KEY + ".")}


class Lifecycle(Engine):
    """Changes, branches and retention; ``Transfer`` (``transfer.py``) builds on it."""

    # ================================================================ sessions

    def create_session(self, session_id: str | None = None, *, tenant: str = DEFAULT_TENANT,
                       user: str | None = None, metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None) -> Session:
        """A new empty session; ``Conflict`` when the id is taken in this tenant by a
        session that has not expired (an expired one, purged or not, is replaced)."""
        try:
            return super().create_session(session_id, tenant=tenant, user=user,
                                          metadata=metadata, state=state, ttl=ttl)
        except Conflict:
            if session_id is None or not self._drop_expired(tenant, session_id):
                raise
        return super().create_session(session_id, tenant=tenant, user=user,
                                      metadata=metadata, state=state, ttl=ttl)

    def _insert_fresh(self, session: Session) -> None:
        """``_b_insert_session``, replacing an expired session of the same id."""
        try:
            self._b_insert_session(session)
        except Conflict:
            if not self._drop_expired(session.tenant, session.id):
                raise
            self._b_insert_session(session)  # Conflict again: another create won the id

    def _drop_expired(self, tenant: str, session_id: str) -> bool:
        """Delete the session (and its forks, as a purge would) if it has expired;
        False if it is live. An expired session is gone for every route, so its id
        is free: the caller inserts again. Whoever bumps its version first deletes it,
        so two creates racing for the id do not both delete."""
        found = self._b_get_session(tenant, session_id)
        if found is None:
            return True  # purged meanwhile
        if not found.is_expired(self.now()):
            return False
        if self._b_save_session(msgspec.structs.replace(found, version=found.version + 1),
                                found.version):
            self._delete_tree(tenant, session_id)
            self._b_gc_assets(tenant)
        return True

    def _live_children(self, session: Session) -> list[Session]:
        """Sessions forked from this one that have not expired (never itself: parent
        links that loop were stored by imports of 0.1)."""
        now = self.now()
        return [c for c in self._b_children(session.tenant, session.id)
                if c.id != session.id and not c.is_expired(now)]

    # ================================================================ changing

    def pop(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
            expected_version: int | None = None) -> Message | None:
        """Remove and return the newest message (None when empty)."""
        for _ in range(100):
            session = self.get_session(session_id, tenant=tenant)
            if expected_version is not None and session.version != expected_version:
                raise Conflict(f"session {session_id!r} is at version {session.version}, "
                               f"not {expected_version}")
            n = session.message_count
            if n == 0:
                return None
            self._refuse_if_shared(session, n - 1)
            rows = self._read(session, max(0, n - 2), n)
            if not rows or rows[-1].seq != n - 1:
                continue  # emptied or cut since the session was read: read it again
            last = rows[-1]
            before = rows[-2] if len(rows) == 2 else None
            ends_reasoning = False
            if before is not None:
                ends_reasoning = is_reasoning_only(MESSAGE_DECODER.decode(before.data))
            own = session.parent_id is None or last.seq >= session.fork_seq
            joined = [[lo, min(hi, n - 1)] for lo, hi in session.joined if lo < n - 1]
            restore: list[int] = []
            if not last.cut_ok:  # the popped message may have held a group together
                restore, joined = self._regroup_before_pop(session, n, joined)
            compactions, compactions_before = self._compactions_below(session, n - 1)
            updated = msgspec.structs.replace(
                session, version=session.version + 1, updated_at=utcnow(),
                message_count=n - 1, token_count=last.cum_before,
                ends_reasoning_only=ends_reasoning,
                fork_seq=session.fork_seq if own else n - 1, joined=joined,
                compactions=compactions, compactions_before=compactions_before)
            if self._b_truncate(tenant, session_id, last.seq if own else n, updated,
                                session.version, restore):
                return self._decode([last])[0]
        raise Conflict(f"session {session_id!r} kept changing; try again")

    def delete_message(self, session_id: str, message_id: str, *,
                       tenant: str = DEFAULT_TENANT, expected_version: int | None = None
                       ) -> Session:
        """Remove one message from anywhere in the session, at once; returns the session.

        The later messages move down a position, with the same ids, statuses and
        token counts; the groups around the gap are made again as an append of the
        remaining messages would make them: a result whose call was deleted becomes an
        orphan (stored, never sent, as one appended without its call), a call whose
        results were deleted ends its group. One write of the backend
        (``_b_rewrite_from``) at the version read, so a read sees the session before
        or after, and an append made meanwhile is never reordered: it makes the write
        miss, and the deletion starts again from the new state (a backend that can
        holds appends off while the deletion reads and writes: ``_b_held``). The cost
        grows with the messages after the deleted one (each is written again).

        ``NotFound`` when the message is not in the session; ``Conflict`` when it is
        inherited (a fork's prefix: delete it in the session that stores it), when a
        live fork shares its position, or when ``expected_version`` is not the
        session's version."""
        for _ in range(100):
            with self._b_held(tenant, session_id):  # the plan is made on what it writes over
                session = self.get_session(session_id, tenant=tenant)
                if expected_version is not None and session.version != expected_version:
                    raise Conflict(f"session {session_id!r} is at version "
                                   f"{session.version}, not {expected_version}")
                row = self._find_row(session, message_id)
                if row is None:
                    raise NotFound(f"no message {message_id!r} in session {session_id!r}")
                own_from = session.fork_seq if session.parent_id is not None else 0
                if row.seq < own_from:
                    raise Conflict(f"message {message_id!r} of session {session_id!r} is "
                                   f"inherited from {session.parent_id!r}; delete it there")
                self._refuse_if_shared(session, row.seq)
                planned = self._without(session, row.seq, message_id)
                if planned is None:
                    continue  # changed since the session was read: read it again
                start, rows, calls, updated = planned
                if self._b_rewrite_from(tenant, session_id, start, rows, calls, updated,
                                        session.version):
                    return updated
            if expected_version is not None:
                raise Conflict(f"session {session_id!r} changed while message "
                               f"{message_id!r} was being deleted")
        raise Conflict(f"session {session_id!r} kept changing; try again")

    def _without(self, session: Session, pos: int, message_id: str
                 ) -> tuple[int, list[Row], dict[str, int], Session] | None:
        """What deleting the message at ``pos`` writes: the position the rewrite starts
        at (the first of the message's group, or of the session's own rows), the rows
        from there on without it (moved down, running totals and group flags made again
        with ``Groups``, as an append of them would), their calls, and the session.
        None when the stored rows are not those of ``session`` any more."""
        n = session.message_count
        own_from = session.fork_seq if session.parent_id is not None else 0
        start = max(own_from, self._group_of(session, pos)[0])
        stored = self._b_rows(session.tenant, session.id, start, n)
        if (len(stored) != n - start or stored[pos - start].id != message_id
                or any(r.seq != start + k for k, r in enumerate(stored))):
            return None
        gone = stored[pos - start]
        rest = [r for r in stored if r.seq != pos]
        messages = self._decode(rest)
        before = self._read(session, start - 1, start) if start else []
        if start and not before:
            return None
        groups = Groups(earlier_calls=self._calls_before(session, start, messages),
                        prev_reasoning_only=bool(before) and is_reasoning_only(
                            MESSAGE_DECODER.decode(before[0].data)))
        for message in messages:
            groups.append(message)
        rows: list[Row] = []
        cum = stored[0].cum_before
        for k, r in enumerate(rest):
            rows.append(r._replace(seq=start + k, cum_before=cum,
                                   cut_ok=groups.starts_group(k), orphan=groups.is_orphan(k)))
            cum += r.tokens
        calls = {call_id: start + k for call_id, k in groups.calls().items()}
        compactions, compactions_before = self._compactions_without(
            session, pos, holds_compaction(MESSAGE_DECODER.decode(gone.data).parts))
        updated = msgspec.structs.replace(
            session, version=session.version + 1, updated_at=utcnow(), message_count=n - 1,
            token_count=cum, ends_reasoning_only=groups.ends_reasoning_only,
            compactions=compactions, compactions_before=compactions_before)
        return start, rows, calls, updated

    def _calls_before(self, session: Session, start: int, messages: list[Message]
                      ) -> dict[str, int]:
        """Positions below ``start`` of the calls that ``messages``' results answer
        and that they do not make themselves (the session's own, then its ancestors')."""
        made = {p.id for m in messages for p in m.parts if type(p) is ToolCall}
        wanted = sorted({p.call_id for m in messages for p in m.parts
                         if type(p) is ToolResult and p.call_id not in made})
        if not wanted:
            return {}
        found = self._b_find_calls(session.tenant, session.id, wanted, start)
        missing = [c for c in wanted if c not in found]
        if missing and session.parent_id is not None:
            found.update(self._inherited_calls(session, missing))
        return found

    def _compactions_without(self, session: Session, pos: int, held: bool
                             ) -> tuple[list[int], int]:
        """``Session.compactions`` and ``compactions_before`` once the message at ``pos``
        (holding a ``Compaction`` part: ``held``) is deleted: the later positions moved
        down; when it was the only one listed, the newest below it read back."""
        listed, before = session.compactions, session.compactions_before
        moved = [p if p < pos else p - 1 for p in listed if p != pos]
        if pos in listed:
            if not moved and before:
                return self._compactions_below(session, pos)
            return moved, before
        return moved, max(0, before - 1) if held else before

    def _regroup_before_pop(self, session: Session, n: int, joined: list[list[int]]
                            ) -> tuple[list[int], list[list[int]]]:
        """The group boundaries that popping message ``n - 1`` opens again (a result
        gone no longer holds its call's group together): own positions whose stored
        flag is restored, and the joined ranges without the inherited ones."""
        group = self._group_of(session, n - 1)
        start = group[0]
        rows = self._read(session, start, n - 1)
        groups = Groups.of(MESSAGE_DECODER.decode(r.data) for r in rows)
        opened = [r.seq for k, r in enumerate(rows) if not r.cut_ok and groups.starts_group(k)]
        own_from = session.fork_seq if session.parent_id is not None else 0
        restore = [seq for seq in opened if seq >= own_from]
        inherited = {seq for seq in opened if seq < own_from}
        if inherited:
            pieces: list[list[int]] = []
            for lo, hi in joined:  # cut the reopened positions out of the ranges
                a = lo
                for seq in sorted(x for x in inherited if lo <= x < hi):
                    if a < seq:
                        pieces.append([a, seq])
                    a = seq + 1
                if a < hi:
                    pieces.append([a, hi])
            joined = pieces
        return restore, joined

    def clear(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        """Remove every message; returns the new version."""
        for _ in range(100):
            session = self.get_session(session_id, tenant=tenant)
            self._refuse_if_shared(session, 0)
            updated = msgspec.structs.replace(
                session, version=session.version + 1, updated_at=utcnow(), message_count=0,
                token_count=0, ends_reasoning_only=False, fork_seq=0, joined=[],
                compactions=[], compactions_before=0)
            if self._b_truncate(tenant, session_id, 0, updated, session.version):
                self._b_gc_assets(tenant)
                return updated.version
        raise Conflict(f"session {session_id!r} kept changing; try again")

    def _compactions_below(self, session: Session, seq: int) -> tuple[list[int], int]:
        """``Session.compactions`` and ``compactions_before`` for the session's positions
        below ``seq`` (after a pop, or for a fork at ``seq``). They come from the list,
        unless every listed one is at ``seq`` or past it while older ones exist: then a
        read back from the oldest listed counts the others past ``seq`` and stops at the
        newest below it: it reads the rows down to that one, not the whole session."""
        listed, before = session.compactions, session.compactions_before
        below = [p for p in listed if p < seq]
        if below or not before:
            return below, before if below else 0
        start = min(listed[0] if listed else session.message_count, session.message_count)
        for past, p in enumerate(self._compactions_backward(session, start)):
            if p < seq:
                return [p], max(0, before - past - 1)
        return [], 0

    def _compactions_backward(self, session: Session, hi: int) -> Iterator[int]:
        """Positions below ``hi`` of messages holding a ``Compaction`` part, newest first,
        read back in growing batches."""
        batch = 64
        while hi > 0:
            lo = max(0, hi - batch)
            for row in reversed(self._read(session, lo, hi)):
                if b'"compaction"' in row.data and holds_compaction(
                        MESSAGE_DECODER.decode(row.data).parts):
                    yield row.seq
            hi, batch = lo, min(batch * 2, 4096)

    def _refuse_if_shared(self, session: Session, seq: int) -> None:
        for child in self._live_children(session):
            if child.fork_seq > seq:
                raise Conflict(f"fork {child.id!r} shares message {seq} of session "
                               f"{session.id!r}; change the fork instead")

    def mark(self, session_id: str, message_ids: Iterable[str], status: KVStatus, *,
             tenant: str = DEFAULT_TENANT) -> int:
        """Set the KV status of messages, widened to their whole groups (so a read
        never splits a call from its results); returns how many changed."""
        status = KVStatus(status)
        session = self.get_session(session_id, tenant=tenant)
        seqs: set[int] = set()
        for mid in message_ids:
            row = self._find_row(session, mid)
            if row is None:
                raise NotFound(f"no message {mid!r} in session {session_id!r}")
            seqs.update(self._group_of(session, row.seq))
        own = sorted(s for s in seqs if session.parent_id is None or s >= session.fork_seq)
        inherited = sorted(seqs.difference(own))
        self._b_set_status(tenant, session_id, own, int(status), inherited)
        return len(seqs)

    def _group_of(self, session: Session, seq: int) -> list[int]:
        lo, hi = max(0, seq - 64), min(session.message_count, seq + 65)
        while True:
            rows = self._read(session, lo, hi)
            i = seq - lo
            a, b = i, i + 1
            while a > 0 and not rows[a].cut_ok:
                a -= 1
            while b < len(rows) and not rows[b].cut_ok:
                b += 1
            start_found = lo == 0 or rows[a].cut_ok
            end_found = b < len(rows) or hi == session.message_count
            if start_found and end_found:
                return [r.seq for r in rows[a:b]]
            lo, hi = max(0, lo - 256), min(session.message_count, hi + 256)

    # ================================================================ branches

    def fork(self, session_id: str, at_message_id: str | None = None, *,
             tenant: str = DEFAULT_TENANT, new_session_id: str | None = None) -> Session:
        """A new session sharing this one's messages up to and including
        ``at_message_id`` (all of them by default), without copying them. Its
        metadata and state are the parent's, the state without the bookkeeping
        about messages (``branch_state``)."""
        session = self.get_session(session_id, tenant=tenant)
        if at_message_id is None:
            fork_seq = session.message_count
        else:
            row = self._find_row(session, at_message_id)
            if row is None:
                raise NotFound(f"no message {at_message_id!r} in session {session_id!r}")
            fork_seq = row.seq + 1
        return self._fork_at(session, fork_seq, new_session_id)

    def _fork_at(self, session: Session, fork_seq: int, new_session_id: str | None) -> Session:
        token_count, ends_reasoning = 0, False
        if fork_seq:
            last = self._read(session, fork_seq - 1, fork_seq)[0]
            token_count = last.cum_before + last.tokens
            ends_reasoning = is_reasoning_only(MESSAGE_DECODER.decode(last.data))
        sid = check_id(new_session_id or new_id(), "session_id")
        if not 0 <= fork_seq <= session.message_count:
            raise InvalidMessage(f"a fork of {session.id!r} starts at a position from 0 to "
                                 f"{session.message_count}, not {fork_seq}", "$.fork_seq")
        compactions, compactions_before = self._compactions_below(session, fork_seq)
        now = utcnow()
        child = Session(
            id=sid, tenant=session.tenant, user=session.user, metadata=dict(session.metadata),
            state=branch_state(session.state), created_at=now, updated_at=now,
            expires_at=session.expires_at, parent_id=session.id, fork_seq=fork_seq,
            root_id=session.root_id or session.id, message_count=fork_seq,
            token_count=token_count, ends_reasoning_only=ends_reasoning,
            joined=[[lo, min(hi, fork_seq)] for lo, hi in session.joined if lo < fork_seq],
            compactions=compactions, compactions_before=compactions_before)
        self._insert_fresh(child)
        return child

    def edit(self, session_id: str, message_id: str, message: Message, *,
             tenant: str = DEFAULT_TENANT) -> Session:
        """Editing an earlier message makes a branch: a fork that shares everything
        before it and continues with ``message`` (its state as a fork's,
        ``branch_state``). Returns the new session."""
        message.validate()
        session = self.get_session(session_id, tenant=tenant)
        row = self._find_row(session, message_id)
        if row is None:
            raise NotFound(f"no message {message_id!r} in session {session_id!r}")
        child = self._fork_at(session, row.seq, None)
        self.append(child.id, [message], tenant=tenant)
        return self.get_session(child.id, tenant=tenant)

    def lineage(self, session_id: str, *, tenant: str = DEFAULT_TENANT) -> list[Session]:
        """Every branch of this session's tree (the root and all forks), oldest first."""
        session = self.get_session(session_id, tenant=tenant)
        now = self.now()
        tree = [s for s in self._b_tree(tenant, session.root_id or session.id)
                if not s.is_expired(now)]
        return sorted(tree, key=lambda s: (s.created_at, s.id))

    # ================================================================ retention

    def delete_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                       cascade: bool = False) -> None:
        """Delete a session and its messages. Forks share its messages: deleting a
        session that has forks needs ``cascade=True``, which deletes them too (at any
        depth; expired forks go along either way)."""
        session = self.get_session(session_id, tenant=tenant)
        children = self._live_children(session)
        if children and not cascade:
            raise Conflict(f"session {session_id!r} has {len(children)} fork(s) sharing its "
                           "messages; pass cascade=True to delete them too")
        self._delete_tree(tenant, session_id)
        self._b_gc_assets(tenant)

    def erase(self, *, tenant: str, user: str | None = None) -> int:
        """Delete every session (forks included), message and asset of a data
        subject (``user``), or of the whole tenant; returns sessions deleted."""
        deleted = 0
        while True:
            batch = self._b_list_sessions(tenant, None, 100, user)
            if not batch:
                break
            for s in batch:
                if self._b_get_session(tenant, s.id) is not None:
                    deleted += self._delete_tree(tenant, s.id)
        self._b_gc_assets(tenant)
        return deleted

    def _tree_below(self, tenant: str, session_id: str) -> list[str]:
        """The session and every session forked from it at any depth, parents before
        their forks, each once: a walk with a visited set, never a recursion, so a
        deep tree or parent links that loop (stored by imports of 0.1) end."""
        order, seen = [session_id], {session_id}
        for sid in order:  # grows as it goes: breadth first
            for child in self._b_children(tenant, sid):
                if child.id not in seen:
                    seen.add(child.id)
                    order.append(child.id)
        return order

    def _delete_tree(self, tenant: str, session_id: str) -> int:
        order = self._tree_below(tenant, session_id)
        for sid in reversed(order):  # forks first: an interruption leaves no orphan fork
            self._b_delete_session(tenant, sid)
        return len(order)

    def purge_expired(self, *, tenant: str | None = None) -> int:
        """Delete sessions past their TTL by the store's clock (``now``), and their
        forks; only ``tenant``'s when given. Returns how many were deleted.

        One session's failure (data a bug or an older release left broken) is logged
        (``chathistory.stores``, with its tenant and id), counted in the closing log
        line and skipped: it never stops the purge of the others, nor another
        tenant's. An error meaning the store cannot serve (``translate_store_error``)
        stops it."""
        now = self.now(fresh=True)
        deleted = failed = 0
        purged: set[str] = set()
        for owner, sid in self._b_expired(now):
            if tenant is not None and owner != tenant:
                continue
            try:
                found = self._b_get_session(owner, sid)
                if found is not None and found.is_expired(now):
                    deleted += self._delete_tree(owner, sid)
                    purged.add(owner)
            except Exception as exc:
                _tolerate(exc, "purge_expired: session %r of tenant %r could not be deleted; "
                          "going on with the others", sid, owner)
                failed += 1
        for owner in sorted(purged):
            try:
                self._b_gc_assets(owner)
            except Exception as exc:
                _tolerate(exc, "purge_expired: the assets of tenant %r could not be "
                          "collected; going on", owner)
                failed += 1
        if failed:
            log.error("purge_expired: %d session(s) deleted, %d failure(s) (logged above)",
                      deleted, failed)
        return deleted


def _tolerate(exc: Exception, message: str, *args: object) -> None:
    """What ``purge_expired`` does with one step's failure (called in its ``except``):
    an error meaning the store cannot serve (``translate_store_error``) is raised
    again; any other is logged with ``message`` and the purge goes on."""
    if translate_store_error(exc) is not None:
        raise exc
    log.exception(message, *args)
