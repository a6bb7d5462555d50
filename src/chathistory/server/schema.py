"""The shapes of the API's JSON bodies: request bodies decode (and validate, with
the path of a bad field) straight into these structs; responses encode from
them. ``openapi.py`` generates the document's schemas from the same classes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from ..model import Attachment, Message
from ..stores.model import Session
from ..window import WindowPlan

__all__ = [
    "MAX_MESSAGES_PER_APPEND",
    "MAX_PARTS_PER_MESSAGE",
    "AnthropicAppendBody",
    "AppendBody",
    "CreateSessionBody",
    "EditBody",
    "EraseBody",
    "ErrorBody",
    "ForkBody",
    "GeminiAppendBody",
    "MarkBody",
    "OpenAIChatAppendBody",
    "OpenAIResponsesAppendBody",
    "ReduceBody",
    "UpdateSessionBody",
    "WindowBody",
]

MAX_MESSAGES_PER_APPEND = 10_000
MAX_PARTS_PER_MESSAGE = 1_000

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
NewId = Annotated[str, msgspec.Meta(min_length=1, max_length=200,
                                    description="an id for URLs: no '/', not '.' or '..'")]
MAX_TTL_SECONDS = 100 * 366 * 86400
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_TTL_SECONDS)]
"""A TTL: at most 100 years (a date past the year 9999 cannot be stored)."""
Count = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(gt=0)]


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    pass


class CreateSessionBody(_Body):
    id: NewId | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    ttl_seconds: PositiveSeconds | None = None


class UpdateSessionBody(_Body):
    metadata: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    ttl_seconds: PositiveSeconds | None = None


class ForkBody(_Body):
    at_message_id: Id | None = None
    new_session_id: NewId | None = None


class EditBody(_Body):
    message_id: Id
    message: Message


class AppendBody(_Body):
    messages: Annotated[list[Message], msgspec.Meta(max_length=MAX_MESSAGES_PER_APPEND)]
    state: dict[str, Any] | None = None
    reject_orphans: bool = False


Payloads = Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_MESSAGES_PER_APPEND)]
IdPrefix = Annotated[str, msgspec.Meta(
    min_length=1, max_length=150,
    description="the stored messages get the ids <id_prefix>-0, <id_prefix>-1, ... in "
                "order, so a retry of the same body stores nothing twice (without it each "
                "gets a new random id); no '/'")]


class _FormatAppendBody(_Body):
    """An append in a provider's shape (``?format=``): its request fields, as a read
    with the same format returns them, and the append's own."""

    state: dict[str, Any] | None = None
    reject_orphans: bool = False
    id_prefix: IdPrefix | None = None


class OpenAIChatAppendBody(_FormatAppendBody, kw_only=True):
    messages: Payloads


class OpenAIResponsesAppendBody(_FormatAppendBody, kw_only=True):
    input: Payloads


class AnthropicAppendBody(_FormatAppendBody, kw_only=True):
    messages: Payloads
    system: str | list[dict[str, Any]] | None = None


class GeminiAppendBody(_FormatAppendBody, kw_only=True):
    contents: Payloads
    system_instruction: str | dict[str, Any] | None = None


class MarkBody(_Body):
    ids: Annotated[list[Id], msgspec.Meta(max_length=MAX_MESSAGES_PER_APPEND)]
    status: Literal[1, 0, -1]


class ReduceBody(_Body):
    type: Literal["truncation", "count", "token_budget"]
    target_count: Positive | None = None
    threshold_count: Count = 0
    max_messages: Positive | None = None
    max_tokens: Count | None = None
    low_water_tokens: Count | None = None
    counter: str | None = None
    keep_system: bool = True


class WindowBody(_Body):
    max_tokens: Positive
    low_water_tokens: Count | None = None
    pin_tokens: Count | None = None
    counter: str | None = None
    keep_system: bool = True


class EraseBody(_Body):
    user: str | None = None
    all: bool = False
    """Erase the whole tenant (needed when no ``user`` is named)."""


# ---------------------------------------------------------------- responses


class SessionPage(msgspec.Struct):
    items: list[Session]
    next_cursor: str | None = None


class VersionOut(msgspec.Struct):
    version: int


class MessagesOut(msgspec.Struct):
    messages: list[Message]


class PopOut(msgspec.Struct):
    message: Message | None


class MarkOut(msgspec.Struct):
    changed: int


class ReduceOut(msgspec.Struct):
    kept: list[str]
    removed: list[str]


class ImportOut(msgspec.Struct):
    added: int


class EraseOut(msgspec.Struct):
    deleted: int


class PurgeOut(msgspec.Struct):
    purged: int


class Me(msgspec.Struct, kw_only=True):
    tenant: str
    counter: str
    key_id: str | None = None
    keys_required: bool = False


class Health(msgspec.Struct):
    status: str


class ErrorDetail(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str
    message: str
    request_id: str
    path: str | None = None
    message_id: str | None = None
    field: str | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


RESPONSE_TYPES: list[Any] = [Session, SessionPage, VersionOut, MessagesOut, PopOut, MarkOut,
                             ReduceOut, WindowPlan, ImportOut, EraseOut, PurgeOut, Me, Health,
                             Attachment, ErrorBody, Message]
