"""History: an ordered, id-deduplicated, mutable sequence of messages with selectors.

``History`` is a ``collections.abc.MutableSequence``: ``h[i] = m``, ``del h[i]``,
``h.insert(i, m)``, slice assignment and deletion work as on a list, except
that a message whose id is already there (outside the positions replaced)
raises ``DuplicateMessage`` and nothing changes. ``add`` and ``extend`` keep
their retry semantics: a present id is a no-op. After a middle edit the id
index, the positions of system messages and the running token totals are
redone from the first changed position (counts are cached, never re-counted);
the atomic groups are rebuilt on the next selection. Appends stay O(1).

Selectors return new lists, ordered old to new, that the caller may change
freely, messages included: each selected message is a copy whose mutable
fields are new containers (the ``parts`` list; the ``metadata`` and
``provider_metadata`` dicts, nested dicts and lists too; ``token_counts``), so
setting a role, editing metadata or replacing parts changes nothing in the
history. Parts are frozen values and shared (their own dicts, such as a tool
call's ``arguments``, too: replace a part rather than edit it). The copy costs
about 0.2 us per selected message (``python -m bench foundation``).

Every selector keeps atomic groups whole (``chathistory.groups``):
count-based ones (``recent``, ``range``) *widen* to the group boundary and may
return a few more messages than asked; ``by_tokens`` *narrows* and never
exceeds its budget. Groups holding an orphan tool result are left out.

Token counts are cached per message and kept as running totals (prefix
sums) per counter, so ``by_tokens`` is a binary search plus a slice: it never
re-tokenizes and its cost does not grow with the length of the history.
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from typing import Any, overload

import msgspec

from .errors import DuplicateMessage, InvalidMessage
from .groups import Groups
from .model import KEPT_ROLES, Compaction, FilePart, KVStatus, Message, ToolCall, ToolResult
from .model.codec import decode_document, encode_document
from .model.parts import ImagePart, MediaPart, TextPart, holds_compaction
from .reduce.base import AsyncReducer, Reducer, as_reducer
from .tokens import TokenCounter, cached_count, get_counter

__all__ = ["History"]



class History(MutableSequence[Message]):
    """The messages of one conversation, in order, each id at most once.

    ``History([...])`` starts pre-filled (few-shot examples, a system prompt).
    ``counter`` is the default tokenizer of ``by_tokens``: a name such as
    ``"o200k_base"`` (the default), a ``TokenCounter`` or a callable.

    Indexing and iteration give the stored messages, as a list does (so
    ``h[i] = msgspec.structs.replace(h[i], ...)`` edits one; pass
    ``token_counts=None`` too when the content changes, or the old cached counts
    go with it). List operations validate what they put in and raise
    ``DuplicateMessage`` for an id already there; ``add`` / ``extend`` ignore a
    present id (a retry). ``auto_reduce`` runs after ``add``, ``append``,
    ``extend`` and the ``add_*`` shortcuts, not after edits in the middle.
    """

    __slots__ = ("_counter", "_edits", "_groups", "_ids", "_kept", "_messages", "_totals",
                 "auto_reduce", "metadata", "reducer")

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        counter: str | TokenCounter | None = None,
        metadata: dict[str, Any] | None = None,
        reducer: Reducer | Iterable[Reducer] | None = None,
        auto_reduce: bool = False,
    ) -> None:
        self._counter = get_counter(counter)
        self.reducer: Reducer | None = None if reducer is None else as_reducer(reducer)
        self.auto_reduce = auto_reduce
        self._messages: list[Message] = []
        self._ids: dict[str, int] = {}
        self._groups: Groups | None = Groups()  # None: stale after a middle edit
        self._kept: list[int] = []  # indices of system and developer messages
        self._totals: dict[str, _Totals] = {}  # counter name -> running totals
        self._edits = 0  # changes other than appends (see ``edits``)
        self.metadata: dict[str, Any] = metadata or {}
        self.extend(messages)

    @property
    def edits(self) -> int:
        """How many times the history changed other than by appending (an edit, an
        insert, a removal, ``replace``): while it stays the same, whoever saw the
        history before (a ``ContextWindow``) needs to read only what was appended."""
        return self._edits

    # ------------------------------------------------------------------ list-like

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return self._messages[index]

    @overload
    def __setitem__(self, index: int, value: Message) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[Message]) -> None: ...
    def __setitem__(self, index: int | slice, value: Message | Iterable[Message]) -> None:
        """Replace a message (a new version may keep its id) or a slice of them."""
        if isinstance(index, slice):
            if isinstance(value, Message):
                raise TypeError("can only assign an iterable of messages to a slice")
            self._assign_slice(index, list(value))
            return
        i = self._position(index)
        message = _checked(value, "$")
        self._check_fresh([message], {i})
        self._splice(i, i + 1, [message])

    @overload
    def __delitem__(self, index: int) -> None: ...
    @overload
    def __delitem__(self, index: slice) -> None: ...
    def __delitem__(self, index: int | slice) -> None:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self._messages))
            if step == 1:
                self._splice(start, max(start, stop), [])
            else:
                self._rebuild_at(sorted(range(start, stop, step)), [])
            return
        i = self._position(index)
        self._splice(i, i + 1, [])

    def insert(self, index: int, value: Message) -> None:
        """Put ``value`` before position ``index`` (clamped, as ``list.insert``)."""
        message = _checked(value, "$")
        self._check_fresh([message], set())
        n = len(self._messages)
        i = max(0, index + n) if index < 0 else min(index, n)
        self._splice(i, i, [message])

    def append(self, value: Message) -> None:
        """Append ``value``; ``DuplicateMessage`` when its id is here (``add`` ignores it)."""
        message = _checked(value, "$")
        self._check_fresh([message], set())
        self._append(message)
        self._auto_reduce(1)

    def reverse(self) -> None:
        """Reverse in place (the mixin's pairwise swaps would meet their own ids)."""
        self[:] = self._messages[::-1]

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of ``value`` (by its id, then equality), in O(1)."""
        i = self._ids.get(value.id) if isinstance(value, Message) else None
        n = len(self._messages)
        low = max(0, start + n) if start < 0 else start
        high = n if stop is None else (max(0, stop + n) if stop < 0 else stop)
        if i is None or not low <= i < high or self._messages[i] != value:
            raise ValueError(f"{value!r} is not in the history")
        return i

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Message):
            return item.id in self._ids
        return isinstance(item, str) and item in self._ids

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            return self._messages == other._messages
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<History {len(self._messages)} messages>"

    @property
    def messages(self) -> list[Message]:
        """A copy of the message list."""
        return list(self._messages)

    @property
    def counter(self) -> TokenCounter:
        """The default token counter."""
        return self._counter

    def get(self, message_id: str) -> Message | None:
        """The message with this id, or None."""
        i = self._ids.get(message_id)
        return None if i is None else self._messages[i]

    def index_of(self, message_id: str) -> int:
        """Position of the message with this id; ``KeyError`` when absent."""
        return self._ids[message_id]

    # ------------------------------------------------------------------ adding

    def add(self, message: Message) -> bool:
        """Append ``message`` unless its id is already here; True when appended.

        A message whose id is present is ignored (False) without a look at its
        content: that is what makes a retried add a no-op. A new message is
        validated first; an invalid one raises ``InvalidMessage`` and changes nothing.
        """
        if not isinstance(message, Message):
            raise InvalidMessage(f"expected a Message, got {type(message).__name__}", "$")
        if message.id in self._ids:
            return False
        message.validate()
        self._append(message)
        self._auto_reduce(1)
        return True

    def _append(self, message: Message) -> None:
        i = len(self._messages)
        self._messages.append(message)
        self._ids[message.id] = i
        if self._groups is not None:
            self._groups.append(message)
        if message.role in KEPT_ROLES:
            self._kept.append(i)
        if self._totals:
            kept = message.role in KEPT_ROLES
            for totals in self._totals.values():
                totals.append(message, kept)

    # MutableSequence.extend returns None; the count is extra (and safe to ignore)
    def extend(self, messages: Iterable[Message]) -> int:  # type: ignore[override]
        """Append every message whose id is new; returns how many were appended.

        All are validated before any is added: one bad message adds none.
        """
        batch = list(messages)
        seen: set[str] = set()
        fresh: list[Message] = []
        for i, message in enumerate(batch):
            if not isinstance(message, Message):
                raise InvalidMessage(f"expected a Message, got {type(message).__name__}",
                                     f"$[{i}]")
            if message.id in self._ids or message.id in seen:
                continue
            try:
                message.validate()
            except InvalidMessage as exc:
                raise exc.under(f"$[{i}]") from None
            seen.add(message.id)
            fresh.append(message)
        for message in fresh:
            self._append(message)
        if fresh:
            self._auto_reduce(len(fresh))
        return len(fresh)

    def add_user(self, text: str = "", *attachments: Any, name: str | None = None) -> Message:
        """Append and return a new user message."""
        return self._add_new(Message.user(text, *attachments, name=name))

    def add_assistant(self, text: str = "", tool_calls: Iterable[Any] = (), *,
                      name: str | None = None, reasoning: Any = None) -> Message:
        """Append and return a new assistant message."""
        return self._add_new(
            Message.assistant(text, tool_calls, name=name, reasoning=reasoning))

    def add_system(self, text: str) -> Message:
        """Append and return a new system message."""
        return self._add_new(Message.system(text))

    def add_developer(self, text: str) -> Message:
        """Append and return a new developer message."""
        return self._add_new(Message.developer(text))

    def add_tool_result(self, call_id: str, content: str | list[Any], is_error: bool = False,
                        *, name: str | None = None) -> Message:
        """Append and return a new tool result."""
        return self._add_new(Message.tool_result(call_id, content, is_error, name=name))

    def _add_new(self, message: Message) -> Message:
        self._append(message)  # factories validated it, and its id is fresh
        self._auto_reduce(1)
        return message

    def _auto_reduce(self, added: int) -> None:
        """Reduce after an add; if the reducer fails (a summarizer), the add is undone
        too, so nothing of the rejected request stays and a retry runs again."""
        if not self.auto_reduce:
            return
        try:
            self.reduce()
        except Exception:
            for _ in range(added):
                self.pop()
            raise

    # ------------------------------------------------------------------ reducing

    def reduce(self, reducer: Reducer | Iterable[Reducer] | None = None) -> bool:
        """Apply ``reducer`` (default: the history's); True when the history changed.

        Messages that leave are set to ``KVStatus.MARKED``. A reducer that raises
        (a failed summarizer) leaves the history unchanged.
        """
        chosen = self.reducer if reducer is None else as_reducer(reducer)
        if chosen is None:
            raise ValueError("no reducer: pass one, or create the History with reducer=...")
        return self._apply(chosen.reduce(self._messages))

    async def areduce(self, reducer: Reducer | Iterable[Reducer] | None = None) -> bool:
        """``reduce`` for async reducers (summarizers that call a model)."""
        chosen = self.reducer if reducer is None else as_reducer(reducer)
        if chosen is None:
            raise ValueError("no reducer: pass one, or create the History with reducer=...")
        if isinstance(chosen, AsyncReducer):
            return self._apply(await chosen.areduce(self._messages))
        return self._apply(chosen.reduce(self._messages))

    def _apply(self, reduced: list[Message] | None) -> bool:
        if reduced is None:
            return False
        old = self._messages
        auto, self.auto_reduce = self.auto_reduce, False
        try:
            self.replace(reduced)
        finally:
            self.auto_reduce = auto
        kept = {m.id for m in reduced}
        for message in old:
            if message.id not in kept:
                message.kv_status = KVStatus.MARKED
        return True

    # ------------------------------------------------------------------ removing

    def pop(self, index: int = -1) -> Message:
        """Remove and return the message at ``index`` (the newest by default)."""
        i = self._position(index)
        message = self._messages[i]
        self._splice(i, i + 1, [])
        return message

    def clear(self) -> None:
        """Remove every message."""
        self.replace(())

    def replace(self, messages: Iterable[Message]) -> None:
        """Replace the whole content (what reducers do); validates like ``extend``."""
        batch = list(messages)  # before clearing: ``messages`` may be this history
        old = self._messages
        self._edits += 1
        self._messages, self._ids = [], {}
        self._groups, self._kept = Groups(), []
        self._totals = {name: _Totals(t.counter) for name, t in self._totals.items()}
        try:
            self.extend(batch)
        except InvalidMessage:
            self.replace(old)
            raise

    # ------------------------------------------------------------------ list edits

    def _position(self, index: int) -> int:
        n = len(self._messages)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        return i

    def _check_fresh(self, batch: list[Message], replaced: set[int], *,
                     indexed: bool = False) -> None:
        """``DuplicateMessage`` when an id of ``batch`` repeats in it or is already
        here at a position not in ``replaced``; the path is ``$[k].id`` when
        ``indexed`` (a slice's values), else ``$.id``."""
        seen: set[str] = set()
        ids = self._ids
        for k, message in enumerate(batch):
            at = ids.get(message.id)
            if message.id in seen or (at is not None and at not in replaced):
                raise DuplicateMessage(message.id, f"$[{k}].id" if indexed else "$.id")
            seen.add(message.id)

    def _assign_slice(self, index: slice, batch: list[Message]) -> None:
        n = len(self._messages)
        start, stop, step = index.indices(n)
        for k, message in enumerate(batch):
            _checked(message, f"$[{k}]")
        if step == 1:
            stop = max(start, stop)
            self._check_fresh(batch, set(range(start, stop)), indexed=True)
            self._splice(start, stop, batch)
            return
        positions = list(range(start, stop, step))
        if len(batch) != len(positions):
            raise ValueError(f"attempt to assign a sequence of size {len(batch)} "
                             f"to an extended slice of size {len(positions)}")
        self._check_fresh(batch, set(positions), indexed=True)
        order = sorted(range(len(positions)), key=positions.__getitem__)
        self._rebuild_at(sorted(positions), [batch[k] for k in order])

    def _splice(self, start: int, stop: int, batch: list[Message]) -> None:
        """``messages[start:stop] = batch`` (checked already), indexes kept right."""
        messages = self._messages
        if start == stop == len(messages):
            for message in batch:
                self._append(message)
            return
        self._edits += 1
        removed = [m.id for m in messages[start:stop]]
        messages[start:stop] = batch
        self._reindex_from(start, removed)

    def _rebuild_at(self, positions: list[int], batch: list[Message]) -> None:
        """Extended slices: put ``batch`` at ``positions`` (ascending), or delete
        them when ``batch`` is empty."""
        if not positions:
            return
        self._edits += 1
        messages = self._messages
        removed = [messages[i].id for i in positions]
        if batch:
            for i, message in zip(positions, batch, strict=True):
                messages[i] = message
        else:
            for i in reversed(positions):
                del messages[i]
        self._reindex_from(positions[0], removed)

    def _reindex_from(self, start: int, removed: list[str]) -> None:
        """Redo the indexes for positions ``start`` on (O(n - start), counts cached);
        ``removed`` are the ids that left."""
        messages = self._messages
        ids = self._ids
        for message_id in removed:
            del ids[message_id]
        n = len(messages)
        for k in range(start, n):
            ids[messages[k].id] = k
        kept = self._kept
        del kept[bisect_left(kept, start):]
        kept.extend(k for k in range(start, n) if messages[k].role in KEPT_ROLES)
        for totals in self._totals.values():
            totals.truncate(start)
            for k in range(start, n):
                totals.append(messages[k], messages[k].role in KEPT_ROLES)
        # pair safety can change before ``start`` too (a call whose result left):
        # the groups are rebuilt whole, on the next selection
        self._groups = None

    def _grouped(self) -> Groups:
        groups = self._groups
        if groups is None:
            groups = self._groups = Groups.of(self._messages)
        return groups

    # ------------------------------------------------------------------ selectors

    def last_user(self) -> Message | None:
        """The newest message with role ``user``, or None."""
        return self._last("user")

    def last_assistant(self) -> Message | None:
        """The newest message with role ``assistant``, or None."""
        return self._last("assistant")

    def _last(self, role: str) -> Message | None:
        for message in reversed(self._messages):
            if message.role == role:
                return _copies([message])[0]
        return None

    def range(self, from_end: int, to_end: int = 0) -> list[Message]:
        """Messages indexed from the end (0 = newest), ``from_end`` inclusive and
        ``to_end`` exclusive: ``range(5, 2)`` is the 5th, 4th and 3rd newest.

        Widens both ends to whole groups, so a tool call comes with its results.
        """
        if not isinstance(from_end, int) or not isinstance(to_end, int):
            raise TypeError("range() takes integer positions")
        if to_end < 0 or from_end <= to_end:
            raise ValueError(
                f"range(from_end={from_end}, to_end={to_end}): need from_end > to_end >= 0"
            )
        n = len(self._messages)
        start, end = max(0, n - from_end), max(0, n - to_end)
        start, end = self._grouped().widen(start, end)
        return self._take(start, end)

    def recent(self, n: int) -> list[Message]:
        """The newest ``n`` messages (``range(n, 0)``), widened to whole groups."""
        if n < 0:
            raise ValueError(f"recent(n={n}): n must be >= 0")
        return self.range(n, 0) if n else []

    def since_compaction(self, *, keep_system: bool = False) -> list[Message]:
        """The window a provider reads after its last compaction: the newest message
        holding a ``Compaction`` part and everything after it (widened back to whole
        groups, so a call keeps its results); the whole history when there is none.

        Everything earlier is what the compaction stands for: OpenAI and Anthropic
        ignore it when it is sent, so leaving it out bounds a long session's request.
        With ``keep_system`` the system and developer messages before it come first.
        """
        messages = self._messages
        n = len(messages)
        start = next((i for i in range(n - 1, -1, -1)
                      if holds_compaction(messages[i].parts)), 0)
        start, _ = self._grouped().widen(start, n)
        tail = self._take(start, n)
        if keep_system:
            tail = _copies([messages[i] for i in self._kept if i < start]) + tail
        return tail

    def _take(self, start: int, end: int) -> list[Message]:
        groups = self._grouped()
        if not groups.orphans_in(start, end):
            return _copies(self._messages[start:end])
        messages = self._messages
        return _copies([messages[i] for i in groups.sendable(start, end)])

    def by_tokens(
        self,
        max_tokens: int,
        counter: str | TokenCounter | None = None,
        *,
        keep_system: bool = False,
    ) -> list[Message]:
        """The newest messages whose tokens, with the reply priming, fit ``max_tokens``.

        Walks back from the newest message a whole group at a time; the first
        group that would exceed the budget is left out and the walk stops
        (it narrows, never exceeds). With ``keep_system`` every system and
        developer message is included and paid for first (if they alone do not
        fit: an empty list); the result stays in history order, so those older
        than the tail come first. Counts are cached, so this never re-tokenizes.
        """
        if max_tokens < 0:
            raise ValueError(f"by_tokens(max_tokens={max_tokens}): must be >= 0")
        c = self._counter if counter is None else get_counter(counter)
        totals = self._totals_for(c)
        n = len(self._messages)
        budget = max_tokens - c.priming_tokens
        kept: list[int] = []
        prefix = totals.all
        if keep_system and self._kept:
            kept = self._kept
            budget -= (prefix[n] - totals.rest[n])  # the kept messages, paid up front
            prefix = totals.rest  # the tail then costs only its other messages
        if budget < 0:
            return []
        groups = self._grouped()
        if groups.has_orphans:  # skipping orphan groups frees budget: walk
            return self._by_tokens_walk(totals.all, budget, kept)
        # fast path: the smallest start whose tail fits, then forward to a group boundary
        start = bisect_left(prefix, prefix[n] - budget, 0, n + 1)
        start, _ = groups.narrow(start, n)
        tail = self._messages[start:n]
        if kept and kept[0] < start:
            messages = self._messages
            tail = [messages[i] for i in kept if i < start] + tail
        return _copies(tail)

    def _by_tokens_walk(self, prefix: Sequence[int], budget: int, kept: list[int]
                        ) -> list[Message]:
        """The general case: walk back group by group, skipping orphan groups and
        messages already counted as kept."""
        groups, messages = self._grouped(), self._messages
        kept_set = set(kept)
        chosen: list[int] = []
        end = len(messages)
        used = 0
        while end > 0:
            start = groups.start_of(end - 1)
            if not groups.orphans_in(start, end):
                cost = sum(prefix[i + 1] - prefix[i] for i in range(start, end)
                           if i not in kept_set)
                if used + cost > budget:
                    break
                used += cost
                chosen.extend(range(end - 1, start - 1, -1))
            end = start
        return _copies([messages[i] for i in sorted(kept_set.union(chosen))])

    def _totals_for(self, counter: TokenCounter) -> _Totals:
        totals = self._totals.get(counter.name)
        if totals is None:
            totals = self._totals[counter.name] = _Totals(counter, self._messages)
        return totals

    def token_count(self, counter: str | TokenCounter | None = None) -> int:
        """Tokens of the whole history (without the reply priming)."""
        c = self._counter if counter is None else get_counter(counter)
        return self._totals_for(c).all[-1]

    def recent_text(self, n: int) -> str:
        """The newest ``n`` messages as readable text: ``User: ...`` lines, one
        ``File: name`` line per attachment, tool calls and results spelled out."""
        lines: list[str] = []
        selection = self.recent(n)
        names = {c.id: c.name for m in selection for c in m.tool_calls}
        for message in selection:
            lines.extend(render_text(message, names))
        return "\n".join(lines)

    # ------------------------------------------------------------------ serialization

    def to_json(self) -> bytes:
        """The versioned JSON document (attachments stored once by content hash)."""
        return encode_document(self._messages, self.metadata)

    @classmethod
    def from_json(cls, data: bytes | str, *, counter: str | TokenCounter | None = None
                  ) -> History:
        """A history from ``to_json()`` output of any released schema version."""
        messages, metadata = decode_document(data)
        history = cls(counter=counter, metadata=metadata)
        history._load_trusted(messages)
        return history

    def to_dict(self) -> dict[str, Any]:
        """The versioned document as JSON-ready builtins."""
        import msgspec

        out: dict[str, Any] = msgspec.json.decode(self.to_json())
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, counter: str | TokenCounter | None = None
                  ) -> History:
        """A history from ``to_dict()`` output."""
        import msgspec

        return cls.from_json(msgspec.json.encode(data), counter=counter)

    def _load_trusted(self, messages: list[Message]) -> None:
        """Load already-validated messages, keeping the first of any repeated id."""
        for message in messages:
            if message.id not in self._ids:
                self._append(message)


_replace = msgspec.structs.replace


def _tree(value: Any) -> Any:
    """``value`` with its dicts and lists copied, all the way down (JSON-like data)."""
    if type(value) is dict:
        return {k: _tree(v) for k, v in value.items()}
    if type(value) is list:
        return [_tree(v) for v in value]
    return value


def _copies(messages: list[Message]) -> list[Message]:
    """What a selector returns: copies sharing no mutable container with the stored
    messages (``parts`` list, ``metadata`` and ``provider_metadata`` trees,
    ``token_counts``). Parts are frozen and shared. Inlined: the per-message cost
    is what ``python -m bench foundation`` shows against a plain slice."""
    return [_replace(m, parts=m.parts[:],
                     metadata=_tree(m.metadata) if m.metadata else {},
                     provider_metadata=_tree(m.provider_metadata) if m.provider_metadata else {},
                     token_counts=None if m.token_counts is None else m.token_counts.copy())
            for m in messages]


def _checked(value: object, path: str) -> Message:
    """``value`` validated, or ``InvalidMessage`` under ``path``."""
    if not isinstance(value, Message):
        raise InvalidMessage(f"expected a Message, got {type(value).__name__}", path)
    try:
        return value.validate()
    except InvalidMessage as exc:
        raise exc.under(path) from None


class _Totals:
    """Running token totals of one counter: ``all[i]`` is the tokens of the first ``i``
    messages, ``rest[i]`` the same without system and developer messages."""

    __slots__ = ("all", "counter", "rest")

    def __init__(self, counter: TokenCounter, messages: Iterable[Message] = ()) -> None:
        self.counter = counter
        self.all = array("q", [0])
        self.rest = array("q", [0])
        for message in messages:
            self.append(message, message.role in KEPT_ROLES)

    def append(self, message: Message, kept: bool) -> None:
        n = cached_count(message, self.counter)
        self.all.append(self.all[-1] + n)
        self.rest.append(self.rest[-1] + (0 if kept else n))

    def truncate(self, length: int) -> None:
        del self.all[length + 1:]
        del self.rest[length + 1:]


def _title(role: str) -> str:
    return role[:1].upper() + role[1:]


def render_text(message: Message, call_names: dict[str, str] | None = None) -> list[str]:
    """Readable lines for one message (the format of ``History.recent_text``)."""
    who = _title(message.role) + (f" ({message.name})" if message.name else "")
    lines: list[str] = []
    text = message.text
    if text:
        lines.append(f"{who}: {text}")
    for part in message.parts:
        if isinstance(part, ToolCall):
            args = json.dumps(part.arguments, ensure_ascii=False)
            lines.append(f"{who} called {part.name}({args}) [call {part.id}]")
        elif isinstance(part, ToolResult):
            label = "error" if part.is_error else "result"
            tool = part.name or (call_names or {}).get(part.call_id) or "tool"
            lines.append(f"{_title(message.role)} {label} from {tool} [call {part.call_id}]: "
                         f"{part.text}")
            if not isinstance(part.content, str):
                lines.extend(_file_line(c) for c in part.content if isinstance(c, MediaPart))
        elif isinstance(part, MediaPart):
            lines.append(_file_line(part))
        elif isinstance(part, Compaction):
            lines.append(f"Compaction: {part.text}" if part.text
                         else f"Compaction ({part.provider}, not readable)")
    if not lines and any(type(p) is not TextPart for p in message.parts):
        lines.append(f"{who}: (reasoning)")
    return lines


def _file_line(part: MediaPart) -> str:
    """``File: name`` for a file or any stored attachment; an image without a name
    by where it is: ``Image: <url>`` (http(s) and other URLs), ``Image (inline)``
    (a data: URL), ``Image (not included)`` (a ChatGPT export's file-service:// or
    sediment:// pointer: the export did not copy the file). The viewer's previews
    follow the same rule (``viewer/dom.js`` ``mediaLabel``)."""
    if isinstance(part, FilePart):
        return f"File: {part.filename}"
    if part.attachment is not None:
        return f"File: {part.attachment.name}"
    url = part.url or ""
    if isinstance(part, ImagePart):
        if url.startswith("data:"):
            return "Image (inline)"
        if url.startswith(_EXPORT_POINTERS):
            return "Image (not included)"
        return f"Image: {url}"
    return f"File: {url if not url.startswith('data:') else type(part).__name__}"


_EXPORT_POINTERS = ("file-service://", "sediment://")
