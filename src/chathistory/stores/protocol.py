"""The store protocols: ``Store`` (public) and ``AppendTxn`` (backend transactions)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from ..model import KVStatus, Message
from ..tokens import TokenCounter
from .model import Page, Row, Session

__all__ = ["AppendTxn", "Store"]


@runtime_checkable
class Store(Protocol):
    """What every store offers (sync). ``AsyncStore`` has the same methods, async."""

    counter: TokenCounter

    def create_session(self, session_id: str | None = None, *, tenant: str = ...,
                       user: str | None = None, metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None) -> Session: ...
    def get_session(self, session_id: str, *, tenant: str = ...) -> Session: ...
    def list_sessions(self, *, tenant: str = ..., user: str | None = None,
                      metadata: Mapping[str, Any] | None = None, limit: int = 50,
                      cursor: str | None = None, order: Literal["created", "recent"] = ...,
                      query: str | None = None) -> Page[Session]: ...
    def update_session(self, session_id: str, *, tenant: str = ...,
                       metadata: dict[str, Any] | None = None,
                       state: dict[str, Any] | None = None,
                       ttl: timedelta | float | None = None,
                       expected_version: int | None = None) -> Session: ...
    def delete_session(self, session_id: str, *, tenant: str = ...,
                       cascade: bool = False) -> None: ...
    def append(self, session_id: str, messages: Iterable[Message], *, tenant: str = ...,
               expected_version: int | None = None, state: dict[str, Any] | None = None,
               reject_orphans: bool = False) -> int: ...
    def context(self, session_id: str, head: int, tail: int, *,
                tenant: str = ...) -> list[Message]: ...
    def tail(self, session_id: str, n: int, *, tenant: str = ...,
             include_marked: bool = False) -> list[Message]: ...
    def window(self, session_id: str, max_tokens: int,
               counter: str | TokenCounter | None = None, *, tenant: str = ...,
               keep_system: bool = False) -> list[Message]: ...
    def range(self, session_id: str, start: int = 0, stop: int | None = None, *,
              tenant: str = ..., include_marked: bool = True) -> list[Message]: ...
    def get(self, session_id: str, message_id: str, *, tenant: str = ...) -> Message: ...
    def pop(self, session_id: str, *, tenant: str = ...,
            expected_version: int | None = None) -> Message | None: ...
    def clear(self, session_id: str, *, tenant: str = ...) -> int: ...
    def mark(self, session_id: str, message_ids: Iterable[str], status: KVStatus, *,
             tenant: str = ...) -> int: ...
    def fork(self, session_id: str, at_message_id: str | None = None, *, tenant: str = ...,
             new_session_id: str | None = None) -> Session: ...
    def edit(self, session_id: str, message_id: str, message: Message, *,
             tenant: str = ...) -> Session: ...
    def lineage(self, session_id: str, *, tenant: str = ...) -> list[Session]: ...
    def erase(self, *, tenant: str, user: str | None = None) -> int: ...
    def purge_expired(self, *, tenant: str | None = None) -> int: ...
    def get_asset(self, sha256: str, *, tenant: str = ...) -> bytes: ...
    def export(self, *, tenant: str = ...,
               session_ids: Iterable[str] | None = None) -> Iterator[bytes]: ...
    def import_(self, lines: Iterable[bytes | str], *, tenant: str | None = None) -> int: ...
    def close(self) -> None: ...


class AppendTxn(Protocol):
    """What an append needs from a backend inside one transaction on one session.

    The backend holds the session locked (or watched, for Redis) while the
    engine's function runs; ``write`` is called at most once.
    """

    session: Session | None

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        """Of ``ids``, those stored in this session: id -> version of their append."""

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        """Of ``call_ids``, those made by this session's own messages: id -> position."""

    def write(self, rows: list[Row], calls: dict[str, int], clear: tuple[int, int] | None,
              session: Session, assets: dict[str, tuple[bytes, str]]) -> None:
        """Store ``rows`` and ``calls``, clear the group-start flag of own rows at
        positions in ``clear`` (``[lo, hi)``), save ``session``, keep ``assets``
        (sha256 -> (bytes, media type)) and reference them from this session."""
