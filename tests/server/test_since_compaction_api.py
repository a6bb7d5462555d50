"""``GET /v1/sessions/{id}/messages?since=compaction`` on every backend through a real
server: ``RemoteStore.since_compaction`` (and its ``_json``), ``AsyncRemoteStore`` and
``AsyncStoreAdapter`` answer what the server's own store answers, as JSON and in a
provider's format; the options it takes and refuses; another tenant's key finds
nothing (issue 21). That the read is bounded is the engine's test
(``tests/stores/test_since_compaction.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import msgspec
import pytest
from serverkit import EVERY_BACKEND, Served, serving

from chathistory import KVStatus, Message, NotFound
from chathistory.formats import from_anthropic, to_anthropic, to_openai_responses
from chathistory.model import Compaction
from chathistory.stores.aio import AsyncStoreAdapter
from chathistory.stores.remote import AsyncRemoteStore, RemoteStore

served = pytest.fixture(scope="module", params=EVERY_BACKEND, name="served")(serving)

KEEP = (False, True)


@pytest.fixture
def remote(served: Served) -> Iterator[RemoteStore]:
    store = RemoteStore(served.url, served.keys["A"])
    yield store
    store.close()


def _openai(serial: int) -> Message:
    return Message(role="assistant", parts=[Compaction(provider="openai_responses",
                                                       data=f"gAAAA-{serial}")],
                   provider_metadata={"openai_responses": {"id": f"cmp_{serial}"}})


def _anthropic_turn() -> Message:
    """An Anthropic assistant turn holding a compaction block before its text."""
    [message] = from_anthropic(None, [{"role": "assistant", "content": [
        {"type": "compaction", "content": "They planned a week in Italy.",
         "encrypted_content": "e1", "signature": "s1"},
        {"type": "text", "text": "Rome first."}]}])
    return message


def _call(call_id: str) -> Message:
    return Message.assistant("", [{"id": call_id, "name": "lookup", "arguments": {"q": "x"}}])


def _sessions(remote: RemoteStore) -> dict[str, tuple[list[str], list[str]]]:
    """Sessions of tenant A, written through the server, and the ids a read from the
    last compaction gives: without the system prompt, and with it."""
    expected: dict[str, tuple[list[str], list[str]]] = {}

    def new(*messages: Message) -> str:
        session = remote.create_session()
        if messages:
            remote.append(session.id, messages)
        return session.id

    def ids(*messages: Message) -> list[str]:
        return [m.id for m in messages]

    # a compaction inside a tool group: the read widens back to the call
    system = Message.system("You plan trips.")
    call, compacted, result = _call("c1"), _openai(1), Message.tool_result("c1", "found")
    after = [Message.user("And the weekend?"), Message.assistant("Venice.")]
    grouped = new(system, Message.user("A week in Italy?"), Message.assistant("Rome."),
                  call, compacted, result, *after)
    expected[grouped] = (ids(call, compacted, result, *after),
                         ids(system, call, compacted, result, *after))
    # an older OpenAI compaction, then an Anthropic turn with one, a marked message after
    first, older, more = Message.user("hi"), _openai(2), Message.user("more")
    turn, marked, last = _anthropic_turn(), Message.user("marked, still read"), Message.user("ok")
    two = new(first, older, more, turn, marked, last)
    remote.mark(two, [marked.id], KVStatus.MARKED)
    expected[two] = (ids(turn, marked, last),) * 2
    # a fork below the newest compaction reads from the one before
    fork = remote.fork(two, more.id).id
    expected[fork] = (ids(older, more),) * 2
    # no compaction: the whole session; none left after a pop: the whole session again
    plain = [Message.user("no compaction here"), Message.assistant("none")]
    expected[new(*plain)] = (ids(*plain),) * 2
    question = Message.user("q")
    popped = new(question, _openai(3))
    assert remote.pop(popped) is not None
    expected[popped] = (ids(question),) * 2
    expected[new()] = ([], [])
    return expected


def test_remote_and_async_read_what_the_store_reads(served: Served,
                                                    remote: RemoteStore) -> None:
    expected = _sessions(remote)
    for sid, wanted in expected.items():
        for keep, want in zip(KEEP, wanted, strict=True):
            local = served.store.since_compaction(sid, tenant="A", keep_system=keep)
            assert [m.id for m in local] == want, (sid, keep)
            assert remote.since_compaction(sid, keep_system=keep) == local
            assert msgspec.json.decode(remote.since_compaction_json(sid, keep_system=keep)) \
                == msgspec.json.decode(served.store.since_compaction_json(
                    sid, tenant="A", keep_system=keep))

    async def through_async() -> list[list[Message]]:
        out = []
        adapter = AsyncStoreAdapter(served.store)
        async with AsyncRemoteStore(served.url, served.keys["A"]) as store:
            for sid in expected:
                for keep in KEEP:
                    out.append(await store.since_compaction(sid, tenant="A", keep_system=keep))
                    out.append(await adapter.since_compaction(sid, tenant="A",
                                                              keep_system=keep))
        return out

    got = asyncio.run(through_async())
    want_all = [served.store.since_compaction(sid, tenant="A", keep_system=keep)
                for sid in expected for keep in KEEP for _ in range(2)]
    assert got == want_all


def test_a_format_encodes_what_the_store_reads(served: Served, remote: RemoteStore,
                                               a: httpx.Client) -> None:
    turn = _anthropic_turn()
    sid = remote.create_session().id
    remote.append(sid, [Message.system("Be brief."), Message.user("hi"), _openai(4),
                        Message.user("next"), turn, Message.user("and?")])
    local = served.store.since_compaction(sid, tenant="A", keep_system=True)
    assert [m.id for m in local][1] == turn.id
    for fmt, encode in (("openai_responses", lambda m: {"input": to_openai_responses(m)}),
                        ("anthropic", to_anthropic)):
        response = a.get(f"/v1/sessions/{sid}/messages",
                         params={"since": "compaction", "keep_system": "true", "format": fmt})
        assert response.status_code == 200, response.text
        assert response.json() == msgspec.json.decode(msgspec.json.encode(encode(local)))
    blocks = a.get(f"/v1/sessions/{sid}/messages",
                   params={"since": "compaction", "format": "anthropic"}).json()
    assert blocks["messages"][0]["content"][0]["type"] == "compaction"


@pytest.mark.parametrize(("params", "names"), [
    ({"since": "yesterday"}, "since"),
    ({"since": ""}, "since"),
    ({"since": "compaction", "tail": "2"}, "exactly one selector"),
    ({"since": "compaction", "start": "0"}, "exactly one selector"),
    ({"since": "compaction", "include_marked": "true"}, "include_marked"),
    ({"since": "compaction", "counter": "o200k_base"}, "counter"),
    ({"since": "compaction", "keep_system": "maybe"}, "keep_system"),
    ({"tail": "2", "keep_system": "true"}, "keep_system"),
    ({"since": "compaction", "assets": "url"}, "assets"),
])
def test_options_that_do_not_apply_are_a_400_naming_them(served: Served, a: httpx.Client,
                                                         params: dict[str, str],
                                                         names: str) -> None:
    sid = served.new_session(a)
    response = a.get(f"/v1/sessions/{sid}/messages", params=params)
    assert response.status_code == 400, response.text
    assert names in response.json()["error"]["message"]


def test_another_tenant_finds_nothing(served: Served, remote: RemoteStore,
                                      b: httpx.Client) -> None:
    sid = remote.create_session().id
    remote.append(sid, [Message.user("secret"), _openai(5)])
    response = b.get(f"/v1/sessions/{sid}/messages", params={"since": "compaction"})
    assert response.status_code == 404
    assert "secret" not in response.text
    with pytest.raises(ValueError, match="tenant"):
        remote.since_compaction(sid, tenant="B")
    with pytest.raises(NotFound):
        remote.since_compaction("no-such-session")
