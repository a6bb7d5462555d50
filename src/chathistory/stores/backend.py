"""The backend contract: what a store backend implements, and nothing else.

The engine (``engine.py`` and the modules it is built from) holds every rule:
idempotent appends, optimistic concurrency, pair-safe reads, forks, retention.
A backend only moves rows, through the primitives below. ``Backend`` declares
them abstract, so a backend that misses one fails when it is constructed
(``TypeError``), not at its first call. Subclass ``BaseStore`` (which is a
``Backend``), implement every abstract method here, and run the conformance
suite (``tests/stores/test_conformance.py``) over the result. A backend that holds
connections also overrides ``close()``.

Words the contracts use:

- A session's **own rows** are the rows stored under its ``(tenant, id)``: every
  position from 0 for a root, from ``fork_seq`` on for a fork. A fork never copies
  its parent's rows; the engine reads them from the parent (and checks the
  positions), so a primitive only ever sees the session it is named for.
- A **position** (``seq``) counts from 0 and includes a fork's inherited prefix.
- Row lists go **ascending by seq**, unless a contract says otherwise.
- **Expiry** is the engine's business: primitives return expired sessions like
  live ones, except ``_b_expired``, which finds them.
- A primitive said to act **at once** makes all of its changes in one transaction
  (or under one lock): another call sees all of them or none.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from .model import Row, Session

__all__ = ["AppendTxn", "Backend", "Span", "keep_bounded", "own_span", "recent_key"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

Span = tuple[str, int, int]
"""``(session_id, lo, hi)``: a session's own positions ``lo <= seq < hi``."""


class AppendTxn(Protocol):
    """What an append needs from a backend inside one transaction on one session.

    The backend holds the session locked (or watched, for Redis) while the engine's
    function runs; ``write`` is called at most once. A backend's transaction class
    subclasses this (its abstract methods are then checked at construction); one
    that only matches it structurally type-checks too.
    """

    __slots__ = ()

    session: Session | None
    """The session as stored when the transaction began; None when it does not exist."""

    @abc.abstractmethod
    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        """Of ``ids``, those of this session's own rows: id -> version of their append."""

    @abc.abstractmethod
    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        """Of ``call_ids``, those made by this session's own messages: id -> position."""

    @abc.abstractmethod
    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        """Store ``rows`` and ``calls``, clear the group-start flag of own rows at
        positions in ``clear`` (``[lo, hi)``), save ``session``, keep ``assets``
        (sha256 -> (bytes, media type); an asset already stored is kept as it is) and
        reference them from this session: all in the transaction."""


class Backend(abc.ABC):
    """The primitives a backend implements. Every method takes the session's
    ``tenant``; nothing here may ever reach another tenant's data."""

    # ---------------------------------------------------------------- sessions

    @abc.abstractmethod
    def _b_insert_session(self, session: Session) -> None:
        """Store a new session; raise ``Conflict`` when ``(tenant, id)`` exists (expired
        or not). Of two racing inserts of one id, exactly one succeeds."""

    @abc.abstractmethod
    def _b_get_session(self, tenant: str, session_id: str) -> Session | None:
        """The stored session, or None."""

    @abc.abstractmethod
    def _b_save_session(self, session: Session, expected_version: int) -> bool:
        """Replace the stored session (and whatever the backend orders it by) if its
        version is still ``expected_version``, at once; False when it is not (or the
        session is gone), and nothing changes."""

    @abc.abstractmethod
    def _b_list_sessions(self, tenant: str, after: tuple[str, str] | None, limit: int,
                         user: str | None, *, recent: bool = False) -> list[Session]:
        """At most ``limit`` sessions of ``tenant`` (only ``user``'s, when given), ordered
        by ``(created_at.isoformat(), id)`` ascending, after ``after``; with ``recent``,
        by ``(recent_key(s), id)`` descending, below ``after``. Expired sessions may be
        included (the engine drops them)."""

    @abc.abstractmethod
    def _b_children(self, tenant: str, session_id: str) -> list[Session]:
        """Sessions forked directly from this one (``parent_id == session_id``), any order."""

    @abc.abstractmethod
    def _b_tree(self, tenant: str, root_id: str) -> list[Session]:
        """Every session whose ``root_id`` is ``root_id`` (the root included), any order."""

    @abc.abstractmethod
    def _b_delete_session(self, tenant: str, session_id: str) -> None:
        """Delete the session, its own rows, calls, status overrides and asset references
        (not the assets: ``_b_gc_assets`` does), at once. Unknown: nothing happens."""

    # ---------------------------------------------------------------- appending

    @abc.abstractmethod
    def _b_append(self, tenant: str, session_id: str, fn: Callable[[AppendTxn], T],
                  ids: Sequence[str] = ()) -> T:
        """Run ``fn`` on an ``AppendTxn`` of the session and return what it returns.
        What ``fn`` writes commits at once with what it read: a write to the session
        by anyone else in between is either excluded (a lock) or detected, and then
        ``fn`` runs again on a fresh transaction (it is safe to rerun). When ``fn``
        raises, nothing is stored and the error propagates. ``ids``: the batch's message
        ids, which ``fn`` will ask ``existing()`` about (a backend may read them together
        with the session)."""

    # ---------------------------------------------------------------- reading rows

    @abc.abstractmethod
    def _b_rows(self, tenant: str, session_id: str, lo: int, hi: int) -> list[Row]:
        """Own rows with ``lo <= seq < hi``, ascending, as stored."""

    @abc.abstractmethod
    def _b_seq_at_cum(self, tenant: str, session_id: str, cum: int) -> int | None:
        """The smallest own seq whose ``cum_before >= cum``, or None (an indexed lookup:
        ``cum_before`` grows with ``seq``)."""

    @abc.abstractmethod
    def _b_kept_rows(self, tenant: str, session_id: str, hi: int) -> list[Row]:
        """Own rows with role system or developer (``KEPT_ROLES``) and ``seq < hi``,
        ascending."""

    @abc.abstractmethod
    def _b_row_by_id(self, tenant: str, session_id: str, message_id: str) -> Row | None:
        """The own row of message ``message_id``, or None."""

    @abc.abstractmethod
    def _b_find_calls(self, tenant: str, session_id: str, call_ids: Sequence[str],
                      hi: int) -> dict[str, int]:
        """Of ``call_ids``, calls made by own rows with ``seq < hi``: id -> seq."""

    @abc.abstractmethod
    def _b_overrides(self, tenant: str, session_id: str) -> dict[int, int]:
        """Status overrides this session recorded for inherited positions: seq -> status."""

    # ---------------------------------------------------------------- changing rows

    @abc.abstractmethod
    def _b_set_status(self, tenant: str, session_id: str, seqs: Sequence[int], status: int,
                      overrides: Sequence[int]) -> None:
        """Set the status of own rows at ``seqs``, and record (or replace) overrides for
        the inherited positions ``overrides`` (rows of an ancestor, never written)."""

    @abc.abstractmethod
    def _b_truncate(self, tenant: str, session_id: str, seq: int, session: Session,
                    expected_version: int, restore: Sequence[int] = ()) -> bool:
        """Delete own rows (and their calls) with ``seq >= seq``, set the group-start
        flag of own rows at ``restore``, and save ``session``, all at once and only if
        the stored version is still ``expected_version`` (else False, nothing changes).
        ``seq == 0`` (a clear) also drops the status overrides and asset references."""

    @abc.abstractmethod
    def _b_rewrite_from(self, tenant: str, session_id: str, seq: int, rows: Sequence[Row],
                        calls: dict[str, int], session: Session, expected_version: int
                        ) -> bool:
        """Replace the own rows with ``seq >= seq`` by ``rows`` (ascending from ``seq``;
        fewer than before: a message deleted from the middle, the later ones moved down
        a position) and their calls by ``calls`` (id -> seq), and save ``session``, all
        at once and only if the stored version is still ``expected_version`` (else
        False, nothing changes). Each row is stored as given (its status and append
        version kept); whatever the backend keeps by position goes with it (the id and
        kept-role indexes, the running totals, the search index). Status overrides and
        asset references stay."""

    # ---------------------------------------------------------------- assets, retention

    @abc.abstractmethod
    def _b_get_asset(self, tenant: str, sha256: str) -> bytes | None:
        """The bytes of the tenant's asset, or None."""

    @abc.abstractmethod
    def _b_gc_assets(self, tenant: str) -> int:
        """Delete the tenant's assets no session references; return how many. An
        append that references one meanwhile must keep it."""

    @abc.abstractmethod
    def _b_expired(self, now: datetime) -> list[tuple[str, str]]:
        """``(tenant, id)`` of every session whose ``expires_at`` is at or before ``now``."""

    # ---------------------------------------------------------------- optional

    def _b_window_probe(self, tenant: str, session_id: str, budget: int
                        ) -> tuple[Session | None, list[Row]] | None:
        """Optional, for backends where a round trip costs: in one read, the session
        (None when unknown) and, for a session that is not a fork, its rows from
        ``seq_at_cum(token_count - budget) - 1`` (0 when that is not positive, the last
        row when no row qualifies) to the end; the rows of a fork are not used.
        None: not implemented, the engine makes the reads one by one."""
        return None

    def _b_tail_probe(self, tenant: str, session_id: str, rows: int
                      ) -> tuple[Session | None, list[Row]] | None:
        """Optional, for backends where a round trip costs: in one read, the session
        (None when unknown) and, for a session that is not a fork, its newest ``rows``
        rows (fewer when it has fewer); the rows of a fork are not used. None: not
        implemented, the engine reads the session, then the rows."""
        return None

    def _b_count_sessions(self, tenant: str, user: str | None, now: datetime) -> int | None:
        """Optional, a count the database keeps cheap: the sessions of ``tenant`` (only
        ``user``'s, when given) that are not expired at ``now``. None: not implemented,
        the engine counts a listing."""
        return None

    def _b_first_user_rows(self, tenant: str, spans: Sequence[Span]
                           ) -> list[Row | None] | None:
        """Optional, one read for many sessions: for each ``(session_id, lo, hi)``, the
        own row with role ``user`` and the smallest seq in ``[lo, hi)``, or None. None:
        not implemented, the engine reads rows a batch at a time."""
        return None

    def _b_held(self, tenant: str, session_id: str) -> AbstractContextManager[None]:
        """Optional: hold off appends to the session while the engine plans a change from
        what it reads and writes it (``delete_message``), so a session appended to
        without pause still gets the change. Default: nothing held; the write's version
        check catches a race and the engine plans again. Inside it the engine reads and
        makes the one write the hold is for (an append there, or a second hold of the
        session, would wait for the hold)."""
        return nullcontext()

    def _b_clock(self) -> datetime | None:
        """Optional: the store's own clock (one round trip), which then judges every TTL
        (``clock.py``); None when it is this machine's."""
        return None


def own_span(session: Session) -> Span:
    """The rows a session stores itself, as a ``Span`` (a fork's start after its shared
    prefix)."""
    return (session.id, session.fork_seq if session.parent_id is not None else 0,
            session.message_count)


def recent_key(session: Session) -> str:
    """``updated_at`` as fixed-width UTC text: the ``order="recent"`` key every
    backend stores and compares (text order is time order)."""
    return session.updated_at.astimezone(UTC).isoformat(timespec="microseconds")


def keep_bounded(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """``cache[key] = value``, then drop the oldest entries beyond ``limit``: a
    per-process memo of sessions that several threads write without a lock (a loser
    of a race over the oldest entry just stops trimming; the next call goes on)."""
    cache[key] = value
    while len(cache) > limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (RuntimeError, StopIteration):  # another thread changed it meanwhile
            break
