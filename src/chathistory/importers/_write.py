"""Writing imported conversations into a store, idempotently.

Every importer turns a source record into a ``Conversation``: a main path of
messages and, for a tree-shaped source (a ChatGPT export), more root-to-leaf
paths that share prefixes with it. Message ids are derived from the source
(``uuid5``), so the same record always gives the same ids.

``write`` places each path: it finds the session already holding the longest
prefix of the path (the main session, then the branch sessions keyed by the
first message they do not share), appends what is missing when that session
ends where the prefix ends, and otherwise forks it at the branch point
(``Store.fork``) and gives the fork its metadata. Re-importing a file therefore
adds nothing, a conversation that went on since the last export gets only its
new messages, and a stored session is never given a message out of its order.

Each step is one store call, so an import stopped anywhere (a crash, a lost
connection) leaves a prefix of the steps done, and running it again finishes
them: a session not yet created, messages not yet appended, and a fork whose
metadata is still its parent's copy (the step after the fork) all get what a
whole import gives them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import msgspec

from ..errors import InvalidMessage, NotFound
from ..model import Message
from ..stores.model import Session
from ..stores.protocol import Store
from ._stream import Truncation

__all__ = ["NAMESPACE", "Conversation", "ImportReport", "TenantArg", "check", "derived_id",
           "invalid_record", "write"]

NAMESPACE = uuid.UUID("6f1c3a52-5d0e-4f0b-9a57-2c1f3e8b7d41")
"""The uuid5 namespace of every id an import derives."""

APPEND_BATCH = 500


class TenantArg(TypedDict, total=False):
    """``tenant=`` for store calls, left out to use the store's default (a remote
    store serves its key's tenant and refuses any other)."""

    tenant: str


def derived_id(*parts: object) -> str:
    """A UUID (version 5) derived from ``parts``: the same parts, the same id."""
    return str(uuid.uuid5(NAMESPACE, "\x00".join(str(p) for p in parts)))


def invalid_record(exc: msgspec.ValidationError | msgspec.DecodeError | RecursionError,
                   index: int) -> InvalidMessage:
    """A decoding error of record ``index``, its path re-rooted at ``$[index]``."""
    if isinstance(exc, RecursionError):
        return InvalidMessage(f"record {index} is nested too deeply to decode", f"$[{index}]")
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        reason, sep, path = text.rpartition(" - at `")
        if sep:
            return InvalidMessage(f"record {index}: {reason}",
                                  f"$[{index}]" + path.rstrip("`")[1:])
        return InvalidMessage(f"record {index}: {text}", f"$[{index}]")
    return InvalidMessage(f"record {index} is not JSON: {text}", f"$[{index}]")


@dataclass
class Conversation:
    """One source record, ready to store."""

    session_id: str
    """The main session's id (derived from the source's id)."""
    paths: list[list[Message]]
    """The main path first, then every other branch from the root to a leaf."""
    metadata: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] | None = None
    branch_metadata: list[dict[str, Any]] = field(default_factory=list)
    """Added to ``metadata`` for the session ``paths[i]`` makes when it becomes a
    branch (a ChatGPT branch's ``branch``: "2 of 3")."""


@dataclass
class ImportReport:
    """What an import read and stored."""

    format: str
    conversations: int = 0
    """Source records read (with empty and invalid ones)."""
    sessions_created: int = 0
    forks_created: int = 0
    messages_added: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """What was left out on purpose, by reason (``empty message``, ``hidden node``...)."""
    invalid: list[str] = field(default_factory=list)
    """Records that did not decode (with ``skip_invalid``), each with its path."""
    truncated: Truncation | None = None
    bytes_read: int = 0

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "conversations": self.conversations,
            "sessions_created": self.sessions_created,
            "forks_created": self.forks_created,
            "messages_added": self.messages_added,
            "skipped": dict(sorted(self.skipped.items())),
            "invalid": list(self.invalid),
            "truncated": None if self.truncated is None else self.truncated.describe(),
            "bytes_read": self.bytes_read,
        }


def check(conversation: Conversation, index: int) -> None:
    """Raise ``InvalidMessage`` (naming record ``index`` and the field) if a store
    would refuse anything of ``conversation``: checked before any of it is
    written, so a record is stored whole or not at all."""
    for messages in conversation.paths:
        for position, message in enumerate(messages):
            try:
                message.validate()
            except InvalidMessage as exc:
                raise InvalidMessage(f"record {index}: {exc.reason}",
                                     f"$[{index}].messages[{position}]" + exc.path[1:]) from None
    for name, value in (("metadata", conversation.metadata), ("state", conversation.state),
                        *(("metadata", extra) for extra in conversation.branch_metadata)):
        try:
            msgspec.json.encode(value)
        except (TypeError, OverflowError) as exc:
            raise InvalidMessage(f"record {index}: its {name} is not JSON: {exc}",
                                 f"$[{index}]") from None


def write(store: Store, conversation: Conversation, report: ImportReport,
          tenant: str | None = None) -> None:
    """Store ``conversation`` (see the module docstring); counts go to ``report``."""
    writer = _Writer(store, conversation, report,
                     TenantArg() if tenant is None else TenantArg(tenant=tenant))
    extras = conversation.branch_metadata
    for i, path in enumerate(conversation.paths):
        if path:
            writer.place(path, extras[i] if i < len(extras) else {})


class _Writer:
    def __init__(self, store: Store, conversation: Conversation, report: ImportReport,
                 tenant: TenantArg) -> None:
        self.store, self.conversation, self.report, self.tenant = (
            store, conversation, report, tenant)

    def place(self, path: Sequence[Message], branch_metadata: dict[str, Any]) -> None:
        main_id = self.conversation.session_id
        session = self._get(main_id)
        if session is None:
            self.store.create_session(main_id, metadata=self.conversation.metadata,
                                      state=self.conversation.state, **self.tenant)
            self.report.sessions_created += 1
            self._append(main_id, path)
            return
        while True:
            shared = self._shared_prefix(session, path)
            if shared == len(path):
                return  # all stored already
            if shared == session.message_count:
                self._append(session.id, path[shared:])
                return
            # The path leaves this session after `shared` messages: its branch is
            # the session keyed by the first message it does not share.
            branch_id = derived_id(main_id, "branch", path[shared].id)
            branch = self._get(branch_id)
            metadata = {**self.conversation.metadata, **branch_metadata, "branch_of": main_id}
            if branch is not None:
                if branch.metadata != metadata and branch.metadata == session.metadata:
                    # forked, and stopped before its metadata was given: give it now
                    branch = self.store.update_session(branch_id, metadata=metadata,
                                                       **self.tenant)
                session = branch
                continue
            if shared == 0:  # differs from the first message on: nothing to share
                self.store.create_session(branch_id, metadata=metadata,
                                          state=self.conversation.state, **self.tenant)
                self.report.sessions_created += 1
            else:
                self.store.fork(session.id, path[shared - 1].id, new_session_id=branch_id,
                                **self.tenant)
                self.store.update_session(branch_id, metadata=metadata, **self.tenant)
                self.report.forks_created += 1
            self._append(branch_id, path[shared:])
            return

    def _get(self, session_id: str) -> Session | None:
        try:
            return self.store.get_session(session_id, **self.tenant)
        except NotFound:
            return None

    def _has(self, session: Session, message_id: str) -> bool:
        try:
            self.store.get(session.id, message_id, **self.tenant)
        except NotFound:
            return False
        return True

    def _shared_prefix(self, session: Session, path: Sequence[Message]) -> int:
        """How many of the path's first messages the session holds. A derived id
        names one position of one source, so holding message i means holding all
        of messages 0..i: a binary search over ``get`` finds the prefix."""
        top = min(session.message_count, len(path))
        if top == 0:
            return 0
        if self._has(session, path[top - 1].id):
            return top
        lo, hi = 0, top - 1  # path[:lo] is held, path[hi] is not
        while lo < hi:
            mid = (lo + hi) // 2
            if self._has(session, path[mid].id):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _append(self, session_id: str, messages: Sequence[Message]) -> None:
        for start in range(0, len(messages), APPEND_BATCH):
            batch = messages[start:start + APPEND_BATCH]
            self.store.append(session_id, batch, **self.tenant)
            self.report.messages_added += len(batch)
