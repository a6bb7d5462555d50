"""The checks of what a caller hands a store: ids, users, JSON fields, TTLs, messages,
and whether a message re-sent under a stored id is the one stored (``reused_field``).

One definition each, for every layer of the engine that takes these values (a
session is created by ``create_session``, by a fork and by an import, and each
checks its id the same way) and for ``RemoteStore``, which validates a batch
before it sends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import msgspec

from ..errors import IdReused, InvalidArgument, InvalidMessage
from ..model import Message
from ..model.codec import encode, strip_part

__all__ = ["check_id", "check_json", "check_user", "reused_field", "sent_content",
           "ttl_deadline", "validated"]


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
    an id the batch repeats kept once (the first), and refused (``IdReused``) when the
    repeat's content is not the first's."""
    batch: list[Message] = []
    seen: dict[str, Message] = {}
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise InvalidMessage(f"expected a Message, got {type(m).__name__}", f"$[{i}]")
        try:
            m.validate()
        except InvalidMessage as exc:
            raise exc.under(f"$[{i}]") from None
        first = seen.get(m.id)
        if first is None:
            seen[m.id] = m
            batch.append(m)
        elif first is not m and (field := reused_field(first, m)) is not None:
            raise IdReused(m.id, field, in_batch=True)
    return batch


_json = msgspec.json.Decoder()
_NOT_SENT = ("created_at", "kv_size", "kv_start", "kv_status", "token_counts", "usage")
"""Fields of a message its sender does not say: the time it was made (a retry that
builds the message again makes it anew), the KV-cache bookkeeping and the cached
token counts, which selectors, windows and stores fill in, and the provider's
observed usage (a retry that lost or re-measured it is still a retry)."""
_DERIVED = ("id", "data", "width", "height")
"""Fields of an attachment its ``sha256`` stands for: a random id of its own, the
bytes (a store keeps them apart), an image's size measured from them (a reference
to stored bytes may leave it out)."""


def sent_content(message: Message) -> dict[str, Any]:
    """``message`` as its sender said it, as the JSON values a store keeps: what a retry
    repeats.

    Without ``_NOT_SENT`` and, in attachments, ``_DERIVED``; compared as values,
    so the order of an object's keys does not matter."""
    if message.has_media:
        message = msgspec.structs.replace(
            message, parts=[strip_part(p, {}) for p in message.parts])
    content: dict[str, Any] = _json.decode(encode(message))  # as it is stored: NaN is null
    for name in _NOT_SENT:
        content.pop(name, None)
    if message.has_media:
        for part in content.get("parts", ()):
            inner = part.get("content")
            for item in [part, *(inner if isinstance(inner, list) else ())]:
                attachment = item.get("attachment") if isinstance(item, dict) else None
                if isinstance(attachment, dict):
                    for name in _DERIVED:
                        attachment.pop(name, None)
    return content


def reused_field(stored: Message, sent: Message) -> str | None:
    """The first field where ``sent`` says other than ``stored`` (``parts[0].text``),
    or None when ``sent`` is ``stored`` sent again (``sent_content`` equal)."""
    return _differs(sent_content(stored), sent_content(sent), "")


def _differs(stored: Any, sent: Any, path: str) -> str | None:
    if stored == sent:
        return None
    if isinstance(stored, dict) and isinstance(sent, dict):
        keys = [*stored, *(k for k in sent if k not in stored)]
        # other bytes are the difference to name, not the names derived from them
        for key in sorted(keys, key=lambda k: k != "sha256"):
            if stored.get(key, _ABSENT) != sent.get(key, _ABSENT):
                inner = f"{path}.{key}" if path else str(key)
                if key in stored and key in sent:
                    return _differs(stored[key], sent[key], inner)
                return inner
    if (isinstance(stored, list) and isinstance(sent, list) and len(stored) == len(sent)):
        for i, (a, b) in enumerate(zip(stored, sent, strict=True)):
            if a != b:
                return _differs(a, b, f"{path}[{i}]")
    return path or "$"


_ABSENT = object()
