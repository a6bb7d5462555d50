"""Values the stores trade in: sessions, stored rows, pages."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec

from ..errors import InvalidMessage
from ..model import Message

__all__ = ["COMPACTIONS_KEPT", "DEFAULT_TENANT", "MESSAGE_DECODER", "SESSION_DECODER",
           "SESSION_SCHEMA_VERSION", "Page", "Row", "Session", "make_row", "utcnow"]

DEFAULT_TENANT = "default"
SESSION_SCHEMA_VERSION = 1
COMPACTIONS_KEPT = 8
"""How many compaction positions a ``Session`` keeps (``Session.compactions``)."""

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Session(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A conversation in a store. ``state`` is a JSON dict where integrations keep
    their own keys; ``version`` counts the writes (optimistic concurrency)."""

    id: str
    tenant: str = DEFAULT_TENANT
    user: str | None = None
    version: int = 0
    metadata: dict[str, Any] = {}
    state: dict[str, Any] = {}
    created_at: datetime = msgspec.field(default_factory=utcnow)
    updated_at: datetime = msgspec.field(default_factory=utcnow)
    expires_at: datetime | None = None
    parent_id: str | None = None
    """The session this one was forked from."""
    fork_seq: int = 0
    """Messages at positions below this come from the parent (shared, not copied)."""
    root_id: str | None = None
    """The first session of this one's tree of forks (itself for a root)."""
    message_count: int = 0
    """Positions in use: the next message goes at this position."""
    token_count: int = 0
    """Tokens of all messages by the store's counter (a running total)."""
    ends_reasoning_only: bool = False
    joined: list[list[int]] = []
    """Inherited position ranges ``[lo, hi)`` whose group boundaries this session
    cleared (a result here answering a call in the shared prefix)."""
    compactions: list[int] = []
    """Positions of the newest messages holding a ``Compaction`` part, ascending, at
    most ``COMPACTIONS_KEPT`` of them (the inherited prefix included): where
    ``since_compaction`` starts, without reading back through the session."""
    compactions_before: int = 0
    """How many messages holding a ``Compaction`` part sit below ``compactions[0]``
    (left out to keep the session small): a pop that empties the list reads back to
    the newest of them."""

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or utcnow())

    def to_dict(self) -> dict[str, Any]:
        """A versioned JSON-ready dict of the whole session (state included)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        out["schema_version"] = SESSION_SCHEMA_VERSION
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Session:
        """A session from ``to_dict()`` output of any released version."""
        version = data.get("schema_version", 1)
        if version != SESSION_SCHEMA_VERSION:
            raise InvalidMessage(f"session schema_version {version} is not supported",
                                 "$.schema_version")
        body = {k: v for k, v in data.items() if k != "schema_version"}
        try:
            return msgspec.convert(body, cls)
        except msgspec.ValidationError as exc:
            from ..model.codec import invalid_from

            raise invalid_from(exc) from None


SESSION_DECODER = msgspec.json.Decoder(Session)
"""The one decoder of a stored or sent ``Session`` (every backend and the remote client)."""

MESSAGE_DECODER = msgspec.json.Decoder(Message)
"""The one decoder of a row's stored JSON (``Row.data``) into its ``Message``."""


class Row(NamedTuple):
    """One stored message with the bookkeeping that makes reads cheap."""

    seq: int
    """Position in the session (shared prefix included), from 0."""
    id: str
    role: str
    data: bytes
    """The message as JSON, attachment bytes moved to the asset storage."""
    tokens: int
    """Tokens by the store's counter."""
    cum_before: int
    """Tokens of every message before this one (running total)."""
    cut_ok: bool
    """Whether a selection may start at this message (it starts a group)."""
    orphan: bool
    """A tool result whose call is not before it."""
    status: int
    """``KVStatus`` value."""
    version: int
    """The session version of the append that stored it."""


def make_row(values: Iterable[Any]) -> Row:
    """A ``Row`` from its values in field order: what ``Row._make`` does, without its
    Python-level call and length check (every row a read returns is made here)."""
    return _tuple_new(Row, values)


_tuple_new = tuple.__new__


class Page(msgspec.Struct, Generic[T]):
    """A page of results and the cursor of the next page (None at the end)."""

    items: list[T]
    next_cursor: str | None = None
