"""API keys: created by the CLI, kept hashed in the store itself, revocable.

A key is ``chk_<key id>_<secret>``, shown once by ``create_key``. The store
keeps only its SHA-256, as a session of the reserved tenant ``__keys__``
(session id = key id; metadata = tenant, name, hash, created_at, revoked), so
every server process over one PostgreSQL or Redis shares the keys. A lookup is
one indexed read by key id and a constant-time comparison of hashes; positive
answers are cached for a few seconds (so a revocation takes effect within that
time on every process), negative ones never are.

Once a key has been created, the store says so for good: ``create_key`` first
writes a marker session (``KEYS_CREATED``) that nothing removes, so revoking
every key never turns a server back to open mode (``has_keys``).

Tenant names starting with ``__`` are reserved and refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
import secrets
import threading
import time
from datetime import UTC, datetime

import msgspec

from ..errors import Conflict, InvalidMessage, NotFound
from ..stores.base import Store

__all__ = [
    "KEYS_CREATED",
    "KEYS_TENANT",
    "KeyCache",
    "KeyInfo",
    "authenticate",
    "cached",
    "check_tenant",
    "create_key",
    "has_keys",
    "list_keys",
    "lookup",
    "revoke_key",
]

KEYS_TENANT = "__keys__"
"""The reserved tenant whose sessions are the keys."""
KEYS_CREATED = "keys-created"
"""The session of ``KEYS_TENANT`` that records that a key was ever created (never a
key id: those are 16 hex digits)."""
_PREFIX = "chk"
_KEY = re.compile(r"chk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,100})")


class KeyInfo(msgspec.Struct, kw_only=True, frozen=True):
    """What is known of a key (never its secret, nor its hash)."""

    id: str
    tenant: str
    name: str
    created_at: str
    revoked: bool = False


def check_tenant(tenant: str) -> str:
    """``tenant`` if it may own data: a non-empty string, not starting with ``__``."""
    if not isinstance(tenant, str) or not tenant.strip() or len(tenant) > 200:
        raise InvalidMessage("tenant must be a non-empty string of at most 200 characters",
                             "$.tenant")
    if tenant.startswith("__"):
        raise InvalidMessage("tenant names starting with '__' are reserved", "$.tenant")
    return tenant


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_key(store: Store, tenant: str, name: str = "") -> tuple[str, str]:
    """A new key for ``tenant``: ``(key_id, secret)``. The secret is not stored and
    cannot be shown again."""
    check_tenant(tenant)
    try:  # first: a key never exists without the record that keys are required
        store.get_session(KEYS_CREATED, tenant=KEYS_TENANT)
    except NotFound:
        with contextlib.suppress(Conflict):  # (another process made it meanwhile)
            store.create_session(KEYS_CREATED, tenant=KEYS_TENANT, metadata={
                "note": "a key was created: this store is never served without keys"})
    key_id = secrets.token_hex(8)
    secret = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    metadata = {"tenant": tenant, "name": str(name), "hash": _digest(secret),
                "created_at": datetime.now(UTC).isoformat(), "revoked": False}
    store.create_session(key_id, tenant=KEYS_TENANT, metadata=metadata)
    return key_id, secret


def _info(session_id: str, metadata: dict[str, object]) -> KeyInfo:
    return KeyInfo(id=session_id, tenant=str(metadata.get("tenant", "")),
                   name=str(metadata.get("name", "")),
                   created_at=str(metadata.get("created_at", "")),
                   revoked=bool(metadata.get("revoked", False)))


def list_keys(store: Store, tenant: str | None = None) -> list[KeyInfo]:
    """Every key (of ``tenant`` when given), oldest first, revoked ones included."""
    out: list[KeyInfo] = []
    cursor: str | None = None
    while True:
        page = store.list_sessions(tenant=KEYS_TENANT, limit=500, cursor=cursor)
        out.extend(_info(s.id, s.metadata) for s in page.items if s.id != KEYS_CREATED
                   and (tenant is None or s.metadata.get("tenant") == tenant))
        cursor = page.next_cursor
        if cursor is None:
            return out


def has_keys(store: Store) -> bool:
    """Whether a key was ever created in ``store``, revoked or not: then the server
    requires keys, for good (the ``KEYS_CREATED`` record, or any key row of a store
    whose keys were made before that record existed)."""
    try:
        store.get_session(KEYS_CREATED, tenant=KEYS_TENANT)
        return True
    except NotFound:
        return bool(store.list_sessions(tenant=KEYS_TENANT, limit=1).items)


def revoke_key(store: Store, key_id: str) -> KeyInfo:
    """Revoke a key; ``NotFound`` when there is no such key. Processes that cached
    the key stop accepting it within their cache time (a few seconds)."""
    if key_id == KEYS_CREATED:
        raise NotFound(f"no key {key_id!r}")
    for _ in range(10):
        session = store.get_session(key_id, tenant=KEYS_TENANT)
        metadata = {**session.metadata, "revoked": True}
        try:
            store.update_session(key_id, tenant=KEYS_TENANT, metadata=metadata,
                                 expected_version=session.version)
        except Conflict:  # changed meanwhile: read it again
            continue
        _default_cache.forget(key_id)
        return _info(key_id, metadata)
    raise RuntimeError(f"key {key_id!r} kept changing; try again")


class KeyCache:
    """Positive lookups for ``seconds``: hash of the secret -> key."""

    def __init__(self, seconds: float = 5.0) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._found: dict[str, tuple[KeyInfo, float]] = {}

    def get(self, digest: str) -> KeyInfo | None:
        hit = self._found.get(digest)
        if hit is None:
            return None
        if hit[1] < time.monotonic():
            with self._lock:
                self._found.pop(digest, None)
            return None
        return hit[0]

    def put(self, digest: str, key: KeyInfo) -> None:
        if self.seconds > 0:
            with self._lock:
                if len(self._found) > 10_000:
                    self._found.clear()
                self._found[digest] = (key, time.monotonic() + self.seconds)

    def forget(self, key_id: str) -> None:
        with self._lock:
            for digest in [d for d, (k, _) in self._found.items() if k.id == key_id]:
                del self._found[digest]


_default_cache = KeyCache()


def cached(secret: str, cache: KeyCache) -> KeyInfo | None:
    """The key ``secret`` names if ``cache`` holds it (no store read)."""
    if not isinstance(secret, str):
        return None
    return cache.get(_digest(secret.strip()))


def lookup(store: Store, secret: str, *, cache: KeyCache | None = None) -> KeyInfo | None:
    """The key ``secret`` names, if it exists and is not revoked; else None."""
    cache = _default_cache if cache is None else cache
    match = _KEY.fullmatch(secret.strip()) if isinstance(secret, str) else None
    if match is None:
        return None
    digest = _digest(match.group(0))
    found = cache.get(digest)
    if found is not None:
        return found
    try:
        session = store.get_session(match.group(1), tenant=KEYS_TENANT)
    except NotFound:
        return None
    stored = str(session.metadata.get("hash", ""))
    if not hmac.compare_digest(stored.encode(), digest.encode()):
        return None
    key = _info(session.id, session.metadata)
    if key.revoked or key.tenant.startswith("__") or not key.tenant:
        return None
    cache.put(digest, key)
    return key


def authenticate(store: Store, secret: str, *, cache: KeyCache | None = None) -> str | None:
    """The tenant of the key ``secret``, or None when it is unknown or revoked."""
    key = lookup(store, secret, cache=cache)
    return None if key is None else key.tenant
