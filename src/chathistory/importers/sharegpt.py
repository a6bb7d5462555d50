"""ShareGPT: a JSON array (or JSON lines) of ``{"id", "conversations": [{"from", "value"}]}``.

``from`` is ``human`` / ``user`` (user), ``gpt`` / ``chatgpt`` / ``bing`` / ``bard`` /
``assistant`` / ``model`` (assistant, the original kept in ``metadata["from"]``
when it is not ``gpt``) or ``system``; any other role is kept as given. A
top-level ``system`` string becomes the first message. Empty turns are left
out and counted.

Ids: the session is ``uuid5(sharegpt, id)``; each message's id is derived from
the record's id, its position and its text, because published ShareGPT files
reuse ids for different conversations (ShareGPT V3 has 123 such ids): a reused
id with other content becomes its own session instead of being merged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import msgspec

from ..errors import InvalidMessage
from ..model import Message, TextPart
from ._write import Conversation, ImportReport, derived_id, invalid_record

__all__ = ["ROLES", "convert"]

ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
    "assistant": "assistant", "model": "assistant",
    "system": "system",
}


class _Turn(msgspec.Struct):
    from_: str = msgspec.field(name="from")
    value: str | None = None


class _Record(msgspec.Struct):
    conversations: list[_Turn]
    id: str | int | None = None
    system: str | None = None


_decoder = msgspec.json.Decoder(_Record)


def convert(raw: bytes, index: int, report: ImportReport) -> Iterator[Conversation]:
    """The conversation of one record (none when it has no non-empty turn)."""
    try:
        record = _decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise invalid_record(exc, index) from None
    source_id = (str(record.id) if record.id is not None
                 else hashlib.sha256(raw).hexdigest()[:32])
    turns = [(t.from_, t.value) for t in record.conversations]
    if record.system:
        turns.insert(0, ("system", record.system))
    messages: list[Message] = []
    for position, (source_role, value) in enumerate(turns):
        if not value or not value.strip():
            report.skip("empty message")
            continue
        role = ROLES.get(source_role.lower(), source_role)
        if not role.strip():
            raise InvalidMessage(f"record {index}: empty role",
                                 f"$[{index}].conversations[{position}].from")
        metadata = {"from": source_role} if source_role not in ("human", "gpt", role) else {}
        messages.append(Message(
            id=derived_id("sharegpt", source_id, position, source_role, value),
            role=role, parts=[TextPart(text=value)], metadata=metadata))
    if not messages:
        report.skip("empty conversation")
        return
    yield Conversation(
        session_id=derived_id("sharegpt", source_id),
        paths=[messages],
        metadata={"source": "sharegpt", "source_id": source_id},
    )
