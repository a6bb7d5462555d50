"""Errors raised by chathistory.

Every error the library raises on purpose derives from one root::

    ChatHistoryError
    ├── InvalidMessage (also ValueError)   bad input; ``.path`` names the field:
    │   │                                  ``$.parts[2].call_id``
    │   └── DuplicateMessage               a list operation on a ``History`` (insert,
    │                                      item or slice assignment) put in an id
    │                                      already there; ``.message_id`` names it
    ├── InvalidArgument (also ValueError)  a bad argument to a store call (a cursor it did
    │                                      not make, a range past the end, a negative n)
    ├── NotFound (also KeyError)           an unknown session, message or asset
    ├── Conflict                           a stale ``expected_version`` / ``If-Match``
    │   └── IdReused                       an append re-sent a stored message id with
    │                                      other content; ``.message_id``, ``.field``
    ├── StoreUnavailable                   the store cannot be reached or written now
    │   │                                  (retry after ``.retry_after`` seconds)
    │   └── StorageFull                    its disk is full; ``.where`` names it
    └── MissingDependency (also ImportError)  an optional extra is not installed; names it

The HTTP layer maps these classes to status codes in one table.
"""

from __future__ import annotations

__all__ = [
    "ChatHistoryError",
    "Conflict",
    "DuplicateMessage",
    "IdReused",
    "InvalidArgument",
    "InvalidMessage",
    "MissingDependency",
    "NotFound",
    "StorageFull",
    "StoreUnavailable",
]


class ChatHistoryError(Exception):
    """Root of every error chathistory raises on purpose."""


class InvalidMessage(ChatHistoryError, ValueError):
    """A message (or a document of messages) failed validation.

    ``path`` is a JSONPath-like pointer to the bad field (``$.parts[2].call_id``)
    and ``reason`` the bare explanation; ``str(err)`` joins both.
    """

    def __init__(self, reason: str, path: str = "$") -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{reason} - at `{path}`")

    def under(self, prefix: str) -> InvalidMessage:
        """The same error with its path re-rooted below ``prefix`` (``$.messages[3]``)."""
        return InvalidMessage(self.reason, prefix + self.path[1:])


class DuplicateMessage(InvalidMessage):
    """A message put into a ``History`` by a list operation has an id that is
    already there (outside the positions being replaced).

    Bad input like any invalid message, with the path to its id (``$[3].id``);
    ``add`` and ``extend`` never raise it: for them a present id is a retry and a
    no-op (invariant 1 of docs/architecture.md).
    """

    def __init__(self, message_id: str, path: str = "$.id") -> None:
        self.message_id = message_id
        super().__init__(f"a message with id {message_id!r} is already in the history", path)

    def under(self, prefix: str) -> DuplicateMessage:
        return DuplicateMessage(self.message_id, prefix + self.path[1:])


class InvalidArgument(ChatHistoryError, ValueError):
    """A store call's argument is out of range or malformed (the caller's mistake, a
    400 through the HTTP service): a cursor the store did not make, a ``start`` past
    the session's end, a negative count. A bare ``ValueError`` from inside a store is
    a bug, never this."""


class NotFound(ChatHistoryError, KeyError):
    """An unknown session, message or asset."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text
        return str(self.args[0]) if self.args else "not found"


class Conflict(ChatHistoryError):
    """A write was made against a stale version of a session."""


class IdReused(Conflict):
    """An append carries a message whose id is stored (or repeated in the batch) with
    other content: not a retry, which repeats what it sent, so refused as a whole.

    Appends are idempotent by id; as with a payment API's idempotency key reused with
    other parameters, a different body under a known id is a 409, never a silent
    no-op. ``message_id`` names the id and ``field`` the first field that differs
    (``parts[0].text``; ``parts`` when their number differs).
    """

    def __init__(self, message_id: str, field: str, *, in_batch: bool = False,
                 message: str | None = None) -> None:
        self.message_id = message_id
        self.field = field
        where = ("is repeated in the batch with other content" if in_batch
                 else "is stored with other content")
        super().__init__(message or f"message {message_id!r} {where}: {field} differs (an "
                         "id names one message; a retry re-sends it unchanged)")


class MissingDependency(ChatHistoryError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{package} is not installed; install it with: pip install 'chathistory[{extra}]'"
        )


class StoreUnavailable(ChatHistoryError):
    """The store cannot serve the call now: its server is unreachable or timed out,
    its file is read-only or locked. Retrying later may succeed; ``retry_after``
    is a hint in seconds (the HTTP service answers 503 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after: float = 1.0, *, unreachable: bool = True
                 ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.unreachable = unreachable
        """The store cannot be reached at all (a server down or timing out), rather than
        refusing some calls (a read-only or locked file, a full disk: reads still work)."""


class StorageFull(StoreUnavailable):
    """The store's disk (or the asset directory's) is full; ``where`` names the file
    or directory. (HTTP 507.)"""

    def __init__(self, message: str, where: str = "", retry_after: float = 30.0) -> None:
        super().__init__(message, retry_after, unreachable=False)
        self.where = where
