"""History: an ordered, id-deduplicated, list-like container with selectors.

Selectors return new lists, ordered old to new, that the caller may change
freely. Every selector keeps atomic groups whole (``chathistory.groups``):
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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from .errors import InvalidMessage
from .groups import Groups
from .model import FilePart, KVStatus, Message, ToolCall, ToolResult
from .model.codec import decode_document, encode_document
from .model.parts import MediaPart, TextPart
from .reduce.base import AsyncReducer, Reducer, as_reducer
from .tokens import TokenCounter, cached_count, get_counter

__all__ = ["History"]

_KEPT_ROLES = frozenset({"system", "developer"})


class History(Sequence[Message]):
    """The messages of one conversation, in order, each id at most once.

    ``History([...])`` starts pre-filled (few-shot examples, a system prompt).
    ``counter`` is the default tokenizer of ``by_tokens``: a name such as
    ``"o200k_base"`` (the default), a ``TokenCounter`` or a callable.
    """

    __slots__ = ("_counter", "_groups", "_ids", "_kept", "_messages", "_totals",
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
        self._groups = Groups()
        self._kept: list[int] = []  # indices of system and developer messages
        self._totals: dict[str, _Totals] = {}  # counter name -> running totals
        self.metadata: dict[str, Any] = metadata or {}
        self.extend(messages)

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
        self._groups.append(message)
        if message.role in _KEPT_ROLES:
            self._kept.append(i)
        if self._totals:
            kept = message.role in _KEPT_ROLES
            for totals in self._totals.values():
                totals.append(message, kept)

    def extend(self, messages: Iterable[Message]) -> int:
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
        message = self._messages[index]
        if index in (-1, len(self._messages) - 1):
            self._messages.pop()
            self._rebuild_indexes(keep_prefix=True)
        else:
            self.replace(m for m in self._messages if m is not message)
        return message

    def clear(self) -> None:
        """Remove every message."""
        self.replace(())

    def replace(self, messages: Iterable[Message]) -> None:
        """Replace the whole content (what reducers do); validates like ``extend``."""
        batch = list(messages)  # before clearing: ``messages`` may be this history
        old = self._messages
        self._messages, self._ids = [], {}
        self._groups, self._kept = Groups(), []
        self._totals = {name: _Totals(t.counter) for name, t in self._totals.items()}
        try:
            self.extend(batch)
        except InvalidMessage:
            self.replace(old)
            raise

    def _rebuild_indexes(self, keep_prefix: bool) -> None:
        messages = self._messages
        self._ids = {m.id: i for i, m in enumerate(messages)}
        self._groups = Groups.of(messages)
        self._kept = [i for i, m in enumerate(messages) if m.role in _KEPT_ROLES]
        for name, totals in self._totals.items():
            if keep_prefix:
                totals.truncate(len(messages))
            else:
                self._totals[name] = _Totals(totals.counter, messages)

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
                return message
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
        start, end = self._groups.widen(start, end)
        return self._take(start, end)

    def recent(self, n: int) -> list[Message]:
        """The newest ``n`` messages (``range(n, 0)``), widened to whole groups."""
        if n < 0:
            raise ValueError(f"recent(n={n}): n must be >= 0")
        return self.range(n, 0) if n else []

    def _take(self, start: int, end: int) -> list[Message]:
        if not self._groups.orphans_in(start, end):
            return self._messages[start:end]
        messages = self._messages
        return [messages[i] for i in self._groups.sendable(start, end)]

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
        if self._groups.has_orphans:  # skipping orphan groups frees budget: walk
            return self._by_tokens_walk(totals.all, budget, kept)
        # fast path: the smallest start whose tail fits, then forward to a group boundary
        start = bisect_left(prefix, prefix[n] - budget, 0, n + 1)
        start, _ = self._groups.narrow(start, n)
        tail = self._messages[start:n]
        if kept and kept[0] < start:
            messages = self._messages
            return [messages[i] for i in kept if i < start] + tail
        return tail

    def _by_tokens_walk(self, prefix: Sequence[int], budget: int, kept: list[int]
                        ) -> list[Message]:
        """The general case: walk back group by group, skipping orphan groups and
        messages already counted as kept."""
        groups, messages = self._groups, self._messages
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
        return [messages[i] for i in sorted(kept_set.union(chosen))]

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


class _Totals:
    """Running token totals of one counter: ``all[i]`` is the tokens of the first ``i``
    messages, ``rest[i]`` the same without system and developer messages."""

    __slots__ = ("all", "counter", "rest")

    def __init__(self, counter: TokenCounter, messages: Iterable[Message] = ()) -> None:
        self.counter = counter
        self.all = array("q", [0])
        self.rest = array("q", [0])
        for message in messages:
            self.append(message, message.role in _KEPT_ROLES)

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
    if not lines and any(type(p) is not TextPart for p in message.parts):
        lines.append(f"{who}: (reasoning)")
    return lines


def _file_line(part: MediaPart) -> str:
    if isinstance(part, FilePart):
        return f"File: {part.filename}"
    if part.attachment is not None:
        return f"File: {part.attachment.name}"
    url = part.url or ""
    return f"File: {url if not url.startswith('data:') else type(part).__name__}"
