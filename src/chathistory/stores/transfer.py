"""Export and import: a tenant's sessions as JSON lines, and back.

``Transfer.export`` streams each session and then its own messages (attachments
inline); ``import_`` loads that (continuing sessions that exist, skipping messages
stored already, so it can be retried), and ``check_import`` checks it first,
storing nothing, so that a bad line names itself before anything is written.
A retry also finishes a fork that an import stopped between making it and
giving it its metadata and state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from ..errors import InvalidMessage
from ..model import Message
from . import checks
from .lifecycle import Lifecycle, branch_state
from .model import DEFAULT_TENANT, Session

__all__ = ["Transfer"]


class Transfer(Lifecycle):
    """Export and import; ``BaseStore`` (``base.py``) is this whole stack."""

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
                stored = self._b_get_session(t, session.id)
                if not self._is_live(stored):
                    self._import_session(session, t, path)
                else:
                    assert stored is not None
                    self._finish_fork(stored, session, t)
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
            checks.check_id(tenant, "tenant")
            checks.check_id(session.id, "id")  # as create_session would
            checks.check_user(session.user)
        except InvalidMessage as exc:
            raise exc.under(path) from None
        if check_id is not None:
            check_id(session.id, path + ".id")

    def _finish_fork(self, stored: Session, session: Session, tenant: str) -> None:
        """Give a fork made by an import that stopped before its next step (see
        ``_import_session``) the metadata and state of its line, as the whole import
        would have; a fork whose metadata or state differ from its parent's copy
        has been given them (or changed since) and is left alone."""
        if stored.parent_id is None or stored.parent_id != session.parent_id:
            return
        if (stored.metadata, stored.state) == (session.metadata, session.state):
            return
        parent = self._b_get_session(tenant, stored.parent_id)
        if parent is None or (stored.metadata, stored.state) != (
                parent.metadata, branch_state(parent.state)):
            return
        self.update_session(stored.id, tenant=tenant, metadata=session.metadata,
                            state=session.state)

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
            ends_reasoning_only=False, fork_seq=0, joined=[], root_id=session.id,
            compactions=[], compactions_before=0)
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
