"""What the framework adapters share: a store on both sides (sync and async),
appends that create the session on first use, reads of a session that may not
exist yet, message ids taken from the framework, JSON-safe metadata, and the
placeholder that lets an assistant message with no content of ours be stored."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..model import AudioPart, FilePart, ImagePart, Message, Part, Reasoning, new_id
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store

__all__ = [
    "aappend_creating",
    "append_creating",
    "b64decode",
    "data_url",
    "ids_for",
    "is_placeholder",
    "json_safe",
    "media_part",
    "or_empty",
    "placeholder",
    "resolved",
    "storable",
    "store_pair",
]

T = TypeVar("T")
_DROP = object()


def store_pair(store: Store | AsyncStoreAdapter) -> tuple[Store, AsyncStoreAdapter]:
    """The store on its sync side and on its async side (one adapter, no copies)."""
    if isinstance(store, AsyncStoreAdapter):
        return store.store, store
    return store, AsyncStoreAdapter(store)


def append_creating(store: Store, session_id: str, messages: Sequence[Message], *,
                    tenant: str, state: dict[str, Any] | None = None) -> int | None:
    """Append (idempotent by id), creating the session on first use; None when
    there was nothing to append."""
    if not messages and state is None:
        return None
    try:
        return store.append(session_id, messages, tenant=tenant, state=state)
    except NotFound:
        with contextlib.suppress(Conflict):  # another writer created it first
            store.create_session(session_id, tenant=tenant)
        return store.append(session_id, messages, tenant=tenant, state=state)


async def aappend_creating(store: AsyncStoreAdapter, session_id: str,
                           messages: Sequence[Message], *, tenant: str) -> int | None:
    """``append_creating`` without blocking the event loop."""
    if not messages:
        return None
    try:
        return await store.append(session_id, messages, tenant=tenant)
    except NotFound:
        with contextlib.suppress(Conflict):
            await store.create_session(session_id, tenant=tenant)
        return await store.append(session_id, messages, tenant=tenant)


def or_empty(read: Callable[[], list[T]]) -> list[T]:
    """``read()``, or ``[]`` when the session does not exist (yet)."""
    try:
        return read()
    except NotFound:
        return []


def resolved(store: Store, messages: list[Message], tenant: str) -> list[Message]:
    """Messages with attachment bytes filled in, when the store keeps them apart."""
    resolve = getattr(store, "resolve", None)
    if resolve is None or not any(m.has_media for m in messages):
        return messages
    out: list[Message] = resolve(messages, tenant=tenant)
    return out


def ids_for(foreign: Iterable[str | None]) -> list[str]:
    """Our ids for a batch of framework messages: the framework's own id when it
    has one (so adding the same message again is a no-op), a new UUID when it has
    none or when an earlier message of the batch already used it."""
    out: list[str] = []
    seen: set[str] = set()
    for value in foreign:
        chosen = value if isinstance(value, str) and value and value not in seen else new_id()
        seen.add(chosen)
        out.append(chosen)
    return out


def json_safe(value: Any) -> Any:
    """``value`` as JSON-shaped builtins, leaving out what JSON cannot hold
    (framework objects in ``additional_kwargs`` and the like); None if nothing is left."""
    out = _safe(value)
    return None if out is _DROP else out


def _safe(value: Any) -> Any:
    try:
        return msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, ValueError, OverflowError):
        pass
    if isinstance(value, dict):
        kept = {str(k): v for k, v in ((k, _safe(v)) for k, v in value.items()) if v is not _DROP}
        return kept
    if isinstance(value, list | tuple):
        return [v for v in (_safe(v) for v in value) if v is not _DROP]
    return _DROP


def media_part(kind: str, **fields: Any) -> ImagePart | AudioPart | FilePart:
    """The media part for ``kind`` (``image``, ``audio``, anything else a file)."""
    if kind == "image":
        return ImagePart(**fields)
    return AudioPart(**fields) if kind == "audio" else FilePart(**fields)


def b64decode(text: Any, path: str) -> bytes:
    """Strict base64; ``InvalidMessage`` at ``path`` otherwise."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise InvalidMessage("invalid base64 data", path) from None


def data_url(url: str, path: str) -> tuple[str | None, bytes]:
    """Media type (None when the URL names none) and bytes of a base64 data URL."""
    head, sep, payload = url.removeprefix("data:").partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        raise InvalidMessage("expected a base64 data URL", path)
    return head[:-7] or None, b64decode(payload, path)


def storable(message: Message) -> bool:
    """Whether the model accepts ``message`` for lack of content alone; any other
    fault still raises ``InvalidMessage``."""
    try:
        message.validate()
    except InvalidMessage as exc:
        if exc.path != "$.parts":
            raise
        return False
    return True


def placeholder(namespace: str) -> Reasoning:
    """The part that lets a framework's assistant message with no content we model
    (an empty response, only an empty text) be stored and read back.

    A message needs content, and a reasoning part holding only provider metadata is
    the model's opaque provider item; provider formats send no reasoning they did not
    sign, so it reaches no model. Only assistant messages get one: formats refuse
    reasoning in any other role."""
    return Reasoning(provider_metadata={namespace: {"placeholder": True}})


def is_placeholder(part: Part, namespace: str) -> bool:
    """True for the ``placeholder(namespace)`` part."""
    return (type(part) is Reasoning and not part.text and part.data is None
            and part.provider_metadata.get(namespace, {}).get("placeholder") is True)
