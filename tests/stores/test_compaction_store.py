"""Compaction items round-trip on every store (memory, SQLite, PostgreSQL, Redis)."""

from __future__ import annotations

from chathistory.formats import from_anthropic, from_openai_responses, to_openai_responses
from chathistory.model import Compaction
from chathistory.stores import BaseStore

ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque",
        "created_by": "resp_9"}


def test_a_session_with_compaction_items_reads_back_equal(store: BaseStore) -> None:
    messages = from_openai_responses([
        {"type": "message", "role": "user", "content": "first"},
        ITEM,
        {"type": "message", "role": "user", "content": "next"},
    ]) + from_anthropic(None, [{"role": "assistant", "content": [
        {"type": "compaction", "content": "summary", "encrypted_content": "e",
         "signature": "s", "tool_changes": []}, {"type": "text", "text": "ok"}]}])
    session = store.create_session()
    store.append(session.id, messages)
    got = store.tail(session.id, 10)
    assert [(m.id, m.role, m.parts, m.provider_metadata) for m in got] == [
        (m.id, m.role, m.parts, m.provider_metadata) for m in messages]
    assert [type(p) for m in got for p in m.parts].count(Compaction) == 2
    assert to_openai_responses(got)[1] == ITEM
