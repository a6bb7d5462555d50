"""The engine's first layer: the store's counter and clock, and sessions.

``Sessions`` creates, reads, lists (cursors, search) and updates sessions on top of
the backend primitives (``backend.py``); the helpers below it make and read the
opaque cursors of ``list_sessions``.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Self

import msgspec

from ..errors import Conflict, InvalidArgument, InvalidMessage, NotFound
from ..model import new_id
from ..model.b64 import decode_base64
from ..tokens import TokenCounter, get_counter
from .backend import Backend, recent_key
from .checks import check_id, check_json, check_user, ttl_deadline
from .clock import StoreClock
from .model import DEFAULT_TENANT, Page, Session, utcnow

__all__ = ["Sessions", "count_listed"]


class Sessions(Backend):
    """The counter, the clock and the sessions; ``Reads`` (``reads.py``) builds on it."""

    def __init__(self, counter: str | TokenCounter | None = None) -> None:
        self.counter: TokenCounter = get_counter(counter)
        self._clock = StoreClock(self._b_clock)

    def now(self, *, fresh: bool = False) -> datetime:
        """The current time by the store's clock, which judges every TTL (``clock.py``):
        PostgreSQL's ``now()``, Redis's ``TIME``; this machine's for SQLite and memory."""
        return self._clock.now(fresh=fresh)

    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ================================================================ sessions

    def create_session(self, session_id: str | None = None, *, tenant: str = DEFAULT_TENANT,
                       user: str | None = None, metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None) -> Session:
        """A new empty session; ``Conflict`` when the id is taken in this tenant."""
        sid = check_id(session_id or new_id(), "session_id")
        check_id(tenant, "tenant")
        check_user(user)
        now = utcnow()
        session = Session(id=sid, tenant=tenant, user=user, metadata=dict(metadata or {}),
                          state=dict(state or {}), created_at=now, updated_at=now,
                          expires_at=ttl_deadline(ttl, self.now()), root_id=sid)
        check_json(session.metadata, "metadata")
        check_json(session.state, "state")
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
        whose metadata has those keys with those values. ``query`` is a word search
        (``search.parse_query``: words, ``"phrases"``, ``prefix*``; ``InvalidArgument``
        naming ``q`` for one without a word): it keeps sessions of which one of their
        own messages matches it (through the store's search index where it has one), or
        whose id or a metadata value (as JSON text) contains its text, ASCII letters
        case-insensitively. A fork is found by its own messages; a match in a shared
        prefix lists the session that owns it. An empty query is no filter.
        """
        if not 1 <= limit <= 1000:
            raise InvalidArgument("limit must be between 1 and 1000")
        if order not in ("created", "recent"):
            raise InvalidArgument(f"order must be 'created' or 'recent', not {order!r}")
        recent = order == "recent"
        after = _parse_cursor(cursor, order)
        if query is not None and not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        matching = self._listing_search(tenant, query) if query else None
        size = limit if matching is None else max(limit, 100)  # a search reads larger batches
        out: list[Session] = []
        now = self.now()
        while True:
            batch = self._b_list_sessions(tenant, after, size, user, recent=recent)
            kept = [s for s in batch if not s.is_expired(now) and (
                not metadata or all(s.metadata.get(k) == v for k, v in metadata.items()))]
            if matching is not None and kept:
                found = matching(kept)
                kept = [s for s in kept if s.id in found]
            for s in kept:
                out.append(s)
                if len(out) == limit:
                    return Page(items=out, next_cursor=_make_cursor(order, s))
            if len(batch) < size:
                return Page(items=out, next_cursor=None)
            after = _order_key(batch[-1], recent)

    def count_sessions(self, *, tenant: str = DEFAULT_TENANT, user: str | None = None,
                       metadata: Mapping[str, Any] | None = None, query: str | None = None,
                       at_most: int | None = None) -> int:
        """How many sessions ``list_sessions`` lists over all its pages with these
        filters (expired ones left out); with ``at_most``, counting stops there.

        Without ``metadata`` and ``query`` the database counts (an index on SQLite and
        PostgreSQL, a set's size on Redis); otherwise this walks the listing, which with
        ``query`` is the search over every session: pass ``at_most`` to bound it.
        """
        if at_most is not None and at_most < 0:
            raise InvalidArgument(f"at_most must be >= 0, got {at_most}")
        if not metadata and not query:
            counted = self._b_count_sessions(tenant, user, self.now())
            if counted is not None:
                return counted if at_most is None else min(counted, at_most)
        return count_listed(functools.partial(self.list_sessions, tenant=tenant, user=user,
                                              metadata=metadata, query=query), at_most)

    def _listing_search(self, tenant: str, query: str
                        ) -> Callable[[Sequence[Session]], set[str]]:
        """``list_sessions``' search: parses ``query`` and returns what keeps, of a batch
        of the tenant's sessions (in listing order, batch after batch), the ids of those
        that match. The engine's ``Browse`` (``browse.py``) implements it."""
        raise NotImplementedError

    def update_session(self, session_id: str, *, tenant: str = DEFAULT_TENANT,
                       metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None,
                       expected_version: int | None = None) -> Session:
        """Replace metadata and/or state (whole dicts) or the TTL; bumps the version."""
        if metadata is not None:
            check_json(metadata, "metadata")
        if state is not None:
            check_json(state, "state")
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
                changes["expires_at"] = ttl_deadline(ttl, self.now())
            updated = msgspec.structs.replace(current, **changes)
            if self._b_save_session(updated, current.version):
                return updated
        raise Conflict(f"session {session_id!r} kept changing; try again")


def count_listed(list_sessions: Callable[..., Page[Session]], at_most: int | None = None
                 ) -> int:
    """The sessions a ``list_sessions`` (any store's, its filters bound) lists over all
    its pages, counted a page of 1,000 at a time; with ``at_most``, counting stops there."""
    total, cursor = 0, None
    while at_most is None or total < at_most:
        page = list_sessions(limit=1000, cursor=cursor)
        total += len(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return total if at_most is None else min(total, at_most)


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
    """The ``(key, id)`` a cursor names; ``InvalidArgument`` for anything ``_make_cursor``
    cannot have made (bad base64, other JSON, a key that is not a time, an id no store
    accepts): a forged cursor is the client's 400, never a driver's error."""
    if not cursor:
        return None
    try:
        raw = decode_base64(cursor)  # strict: a character is never skipped
        made_for, key, sid = _cursor_decoder.decode(raw)
    except (ValueError, msgspec.DecodeError):
        created, sep, sid = cursor.partition("|")
        if sep and created[:1].isdigit():  # the cursor of older releases: created order
            made_for, key = "created", created
        else:
            raise InvalidArgument(f"bad cursor {cursor[:100]!r}") from None
    try:
        datetime.fromisoformat(key)
        check_id(sid, "cursor")
    except (ValueError, InvalidMessage):
        raise InvalidArgument(f"bad cursor {cursor[:100]!r}") from None
    if made_for != order:
        raise InvalidArgument(f"this cursor is for order={made_for}, not order={order}")
    return key, sid
