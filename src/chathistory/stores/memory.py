"""MemoryStore: the reference implementation and the test double.

Everything lives in dicts behind one lock; nothing survives the process.
Every other backend must behave exactly like this one (the conformance suite
runs them all).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

from ..errors import Conflict
from ..model import KEPT_ROLES
from ..tokens import TokenCounter
from .backend import AppendTxn, recent_key
from .base import BaseStore
from .model import Row, Session

__all__ = ["MemoryStore"]

T = TypeVar("T")
Key = tuple[str, str]


class _Txn(AppendTxn):
    def __init__(self, store: MemoryStore, key: Key) -> None:
        self.store, self.key = store, key
        self.session = store._sessions.get(key)

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        index = self.store._ids.get(self.key, {})
        rows = self.store._rows.get(self.key, [])
        return {i: rows[index[i]].version for i in ids if i in index}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        calls = self.store._calls.get(self.key, {})
        return {c: calls[c] for c in call_ids if c in calls}

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        s = self.store
        own = s._rows.setdefault(self.key, [])
        index = s._ids.setdefault(self.key, {})
        if clear is not None and own:
            base = own[0].seq
            for seq in range(clear[0], clear[1]):
                if 0 <= seq - base < len(own):
                    own[seq - base] = own[seq - base]._replace(cut_ok=False)
        kept = s._kept.setdefault(self.key, [])
        for row in rows:
            index[row.id] = len(own)
            if row.role in KEPT_ROLES:
                kept.append(len(own))
            own.append(row)
        s._calls.setdefault(self.key, {}).update(calls)
        tenant_assets = s._assets.setdefault(self.key[0], {})
        for sha, value in assets.items():
            tenant_assets.setdefault(sha, value)
            s._refs.setdefault(self.key, set()).add(sha)
        s._sessions[self.key] = session


class MemoryStore(BaseStore):
    """An in-process store (``memory://``)."""

    def __init__(self, counter: str | TokenCounter | None = None) -> None:
        super().__init__(counter)
        self._lock = threading.RLock()
        self._sessions: dict[Key, Session] = {}
        self._rows: dict[Key, list[Row]] = {}
        self._ids: dict[Key, dict[str, int]] = {}
        self._calls: dict[Key, dict[str, int]] = {}
        self._overrides: dict[Key, dict[int, int]] = {}
        self._assets: dict[str, dict[str, tuple[bytes, str]]] = {}
        self._refs: dict[Key, set[str]] = {}
        self._kept: dict[Key, list[int]] = {}  # indexes of own system/developer rows

    # sessions
    def _b_insert_session(self, session: Session) -> None:
        with self._lock:
            key = (session.tenant, session.id)
            if key in self._sessions:
                raise Conflict(f"session {session.id!r} exists")
            self._sessions[key] = session

    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        return self._sessions.get((tenant, session_id))

    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        with self._lock:
            key = (session.tenant, session.id)
            current = self._sessions.get(key)
            if current is None or current.version != expected_version:
                return False
            self._sessions[key] = session
            return True

    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        # the simplest correct thing: sort the tenant's sessions on every call
        with self._lock:
            found = [s for (t, _), s in self._sessions.items()
                     if t == tenant and (user is None or s.user == user)]
        if recent:
            keyed = sorted(((recent_key(s), s.id), s) for s in found)
            keyed.reverse()
            return [s for k, s in keyed if after is None or k < after][:limit]
        keyed = sorted(((s.created_at.isoformat(), s.id), s) for s in found)
        return [s for k, s in keyed if after is None or k > after][:limit]

    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        with self._lock:
            return [s for (t, _), s in self._sessions.items()
                    if t == tenant and s.parent_id == session_id]

    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        with self._lock:
            return [s for (t, _), s in self._sessions.items()
                    if t == tenant and (s.root_id or s.id) == root_id]

    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        with self._lock:
            key = (tenant, session_id)
            for table in (self._sessions, self._rows, self._ids, self._calls, self._overrides,
                          self._refs, self._kept):
                table.pop(key, None)

    # messages
    def _b_append(self, tenant: str, session_id: str, fn: Callable[[_Txn], T],
                  ids: Sequence[str] = ()) -> T:
        with self._lock:
            return fn(_Txn(self, (tenant, session_id)))

    def _own(self, tenant: str, session_id: str) -> list[Row]:
        return self._rows.get((tenant, session_id), [])

    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        with self._lock:
            own = self._own(tenant, session_id)
            if not own:
                return []
            base = own[0].seq
            return own[max(0, lo - base):max(0, hi - base)]

    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        with self._lock:
            own = self._own(tenant, session_id)
            i = bisect_left(own, cum, key=lambda r: r.cum_before)
            return own[i].seq if i < len(own) else None

    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        with self._lock:
            own = self._own(tenant, session_id)
            return [own[i] for i in self._kept.get((tenant, session_id), [])
                    if i < len(own) and own[i].seq < hi and own[i].role in KEPT_ROLES]

    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        with self._lock:
            i = self._ids.get((tenant, session_id), {}).get(message_id)
            return None if i is None else self._own(tenant, session_id)[i]

    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        with self._lock:
            calls = self._calls.get((tenant, session_id), {})
            return {c: calls[c] for c in call_ids if c in calls and calls[c] < hi}

    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        with self._lock:
            own = self._own(tenant, session_id)
            if own:
                base = own[0].seq
                for seq in seqs:
                    own[seq - base] = own[seq - base]._replace(status=status)
            if overrides:
                table = self._overrides.setdefault((tenant, session_id), {})
                table.update(dict.fromkeys(overrides, status))

    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        with self._lock:
            return dict(self._overrides.get((tenant, session_id), {}))

    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        with self._lock:
            key = (tenant, session_id)
            current = self._sessions.get(key)
            if current is None or current.version != expected_version:
                return False
            own = self._rows.get(key, [])
            if own:
                keep = max(0, seq - own[0].seq)
                del own[keep:]
                base = own[0].seq if own else 0
                for at in restore:
                    own[at - base] = own[at - base]._replace(cut_ok=True)
                self._ids[key] = {r.id: i for i, r in enumerate(own)}
                self._kept[key] = [i for i in self._kept.get(key, []) if i < len(own)]
            self._calls[key] = {c: s for c, s in self._calls.get(key, {}).items() if s < seq}
            if seq == 0:
                self._overrides.pop(key, None)
                self._refs.pop(key, None)
            self._sessions[key] = session
            return True

    @contextmanager
    def _b_held(self, tenant: str, session_id: str) -> Iterator[None]:
        with self._lock:
            yield

    def _b_rewrite_from(self, tenant: str, session_id: str, seq: int, rows: Sequence[Row],
                        calls: dict[str, int], session: Session, expected_version: int
                        ) -> bool:
        with self._lock:
            key = (tenant, session_id)
            current = self._sessions.get(key)
            if current is None or current.version != expected_version:
                return False
            own = self._rows.setdefault(key, [])
            keep = max(0, seq - own[0].seq) if own else 0
            own[keep:] = rows
            self._ids[key] = {r.id: i for i, r in enumerate(own)}
            self._kept[key] = [i for i, r in enumerate(own) if r.role in KEPT_ROLES]
            kept_calls = {c: s for c, s in self._calls.get(key, {}).items() if s < seq}
            self._calls[key] = {**kept_calls, **calls}
            self._sessions[key] = session
            return True

    # assets and retention
    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        found = self._assets.get(tenant, {}).get(sha256)
        return None if found is None else found[0]

    def _b_gc_assets(self, tenant: str) -> int:
        with self._lock:
            used: set[str] = set()
            for (t, _), refs in self._refs.items():
                if t == tenant:
                    used |= refs
            assets = self._assets.get(tenant, {})
            gone = [sha for sha in assets if sha not in used]
            for sha in gone:
                del assets[sha]
            return len(gone)

    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        with self._lock:
            return [k for k, s in self._sessions.items() if s.is_expired(now)]
