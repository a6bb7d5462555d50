"""The two routes that compose library parts (a reducer or the context window
with ``Store.mark``), as plain sync functions over any ``Store``: the routes
only decode the request and encode the answer.

Both read the session's live messages (``range`` without marked ones), so their
cost grows with what is live, plus a scan of the session's rows in stores
that filter after reading.
"""

from __future__ import annotations

from typing import Any

from ..errors import Conflict, InvalidMessage
from ..model import KVStatus
from ..reduce import MessageCountReducer, TokenBudgetReducer, TruncationReducer
from ..reduce.base import Reducer
from ..stores.base import Store
from ..stores.model import utcnow
from ..tokens import COUNTER_NAME_PATTERN, TokenCounter, get_counter
from ..window import ContextWindow, WindowPlan
from .errors import BadRequest, PreconditionFailed
from .schema import ReduceBody, ReduceOut, WindowBody

__all__ = ["QUERY_COUNTER", "WINDOW_STATE_KEY", "counter_for", "plan_window", "reduce_session"]

QUERY_COUNTER = {"pattern": f"^$|{COUNTER_NAME_PATTERN}"}
"""The schema of a ``counter`` query parameter: a name ``counter_for`` knows, or empty
(the store's)."""
WINDOW_STATE_KEY = "chathistory.window"
"""Where ``plan_window`` keeps the window's layout in ``Session.state``."""


def counter_for(store: Store, name: str | None, path: str = "$.counter") -> TokenCounter:
    """The counter named ``name``: the store's own when it is that one (a name such
    as ``approx:4`` that ``get_counter`` does not parse), else ``get_counter``'s, which
    knows a closed set of names (encodings, ``approx``, OpenAI model names of bounded
    length) and caches none a client made up. Any other name is ``InvalidMessage``
    at ``path`` (the body's field, or the query parameter)."""
    if name is None or name == store.counter.name:
        return store.counter
    try:
        return get_counter(name)
    except ValueError as exc:
        raise InvalidMessage(str(exc), path) from None


def _check_low_water(max_tokens: int, low_water_tokens: int | None) -> None:
    """400 for a ``low_water_tokens`` over ``max_tokens`` (which the reducer and the
    window refuse with ``ValueError``; the schema holds both to >= 0)."""
    if low_water_tokens is not None and low_water_tokens > max_tokens:
        raise BadRequest(f"low_water_tokens ({low_water_tokens}) is over max_tokens "
                         f"({max_tokens})")


def _reducer(body: ReduceBody, store: Store) -> Reducer:
    if body.type == "truncation":
        if body.target_count is None:
            raise BadRequest("a truncation reducer needs target_count")
        return TruncationReducer(body.target_count, body.threshold_count,
                                 keep_system=body.keep_system)
    if body.type == "count":
        if body.max_messages is None:
            raise BadRequest("a count reducer needs max_messages")
        return MessageCountReducer(body.max_messages, keep_system=body.keep_system)
    if body.max_tokens is None:
        raise BadRequest("a token_budget reducer needs max_tokens")
    _check_low_water(body.max_tokens, body.low_water_tokens)
    return TokenBudgetReducer(body.max_tokens, body.low_water_tokens,
                              counter=counter_for(store, body.counter),
                              keep_system=body.keep_system)


def reduce_session(store: Store, tenant: str, session_id: str, body: ReduceBody) -> ReduceOut:
    """Run a reducer over the session's live messages and mark what it removes
    (non-destructive: marked messages stay in the store, hidden from reads)."""
    reducer = _reducer(body, store)
    live = store.range(session_id, tenant=tenant, include_marked=False)
    reduced = reducer.reduce(live)
    if reduced is None:
        return ReduceOut(kept=[m.id for m in live], removed=[])
    kept = {m.id for m in reduced}
    removed = [m.id for m in live if m.id not in kept]
    if removed:
        store.mark(session_id, removed, KVStatus.MARKED, tenant=tenant)
    return ReduceOut(kept=[m.id for m in reduced], removed=removed)


def plan_window(store: Store, tenant: str, session_id: str, body: WindowBody,
                expected_version: int | None = None) -> WindowPlan:
    """This turn's ``WindowPlan`` for the session: the layout of the previous
    turn comes from ``session.state["chathistory.window"]`` (so any server process
    can plan the next turn), evicted messages are marked in the store, and the new
    layout is saved with the session's version checked."""
    counter = counter_for(store, body.counter)  # a bad name fails before any read
    _check_low_water(body.max_tokens, body.low_water_tokens)
    session = store.get_session(session_id, tenant=tenant)
    if expected_version is not None and session.version != expected_version:
        raise PreconditionFailed(f"session {session_id!r} is at version {session.version}, "
                                 f"not {expected_version}")
    live = store.range(session_id, tenant=tenant, include_marked=False)
    settings: dict[str, Any] = {
        "max_tokens": body.max_tokens,
        "low_water_tokens": body.low_water_tokens,
        "pin_tokens": body.pin_tokens,
        "counter": counter.name,
        "keep_system": body.keep_system,
    }
    previous = session.state.get(WINDOW_STATE_KEY)
    if (not isinstance(previous, dict) or any(previous.get(k) != settings[k] for k in
                                              ("max_tokens", "counter", "keep_system"))):
        previous = {}  # another window: its layout says nothing about this one
    try:
        window = ContextWindow.from_dict({**previous, **settings}, live, counter)
    except (ValueError, TypeError) as exc:
        if not previous:
            raise
        # the state is the client's to write (PATCH): a layout that is not one is its input
        raise InvalidMessage(f"not a window layout: {type(exc).__name__}",
                             f"$.state[{WINDOW_STATE_KEY!r}]") from None
    plan = window.plan(live)
    last = plan.messages[-1] if plan.messages else None
    layout = window.to_dict()
    # what the viewer shows of the last turn (ignored by ContextWindow.from_dict)
    layout["last_turn"] = {"reused_prefix_tokens": plan.reused_prefix_tokens,
                           "new_tokens": plan.new_tokens, "total_tokens": plan.total_tokens,
                           "evicted": len(plan.evicted_ids), "head_count": plan.head_count,
                           "end": (last.kv_start or 0) + (last.kv_size or 0) if last else 0,
                           "at": utcnow().isoformat()}
    state = {**session.state, WINDOW_STATE_KEY: layout}
    try:
        store.update_session(session_id, tenant=tenant, state=state,
                             expected_version=session.version)
    except Conflict:
        raise Conflict(f"session {session_id!r} changed while its window was planned; "
                       "plan again") from None
    if plan.evicted_ids:
        store.mark(session_id, plan.evicted_ids, KVStatus.MARKED, tenant=tenant)
    return plan
