"""The OpenAI Conversations API of ``chathistory serve``, with the official ``openai``
SDK as client and oracle (issue 20): every call of ``client.conversations`` and
``client.conversations.items``, sync and async, on every store; answers parsed by the
SDK's own types with strict validation; pagination over 250 items; errors as the SDK's
exception classes.

Each scenario is an ``async def`` over ``conversationkit.Sdk`` and runs once with
``OpenAI`` and once with ``AsyncOpenAI``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pytest
from conversationkit import (
    PNG_DATA_URL,
    Sdk,
    assert_item,
    assistant_message,
    client,
    mixed_items,
    new_id,
    run,
    settled,
    user_message,
)
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItemList,
)
from openai.types.conversations import Message as ItemMessage
from openai.types.responses import ResponseFunctionToolCallItem, ResponseReasoningItem
from serverkit import EVERY_BACKEND, Served, serving

from chathistory import Message

INCLUDE: Any = ["reasoning.encrypted_content", "message.input_image.image_url"]


served = pytest.fixture(scope="module", params=EVERY_BACKEND, name="served")(serving)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def fill(sdk: Sdk, conversation_id: str, count: int) -> list[str]:
    """``count`` items (user and assistant turns), 20 a request as OpenAI allows; their
    ids in the order they were added."""
    ids: list[str] = []
    for start in range(0, count, 20):
        batch = [user_message(f"u{i}") if i % 2 == 0 else assistant_message(f"a{i}")
                 for i in range(start, min(start + 20, count))]
        answer = await sdk.items.create(conversation_id, items=batch)
        assert [item.id for item in answer.data][1::2] == [item["id"] for item in batch[1::2]]
        ids += [item.id for item in answer.data]
    assert len(set(ids)) == count
    return ids


def stored_ids(served: Served, conversation_id: str) -> list[str]:
    """The conversation's message ids as chathistory's own API reads them."""
    with served.client("A") as http:
        response = http.get(f"/v1/sessions/{conversation_id}/messages", params={"start": 0})
    assert response.status_code == 200, response.text
    return [message["id"] for message in response.json()["messages"]]


def test_conversation_lifecycle(served: Served, mode: str) -> None:
    """create (empty, with metadata), retrieve, update, delete; then it is gone."""
    async def scenario(sdk: Sdk) -> None:
        before = int(time.time())
        empty = await sdk.conversations.create()
        assert isinstance(empty, Conversation)
        assert empty.id.startswith("conv_") and empty.object == "conversation"
        assert before - 2 <= empty.created_at <= int(time.time()) + 2
        assert not empty.metadata
        assert (await sdk.items.list(empty.id)).data == []

        tagged = await sdk.conversations.create(metadata={"topic": "weather", "user": "u-1"})
        assert tagged.id != empty.id and tagged.metadata == {"topic": "weather", "user": "u-1"}
        again = await sdk.conversations.retrieve(tagged.id)
        assert again.to_dict() == tagged.to_dict()

        updated = await sdk.conversations.update(tagged.id, metadata={"topic": "travel"})
        assert (updated.id, updated.created_at) == (tagged.id, tagged.created_at)
        assert updated.metadata == {"topic": "travel"}  # replaced, as OpenAI's update does
        assert (await sdk.conversations.retrieve(tagged.id)).metadata == {"topic": "travel"}

        deleted = await sdk.conversations.delete(tagged.id)
        assert isinstance(deleted, ConversationDeletedResource)
        assert (deleted.id, deleted.deleted, deleted.object) == (
            tagged.id, True, "conversation.deleted")
        for call in (sdk.conversations.retrieve(tagged.id), sdk.items.list(tagged.id),
                     sdk.conversations.delete(tagged.id)):
            with pytest.raises(openai.NotFoundError):
                await call
        assert (await sdk.conversations.retrieve(empty.id)).id == empty.id

    run(served, mode, scenario)


def test_created_with_initial_items(served: Served, mode: str) -> None:
    """Items of every kind given to create come back as sent (listed, one by one), in
    the SDK's types, and are the session's messages in chathistory's own API."""
    async def scenario(sdk: Sdk) -> None:
        sent = mixed_items()
        conversation = await sdk.conversations.create(items=sent, metadata={"k": "v"})
        assert conversation.metadata == {"k": "v"}
        page = await sdk.items.list(conversation.id, order="asc", include=INCLUDE)
        assert page.has_more is False and len(page.data) == len(sent)
        for i, (item, one) in enumerate(zip(page.data, sent, strict=True)):
            assert_item(item, one, path=f"items[{i}]")
        kinds = [type(item) for item in page.data]
        assert kinds == [ItemMessage, ItemMessage, ResponseReasoningItem,
                         ResponseFunctionToolCallItem, kinds[4], ItemMessage]
        assert page.data[4].type == "function_call_output"
        ids = [item.id for item in page.data]
        assert len(set(ids)) == len(ids)
        for i in (2, 3, 5):
            assert ids[i] == sent[i]["id"]  # an id sent is the id kept
        for item, one in zip(page.data, sent, strict=True):
            alone = await sdk.items.retrieve(item.id, conversation_id=conversation.id,
                                             include=INCLUDE)
            assert alone.to_dict() == item.to_dict()
            assert_item(alone, one)
        newest_first = await sdk.items.list(conversation.id, include=INCLUDE)
        assert [item.id for item in newest_first.data] == ids[::-1]
        assert stored_ids(sdk.served, conversation.id) == ids

    run(served, mode, scenario)


def test_items_create_batch(served: Served, mode: str) -> None:
    """items.create answers a ConversationItemList of what it stored, in order; string
    content is stored as an input_text part."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(items=[user_message("first")])
        sent: list[dict[str, Any]] = [
            {"role": "user", "content": "a plain string"},
            {"type": "message", "role": "system", "content": "be brief"},
            *mixed_items(),
        ]
        answer = await sdk.items.create(conversation.id, items=sent, include=INCLUDE)
        assert isinstance(answer, ConversationItemList)
        assert answer.object == "list" and answer.has_more is False
        assert len(answer.data) == len(sent)
        for i, (item, one) in enumerate(zip(answer.data, sent, strict=True)):
            assert_item(item, one, path=f"items[{i}]")
        assert (answer.first_id, answer.last_id) == (answer.data[0].id, answer.data[-1].id)
        listed = await sdk.items.list(conversation.id, order="asc", include=INCLUDE)
        assert [item.to_dict() for item in listed.data[1:]] == [
            item.to_dict() for item in answer.data]
        assert stored_ids(sdk.served, conversation.id) == [item.id for item in listed.data]

    run(served, mode, scenario)


def test_list_defaults_and_order(served: Served, mode: str) -> None:
    """Without parameters: the newest 20, newest first (OpenAI's defaults); asc the
    other way; limit out of 1..100 refused naming ``limit``."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create()
        ids = await fill(sdk, conversation.id, 25)
        default = await sdk.items.list(conversation.id)
        assert [item.id for item in default.data] == ids[::-1][:20]
        assert default.has_more is True and default.last_id == ids[5]
        assert getattr(default, "first_id", ids[-1]) == ids[-1]
        ascending = await sdk.items.list(conversation.id, order="asc", limit=100)
        assert [item.id for item in ascending.data] == ids and ascending.has_more is False
        assert ascending.last_id == ids[-1]
        one = await sdk.items.list(conversation.id, order="desc", limit=1)
        assert [item.id for item in one.data] == ids[-1:] and one.has_more is True
        for limit in (0, 101):
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.items.list(conversation.id, limit=limit)
            assert refused.value.param == "limit", refused.value.body
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.items.list(conversation.id, order="sideways")
        assert refused.value.param == "order", refused.value.body

    run(served, mode, scenario)


def test_pagination_over_250_items(served: Served, mode: str) -> None:
    """``after``/``limit`` pages by hand, the SDK's next page, and its auto-pagination,
    in both orders: every id once, in order; ``has_more`` false on the last page."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create()
        ids = await fill(sdk, conversation.id, 250)
        for order, expected in (("asc", ids), ("desc", ids[::-1])):
            seen: list[str] = []
            after: Any = openai.omit
            while True:
                page = await sdk.items.list(conversation.id, order=order, limit=7, after=after)
                assert 1 <= len(page.data) <= 7
                seen += [item.id for item in page.data]
                assert page.last_id == page.data[-1].id
                assert page.has_more is (len(seen) < len(expected)), (order, len(seen))
                if not page.has_more:
                    break
                after = page.last_id
            assert seen == expected, order

            page = await sdk.items.list(conversation.id, order=order, limit=7)
            by_sdk = [item.id for item in page.data]
            while page.has_next_page():
                page = await sdk.next_page(page)
                by_sdk += [item.id for item in page.data]
            assert by_sdk == expected, order
            assert [item.id for item in await sdk.every_item(
                conversation.id, order=order, limit=7)] == expected, order
        assert [item.id for item in await sdk.every_item(conversation.id, limit=100)] == ids[::-1]
        assert stored_ids(sdk.served, conversation.id) == ids

    run(served, mode, scenario)


def test_delete_item(served: Served, mode: str) -> None:
    """Deleting an item answers the conversation; the item is gone from the list, from a
    retrieve and from the session; a call and its output stay together."""
    async def scenario(sdk: Sdk) -> None:
        sent = mixed_items()
        conversation = await sdk.conversations.create(items=sent)
        before = [item.id for item in (await sdk.items.list(conversation.id, order="asc")).data]
        gone = before[1]  # the user's message, between the developer's and the reasoning
        answer = await sdk.items.delete(gone, conversation_id=conversation.id)
        assert isinstance(answer, Conversation) and answer.id == conversation.id
        after = await sdk.items.list(conversation.id, order="asc", include=INCLUDE)
        assert [item.id for item in after.data] == before[:1] + before[2:]
        for item, one in zip(after.data, sent[:1] + sent[2:], strict=True):
            assert_item(item, one)
        call, output = after.data[2], after.data[3]
        assert (call.type, output.type) == ("function_call", "function_call_output")
        assert call.call_id == output.call_id
        with pytest.raises(openai.NotFoundError):
            await sdk.items.retrieve(gone, conversation_id=conversation.id)
        with pytest.raises(openai.NotFoundError):
            await sdk.items.delete(gone, conversation_id=conversation.id)
        assert stored_ids(sdk.served, conversation.id) == before[:1] + before[2:]

    run(served, mode, scenario)


def test_include_encrypted_reasoning(served: Served, mode: str) -> None:
    """``include=["reasoning.encrypted_content"]`` is accepted on create, list and
    retrieve, and gives the encrypted content back as sent."""
    async def scenario(sdk: Sdk) -> None:
        reasoning = mixed_items()[2]
        conversation = await sdk.conversations.create()
        include: Any = ["reasoning.encrypted_content"]
        created = await sdk.items.create(conversation.id, items=[reasoning], include=include)
        listed = await sdk.items.list(conversation.id, include=include)
        alone = await sdk.items.retrieve(reasoning["id"], conversation_id=conversation.id,
                                         include=include)
        for item in (created.data[0], listed.data[0], alone):
            assert isinstance(item, ResponseReasoningItem)
            assert item.encrypted_content == reasoning["encrypted_content"]
            assert_item(item, reasoning)

    run(served, mode, scenario)


def test_an_item_id_stored_once(served: Served, mode: str) -> None:
    """Items sent again with the ids they were stored under are not stored twice
    (a retry after a lost answer)."""
    async def scenario(sdk: Sdk) -> None:
        sent = mixed_items()
        with_ids = [one for one in sent if "id" in one]
        conversation = await sdk.conversations.create(items=sent)
        first = await sdk.items.list(conversation.id, order="asc", include=INCLUDE)
        again = await sdk.items.create(conversation.id, items=with_ids, include=INCLUDE)
        assert [item.id for item in again.data] == [one["id"] for one in with_ids]
        retry = await sdk.items.create(conversation.id, items=with_ids[1:2])
        assert [item.id for item in retry.data] == [with_ids[1]["id"]]
        listed = await sdk.items.list(conversation.id, order="asc", include=INCLUDE)
        assert [item.to_dict() for item in listed.data] == [item.to_dict() for item in first.data]
        assert len(stored_ids(sdk.served, conversation.id)) == len(sent)

    run(served, mode, scenario)


def test_unknown_conversation_and_item(served: Served, mode: str) -> None:
    """Every call on a conversation or item that does not exist raises NotFoundError."""
    async def scenario(sdk: Sdk) -> None:
        missing = new_id("conv")
        conversation = await sdk.conversations.create(items=[user_message("here")])
        calls = [
            sdk.conversations.retrieve(missing),
            sdk.conversations.update(missing, metadata={"a": "b"}),
            sdk.conversations.delete(missing),
            sdk.items.list(missing),
            sdk.items.create(missing, items=[user_message("lost")]),
            sdk.items.retrieve(new_id("msg"), conversation_id=missing),
            sdk.items.retrieve(new_id("msg"), conversation_id=conversation.id),
            sdk.items.delete(new_id("msg"), conversation_id=conversation.id),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError) as raised:
                await call
            assert raised.value.status_code == 404
            assert isinstance(raised.value.body, dict) and raised.value.body.get("message")
        assert len((await sdk.items.list(conversation.id)).data) == 1

    run(served, mode, scenario)


BAD_ITEMS: list[tuple[dict[str, Any], str]] = [
    ({"type": "message", "content": [{"type": "input_text", "text": "no role"}]}, "role"),
    ({"type": "message", "role": "user", "content": 42}, "content"),
    ({"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": ["not", "a", "string"]}]}, "content[0]"),
    ({"type": "no_such_item", "role": "user", "content": "x"}, "type"),
    ({"type": "function_call", "call_id": "call_1", "name": "f"}, "arguments"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_ITEMS, ids=[f for _, f in BAD_ITEMS])
def test_a_bad_item(served: Served, mode: str, bad: dict[str, Any], field: str) -> None:
    """A bad item (second of a batch) is a BadRequestError whose ``param`` names its path
    (``items[1]...``), from items.create and from create; nothing of the batch is
    stored."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(items=[user_message("kept")])
        for call in (sdk.items.create(conversation.id, items=[user_message("ok"), bad]),
                     sdk.conversations.create(items=[user_message("ok"), bad])):
            with pytest.raises(openai.BadRequestError) as refused:
                await call
            param = refused.value.param or ""
            assert param.startswith("items[1]"), refused.value.body
            assert field in param or field in str(refused.value.body), refused.value.body
        listed = await sdk.items.list(conversation.id)
        assert [item.to_dict()["content"][0]["text"] for item in listed.data] == ["kept"]

    run(served, mode, scenario)


def test_metadata_over_its_limits(served: Served, mode: str) -> None:
    """OpenAI's metadata limits (16 pairs, keys of 64 and values of 512 characters)
    are a BadRequestError naming ``metadata``."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(metadata={"a": "b"})
        for metadata in ({f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"},
                         {"k": "v" * 513}):
            for call in (sdk.conversations.create(metadata=metadata),
                         sdk.conversations.update(conversation.id, metadata=metadata)):
                with pytest.raises(openai.BadRequestError) as refused:
                    await call
                assert (refused.value.param or "").startswith("metadata"), refused.value.body
        at_limit = {f"{i:064d}": "v" * 512 for i in range(16)}
        assert (await sdk.conversations.update(conversation.id, metadata=at_limit)
                ).metadata == at_limit

    run(served, mode, scenario)


def test_keys(served: Served, mode: str) -> None:
    """No key or a wrong one: AuthenticationError. Tenant B's key on A's conversation:
    NotFoundError for every call, and A's conversation is unchanged."""
    async def scenario(sdk: Sdk) -> None:
        mine = await sdk.conversations.create(items=mixed_items(), metadata={"owner": "A"})
        first = (await sdk.items.list(mine.id)).data[0].id
        no_key: Any = {"Authorization": openai.omit}
        with pytest.raises(openai.AuthenticationError):
            await sdk.conversations.retrieve(mine.id, extra_headers=no_key)
        with pytest.raises(openai.AuthenticationError):
            await sdk.conversations.create(extra_headers=no_key)
        for key in ("chk_0123456789abcdef_wrong", sdk.served.keys["A"] + "x"):
            wrong = client(sdk.served, "async" if sdk.is_async else "sync", api_key=key)
            with pytest.raises(openai.AuthenticationError):
                await settled(wrong.conversations.retrieve(mine.id))
            await settled(wrong.close())
        other = Sdk(client(sdk.served, "async" if sdk.is_async else "sync", "B"), sdk.served)
        calls = [
            other.conversations.retrieve(mine.id),
            other.conversations.update(mine.id, metadata={"owner": "B"}),
            other.items.list(mine.id),
            other.items.create(mine.id, items=[user_message("from B")]),
            other.items.retrieve(first, conversation_id=mine.id),
            other.items.delete(first, conversation_id=mine.id),
            other.conversations.delete(mine.id),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError):
                await call
        await settled(other.client.close())
        assert (await sdk.conversations.retrieve(mine.id)).metadata == {"owner": "A"}
        assert (await sdk.items.list(mine.id)).data[0].id == first
        assert len((await sdk.items.list(mine.id)).data) == len(mixed_items())

    run(served, mode, scenario)


def test_image_data_url_kept(served: Served, mode: str) -> None:
    """An input image given as a data URL comes back as the same data URL."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(items=[mixed_items()[1]])
        item = (await sdk.items.list(conversation.id, include=INCLUDE)).data[0]
        assert item.content[1].image_url == PNG_DATA_URL

    run(served, mode, scenario)


def test_batch_and_parameter_limits(served: Served, mode: str) -> None:
    """OpenAI's 20 items a request (``param: items``), an ``after`` that names no item
    of the conversation (``param: after``), an ``include`` the SDK does not define
    (``param: include``): BadRequestErrors, nothing stored; 20 items pass. Metadata set
    to null by update is emptied."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(metadata={"a": "b"})
        too_many = [user_message(f"m{i}") for i in range(21)]
        for call in (sdk.items.create(conversation.id, items=too_many),
                     sdk.conversations.create(items=too_many)):
            with pytest.raises(openai.BadRequestError) as refused:
                await call
            assert refused.value.param == "items", refused.value.body
        assert (await sdk.items.list(conversation.id)).data == []
        assert len((await sdk.items.create(conversation.id, items=too_many[:20])).data) == 20
        other = await sdk.conversations.create(items=[user_message("elsewhere")])
        elsewhere = (await sdk.items.list(other.id)).data[0].id
        for after in (new_id("msg"), elsewhere):
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.items.list(conversation.id, after=after)
            assert refused.value.param == "after", refused.value.body
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.items.list(conversation.id, include=["no.such_field"])
        assert refused.value.param == "include", refused.value.body
        emptied = await sdk.conversations.update(conversation.id, metadata=None)
        assert not emptied.metadata and not (await sdk.conversations.retrieve(emptied.id)).metadata

    run(served, mode, scenario)


def test_delete_at_any_depth(served: Served, mode: str) -> None:
    """An item deep in a conversation is deleted and everything after it stays as it
    was, in order; so is the oldest of more than a hundred."""
    async def scenario(sdk: Sdk) -> None:
        sent = mixed_items()
        conversation = await sdk.conversations.create(items=sent)
        ids = [item.id for item in (await sdk.items.list(conversation.id, order="asc")).data]
        ids += await fill(sdk, conversation.id, 100)
        deepest = ids[-101]
        assert deepest == ids[5]  # the assistant's annotated answer, under 100 items
        await sdk.items.delete(deepest, conversation_id=conversation.id)
        left = ids[:5] + ids[6:]
        assert [item.id for item in await sdk.every_item(conversation.id, order="asc",
                                                         limit=100)] == left
        listed = await sdk.items.list(conversation.id, order="asc", limit=5, include=INCLUDE)
        for item, one in zip(listed.data, sent[:5], strict=True):
            assert_item(item, one)
        await sdk.items.delete(ids[0], conversation_id=conversation.id)
        assert stored_ids(sdk.served, conversation.id) == left[1:]

    run(served, mode, scenario)


def test_a_session_written_through_v1(served: Served, mode: str) -> None:
    """A session written through chathistory's own API is a conversation: its messages
    are items in the SDK's types (an assistant turn with text and a call is two items),
    each retrievable and a page boundary; one item of a two-item message cannot be
    deleted alone; the newest item can."""
    async def scenario(sdk: Sdk) -> None:
        turn = [Message.user("Weather in Paris?"),
                Message.assistant("Let me look.", [{"id": "call_v1", "name": "get_weather",
                                                    "arguments": {"city": "Paris"}}]),
                Message.tool_result("call_v1", "18 C, sunny"),
                Message.assistant("18 C and sunny.")]
        with sdk.served.client("A") as http:
            session_id = sdk.served.new_session(http)
            appended = http.post(f"/v1/sessions/{session_id}/messages",
                                 json={"messages": [m.to_dict() for m in turn]})
            assert appended.status_code == 200, appended.text
        items = await sdk.every_item(session_id, order="asc")
        assert [item.type for item in items] == [
            "message", "message", "function_call", "function_call_output", "message"]
        assert (items[0].role, items[0].content[0].text) == ("user", "Weather in Paris?")
        assert (items[1].role, items[1].content[0].text) == ("assistant", "Let me look.")
        assert (items[2].call_id, items[2].name) == ("call_v1", "get_weather")
        assert json.loads(items[2].arguments) == {"city": "Paris"}
        assert (items[3].call_id, items[3].output) == ("call_v1", "18 C, sunny")
        assert items[4].content[0].text == "18 C and sunny."
        ids = [item.id for item in items]
        assert len(set(ids)) == 5
        for item in items:
            alone = await sdk.items.retrieve(item.id, conversation_id=session_id)
            assert alone.to_dict() == item.to_dict()
        one_by_one = await sdk.every_item(session_id, order="asc", limit=1)
        assert [item.id for item in one_by_one] == ids
        with pytest.raises(openai.BadRequestError):
            await sdk.items.delete(ids[2], conversation_id=session_id)
        await sdk.items.delete(ids[4], conversation_id=session_id)
        assert [item.id for item in await sdk.every_item(session_id, order="asc")] == ids[:4]
        assert (await sdk.conversations.retrieve(session_id)).id == session_id

    run(served, mode, scenario)


def test_concurrent_item_creates(served: Served, mode: str) -> None:
    """Eight items.create calls at once on one conversation (gathered: concurrent with
    the async client) each store their items once, without a conflict."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create()
        batches = [[assistant_message(f"{n}-{i}") for i in range(3)] for n in range(8)]
        answers = await asyncio.gather(*(sdk.items.create(conversation.id, items=batch)
                                         for batch in batches))
        for answer, batch in zip(answers, batches, strict=True):
            assert [item.id for item in answer.data] == [one["id"] for one in batch]
        listed = await sdk.every_item(conversation.id, order="asc", limit=100)
        assert sorted(item.id for item in listed) == sorted(
            one["id"] for batch in batches for one in batch)
        positions = {item.id: i for i, item in enumerate(listed)}
        for batch in batches:  # a batch is stored as one run, in its order
            first = positions[batch[0]["id"]]
            assert [positions[one["id"]] for one in batch] == [first, first + 1, first + 2]

    run(served, mode, scenario)


def test_an_answer_is_what_is_stored(served: Served, mode: str) -> None:
    """items.create answers the items the conversation holds: an id already stored
    (sent again with other content, or twice in one batch) is answered as stored, once,
    never as the copy that was dropped."""
    async def scenario(sdk: Sdk) -> None:
        kept = assistant_message("stored first")
        conversation = await sdk.conversations.create(items=[kept])
        other_copy = assistant_message("a different copy", kept["id"])
        twice = assistant_message("one")
        batches = [[other_copy], [twice, assistant_message("two", twice["id"])]]
        for batch in batches:
            answer = await sdk.items.create(conversation.id, items=batch)
            ids = [item.id for item in answer.data]
            assert len(ids) == len(set(ids)), f"one id twice in the answer: {ids}"
            for item in answer.data:
                stored = await sdk.items.retrieve(item.id, conversation_id=conversation.id)
                assert item.to_dict() == stored.to_dict()
        listed = await sdk.items.list(conversation.id, order="asc")
        assert [item.content[0].text for item in listed.data] == ["stored first", "one"]

    run(served, mode, scenario)


def test_an_empty_batch(served: Served, mode: str) -> None:
    """items.create with no items: refused naming ``items``, or an empty list the SDK's
    ``ConversationItemList`` parses (its ``first_id`` and ``last_id`` are strings)."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(items=[])
        assert (await sdk.items.list(conversation.id)).data == []
        try:
            answer = await sdk.items.create(conversation.id, items=[])
        except openai.BadRequestError as refused:
            assert refused.param == "items", refused.body
        else:
            assert answer.data == [] and answer.has_more is False

    run(served, mode, scenario)


@pytest.mark.parametrize("item_id", ["msg_a/b", "msg_a?b#c", "msg_%2F", "msg_ü 🍅"])
def test_an_item_id_in_a_url(served: Served, mode: str, item_id: str) -> None:
    """An item id the API accepts is one it can retrieve and delete (the SDK puts it in
    the path, percent-encoded); else it is refused naming ``items[0].id``."""
    async def scenario(sdk: Sdk) -> None:
        conversation = await sdk.conversations.create(items=[user_message("first")])
        try:
            await sdk.items.create(conversation.id, items=[assistant_message("x", item_id)])
        except openai.BadRequestError as refused:
            assert refused.param == "items[0].id", refused.body
            return
        stored = await sdk.items.retrieve(item_id, conversation_id=conversation.id)
        assert stored.id == item_id
        await sdk.items.delete(item_id, conversation_id=conversation.id)
        assert len((await sdk.items.list(conversation.id)).data) == 1

    run(served, mode, scenario)


def test_listed_ids_are_unique(served: Served, mode: str) -> None:
    """The ids listed for a session written through /v1 (one message, two items: ids
    derived from the message's) stay unique, and pages chain by them, when other
    messages and items have ids of that shape."""
    async def scenario(sdk: Sdk) -> None:
        with sdk.served.client("A") as http:
            session_id = sdk.served.new_session(http)
            two_items = Message.assistant("Let me look.", [
                {"id": "call_u", "name": "f", "arguments": {}}], id="m")
            for message in (two_items, Message.tool_result("call_u", "r", id="r"),
                            Message.user("an id of that shape", id="m~1")):
                appended = http.post(f"/v1/sessions/{session_id}/messages",
                                     json={"messages": [message.to_dict()]})
                assert appended.status_code == 200, appended.text
        listed = [item.id for item in await sdk.every_item(session_id, order="asc")]
        await sdk.items.create(session_id, items=[assistant_message("again", listed[0])])
        ids = [item.id for item in await sdk.every_item(session_id, order="asc")]
        assert len(ids) == len(set(ids)), ids
        assert [item.id for item in await sdk.every_item(session_id, order="asc",
                                                         limit=1)] == ids
        assert [item.id for item in await sdk.every_item(session_id, limit=1)] == ids[::-1]
        for item_id in ids:
            assert (await sdk.items.retrieve(item_id, conversation_id=session_id)).id == item_id

    run(served, mode, scenario)


def test_deletes_beside_concurrent_creates(served: Served, mode: str) -> None:
    """An item deleted from the middle while items.create calls run at once (gathered:
    concurrent with the async client), with the SDK retrying as it does by default:
    every call succeeds, the item is gone, every other item is there once, the older
    ones in their order."""
    async def scenario(sdk: Sdk) -> None:
        retrying = Sdk(client(sdk.served, "async" if sdk.is_async else "sync", retries=5),
                       sdk.served)
        conversation = await retrying.conversations.create()
        ids = await fill(retrying, conversation.id, 80)
        for round_ in range(3):
            gone = ids[-50 + round_]
            batches = [[assistant_message(f"{round_}-{k}-{i}") for i in range(2)]
                       for k in range(6)]
            await asyncio.gather(
                retrying.items.delete(gone, conversation_id=conversation.id),
                *(retrying.items.create(conversation.id, items=batch) for batch in batches))
            listed = [item.id for item in await retrying.every_item(
                conversation.id, order="asc", limit=100)]
            older = [item_id for item_id in ids if item_id != gone]
            assert listed[:len(older)] == older, round_
            assert sorted(listed[len(older):]) == sorted(
                one["id"] for batch in batches for one in batch), round_
            ids = listed
        assert stored_ids(sdk.served, conversation.id) == ids
        await settled(retrying.client.close())

    run(served, mode, scenario)
