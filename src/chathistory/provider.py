"""HistoryProvider: the bookkeeping of a turn, done right over any store.

An agent loop calls ``before_run(session, new_messages)`` to get the messages
to send (history first, then the new input) and ``after_run(session,
request_messages, response_messages, error=None)`` to store the turn. The
provider holds no per-session state: what it needs between turns lives in
``session.state[provider.key]`` and is written in the same transaction as the
turn's messages, so a conversation can move between processes and machines.

Edges peers get wrong, and how they are handled here:

- history is never stored twice: every message that came from history is
  stamped (``metadata["chathistory.source"]``) and ``after_run`` skips it;
- a failed or incomplete run stores nothing (and forgets the turn's window
  bookkeeping);
- a tool result whose ``call_id`` matches no earlier call is refused with
  ``InvalidMessage`` naming the id, before anything is stored;
- only one provider of a pipeline may load history: a second loading provider
  sees stamped messages in its input and raises ``ProviderConflict``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from .errors import ChatHistoryError, InvalidMessage
from .groups import Groups
from .model import KVStatus, Message
from .model.codec import message_from_builtins
from .reduce.base import KEPT_ROLES, Reducer, as_reducer
from .reduce.summarize import is_summary
from .stores.aio import AsyncStoreAdapter
from .stores.base import Store
from .stores.model import DEFAULT_TENANT, Session
from .window import ContextWindow

__all__ = ["SOURCE_KEY", "HistoryProvider", "ProviderConflict"]

SOURCE_KEY = "chathistory.source"
"""Message metadata key stamped on every message a provider loaded from history."""

Policy = ContextWindow | Reducer | Sequence[Reducer] | int | None
MessageFilter = Callable[[Message], bool]


class ProviderConflict(ChatHistoryError):
    """Two providers of one pipeline both load history."""


def stamp(message: Message, source: str) -> Message:
    """A copy of ``message`` marked as loaded from history by ``source``."""
    return msgspec.structs.replace(message, metadata={**message.metadata, SOURCE_KEY: source})


def from_history(message: Message) -> bool:
    """True for a message a provider loaded from history."""
    return SOURCE_KEY in message.metadata


def _unstamped(message: Message) -> Message:
    if SOURCE_KEY not in message.metadata:
        return message
    meta = {k: v for k, v in message.metadata.items() if k != SOURCE_KEY}
    return msgspec.structs.replace(message, metadata=meta)


class HistoryProvider:
    """Loads history before a model call and stores the turn after it.

    ``store``: any ``Store`` (a ``RemoteStore`` for service-managed
    conversations), or None to keep the messages in ``session.state`` itself.
    ``policy``: what of the history goes to the model: a ``ContextWindow``
    (KV-aware, chunked eviction), reducers (a reducer or a list), ``n`` (the
    newest n messages, widened to whole groups) or None (everything live).
    """

    def __init__(
        self,
        store: Store | AsyncStoreAdapter | None = None,
        *,
        policy: Policy = None,
        key: str = "chathistory",
        tenant: str = DEFAULT_TENANT,
        load_messages: bool = True,
        store_context_messages: bool = False,
        load_filter: MessageFilter | None = None,
        store_filter: MessageFilter | None = None,
        validate_tool_results: bool = True,
    ) -> None:
        self.store: Store | None = store.store if isinstance(store, AsyncStoreAdapter) else store
        if isinstance(policy, int) and policy < 0:
            raise ValueError("policy=n needs n >= 0")
        self.policy: ContextWindow | Reducer | int | None = (
            policy if policy is None or isinstance(policy, ContextWindow | int)
            else as_reducer(policy))
        self.key = key
        self.tenant = tenant
        self.load_messages = load_messages
        self.store_context_messages = store_context_messages
        self.load_filter = load_filter
        self.store_filter = store_filter
        self.validate_tool_results = validate_tool_results

    # ------------------------------------------------------------------ sessions

    def new_session(self, session_id: str | None = None, **options: Any) -> Session:
        """A new session: in the store, or a free-standing one when there is none."""
        if self.store is not None:
            return self.store.create_session(session_id, tenant=self.tenant, **options)
        from .model import new_id

        return Session(id=session_id or new_id(), tenant=self.tenant, **options)

    def _state(self, session: Session) -> dict[str, Any]:
        state = session.state.get(self.key)
        return dict(state) if isinstance(state, dict) else {}

    # ------------------------------------------------------------------ before

    def before_run(self, session: Session, new_messages: Iterable[Message]) -> list[Message]:
        """The messages to send: history (stamped) first, then ``new_messages``."""
        new = list(new_messages)
        if not self.load_messages:
            return new
        others = {m.metadata[SOURCE_KEY] for m in new if from_history(m)}
        if others:
            raise ProviderConflict(
                f"provider {self.key!r} loads history, but provider(s) {sorted(others)} "
                "already did: only one provider of a pipeline may load messages "
                "(give the others load_messages=False)")
        for i, m in enumerate(new):
            try:
                m.validate()
            except InvalidMessage as exc:
                raise exc.under(f"$[{i}]") from None
        state = self._state(session)
        loaded = [stamp(m, self.key) for m in self._load(session, state)
                  if self.load_filter is None or self.load_filter(m)]
        if self.store is None and self.validate_tool_results:
            _check_results(loaded, new)
        prompt, pending = self._select(state, loaded, new)
        session.state = {**session.state, self.key: {**state, "_pending": pending}}
        return prompt

    def _load(self, session: Session, state: dict[str, Any]) -> list[Message]:
        policy = self.policy
        if self.store is None:
            stored = [message_from_builtins(d) for d in state.get("messages", [])]
            live = [m for m in stored if m.kv_status == KVStatus.LOADED]
            if isinstance(policy, int):
                return _tail(live, policy)
            summary = state.get("summary")
            return _with_summary(live, summary)
        sid, tenant = session.id, self.tenant
        if isinstance(policy, int):
            return self.store.tail(sid, policy, tenant=tenant) if policy else []
        if isinstance(policy, ContextWindow) and "live" in state:
            return self.store.context(sid, head=state.get("head", 0),
                                      tail=state["live"], tenant=tenant)
        if policy is not None and "live" in state:  # reducers
            loaded = self.store.context(sid, head=0, tail=state["live"], tenant=tenant)
            return _with_summary(loaded, state.get("summary"))
        return self.store.range(sid, include_marked=False, tenant=tenant)

    def _select(self, state: dict[str, Any], loaded: list[Message], new: list[Message]
                ) -> tuple[list[Message], dict[str, Any]]:
        policy = self.policy
        candidates = loaded + new
        if policy is None or isinstance(policy, int):
            return candidates, {}
        if isinstance(policy, ContextWindow):
            window = ContextWindow.from_dict(state["window"], candidates,
                                             counter=policy.counter) if "window" in state else (
                ContextWindow(policy.max_tokens, policy.counter, policy.low_water_tokens,
                              keep_system=bool(policy.keep_roles), pin_tokens=policy.pin_tokens))
            plan = window.plan(candidates)
            window.commit()  # evicted messages are marked in the store after the run
            return plan.messages, {
                "window": window.to_dict(), "evicted": plan.evicted_ids,
                "head": plan.head_count, "live": len(plan.messages) - plan.head_count,
            }
        reduced = policy.reduce(candidates)
        if reduced is None:
            return candidates, {"live": _live_count(candidates)}
        kept_ids = {m.id for m in reduced}
        removed = [m.id for m in candidates
                   if m.id not in kept_ids and from_history(m) and not is_summary(m)]
        summary = next((m for m in reduced if is_summary(m)), None)
        pending: dict[str, Any] = {"evicted": removed, "live": _live_count(reduced)}
        if summary is not None:
            summary = stamp(summary, self.key)
            reduced = [summary if is_summary(m) else m for m in reduced]
            pending["summary"] = msgspec.to_builtins(_unstamped(summary))
        return reduced, pending

    # ------------------------------------------------------------------ after

    def after_run(
        self,
        session: Session,
        request_messages: Iterable[Message],
        response_messages: Iterable[Message],
        error: BaseException | None = None,
        *,
        complete: bool = True,
    ) -> int | None:
        """Store the turn: the new request messages (not stamped as history) and
        the responses, with the provider's state, in one atomic write. Nothing
        is stored when ``error`` is given or ``complete`` is False. Returns the
        session's new version (None when nothing was stored)."""
        state = self._state(session)
        pending = state.pop("_pending", {})
        if error is not None or not complete:
            session.state = {**session.state, self.key: state}
            return None
        request = list(request_messages)
        if self.load_messages or not self.store_context_messages:
            request = [m for m in request if not from_history(m)]
        else:
            request = [_unstamped(m) for m in request]
        to_store = [m for m in [*request, *response_messages]
                    if self.store_filter is None or self.store_filter(m)]
        for key in ("window", "head", "summary"):
            if key in pending:
                state[key] = pending[key]
        if "live" in pending:
            state["live"] = pending["live"] + len(to_store)
        evicted = pending.get("evicted", [])
        if self.store is None:
            return self._after_in_session(session, state, to_store, evicted)
        version = self.store.append(session.id, to_store, tenant=self.tenant,
                                    state={**session.state, self.key: state},
                                    reject_orphans=self.validate_tool_results)
        if evicted:
            self.store.mark(session.id, evicted, KVStatus.MARKED, tenant=self.tenant)
        fresh = self.store.get_session(session.id, tenant=self.tenant)
        session.state, session.version = fresh.state, fresh.version
        session.message_count, session.token_count = fresh.message_count, fresh.token_count
        return version

    def _after_in_session(self, session: Session, state: dict[str, Any],
                          to_store: list[Message], evicted: list[str]) -> int:
        stored = [message_from_builtins(d) for d in state.get("messages", [])]
        if self.validate_tool_results:
            _check_results([m for m in stored if m.kv_status == KVStatus.LOADED] or stored,
                           to_store)
        known = {m.id for m in stored}
        gone = set(evicted)
        for m in stored:
            if m.id in gone:
                m.kv_status = KVStatus.MARKED
        stored.extend(m for m in to_store if m.id not in known)
        state["messages"] = [msgspec.to_builtins(m) for m in stored]
        session.state = {**session.state, self.key: state}
        session.version += 1
        return session.version

    # ------------------------------------------------------------------ async twins

    async def abefore_run(self, session: Session, new_messages: Iterable[Message]
                          ) -> list[Message]:
        """``before_run`` without blocking the event loop."""
        return await asyncio.to_thread(self.before_run, session, list(new_messages))

    async def aafter_run(self, session: Session, request_messages: Iterable[Message],
                         response_messages: Iterable[Message],
                         error: BaseException | None = None, *, complete: bool = True
                         ) -> int | None:
        """``after_run`` without blocking the event loop."""
        return await asyncio.to_thread(self.after_run, session, list(request_messages),
                                       list(response_messages), error, complete=complete)


def _tail(messages: list[Message], n: int) -> list[Message]:
    if n <= 0:
        return []
    groups = Groups.of(messages)
    start, end = groups.widen(max(0, len(messages) - n), len(messages))
    return [messages[i] for i in groups.sendable(start, end)]


def _with_summary(messages: list[Message], summary: dict[str, Any] | None) -> list[Message]:
    if not summary:
        return messages
    message = message_from_builtins(summary)
    at = 0
    while at < len(messages) and messages[at].role in KEPT_ROLES:
        at += 1
    return [*messages[:at], message, *messages[at:]]


def _live_count(messages: Sequence[Message]) -> int:
    """Messages after the leading system/developer run, the summary not counted: what
    ``Store.context(tail=...)`` must read back next turn."""
    lead = 0
    while lead < len(messages) and messages[lead].role in KEPT_ROLES:
        lead += 1
    return sum(1 for m in messages[lead:] if not is_summary(m))


def _check_results(history: Sequence[Message], new: Sequence[Message]) -> None:
    """Refuse a tool result whose call is neither in the history nor earlier in ``new``."""
    calls = {c.id for m in history for c in m.tool_calls}
    for i, m in enumerate(new):
        calls.update(c.id for c in m.tool_calls)
        for j, part in enumerate(m.parts):
            call_id = getattr(part, "call_id", None)
            if call_id is not None and call_id not in calls:
                raise InvalidMessage(
                    f"tool result answers call {call_id!r}, which is not earlier in the "
                    "conversation", f"$[{i}].parts[{j}].call_id")
