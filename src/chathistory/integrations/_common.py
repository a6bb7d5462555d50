"""What the framework adapters share: a store on both sides (sync and async),
appends that create the session on first use, reads of a session that may not
exist yet, message ids taken from the framework, JSON-safe metadata, the
placeholder that lets an assistant message with no content of ours be stored, and
provider compactions: their provider's own item or block, and the ones a framework
cannot carry kept beside its message."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..formats import from_anthropic, from_openai_responses, to_anthropic, to_openai_responses
from ..formats._common import b64decode
from ..model import AudioPart, Compaction, FilePart, ImagePart, Message, Part, Reasoning, new_id
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store

__all__ = [
    "COMPACTION_KEY",
    "aappend_creating",
    "append_creating",
    "b64decode",
    "compaction_of",
    "data_url",
    "ids_for",
    "is_placeholder",
    "json_safe",
    "kept_compactions",
    "media_part",
    "native_compaction",
    "natively",
    "or_empty",
    "placeholder",
    "resolved",
    "storable",
    "store_pair",
    "with_kept_compactions",
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


# ---------------------------------------------------------------- provider compactions

COMPACTION_KEY = "chathistory_compaction"
"""The key, in metadata of a framework message that no provider is sent, under which
an adapter keeps the compactions ``kept_compactions`` names."""
_NATIVE = ("openai_responses", "anthropic")


def native_compaction(part: Compaction) -> dict[str, Any] | None:
    """The provider's own form of ``part``: the Responses ``compaction`` item, or the
    Anthropic ``compaction`` block (as the provider formats write them); None for a
    compaction of another provider."""
    if part.provider not in _NATIVE:
        return None
    message = Message(role="assistant", parts=[part])
    if part.provider == "anthropic":
        turns = to_anthropic([message])["messages"]
        return dict(turns[0]["content"][0]) if turns else None
    items = to_openai_responses([message])
    return dict(items[0]) if items else None


def compaction_of(native: Mapping[str, Any]) -> Compaction | None:
    """Our part for a provider's own compaction: an Anthropic ``compaction`` block (it
    has ``content``, null when compaction failed) or a Responses ``compaction`` item
    (it never has one), decoded by the provider's format; None for anything else,
    or for a block or item the format refuses."""
    if native.get("type") != "compaction":
        return None
    try:
        if "content" in native:
            found = from_anthropic(None, [{"role": "assistant", "content": [dict(native)]}])
        else:
            found = from_openai_responses([native])
    except InvalidMessage:
        return None
    parts = found[0].parts if len(found) == 1 else []
    return parts[0] if len(parts) == 1 and type(parts[0]) is Compaction else None


def _without(part: Compaction, namespace: str) -> Compaction:
    if namespace not in part.provider_metadata:
        return part
    rest = {k: v for k, v in part.provider_metadata.items() if k != namespace}
    return msgspec.structs.replace(part, provider_metadata=rest)


def natively(part: Compaction) -> Compaction | None:
    """What ``part`` reads back as from its provider's own item or block (None when its
    provider has none): the ``carried`` of a framework that keeps those as given."""
    form = native_compaction(part)
    return None if form is None else compaction_of(form)


Carried = Callable[[Compaction], Compaction | None]
"""What a compaction reads back as from a framework's own form of it (without the
adapter's metadata), None when the framework has no form for it."""


def kept_compactions(parts: Sequence[Part], namespace: str, carried: Carried = natively
                     ) -> list[list[Any]]:
    """``[index, part]`` (the part as JSON, without the adapter's ``namespace``) for
    each compaction in ``parts`` the framework's own form would not give back whole
    (``carried``), or has no form for. The adapter keeps the list in metadata of the
    framework message that is never sent."""
    kept: list[list[Any]] = []
    for index, part in enumerate(parts):
        if type(part) is Compaction:
            mine = _without(part, namespace)
            if carried(mine) != mine:
                kept.append([index, msgspec.to_builtins(mine)])
    return kept


def with_kept_compactions(parts: list[Part], kept: Any, namespace: str, path: str,
                          carried: Carried = natively) -> list[Part]:
    """``parts`` with what ``kept_compactions`` kept back in place: a compaction the
    framework has a form for replaces the one read from that form at its index
    (keeping that one's ``namespace`` metadata), if the framework left the form as
    written; one it has none for is inserted at its index. A ``kept`` that is not such
    a list is ``InvalidMessage`` at ``path``."""
    if kept is None:
        return parts
    try:
        entries = sorted(((int(index), msgspec.convert(raw, Compaction)) for index, raw in kept),
                         key=lambda entry: entry[0])
    except (TypeError, ValueError, msgspec.ValidationError):
        raise InvalidMessage("expected a list of [index, compaction] pairs", path) from None
    out = list(parts)
    for index, part in entries:
        expected = carried(part)
        if expected is None:
            out.insert(index, part)
            continue
        found = out[index] if 0 <= index < len(out) else None
        if type(found) is Compaction and _without(found, namespace) == expected:
            ours = found.provider_metadata.get(namespace)
            out[index] = part if ours is None else msgspec.structs.replace(
                part, provider_metadata={**part.provider_metadata, namespace: ours})
    return out
