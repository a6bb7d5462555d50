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

Where the messages live is a ``Storage``'s one job, the turn is the provider's:
``InStore`` (a store; ``after_run`` is the turn's append with the state, then the
evictions' marks: see its docstring for what a crash between them leaves) or
``InSession`` (``session.state[key]["messages"]``). A custom backend is a subclass
that overrides ``provide_chat_history(session)`` and ``store_chat_history(session,
messages)`` (Agent Framework's ``ChatHistoryProvider`` shape; ``Custom`` storage):
the turn then reads and writes through them, with every rule above, and
``session.state`` holds only the bookkeeping. The async methods run the sync ones
in ``chathistory.dispatch``'s pool, through the store's circuit, as
``AsyncStoreAdapter`` and the HTTP service run store calls.
``ProviderSessionState`` keeps a provider's own typed state in the session.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

import msgspec

from .dispatch import default_dispatch
from .errors import ChatHistoryError, Conflict, InvalidMessage, NotFound
from .formats.usage import record_usage
from .groups import Groups
from .model import KVStatus, Message, new_id
from .model.codec import message_from_builtins
from .reduce.base import KEPT_ROLES, Reducer, as_reducer
from .reduce.summarize import is_summary
from .stores.aio import AsyncStoreAdapter
from .stores.base import Store
from .stores.model import DEFAULT_TENANT, Session
from .window import ContextWindow

__all__ = ["SOURCE_KEY", "Custom", "HistoryProvider", "InSession", "InStore", "ProviderConflict",
           "ProviderSessionState", "Storage", "Turn"]

SOURCE_KEY = "chathistory.source"
"""Message metadata key stamped on every message a provider loaded from history."""

Policy = ContextWindow | Reducer | Sequence[Reducer] | int | None
PolicyKind = ContextWindow | Reducer | int | None
"""A policy as the provider keeps it (a list of reducers made one)."""
MessageFilter = Callable[[Message], bool]
StateT = TypeVar("StateT")
P = ParamSpec("P")
T = TypeVar("T")


class ProviderConflict(ChatHistoryError):
    """Two providers of one pipeline both load history."""


class ProviderSessionState(Generic[StateT]):
    """A provider's own state in ``session.state[state_key]``, made by ``initializer``
    on first use (Agent Framework's ``ProviderSessionState``).

    ``session.state`` is JSON (stores keep it with the session, ``Session.to_dict``
    carries it), so the state is saved as JSON builtins (a ``msgspec.Struct`` or a
    dataclass converted) and read back as ``state_type`` when one is given, else as
    the builtins. Reads are copies: a change counts once passed to ``save_state``.
    Without a session (None) nothing is read or saved.
    """

    def __init__(self, initializer: Callable[[Session | None], StateT], state_key: str, *,
                 state_type: type[StateT] | None = None) -> None:
        if not state_key:
            raise ValueError("state_key must be a non-empty string")
        self.initializer = initializer
        self.state_key = state_key
        self.state_type = state_type

    def get_or_initialize_state(self, session: Session | None) -> StateT:
        """The saved state, or a new one from ``initializer`` (saved at once)."""
        if session is not None and session.state.get(self.state_key) is not None:
            raw = session.state[self.state_key]
            if self.state_type is None:
                found: StateT = copy.deepcopy(raw)
                return found
            return msgspec.convert(raw, self.state_type)
        state = self.initializer(session)
        self.save_state(session, state)
        return state

    def save_state(self, session: Session | None, state: StateT) -> None:
        """Save ``state`` in the session (in the store with the provider's next write)."""
        if session is not None:
            session.state = {**session.state, self.state_key: msgspec.to_builtins(state)}


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
    conversations) or an ``AsyncStoreAdapter``, or None to keep the messages in
    ``session.state`` itself. ``policy``: what of the history goes to the model: a
    ``ContextWindow`` (KV-aware, chunked eviction), reducers (a reducer or a list),
    ``n`` (the newest n messages, widened to whole groups) or None (everything live).

    The provider does the turn (stamping, filters, the policy, checks, the
    bookkeeping in the session state); where the messages live is its ``storage``'s
    job: ``InStore`` or ``InSession``, or a custom backend's two methods.
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
        if isinstance(policy, int) and policy < 0:
            raise ValueError("policy=n needs n >= 0")
        self.policy: PolicyKind = (
            policy if policy is None or isinstance(policy, ContextWindow | int)
            else as_reducer(policy))
        self.load_messages = load_messages
        self.store_context_messages = store_context_messages
        self.load_filter = load_filter
        self.store_filter = store_filter
        self.validate_tool_results = validate_tool_results
        base = HistoryProvider
        overridden = {type(self).provide_chat_history is not base.provide_chat_history,
                      type(self).store_chat_history is not base.store_chat_history}
        if len(overridden) == 2:
            raise TypeError("a custom backend overrides both provide_chat_history and "
                            "store_chat_history")
        self.custom_backend = True in overridden
        adapter = store if isinstance(store, AsyncStoreAdapter) else None
        sync: Store | None = store.store if isinstance(store, AsyncStoreAdapter) else store
        self.storage: Storage = (InSession(key, tenant) if sync is None
                                 else InStore(sync, key, tenant))
        """Where the messages live (a custom backend's methods wrap it)."""
        self.aio = adapter if adapter is not None or sync is None else AsyncStoreAdapter(sync)
        """The store's async face (None without a store): the async methods run in its
        dispatch, through its circuit, as the HTTP service runs store calls."""
        self._turns: Storage = (Custom(self.storage, self.provide_chat_history,
                                       self.store_chat_history)
                                if self.custom_backend else self.storage)

    @property
    def store(self) -> Store | None:
        """The store, or None when the messages live in ``session.state``."""
        return self.storage.store

    @property
    def key(self) -> str:
        """Where the provider's state lives: ``session.state[key]``."""
        return self.storage.key

    @property
    def tenant(self) -> str:
        return self.storage.tenant

    # ------------------------------------------------------------------ sessions

    def new_session(self, session_id: str | None = None, **options: Any) -> Session:
        """A new session: in the store, or a free-standing one when there is none."""
        return self.storage.new_session(session_id, options)

    # ------------------------------------------------------------------ the backend

    def provide_chat_history(self, session: Session) -> list[Message]:
        """The session's history, oldest first, that ``before_run`` selects from.

        Override it together with ``store_chat_history`` to keep the messages
        anywhere: a custom backend returns every message it stored for the
        session, in order. This default reads the store, or the session state,
        leaving out messages the window marked."""
        return self.storage.messages(session, include_marked=False)

    def store_chat_history(self, session: Session, messages: Sequence[Message]) -> None:
        """Store a turn's ``messages`` after the session's history.

        Override it together with ``provide_chat_history``. It is called once per
        completed turn with the messages to keep (filtered, checked, never ones
        loaded from history); it must keep their order. This default appends to
        the store (creating the session on first use) or to the session state,
        idempotent by message id."""
        self.storage.add(session, list(messages), reject_orphans=self.validate_tool_results)

    def get_messages(self, session: Session) -> list[Message]:
        """Every message stored for the session, oldest first (Agent Framework's
        ``get_messages``): marked ones included (their ``kv_status`` says so);
        from the custom backend when there is one. [] before the first turn."""
        return self._turns.messages(session, include_marked=True)

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
        state = _state(session, self.key)
        loaded = [stamp(m, self.key) for m in self._turns.load(session, state, self.policy)
                  if self.load_filter is None or self.load_filter(m)]
        if self.validate_tool_results:
            self._turns.check_input(loaded, new)
        prompt, pending = self._select(state, loaded, new)
        session.state = {**session.state, self.key: {**state, "_pending": pending}}
        return prompt

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
        usage: Any = None,
        latency_ms: float | None = None,
    ) -> int | None:
        """Store the turn: the new request messages (not stamped as history) and
        the responses, with the provider's state. Nothing is stored when ``error``
        is given or ``complete`` is False. Returns the session's new version (None
        when nothing was stored).

        ``usage`` is what the provider reported for the response: a ``Usage``, or the
        provider's response or its usage object as its SDK gives it (read by
        ``formats.usage_from_response``); it is recorded, with ``latency_ms``, on the
        last assistant message of ``response_messages`` unless that one carries
        usage already.

        In a store this is two writes, each atomic, in this order: (1) the
        messages with the session's state (one ``append``; ``update_session`` when
        no message is kept), then (2) the marks of the history the policy evicted
        (``store.mark``). A crash between them leaves the turn stored, its state
        written, and the evicted messages unmarked (still "live" to other readers,
        and a ``ContextWindow`` would load them again); the state names them
        (``"unmarked"``), and the next ``before_run`` sees that they are not marked
        (one read) and marks them before it loads anything, so the marks come one
        turn late and the prompt is unchanged. In ``session.state`` (no store) the
        turn, marks included, is one change of the state; a custom backend gets one
        ``store_chat_history`` call and marks nothing."""
        state = _state(session, self.key)
        pending = state.pop("_pending", {})
        if error is not None or not complete:
            session.state = {**session.state, self.key: state}
            return None
        given = list(request_messages)
        request = given
        if self.load_messages or not self.store_context_messages:
            request = [m for m in request if not from_history(m)]
        else:
            request = [_unstamped(m) for m in request]
        responses = list(response_messages)
        if usage is not None:
            responses = record_usage(responses, usage, latency_ms=latency_ms)
        to_store = [m for m in [*request, *responses]
                    if self.store_filter is None or self.store_filter(m)]
        for key in ("window", "head", "summary"):
            if key in pending:
                state[key] = pending[key]
        if "live" in pending:
            state["live"] = pending["live"] + len(to_store)
        return self._turns.save_turn(session, state, Turn(given, to_store,
                                                          pending.get("evicted", [])),
                                     check=self.validate_tool_results)

    # ------------------------------------------------------------------ async twins

    async def dispatched(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` as ``AsyncStoreAdapter`` runs a store call (its
        dispatch, the store's circuit); without a store, in the default dispatch."""
        if self.aio is not None:
            return await self.aio.call(self.tenant, fn, *args, **kwargs)
        return await default_dispatch().run_as(self.tenant, fn, *args, **kwargs)

    async def aget_messages(self, session: Session) -> list[Message]:
        """``get_messages`` without blocking the event loop."""
        return await self.dispatched(self.get_messages, session)

    async def abefore_run(self, session: Session, new_messages: Iterable[Message]
                          ) -> list[Message]:
        """``before_run`` without blocking the event loop."""
        return await self.dispatched(self.before_run, session, list(new_messages))

    async def aafter_run(self, session: Session, request_messages: Iterable[Message],
                         response_messages: Iterable[Message],
                         error: BaseException | None = None, *, complete: bool = True,
                         usage: Any = None, latency_ms: float | None = None
                         ) -> int | None:
        """``after_run`` without blocking the event loop."""
        return await self.dispatched(self.after_run, session, list(request_messages),
                                   list(response_messages), error, complete=complete,
                                   usage=usage, latency_ms=latency_ms)


# ---------------------------------------------------------------- where messages live


def _state(session: Session, key: str) -> dict[str, Any]:
    state = session.state.get(key)
    return dict(state) if isinstance(state, dict) else {}


class Turn(NamedTuple):
    """A completed turn, for ``Storage.save_turn``."""

    given: list[Message]
    """The request messages as given (history included: a custom backend checks
    tool results against them)."""
    to_store: list[Message]
    """The messages to store (filtered; never ones loaded from history)."""
    evicted: list[str]
    """Ids of history messages the policy evicted this turn."""


class Storage:
    """Where a provider's messages live: one job, storage. The turn's rules
    (stamping, filters, the policy's choice, the bookkeeping) are the provider's.
    ``key``: the provider's entry in ``session.state``; ``tenant``: the store's."""

    store: Store | None = None

    def __init__(self, key: str, tenant: str) -> None:
        self.key, self.tenant = key, tenant

    def new_session(self, session_id: str | None, options: dict[str, Any]) -> Session:
        return Session(id=session_id or new_id(), tenant=self.tenant, **options)

    def messages(self, session: Session, *, include_marked: bool) -> list[Message]:
        """Every message stored for the session, oldest first."""
        raise NotImplementedError

    def add(self, session: Session, messages: list[Message], *, reject_orphans: bool) -> None:
        """Store ``messages`` after the session's history (idempotent by id)."""
        raise NotImplementedError

    def load(self, session: Session, state: dict[str, Any], policy: PolicyKind
             ) -> list[Message]:
        """The history the policy chooses from, read as cheaply as the storage can."""
        raise NotImplementedError

    def check_input(self, loaded: list[Message], new: list[Message]) -> None:
        """Before the run: refuse a tool result of ``new`` that answers no call
        (here: nothing; the storage checks when the turn is saved)."""

    def save_turn(self, session: Session, state: dict[str, Any], turn: Turn, *,
                  check: bool) -> int:
        """Store a completed turn with the provider's ``state``; the new version."""
        raise NotImplementedError


class InStore(Storage):
    """The messages in a ``Store``, the provider's state with the session's."""

    def __init__(self, store: Store, key: str, tenant: str) -> None:
        super().__init__(key, tenant)
        self.store: Store = store

    def new_session(self, session_id: str | None, options: dict[str, Any]) -> Session:
        return self.store.create_session(session_id, tenant=self.tenant, **options)

    def messages(self, session: Session, *, include_marked: bool) -> list[Message]:
        try:
            return self.store.range(session.id, include_marked=include_marked,
                                    tenant=self.tenant)
        except NotFound:
            return []

    def add(self, session: Session, messages: list[Message], *, reject_orphans: bool) -> None:
        try:
            self.store.append(session.id, messages, tenant=self.tenant,
                              reject_orphans=reject_orphans)
        except NotFound:
            with contextlib.suppress(Conflict):  # another writer created it first
                self.store.create_session(session.id, tenant=self.tenant)
            self.store.append(session.id, messages, tenant=self.tenant,
                              reject_orphans=reject_orphans)

    def load(self, session: Session, state: dict[str, Any], policy: PolicyKind
             ) -> list[Message]:
        store, sid, tenant = self.store, session.id, self.tenant
        if state.get(UNMARKED):
            self._ensure_marked(sid, state[UNMARKED])
        if isinstance(policy, int):
            return store.tail(sid, policy, tenant=tenant) if policy else []
        if isinstance(policy, ContextWindow) and "live" in state:
            return store.context(sid, head=state.get("head", 0), tail=state["live"],
                                 tenant=tenant)
        if policy is not None and "live" in state:  # reducers
            loaded = store.context(sid, head=0, tail=state["live"], tenant=tenant)
            return _with_summary(loaded, state.get("summary"))
        return store.range(sid, include_marked=False, tenant=tenant)

    def save_turn(self, session: Session, state: dict[str, Any], turn: Turn, *,
                  check: bool) -> int:
        store, sid, tenant = self.store, session.id, self.tenant
        state.pop(UNMARKED, None)
        if turn.evicted:
            state[UNMARKED] = turn.evicted  # until the next turn has seen them marked
        whole = {**session.state, self.key: state}
        if turn.to_store:  # write 1: the messages and the state, atomically
            version = store.append(sid, turn.to_store, tenant=tenant, state=whole,
                                   reject_orphans=check)
        else:
            version = store.update_session(sid, tenant=tenant, state=whole).version
        session.state = whole  # what the store holds now, even if the marks fail
        if turn.evicted:  # write 2: the marks
            self._mark(sid, turn.evicted)
        fresh = store.get_session(sid, tenant=tenant)
        session.state, session.version = fresh.state, fresh.version
        session.message_count, session.token_count = fresh.message_count, fresh.token_count
        return version

    def _ensure_marked(self, sid: str, ids: list[str]) -> None:
        """Mark ``ids`` unless the last turn's second write did (one read to see)."""
        with contextlib.suppress(NotFound):
            if self.store.get(sid, ids[-1], tenant=self.tenant).kv_status == KVStatus.MARKED:
                return
        self._mark(sid, ids)

    def _mark(self, sid: str, ids: list[str]) -> None:
        try:
            self.store.mark(sid, ids, KVStatus.MARKED, tenant=self.tenant)
        except NotFound:  # one is gone meanwhile (popped, cleared): mark the others
            for one in ids:
                with contextlib.suppress(NotFound):
                    self.store.mark(sid, [one], KVStatus.MARKED, tenant=self.tenant)


UNMARKED = "unmarked"
"""In the provider's state: ids of the messages its last turn evicted, written with the
turn and marked right after it; the next ``before_run`` marks them if that never
happened (a crash between the two writes)."""


class InSession(Storage):
    """The messages in ``session.state[key]["messages"]`` (no store): a turn is one
    change of the session's state, marks included; the caller persists the session."""

    def _saved(self, session: Session) -> list[Message]:
        return [message_from_builtins(d) for d in _state(session, self.key).get("messages", [])]

    def messages(self, session: Session, *, include_marked: bool) -> list[Message]:
        saved = self._saved(session)
        return saved if include_marked else [m for m in saved if m.kv_status == KVStatus.LOADED]

    def add(self, session: Session, messages: list[Message], *, reject_orphans: bool) -> None:
        stored = self._saved(session)
        known = {m.id for m in stored}
        stored.extend(m for m in messages if m.id not in known)
        state = {**_state(session, self.key),
                 "messages": [msgspec.to_builtins(m) for m in stored]}
        session.state = {**session.state, self.key: state}

    def load(self, session: Session, state: dict[str, Any], policy: PolicyKind
             ) -> list[Message]:
        stored = [message_from_builtins(d) for d in state.get("messages", [])]
        live = [m for m in stored if m.kv_status == KVStatus.LOADED]
        if isinstance(policy, int):
            return _tail(live, policy)
        return _with_summary(live, state.get("summary"))

    def check_input(self, loaded: list[Message], new: list[Message]) -> None:
        _check_results(loaded, new)

    def save_turn(self, session: Session, state: dict[str, Any], turn: Turn, *,
                  check: bool) -> int:
        stored = [message_from_builtins(d) for d in state.get("messages", [])]
        if check:
            _check_results([m for m in stored if m.kv_status == KVStatus.LOADED] or stored,
                           turn.to_store)
        known = {m.id for m in stored}
        gone = set(turn.evicted)
        for m in stored:
            if m.id in gone:
                m.kv_status = KVStatus.MARKED
        stored.extend(m for m in turn.to_store if m.id not in known)
        state["messages"] = [msgspec.to_builtins(m) for m in stored]
        session.state = {**session.state, self.key: state}
        session.version += 1
        return session.version


class Custom(Storage):
    """A custom backend: the messages are wherever ``provide`` and ``keep`` (the
    provider's overridden ``provide_chat_history`` / ``store_chat_history``) keep
    them; the state holds only the bookkeeping. Evicted messages are not marked:
    the state's head/live counts leave them out."""

    def __init__(self, inner: Storage, provide: Callable[[Session], Sequence[Message]],
                 keep: Callable[[Session, Sequence[Message]], None]) -> None:
        super().__init__(inner.key, inner.tenant)
        self.inner, self.provide, self.keep = inner, provide, keep
        self.store = inner.store

    def new_session(self, session_id: str | None, options: dict[str, Any]) -> Session:
        return self.inner.new_session(session_id, options)

    def messages(self, session: Session, *, include_marked: bool) -> list[Message]:
        return list(self.provide(session))

    def add(self, session: Session, messages: list[Message], *, reject_orphans: bool) -> None:
        self.keep(session, messages)

    def load(self, session: Session, state: dict[str, Any], policy: PolicyKind
             ) -> list[Message]:
        history = list(self.provide(session))
        if isinstance(policy, int):
            return _tail(history, policy)
        if isinstance(policy, ContextWindow) and "live" in state:
            return _context(history, state.get("head", 0), state["live"])
        if policy is not None and "live" in state:  # reducers
            return _with_summary(_context(history, 0, state["live"]), state.get("summary"))
        return history

    def save_turn(self, session: Session, state: dict[str, Any], turn: Turn, *,
                  check: bool) -> int:
        if check:
            try:  # the calls sent with the turn, loaded history included, usually suffice
                _check_results(turn.given, turn.to_store)
            except InvalidMessage:
                _check_results(self.provide(session), turn.to_store)
        before = session.state
        session.state = {**session.state, self.key: state}  # (a default it wraps adds here)
        try:
            if turn.to_store:
                self.keep(session, turn.to_store)
        except BaseException:
            session.state = before  # nothing of a failed turn
            raise
        session.version += 1
        return session.version


def _tail(messages: list[Message], n: int) -> list[Message]:
    if n <= 0:
        return []
    groups = Groups.of(messages)
    start, end = groups.widen(max(0, len(messages) - n), len(messages))
    return [messages[i] for i in groups.sendable(start, end)]


def _context(messages: list[Message], head: int, tail: int) -> list[Message]:
    """``Store.context`` over a list: the first ``head`` messages, the system and
    developer ones, and the newest ``tail``, widened to whole groups; orphans left out."""
    n = len(messages)
    groups = Groups.of(messages)
    chosen = {i for i, m in enumerate(messages) if m.role in KEPT_ROLES}
    if head > 0:
        chosen.update(range(groups.widen(0, min(head, n))[1]))
    if tail > 0:
        chosen.update(range(groups.widen(max(0, n - tail), n)[0], n))
    sendable = set(groups.sendable(0, n))
    return [messages[i] for i in sorted(chosen) if i in sendable]


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
