"""The reducer protocol, composition, and the pair-safe cut they all share.

A reducer is a function from a sequence of messages to a new list, or
``None`` when nothing needed reducing. Reducers compose as a list
(``Pipeline``); each has an async twin (``areduce``) so summarizers that call
a model can run without blocking.

Every reducer keeps system and developer messages unless told otherwise, and
cuts only at group boundaries from ``chathistory.groups`` (never a tool call
without its results, never half a parallel group, never reasoning without its
call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from ..groups import Groups
from ..model import KEPT_ROLES, Message

__all__ = [
    "KEPT_ROLES", "AsyncReducer", "BaseReducer", "Pipeline", "Reducer", "Split", "as_reducer",
]



@runtime_checkable
class Reducer(Protocol):
    """Something that can reduce a list of messages."""

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None: ...


@runtime_checkable
class AsyncReducer(Protocol):
    async def areduce(self, messages: Sequence[Message]) -> list[Message] | None: ...


class BaseReducer:
    """Base class: ``areduce`` runs ``reduce`` unless a subclass does better."""

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        raise NotImplementedError

    async def areduce(self, messages: Sequence[Message]) -> list[Message] | None:
        return self.reduce(messages)

    def __call__(self, messages: Sequence[Message]) -> list[Message]:
        """Reduce, returning the messages unchanged (as a new list) when nothing was due."""
        out = self.reduce(messages)
        return list(messages) if out is None else out


class Pipeline(BaseReducer):
    """Reducers applied in order; ``None`` when none of them changed anything."""

    def __init__(self, reducers: Iterable[Reducer]) -> None:
        self.reducers = [as_reducer(r) for r in reducers]

    def reduce(self, messages: Sequence[Message]) -> list[Message] | None:
        current: Sequence[Message] = messages
        changed = False
        for reducer in self.reducers:
            out = reducer.reduce(current)
            if out is not None:
                current, changed = out, True
        return list(current) if changed else None

    async def areduce(self, messages: Sequence[Message]) -> list[Message] | None:
        current: Sequence[Message] = messages
        changed = False
        for reducer in self.reducers:
            if isinstance(reducer, AsyncReducer):
                out = await reducer.areduce(current)
            else:
                out = reducer.reduce(current)
            if out is not None:
                current, changed = out, True
        return list(current) if changed else None


def as_reducer(value: Reducer | Iterable[Reducer]) -> Reducer:
    """A reducer from a reducer or a plain list of them."""
    if isinstance(value, Reducer):
        return value
    if isinstance(value, Iterable):
        return Pipeline(value)
    raise TypeError(f"not a reducer: {value!r}")


class Split:
    """A message list split into kept messages (system, developer) and the rest,
    with the group boundaries of the rest, for cutting.

    ``cut(start)`` keeps ``rest[start:]`` (``start`` must be a boundary) and puts
    the kept messages back where they were relative to what remains: those
    before the cut go first, in order; those after stay in place.
    """

    def __init__(self, messages: Sequence[Message], keep_roles: frozenset[str],
                 exclude: Callable[[Message], bool] | None = None) -> None:
        self.messages = [m for m in messages if not exclude(m)] if exclude else list(messages)
        self.keep_roles = keep_roles
        self.rest = [m for m in self.messages if m.role not in keep_roles]
        self.groups = Groups.of(self.rest)

    @property
    def kept(self) -> list[Message]:
        return [m for m in self.messages if m.role in self.keep_roles]

    def boundary_at_or_after(self, start: int) -> int:
        """The first group boundary at or after ``start`` (narrowing)."""
        return self.groups.narrow(start, len(self.rest))[0]

    def boundary_at_or_before(self, start: int) -> int:
        """The last group boundary at or before ``start`` (widening)."""
        return self.groups.start_of(start) if start < len(self.rest) else start

    def cut(self, start: int) -> list[Message]:
        """The messages with ``rest[:start]`` removed, orphan groups left out."""
        remaining = {id(self.rest[i]) for i in self.groups.sendable(start, len(self.rest))}
        return [m for m in self.messages if m.role in self.keep_roles or id(m) in remaining]

    def removed(self, start: int) -> list[Message]:
        """The non-kept messages a cut at ``start`` removes."""
        return self.rest[:start]
