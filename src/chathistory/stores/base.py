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

from collections.abc import Iterable, Iterator

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..model import KVStatus, Message, new_id
from .engine import Engine, _check_id, _check_user, _message_decoder
from .model import DEFAULT_TENANT, Session, utcnow
from .protocol import AppendTxn, Store

__all__ = ["AppendTxn", "BaseStore", "Store"]


class BaseStore(Engine):
    """A store: the engine plus changes, branches, retention, export and import."""

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
        for child in self._b_children(session.tenant, session.id):
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
        now = utcnow()
        child = Session(
            id=sid, tenant=session.tenant, user=session.user, metadata=dict(session.metadata),
            state=dict(session.state), created_at=now, updated_at=now,
            expires_at=session.expires_at, parent_id=session.id, fork_seq=fork_seq,
            root_id=session.root_id or session.id, message_count=fork_seq,
            token_count=token_count, ends_reasoning_only=ends_reasoning,
            joined=[[lo, min(hi, fork_seq)] for lo, hi in session.joined if lo < fork_seq])
        self._b_insert_session(child)
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
        tree = self._b_tree(tenant, session.root_id or session.id)
        return sorted(tree, key=lambda s: (s.created_at, s.id))

    # ================================================================ retention

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

    def _delete_tree(self, tenant: str, session_id: str) -> int:
        deleted = 0
        for child in self._b_children(tenant, session_id):
            deleted += self._delete_tree(tenant, child.id)
        self._b_delete_session(tenant, session_id)
        return deleted + 1

    def purge_expired(self) -> int:
        """Delete sessions past their TTL (and their forks); returns how many."""
        deleted = 0
        tenants: set[str] = set()
        for tenant, sid in self._b_expired(utcnow()):
            if self._b_get_session(tenant, sid) is not None:
                deleted += self._delete_tree(tenant, sid)
                tenants.add(tenant)
        for tenant in tenants:
            self._b_gc_assets(tenant)
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
            yield from batch
            if len(batch) < 200:
                return
            after = (batch[-1].created_at.isoformat(), batch[-1].id)

    def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int:
        """Load ``export()`` output; sessions that exist are continued, messages that
        exist are skipped (by id), so an import can be retried. Returns messages added."""
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

        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = msgspec.json.decode(line)
            except msgspec.DecodeError as exc:
                raise InvalidMessage(f"line {number} is not JSON: {exc}", "$") from None
            kind = record.get("kind") if isinstance(record, dict) else None
            if kind == "session":
                added += flush()
                session = Session.from_dict(record["session"])
                t = tenant or session.tenant
                current = (t, session.id)
                if self._b_get_session(t, session.id) is None:
                    self._import_session(session, t)
            elif kind == "message":
                if current is None or record.get("session_id") != current[1]:
                    raise InvalidMessage(f"line {number}: a message before its session",
                                         "$.session_id")
                from ..model.codec import message_from_builtins

                try:
                    pending.append(message_from_builtins(record["message"]))
                except InvalidMessage as exc:
                    raise exc.under(f"$.line[{number}].message") from None
                if len(pending) >= 500:
                    added += flush()
            else:
                raise InvalidMessage(f"line {number}: unknown kind {kind!r}", "$.kind")
        return added + flush()

    def _import_session(self, session: Session, tenant: str) -> None:
        _check_id(session.id, "session_id")  # as create_session would
        _check_user(session.user)
        if session.parent_id is not None and session.fork_seq:
            parent = self._b_get_session(tenant, session.parent_id)
            if parent is None:
                raise NotFound(f"fork {session.id!r} needs its parent {session.parent_id!r}; "
                               "import the parent first")
            child = self._fork_at(parent, session.fork_seq, session.id)
            self.update_session(child.id, tenant=tenant, metadata=session.metadata,
                                state=session.state)
            return
        fresh = msgspec.structs.replace(
            session, tenant=tenant, version=0, message_count=0, token_count=0,
            ends_reasoning_only=False, fork_seq=0, joined=[], parent_id=session.parent_id,
            root_id=session.root_id or session.id)
        self._b_insert_session(fresh)
