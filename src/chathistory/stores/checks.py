"""The checks of what a caller hands a store: ids, users, JSON fields, TTLs, messages.

One definition each, for every layer of the engine that takes these values (a
session is created by ``create_session``, by a fork and by an import, and each
checks its id the same way) and for ``RemoteStore``, which validates a batch
before it sends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from ..errors import InvalidArgument, InvalidMessage
from ..model import Message

__all__ = ["check_id", "check_json", "check_user", "ttl_deadline", "validated"]


def ttl_deadline(ttl: timedelta | float | None, now: datetime) -> datetime | None:
    """``now`` (the store's clock) plus ``ttl``."""
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not seconds > 0:  # NaN too
        raise InvalidArgument("ttl must be positive")
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidArgument(f"ttl of {seconds:g} seconds ends after the year 9999") from None


def check_id(value: str, field: str) -> str:
    """``value``, an id (a tenant, a session's id) a store accepts: a non-empty string
    of at most 200 characters without NUL; else ``InvalidMessage`` at ``$.<field>``."""
    if not isinstance(value, str) or not value or len(value) > 200 or "\x00" in value:
        raise InvalidMessage(f"{field} must be a non-empty string of at most 200 characters "
                             "without NUL", f"$.{field}")
    return value


def check_user(user: str | None) -> None:
    """``InvalidMessage`` unless ``user`` is None or a string without NUL."""
    if user is not None and (not isinstance(user, str) or "\x00" in user):
        raise InvalidMessage("user must be a string without NUL", "$.user")


def check_json(value: object, field: str) -> None:
    """``InvalidMessage`` unless ``value`` (metadata, state) is a dict that encodes as JSON."""
    if not isinstance(value, dict):
        raise InvalidMessage(f"{field} must be a JSON object", f"$.{field}")
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"{field} is not JSON-serializable: {exc}", f"$.{field}") from None


def validated(messages: Iterable[Message]) -> list[Message]:
    """The batch to append: each message validated (``InvalidMessage`` at ``$[i]...``),
    an id the batch repeats kept once (the first)."""
    batch: list[Message] = []
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise InvalidMessage(f"expected a Message, got {type(m).__name__}", f"$[{i}]")
        try:
            m.validate()
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        if m.id not in seen:
            seen.add(m.id)
            batch.append(m)
    return batch
