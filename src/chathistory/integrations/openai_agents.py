"""OpenAI Agents SDK: the ``Session`` protocol over any chathistory store.

``ChatHistorySession(session_id, store)`` can be passed as ``session=`` to
``Runner.run``. It returns what the SDK's own ``SQLiteSession`` returns (a test
runs both side by side on every backend): items come back in the order they were
added and equal to ``json.loads(json.dumps(item))``, ``get_items(limit=n)``
returns the newest ``n`` in chronological order (``0`` gives none, a negative
limit all, and ``session_settings.limit`` is the default), ``pop_item`` removes
and returns the newest item (None when empty), ``clear_session`` removes them all.

Storage: each item is one message, appended in one atomic write per
``add_items`` (``chathistory.formats.responses_items``, which the service's OpenAI
Conversations API shares): the item itself is kept as given in
``provider_metadata["openai_agents"]["item"]`` (that is what ``get_items``
returns), and the message's role and parts are what
``chathistory.formats.from_openai_responses`` decodes from it (items that adapter
does not take are mapped as ``responses_items`` says), so token counts, pair
safety, the viewer and the other adapters see real content.

Differences from ``SQLiteSession``, the first two from chathistory's pair-safety
rule, on purpose:

- a limit that would split a tool call from its results (parallel calls from each
  other's results, or reasoning from the item after it) is widened to the whole
  group, so ``get_items(n)`` may return a few more than ``n``: the newest ``n``
  items and the rest of their oldest group (``pair_safe=False`` gives exactly
  ``n``). ``SQLiteSession`` can hand the model ``[call_2, out_1, out_2, answer]``,
  which the Responses API rejects (``out_1`` has no call);
- a result whose call was never added (an ``*_output`` with an unknown
  ``call_id``) is kept but not returned, for the same reason;
- an item ``json.dumps`` cannot write strictly (NaN or infinity, a lone surrogate)
  is refused with ``InvalidMessage`` instead of being stored as non-standard JSON.

Messages that other writers added to the same session (a ``HistoryProvider``,
another adapter) are returned as ``to_openai_responses`` encodes them
(``pop_item`` removes such a message whole and returns its last item).

Observed usage: the Session protocol sees items, not responses, so the usage of
each model response comes through run hooks: ``Runner.run(..., session=session,
hooks=session.usage_hooks())`` (or ``session.observe(model_response)`` from hooks of
your own). The SDK calls ``on_llm_end`` before it adds the response's items, and
the usage is recorded on the message of the response's last output item when that
item is added (matched by its id, or its ``call_id`` for a call without one).

Provider compactions: a ``compaction`` item (``OpenAIResponsesCompactionSession``'s,
or one the API returns) is stored as a ``Compaction`` part and returned as the item;
another writer's OpenAI compaction is returned as its item, and an Anthropic one,
which the Responses API cannot read, is not returned but stays stored.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import msgspec

from ..errors import InvalidMessage, MissingDependency, NotFound
from ..formats.responses_items import ITEM_KEY, item_of, message_of
from ..formats.usage import usage_from_openai_responses
from ..model import Message, Usage
from ..stores.aio import AsyncStoreAdapter
from ..stores.base import Store
from ..stores.model import DEFAULT_TENANT
from ._common import append_creating, or_empty, resolved, store_pair

try:
    from agents.items import ModelResponse, TResponseInputItem
    from agents.lifecycle import RunHooks
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency("openai-agents", "openai-agents") from exc

__all__ = ["ChatHistorySession", "UsageHooks", "item_of", "message_of"]

NS = ITEM_KEY
MAX_OBSERVED = 64
"""The most responses' usage a session holds while their items are not yet added."""
_FAKE_ID = "__fake_id__"  # what the SDK's Chat Completions model gives items for an id


def _item_key(item: Any) -> str | None:
    """What tells a response's output item from the others when it is added: its id,
    or its call id, or (for items without either) its JSON."""
    def get(key: str) -> Any:
        return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)

    item_id, call_id = get("id"), get("call_id")
    if isinstance(item_id, str) and item_id and item_id != _FAKE_ID:
        return f"id:{item_id}"
    if isinstance(call_id, str) and call_id:
        return f"call:{call_id}"
    if isinstance(item, Mapping):
        return "json:" + json.dumps(item, sort_keys=True, default=str)
    return None


class UsageHooks(RunHooks[Any]):
    """Run hooks that hand every model response to ``session.observe``, so its usage
    is kept on the message of its last item."""

    def __init__(self, session: ChatHistorySession) -> None:
        self.session = session

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "model",
                                                                         None)
        self.session.observe(response, model=model if isinstance(model, str) else None)


class ChatHistorySession:
    """An Agents SDK ``Session`` kept in a chathistory store (any backend).

    ``store`` may be sync (calls run in a worker thread) or an ``AsyncStoreAdapter``.
    The store session ``(tenant, session_id)`` is created on the first ``add_items``.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, store: Store | AsyncStoreAdapter, *,
                 tenant: str = DEFAULT_TENANT,
                 session_settings: SessionSettings | None = None,
                 pair_safe: bool = True) -> None:
        self.session_id = session_id
        self.store, self.async_store = store_pair(store)
        self.tenant = tenant
        self.session_settings = session_settings or SessionSettings()
        self.pair_safe = pair_safe
        self._observed: OrderedDict[str, Usage] = OrderedDict()

    def observe(self, response: ModelResponse, *, model: str | None = None,
                latency_ms: float | None = None) -> None:
        """Keep ``response``'s usage until its last output item is added (then it is
        that message's ``usage``). A response that reports no request is ignored."""
        usage = response.usage
        if not response.output or (usage.requests == 0 and not usage.input_tokens
                                    and not usage.output_tokens):
            return
        inputs = response.to_input_items()
        key = _item_key(inputs[-1]) if inputs else None
        if key is None:
            return
        self._observed[key] = usage_from_openai_responses(usage, model=model,
                                                          latency_ms=latency_ms)
        while len(self._observed) > MAX_OBSERVED:
            self._observed.popitem(last=False)

    def usage_hooks(self) -> UsageHooks:
        """Run hooks that record each model response's usage (``Runner.run(...,
        hooks=session.usage_hooks())``)."""
        return UsageHooks(self)

    def _messages(self, limit: int | None) -> list[Message]:
        store, sid, tenant = self.store, self.session_id, self.tenant
        if limit is None or limit < 0:  # negative: all, as SQLiteSession's LIMIT does
            return or_empty(lambda: store.range(sid, include_marked=False, tenant=tenant))
        if limit == 0:
            return []
        if self.pair_safe:
            return or_empty(lambda: store.tail(sid, limit, tenant=tenant))

        def exact() -> list[Message]:
            count = store.get_session(sid, tenant=tenant).message_count
            found = store.range(sid, max(0, count - limit), tenant=tenant, include_marked=False)
            return found[-limit:]

        return or_empty(exact)

    def _items(self, limit: int | None) -> list[TResponseInputItem]:
        messages = self._messages(limit)
        if any(NS not in m.provider_metadata for m in messages):
            messages = resolved(self.store, messages, self.tenant)
        items = [item for m in messages for item in item_of(m)]
        return cast(list[TResponseInputItem], items)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the newest ``limit``."""
        resolved_limit = resolve_session_limit(limit, self.session_settings)
        return await self.async_store.call(self.tenant, self._items, resolved_limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in one atomic write (nothing is stored if one is invalid)."""
        if not items:
            return
        messages = []
        for i, item in enumerate(items):
            try:
                message = message_of(cast(Mapping[str, Any], item))
            except InvalidMessage as exc:
                raise exc.under(f"$[{i}]") from None
            key = _item_key(item) if self._observed else None
            if key is not None and key in self._observed:
                message = msgspec.structs.replace(message, usage=self._observed.pop(key))
            messages.append(message)
        await self.async_store.call(self.tenant, append_creating, self.store,
                                    self.session_id, messages, tenant=self.tenant)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; None when the session is empty."""
        try:
            message = await self.async_store.pop(self.session_id, tenant=self.tenant)
        except NotFound:
            return None
        if message is None:
            return None
        if NS not in message.provider_metadata:
            message = resolved(self.store, [message], self.tenant)[0]
        items = item_of(message)
        return cast(TResponseInputItem, items[-1]) if items else None

    async def clear_session(self) -> None:
        """Remove every item of the session (the store session itself stays)."""
        with contextlib.suppress(NotFound):
            await self.async_store.clear(self.session_id, tenant=self.tenant)
