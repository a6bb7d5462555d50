"""The engine's append path: validation, grouping into rows, assets.

``Appending.append`` validates a batch, counts its tokens, and inside the backend's
transaction (``_b_append``) skips what is stored already (a retry, also through a
fork's ancestors), groups the batch after the stored prefix, and writes the rows,
their calls and their attachments (moved out of the stored JSON) at once.

A message whose id is stored must be the one stored (``checks.reused_field``), or the
batch is refused (``IdReused``). The stored rows of those ids are read after the
transaction that found them, which then runs again: only a retry pays for the
reads, and no lock is held while they are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..errors import Conflict, IdReused, InvalidMessage, NotFound
from ..groups import Groups
from ..model import Message, ToolCall, ToolResult
from ..model.codec import encode, strip_part
from ..model.parts import holds_compaction
from ..tokens import cached_count
from .backend import AppendTxn
from .checks import check_json, reused_field, validated
from .model import COMPACTIONS_KEPT, DEFAULT_TENANT, Row, Session, utcnow
from .reads import Reads

__all__ = ["Appending"]

_RECHECKS = 8
"""Times an append reads stored rows of its ids and runs again before it gives up (a
row its read found is deleted and its id appended again in between, each time)."""


class _Resent(Exception):
    """Raised out of an append's transaction: these ids of the batch are stored, and
    their rows must be compared with the batch before anything is written."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__(ids)
        self.ids = ids


class Appending(Reads):
    """Appends; ``Engine`` (``engine.py``) is this whole stack."""

    def append(self, session_id: str, messages: Iterable[Message], *,
               tenant: str = DEFAULT_TENANT, expected_version: int | None = None,
               state: dict[str, Any] | None = None, reject_orphans: bool = False) -> int:
        """Append atomically; returns the session's new version.

        Idempotent by message id: a retried append stores nothing twice and
        returns the version of the append that stored the messages. A message
        whose id is stored with other content (``created_at``, KV fields and token
        counts aside), or repeated in the batch with other content, raises
        ``IdReused`` naming the id and the field, and nothing is stored. A stale
        ``expected_version`` raises ``Conflict``; an invalid message raises
        ``InvalidMessage`` (path ``$[i]...``) and nothing is stored.
        ``state`` replaces the session's state in the same transaction.
        ``reject_orphans`` refuses a tool result whose ``call_id`` matches no
        call earlier in the conversation (``InvalidMessage`` naming the id).
        """
        if state is not None:
            check_json(state, "state")
        batch = validated(messages)
        if not batch:
            return self.get_session(session_id, tenant=tenant).version
        counter = self.counter
        tokens = [cached_count(m, counter) for m in batch]  # outside the transaction
        now = self.now()  # (it may read the store's clock: not inside the transaction)
        ids = [m.id for m in batch]
        sent = dict(zip(ids, batch, strict=True))
        checked: dict[str, int] = {}  # stored ids found the same: id -> version of the row

        def run(tx: AppendTxn) -> int:
            session = tx.session
            if session is None or session.is_expired(now):
                raise NotFound(f"no session {session_id!r}")
            existing = tx.existing(ids)
            unchecked = [i for i, v in existing.items() if checked.get(i) != v]
            if unchecked:
                raise _Resent(unchecked)
            inherited = self._inherited_rows(session, [i for i in ids if i not in existing])
            for row in inherited.values():
                self._check_resent(row, sent[row.id])
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
            compactions, before = _noted_compactions(session, [
                first + k for k, (m, _t) in enumerate(fresh) if holds_compaction(m.parts)])
            updated = msgspec.structs.replace(
                session, version=version, updated_at=utcnow(), message_count=first + len(rows),
                token_count=cum, ends_reasoning_only=groups.ends_reasoning_only, joined=joined,
                state=session.state if state is None else dict(state),
                compactions=compactions, compactions_before=before)
            tx.write(rows, calls, clear, updated, assets)
            return version

        for _ in range(_RECHECKS):
            try:
                return self._b_append(tenant, session_id, run, ids)
            except _Resent as resent:
                for message_id in resent.ids:
                    row = self._b_row_by_id(tenant, session_id, message_id)
                    if row is not None:  # (None: deleted since; the next run sees it so)
                        self._check_resent(row, sent[message_id])
                        checked[message_id] = row.version
        raise Conflict(f"session {session_id!r} kept changing under the batch's ids; "
                       "try again")

    def _check_resent(self, row: Row, message: Message) -> None:
        """``IdReused`` unless ``message`` is the one ``row`` stores, sent again."""
        field = reused_field(self._decode([row])[0], message)
        if field is not None:
            raise IdReused(message.id, field)

    def _inherited_rows(self, session: Session, ids: Sequence[str]) -> dict[str, Row]:
        """Of ``ids``, the rows a fork inherits from its ancestors, by id."""
        found: dict[str, Row] = {}
        for owner, lo, hi in self._segments(session) if ids else []:
            if owner.id == session.id:
                continue
            for i in ids:
                row = self._b_row_by_id(owner.tenant, owner.id, i)
                if row is not None and lo <= row.seq < hi:
                    found[i] = row
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


def _noted_compactions(session: Session, positions: list[int]) -> tuple[list[int], int]:
    """The session's compaction bookkeeping with ``positions`` (new messages holding a
    ``Compaction``) added: the newest ``COMPACTIONS_KEPT`` listed, the others counted."""
    listed, before = session.compactions, session.compactions_before
    if not positions:
        return listed, before
    listed = [*listed, *positions]
    dropped = max(0, len(listed) - COMPACTIONS_KEPT)
    return listed[dropped:], before + dropped


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
