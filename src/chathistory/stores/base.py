"""``BaseStore``: what every backend subclasses.

The rules (idempotent appends, optimistic concurrency, pair-safe reads, forks
that share their prefix, retention) live in the engine (``engine.py``) and
here (``BaseStore``: changes, branches, retention, export and import), so that
each backend only moves rows by implementing the ``_b_*`` primitives.
Backends are written on their natural (sync) side; ``chathistory.stores.aio``
adapts any of them to ``AsyncStore``.

Every method takes ``tenant``; sessions are keyed by ``(tenant, session_id)``,
so one tenant can never name another's session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..model import KVStatus, Message, new_id
from .engine import Engine, _check_id, _check_user, _message_decoder
from .errors import translate_store_error
from .model import DEFAULT_TENANT, Session, utcnow
from .protocol import AppendTxn, Store

__all__ = ["AppendTxn", "BaseStore", "Store"]

log = logging.getLogger("chathistory.stores")


class BaseStore(Engine):
    """A store: the engine plus changes, branches, retention, export and import."""

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
            last = rows[-1]
            before = rows[-2] if len(rows) == 2 else None
            ends_reasoning = False
            if before is not None:
                from ..groups import is_reasoning_only

                ends_reasoning = is_reasoning_only(_message_decoder.decode(before.data))
            own = session.parent_id is None or last.seq >= session.fork_seq
            joined = [[lo, min(hi, n - 1)] for lo, hi in session.joined if lo < n - 1]
            restore: list[int] = []
            if not last.cut_ok:  # the popped message may have held a group together
                restore, joined = self._regroup_before_pop(session, n, joined)
            updated = msgspec.structs.replace(
                session, version=session.version + 1, updated_at=utcnow(),
                message_count=n - 1, token_count=last.cum_before,
                ends_reasoning_only=ends_reasoning,
                fork_seq=session.fork_seq if own else n - 1, joined=joined)
            if self._b_truncate(tenant, session_id, last.seq if own else n, updated,
                                session.version, restore):
                return self._decode([last])[0]
        raise Conflict(f"session {session_id!r} kept changing; try again")

    def _regroup_before_pop(self, session: Session, n: int, joined: list[list[int]]
                            ) -> tuple[list[int], list[list[int]]]:
        """The group boundaries that popping message ``n - 1`` opens again (a result
        gone no longer holds its call's group together): own positions whose stored
        flag is restored, and the joined ranges without the inherited ones."""
        from ..groups import Groups

        group = self._group_of(session, n - 1)
        start = group[0]
        rows = self._read(session, start, n - 1)
        groups = Groups.of(_message_decoder.decode(r.data) for r in rows)
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
                token_count=0, ends_reasoning_only=False, fork_seq=0, joined=[])
            if self._b_truncate(tenant, session_id, 0, updated, session.version):
                self._b_gc_assets(tenant)
                return updated.version
        raise Conflict(f"session {session_id!r} kept changing; try again")

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
        ``at_message_id`` (all of them by default), without copying them."""
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
            from ..groups import is_reasoning_only

            ends_reasoning = is_reasoning_only(_message_decoder.decode(last.data))
        sid = _check_id(new_session_id or new_id(), "session_id")
        if not 0 <= fork_seq <= session.message_count:
            raise InvalidMessage(f"a fork of {session.id!r} starts at a position from 0 to "
                                 f"{session.message_count}, not {fork_seq}", "$.fork_seq")
        now = utcnow()
        child = Session(
            id=sid, tenant=session.tenant, user=session.user, metadata=dict(session.metadata),
            state=dict(session.state), created_at=now, updated_at=now,
            expires_at=session.expires_at, parent_id=session.id, fork_seq=fork_seq,
            root_id=session.root_id or session.id, message_count=fork_seq,
            token_count=token_count, ends_reasoning_only=ends_reasoning,
            joined=[[lo, min(hi, fork_seq)] for lo, hi in session.joined if lo < fork_seq])
        self._insert_fresh(child)
        return child

    def edit(self, session_id: str, message_id: str, message: Message, *,
             tenant: str = DEFAULT_TENANT) -> Session:
        """Editing an earlier message makes a branch: a fork that shares everything
        before it and continues with ``message``. Returns the new session."""
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
                if translate_store_error(exc) is not None:
                    raise
                failed += 1
                log.exception("purge_expired: session %r of tenant %r could not be deleted; "
                              "going on with the others", sid, owner)
        for owner in sorted(purged):
            try:
                self._b_gc_assets(owner)
            except Exception as exc:
                if translate_store_error(exc) is not None:
                    raise
                failed += 1
                log.exception("purge_expired: the assets of tenant %r could not be "
                              "collected; going on", owner)
        if failed:
            log.error("purge_expired: %d session(s) deleted, %d failure(s) (logged above)",
                      deleted, failed)
        return deleted

    # ================================================================ export / import

    def export(self, *, tenant: str = DEFAULT_TENANT,
               session_ids: Iterable[str] | None = None) -> Iterator[bytes]:
        """JSON lines: each session, then its own messages (attachments inline).
        Streams: memory does not grow with the number of sessions or messages."""
        encoder = msgspec.json.Encoder()
        if session_ids is not None:
            sessions: Iterable[Session] = (self.get_session(s, tenant=tenant)
                                           for s in session_ids)
        else:
            sessions = self._all_sessions(tenant)
        for session in sessions:
            yield encoder.encode({"kind": "session", "session": session.to_dict()}) + b"\n"
            lo = session.fork_seq if session.parent_id is not None else 0
            for start in range(lo, session.message_count, 500):
                rows = self._b_rows(tenant, session.id, start,
                                    min(start + 500, session.message_count))
                for m in self.resolve(self._decode(rows), tenant=tenant):
                    line = {"kind": "message", "session_id": session.id, "message": m}
                    yield encoder.encode(line) + b"\n"

    def _all_sessions(self, tenant: str) -> Iterator[Session]:
        after: tuple[str, str] | None = None
        while True:
            batch = self._b_list_sessions(tenant, after, 200, None)
            now = self.now()
            yield from (s for s in batch if not s.is_expired(now))
            if len(batch) < 200:
                return
            after = (batch[-1].created_at.isoformat(), batch[-1].id)

    def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int:
        """Load ``export()`` output; sessions that exist are continued, messages that
        exist are skipped (by id), so an import can be retried. Returns messages added.

        A list (any ``Sequence``) of lines is checked whole first (``check_import``):
        a bad line then stores nothing. Lines given once (a generator, a file) are
        checked as they come and committed 500 messages at a time, so a bad line
        stops the import there; call ``check_import`` on a first pass to avoid that."""
        if isinstance(lines, Sequence):
            self.check_import(lines, tenant=tenant)
        added = 0
        pending: list[Message] = []
        current: tuple[str, str] | None = None

        def flush() -> int:
            if current is None or not pending:
                return 0
            before = self.get_session(current[1], tenant=current[0]).message_count
            self.append(current[1], pending, tenant=current[0])
            n = self.get_session(current[1], tenant=current[0]).message_count - before
            pending.clear()
            return n

        for number, record in _records(lines):
            if record["kind"] == "session":
                added += flush()
                session = _session_of(record, number)
                t = tenant or session.tenant
                current = (t, session.id)
                path = f"$.line[{number}].session"
                self._check_new_session(session, t, path)  # before a lookup by its id
                if not self._is_live(self._b_get_session(t, session.id)):
                    self._import_session(session, t, path)
            else:
                if current is None or record.get("session_id") != current[1]:
                    raise InvalidMessage(f"line {number}: a message before its session",
                                         f"$.line[{number}].session_id")
                pending.append(_message_of(record, number))
                if len(pending) >= 500:
                    added += flush()
        return added + flush()

    def check_import(self, lines: Iterable[bytes | str], *, tenant: str | None = None,
                     check_id: Callable[[str, str], object] | None = None) -> None:
        """Check ``export()`` output before importing it, storing nothing: each line
        is JSON of a known kind; each message follows its session line and is valid;
        each session to be created has an id ``create_session`` accepts (and that
        ``check_id(id, path)`` accepts; the server passes its URL rule), and a fork
        names a parent stored or earlier in the lines (so parent links never loop: a
        session is never its own ancestor) and starts within it (``0 <= fork_seq <=``
        the parent's messages). Raises ``InvalidMessage`` naming the line and field
        (``$.line[3].session.parent_id``). Sessions that exist are continued by an
        import, so only their messages are checked."""
        counts: dict[tuple[str, str], int] = {}  # session -> messages it will have at most
        current: tuple[str, str] | None = None
        for number, record in _records(lines):
            if record["kind"] == "message":
                if current is None or record.get("session_id") != current[1]:
                    raise InvalidMessage(f"line {number}: a message before its session",
                                         f"$.line[{number}].session_id")
                _message_of(record, number)
                counts[current] += 1
                continue
            session = _session_of(record, number)
            t = tenant or session.tenant
            current = (t, session.id)
            if current in counts:
                continue  # the same session again: continued
            path = f"$.line[{number}].session"
            self._check_new_session(session, t, path)  # before a lookup by its id
            stored = self._b_get_session(t, session.id)
            if self._is_live(stored):
                assert stored is not None
                counts[current] = stored.message_count
                continue
            if check_id is not None:
                check_id(session.id, path + ".id")
            if session.parent_id is None:
                counts[current] = 0
                continue
            parent_key = (t, session.parent_id)
            if parent_key in counts:
                parent_count = counts[parent_key]
            else:
                parent = self._b_get_session(t, session.parent_id)
                if not self._is_live(parent):
                    raise _unknown_parent(session, path)
                assert parent is not None
                parent_count = parent.message_count
            _check_fork_seq(session, parent_count, path)
            counts[current] = session.fork_seq

    def _is_live(self, session: Session | None) -> bool:
        return session is not None and not session.is_expired(self.now())

    @staticmethod
    def _check_new_session(session: Session, tenant: str, path: str,
                           check_id: Callable[[str, str], object] | None = None) -> None:
        try:
            _check_id(tenant, "tenant")
            _check_id(session.id, "id")  # as create_session would
            _check_user(session.user)
        except InvalidMessage as exc:
            raise exc.under(path) from None
        if check_id is not None:
            check_id(session.id, path + ".id")

    def _import_session(self, session: Session, tenant: str, path: str) -> None:
        self._check_new_session(session, tenant, path)
        if session.parent_id is not None:  # a fork, also at position 0
            parent = self._b_get_session(tenant, session.parent_id)
            if not self._is_live(parent):
                raise _unknown_parent(session, path)
            assert parent is not None
            _check_fork_seq(session, parent.message_count, path)
            child = self._fork_at(parent, session.fork_seq, session.id)
            self.update_session(child.id, tenant=tenant, metadata=session.metadata,
                                state=session.state)
            return
        fresh = msgspec.structs.replace(
            session, tenant=tenant, version=0, message_count=0, token_count=0,
            ends_reasoning_only=False, fork_seq=0, joined=[], root_id=session.id)
        self._insert_fresh(fresh)


def _records(lines: Iterable[bytes | str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of each non-blank line, its kind checked."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
            raise InvalidMessage(f"line {number} is not JSON: {exc}",
                                 f"$.line[{number}]") from None
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind not in ("session", "message"):
            raise InvalidMessage(f"line {number}: unknown kind {kind!r}",
                                 f"$.line[{number}].kind")
        yield number, record


def _session_of(record: dict[str, Any], number: int) -> Session:
    path = f"$.line[{number}].session"
    data = record.get("session")
    if not isinstance(data, dict):
        raise InvalidMessage(f"line {number}: a session record needs a session object", path)
    try:
        return Session.from_dict(data)
    except InvalidMessage as exc:
        raise exc.under(path) from None


def _message_of(record: dict[str, Any], number: int) -> Message:
    from ..model.codec import message_from_builtins

    data = record.get("message")
    if not isinstance(data, dict):
        raise InvalidMessage(f"line {number}: a message record needs a message object",
                             f"$.line[{number}].message")
    try:
        return message_from_builtins(data)
    except InvalidMessage as exc:
        raise exc.under(f"$.line[{number}].message") from None


def _unknown_parent(session: Session, path: str) -> InvalidMessage:
    if session.parent_id == session.id:
        return InvalidMessage(f"session {session.id!r} names itself as its parent",
                              path + ".parent_id")
    return InvalidMessage(f"fork {session.id!r} needs its parent {session.parent_id!r}, which "
                          "is neither stored nor earlier in the import (an export lists "
                          "parents before their forks)", path + ".parent_id")


def _check_fork_seq(session: Session, parent_count: int, path: str) -> None:
    if not 0 <= session.fork_seq <= parent_count:
        raise InvalidMessage(f"fork {session.id!r} starts at position {session.fork_seq} of "
                             f"{session.parent_id!r}, which has {parent_count} message(s)",
                             path + ".fork_seq")
