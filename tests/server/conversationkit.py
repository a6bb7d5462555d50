"""What the OpenAI Conversations tests share: the official ``openai`` SDK as the
client (sync or async, behind one awaitable face, so each scenario is written once),
OpenAI items of several kinds, and the check that an item came back as it was sent.
Servers over every store, Redis included, come from ``serverkit.serve``.

The SDK is also the oracle: clients validate every answer strictly against the SDK's
own types (``_strict_response_validation``), so a shape the SDK would not parse is an
``openai.APIResponseValidationError``, never a silently half-built model.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from serverkit import Served

PREFIX = "/openai/v1"
# a 4x2 PNG, base64 as Python writes it: a data URL that must come back byte for byte
PNG_DATA_URL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAQAAAACCAIAAADwyuo0AAAAEElE"
                "QVR42mP4n+wORwzIHACygg1JFQf1EgAAAABJRU5ErkJggg==")


class Calls:
    """Any attribute path of an ``OpenAI`` or ``AsyncOpenAI`` client; calling it
    returns an awaitable either way (a page, for ``items.list``)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Calls:
        return Calls(getattr(self._target, name))

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await settled(self._target(*args, **kwargs))


async def settled(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


class Sdk:
    """One client of the SDK, sync or async, and what the scenarios ask of it."""

    def __init__(self, client: openai.OpenAI | openai.AsyncOpenAI, served: Served) -> None:
        self.client = client
        self.served = served
        self.is_async = isinstance(client, openai.AsyncOpenAI)
        self.conversations = Calls(client.conversations)
        self.items = Calls(client.conversations.items)

    async def every_item(self, conversation_id: str, **params: Any) -> list[Any]:
        """Every item by the SDK's own auto-pagination (``for`` / ``async for``)."""
        pages = self.client.conversations.items.list(conversation_id, **params)
        if hasattr(pages, "__aiter__"):  # the async client's AsyncPaginator
            return [item async for item in pages]
        return list(pages)

    async def next_page(self, page: Any) -> Any:
        return await settled(page.get_next_page())


def client(served: Served, mode: str, tenant: str = "A", *, api_key: str | None = None,
           retries: int = 0) -> openai.OpenAI | openai.AsyncOpenAI:
    """An SDK client of ``tenant`` (or with ``api_key``) over ``served``'s OpenAI routes:
    by default no retries (errors surface at once); answers validated strictly."""
    cls = openai.AsyncOpenAI if mode == "async" else openai.OpenAI
    return cls(base_url=f"{served.url}{PREFIX}", api_key=api_key or served.keys[tenant],
               max_retries=retries, timeout=30, _strict_response_validation=True)


def run(served: Served, mode: str, scenario: Callable[[Sdk], Awaitable[None]]) -> None:
    """``scenario`` with a client of tenant A in ``mode`` (``sync``/``async``), in a loop
    of its own (the async client's connections belong to the loop)."""
    async def main() -> None:
        sdk = Sdk(client(served, mode), served)
        try:
            await scenario(sdk)
        finally:
            await Calls(sdk.client.close)()

    asyncio.run(main())


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant_message(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": item_id or new_id("msg"),
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def mixed_items() -> list[dict[str, Any]]:
    """One of each kind the issue names: a user message with text and an image, a
    function call and its output, reasoning with encrypted content and a summary, an
    assistant message with an annotated output text, a developer message."""
    call_id = new_id("call")
    return [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "Answer in one sentence."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is in this picture, and the weather there?"},
            {"type": "input_image", "image_url": PNG_DATA_URL, "detail": "low"}]},
        {"type": "reasoning", "id": new_id("rs"),
         "summary": [{"type": "summary_text", "text": "A tomato; ask for the weather."}],
         "encrypted_content": "gAAAAABo" + uuid.uuid4().hex * 4},
        # the arguments are a JSON string: its spaces and key order are part of it
        {"type": "function_call", "id": new_id("fc"), "call_id": call_id, "name": "get_weather",
         "arguments": '{"city": "Paris",  "unit":"C"}', "status": "completed"},
        {"type": "function_call_output", "call_id": call_id, "output": "18 C, sunny"},
        {"type": "message", "role": "assistant", "id": new_id("msg"), "status": "completed",
         "content": [{"type": "output_text", "text": "A tomato; 18 C and sunny in Paris.",
                      "annotations": [{"type": "url_citation", "start_index": 0,
                                       "end_index": 8, "title": "Tomato",
                                       "url": "https://example.org/tomato"}]}]},
    ]


EMPTY: tuple[Any, ...] = (None, [], {})
# what an answer may add to an item at its top level besides fields left empty
ADDED = {"id", "status", "created_by"}


def assert_item(got: Any, sent: dict[str, Any], *, path: str = "item") -> None:
    """``got`` (an SDK model) is ``sent`` field by field: every field sent comes back
    equal; besides an id (the one sent, if any) and a status (the one sent, if any),
    anything added is empty. A string ``content`` comes back as one ``input_text``, as
    OpenAI stores it."""
    answer = got.to_dict()
    assert isinstance(answer.get("id"), str) and answer["id"], f"{path}: no id in {answer}"
    assert answer.get("status") in (None, "in_progress", "completed", "incomplete"), answer
    expected = {"type": "message", **sent}
    if isinstance(expected.get("content"), str):
        expected["content"] = [{"type": "input_text", "text": expected["content"]}]
    for key in ADDED - expected.keys():
        answer.pop(key, None)
    _assert_same(answer, expected, path)


def _assert_same(got: Any, sent: Any, path: str) -> None:
    if isinstance(sent, dict):
        assert isinstance(got, dict), f"{path}: {got!r} is not an object like {sent!r}"
        for key, value in sent.items():
            assert key in got, f"{path}.{key} is missing from {got!r}"
            _assert_same(got[key], value, f"{path}.{key}")
        added = {key: got[key] for key in got.keys() - sent.keys() if got[key] not in EMPTY}
        assert not added, f"{path}: fields not sent came back: {added}"
    elif isinstance(sent, list):
        assert isinstance(got, list) and len(got) == len(sent), f"{path}: {got!r} vs {sent!r}"
        for i, (one, other) in enumerate(zip(got, sent, strict=True)):
            _assert_same(one, other, f"{path}[{i}]")
    else:
        assert got == sent and type(got) is type(sent), f"{path}: {got!r} != {sent!r}"
