"""Thin adapters that drive chathistory and its peers the same way.

Every adapter takes messages as (role, text) pairs and counts tokens with the
same exact o200k counter (bpe-openai), plus the OpenAI chat overhead that
chathistory uses: 3 tokens per message, +1 when a name is set.

Selection adapters (`Selector`) model one app turn: wrap the new text in the
library's message type, append it, and select the newest messages within the
budget. Serialization adapters (`RoundTrip`) turn a 10k history into bytes and
back into the library's own objects.

This module deliberately has no `from __future__ import annotations`:
LangChain's `trim_messages` looks at the *runtime* annotation of the counter's
first parameter (`is BaseMessage`) to decide that it counts one message.
"""

import importlib.metadata
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from bpe_openai import _bindings

Pair = tuple[str, str]

ENCODING = "o200k_base"
PER_MESSAGE_OVERHEAD = 3  # OpenAI chat format: <|start|>role<|message|> ... <|end|>
NAME_OVERHEAD = 1

_tokenizer = _bindings.tokenizer_for_encoding(ENCODING)
# `count` is exact and treats special-token text such as <|endoftext|> as
# ordinary text (ShareGPT contains it; the tiktoken-style encode() raises).
count_text: Callable[[str], int] = _tokenizer.count


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


class Unavailable(Exception):
    """A peer library could not be imported or driven; the reason is printed."""


class DeadlineExceeded(Exception):
    """A single call ran past its time cap and was stopped (a lower bound)."""


class Selector:
    """One library's 'append a message, select the newest N tokens' turn."""

    name = ""
    distribution = ""
    # Whether the library keeps counts between calls, so that a first call
    # (the "initial count") differs from later ones.
    caches_counts = False

    def build(self, history: Sequence[Pair]) -> None:
        raise NotImplementedError

    def warm(self, budget: int) -> int:
        """First selection over the built history; returns how many were selected."""
        return len(self.turn_select(budget))

    def turn(self, role: str, text: str, budget: int) -> int:
        """Append one new message and select; returns how many were selected."""
        self.append(role, text)
        return len(self.turn_select(budget))

    def append(self, role: str, text: str) -> None:
        raise NotImplementedError

    def turn_select(self, budget: int) -> list[Any]:
        raise NotImplementedError

    def set_deadline(self, deadline: float | None) -> None:
        """Selectors whose single call can run for minutes stop at `deadline`."""


# --- chathistory ---------------------------------------------------------------


def _chathistory() -> Any:
    try:
        import chathistory
        from chathistory import History, Message  # noqa: F401
    except Exception as error:  # the library is being written alongside
        raise Unavailable(f"chathistory not importable: {error!r}") from error
    return chathistory


def chathistory_message(role: str, text: str) -> Any:
    from chathistory import Message

    if role == "user":
        return Message.user(text)
    if role == "system":
        return Message.system(text)
    return Message.assistant(text)


class ChathistorySelector(Selector):
    name = "chathistory History.by_tokens"
    distribution = "chathistory"
    caches_counts = True

    def build(self, history: Sequence[Pair]) -> None:
        history_class = _chathistory().History
        self.history = history_class(
            [chathistory_message(r, t) for r, t in history], counter=ENCODING
        )

    def append(self, role: str, text: str) -> None:
        self.history.add(chathistory_message(role, text))

    def turn_select(self, budget: int) -> list[Any]:
        return self.history.by_tokens(budget)


# --- plain Python baseline -----------------------------------------------------


class BaselineSelector(Selector):
    """A list of dicts, a list of counts taken when a message is added, a backward walk."""

    name = "plain Python (cached counts, backward walk)"
    distribution = ""
    caches_counts = True

    def build(self, history: Sequence[Pair]) -> None:
        self.messages = [{"role": r, "content": t} for r, t in history]
        self.counts: list[int] = []

    def warm(self, budget: int) -> int:
        self.counts = [count_text(m["content"]) + PER_MESSAGE_OVERHEAD for m in self.messages]
        return len(self.turn_select(budget))

    def append(self, role: str, text: str) -> None:
        self.messages.append({"role": role, "content": text})
        self.counts.append(count_text(text) + PER_MESSAGE_OVERHEAD)

    def turn_select(self, budget: int) -> list[Any]:
        counts = self.counts
        total = 0
        start = len(counts)
        while start > 0:
            cost = counts[start - 1]
            if total + cost > budget:
                break
            total += cost
            start -= 1
        return self.messages[start:]


# --- LangChain -----------------------------------------------------------------


def _langchain_messages() -> Any:
    try:
        from langchain_core import messages
    except Exception as error:
        raise Unavailable(f"langchain-core not importable: {error!r}") from error
    return messages


def langchain_message(role: str, text: str) -> Any:
    lc = _langchain_messages()
    if role == "user":
        return lc.HumanMessage(text)
    if role == "system":
        return lc.SystemMessage(text)
    return lc.AIMessage(text)


def _make_langchain_counter() -> Callable[..., int]:
    """The same per-message count as chathistory's (overhead, role and text)."""
    return _make_langchain_chat_counter()


class LangchainSelector(Selector):
    name = "LangChain trim_messages"
    distribution = "langchain-core"

    def build(self, history: Sequence[Pair]) -> None:
        lc = _langchain_messages()
        self.trim_messages = lc.trim_messages
        self.counter = self.make_counter()
        self.messages = [langchain_message(r, t) for r, t in history]

    def make_counter(self) -> Callable[..., int]:
        return _make_langchain_counter()

    def append(self, role: str, text: str) -> None:
        self.messages.append(langchain_message(role, text))

    def turn_select(self, budget: int) -> list[Any]:
        return self.trim_messages(
            self.messages,
            max_tokens=budget,
            strategy="last",
            token_counter=self.counter,
            include_system=True,
            start_on="human",
        )


class LangchainMemoizedSelector(LangchainSelector):
    """trim_messages with a counter the app memoizes per message object.

    Not what LangChain does by itself; shown to separate the cost of
    re-tokenizing from the cost of trim_messages' own bookkeeping.
    """

    name = "LangChain trim_messages + app-memoized counts"
    caches_counts = True

    def make_counter(self) -> Callable[..., int]:
        count_message = _make_langchain_counter()
        base_message = _langchain_messages().BaseMessage
        # Keyed by object identity: the history list keeps every message alive.
        memo: dict[int, int] = {}

        def memoized_count(message: base_message) -> int:  # type: ignore[valid-type]
            key = id(message)
            cached = memo.get(key)
            if cached is None:
                cached = memo[key] = count_message(message)
            return cached

        return memoized_count

    def append(self, role: str, text: str) -> None:
        # The app pays the new message's count once, when it is added.
        message = langchain_message(role, text)
        self.messages.append(message)
        self.counter(message)


# --- LlamaIndex ------------------------------------------------------------------


def _llamaindex() -> tuple[Any, Any, Any]:
    try:
        from llama_index.core.base.llms.types import ChatMessage, MessageRole
        from llama_index.core.memory import ChatMemoryBuffer
    except Exception as error:
        raise Unavailable(f"llama-index-core not importable: {error!r}") from error
    return ChatMemoryBuffer, ChatMessage, MessageRole


def llamaindex_message(role: str, text: str) -> Any:
    _, chat_message, message_role = _llamaindex()
    roles = {
        "user": message_role.USER,
        "assistant": message_role.ASSISTANT,
        "system": message_role.SYSTEM,
    }
    return chat_message(role=roles[role], content=text)


class LlamaindexSelector(Selector):
    """ChatMemoryBuffer.get(): it joins the message texts and re-counts the
    joined text once per message it drops, so one call grows with n^2."""

    name = "LlamaIndex ChatMemoryBuffer.get"
    distribution = "llama-index-core"

    def __init__(self) -> None:
        self.deadline: float | None = None

    def tokenizer_fn(self, text: str) -> range:
        # ChatMemoryBuffer only takes len() of what the tokenizer returns; a
        # range of the exact count avoids building a token list it never reads.
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise DeadlineExceeded
        return range(count_text(text))

    def set_deadline(self, deadline: float | None) -> None:
        self.deadline = deadline

    def build(self, history: Sequence[Pair]) -> None:
        memory_class, _, _ = _llamaindex()
        self.budget: int | None = None
        self.memory_class = memory_class
        self.initial = [llamaindex_message(r, t) for r, t in history]
        self.memory: Any = None

    def _memory(self, budget: int) -> Any:
        if self.memory is None or self.budget != budget:
            self.budget = budget
            self.memory = self.memory_class.from_defaults(
                chat_history=list(self.initial), token_limit=budget, tokenizer_fn=self.tokenizer_fn
            )
        return self.memory

    def turn(self, role: str, text: str, budget: int) -> int:
        memory = self._memory(budget)
        memory.put(llamaindex_message(role, text))
        return len(memory.get())

    def turn_select(self, budget: int) -> list[Any]:
        return self._memory(budget).get()  # type: ignore[no-any-return]


SELECTORS: list[type[Selector]] = [
    ChathistorySelector,
    BaselineSelector,
    LangchainSelector,
    LangchainMemoizedSelector,
    LlamaindexSelector,
]


# --- serialize + restore ------------------------------------------------------


class RoundTrip:
    """Serialize a history to bytes/str and restore the library's own objects."""

    name = ""
    distribution = ""

    def build(self, history: Sequence[Pair]) -> Any:
        raise NotImplementedError

    def dump(self, obj: Any) -> bytes | str:
        raise NotImplementedError

    def load(self, data: bytes | str) -> Any:
        raise NotImplementedError

    def texts(self, restored: Any) -> list[str]:
        """Message texts of a restored history, to check the round trip."""
        raise NotImplementedError


class ChathistoryRoundTrip(RoundTrip):
    name = "chathistory History.to_json / from_json"
    distribution = "chathistory"

    def build(self, history: Sequence[Pair]) -> Any:
        history_class = _chathistory().History
        return history_class([chathistory_message(r, t) for r, t in history], counter=ENCODING)

    def dump(self, obj: Any) -> bytes | str:
        return obj.to_json()  # type: ignore[no-any-return]

    def load(self, data: bytes | str) -> Any:
        from chathistory import History

        return History.from_json(data)

    def texts(self, restored: Any) -> list[str]:
        return [message.text for message in restored]


class OrjsonRoundTrip(RoundTrip):
    name = "orjson over plain dicts"
    distribution = "orjson"

    def build(self, history: Sequence[Pair]) -> Any:
        return [{"role": r, "content": t} for r, t in history]

    def dump(self, obj: Any) -> bytes | str:
        import orjson

        return orjson.dumps(obj)

    def load(self, data: bytes | str) -> Any:
        import orjson

        return orjson.loads(data)

    def texts(self, restored: Any) -> list[str]:
        return [message["content"] for message in restored]


class LangchainRoundTrip(RoundTrip):
    """messages_to_dict / messages_from_dict, dicts to JSON with the stdlib,
    as LangChain's own file and SQL chat histories do."""

    name = "LangChain messages_to_dict + json"
    distribution = "langchain-core"

    def build(self, history: Sequence[Pair]) -> Any:
        return [langchain_message(r, t) for r, t in history]

    def dump(self, obj: Any) -> bytes | str:
        return json.dumps(_langchain_messages().messages_to_dict(obj))

    def load(self, data: bytes | str) -> Any:
        return _langchain_messages().messages_from_dict(json.loads(data))

    def texts(self, restored: Any) -> list[str]:
        return [message.content for message in restored]


class LangchainOrjsonRoundTrip(LangchainRoundTrip):
    """The same, with orjson for the dict <-> bytes step (LangChain's best case)."""

    name = "LangChain messages_to_dict + orjson"

    def dump(self, obj: Any) -> bytes | str:
        import orjson

        return orjson.dumps(_langchain_messages().messages_to_dict(obj))

    def load(self, data: bytes | str) -> Any:
        import orjson

        return _langchain_messages().messages_from_dict(orjson.loads(data))


class SemanticKernelRoundTrip(RoundTrip):
    name = "Semantic Kernel ChatHistory.serialize / restore_chat_history"
    distribution = "semantic-kernel"

    def _chat_history_class(self) -> Any:
        try:
            from semantic_kernel.contents import ChatHistory
        except Exception as error:
            raise Unavailable(f"semantic-kernel not importable: {error!r}") from error
        return ChatHistory

    def build(self, history: Sequence[Pair]) -> Any:
        chat_history = self._chat_history_class()()
        add = {
            "user": chat_history.add_user_message,
            "assistant": chat_history.add_assistant_message,
            "system": chat_history.add_system_message,
        }
        for role, text in history:
            add[role](text)
        return chat_history

    def dump(self, obj: Any) -> bytes | str:
        return obj.serialize()  # type: ignore[no-any-return]

    def load(self, data: bytes | str) -> Any:
        return self._chat_history_class().restore_chat_history(data)

    def texts(self, restored: Any) -> list[str]:
        return [message.content for message in restored.messages]


class AgentFrameworkRoundTrip(RoundTrip):
    """An AgentSession whose in-memory history holds the messages:
    AgentSession.to_dict / from_dict (which call Message.to_dict / from_dict),
    JSON with the stdlib as Message.to_json does."""

    name = "Agent Framework AgentSession.to_dict / from_dict + json"
    distribution = "agent-framework-core"
    state_key = "in_memory"  # InMemoryHistoryProvider.DEFAULT_SOURCE_ID

    def _framework(self) -> Any:
        try:
            import agent_framework
        except Exception as error:
            raise Unavailable(f"agent-framework-core not importable: {error!r}") from error
        return agent_framework

    def build(self, history: Sequence[Pair]) -> Any:
        framework = self._framework()
        session = framework.AgentSession()
        session.state[self.state_key] = {
            "messages": [framework.Message(role, [text]) for role, text in history]
        }
        return session

    def dump(self, obj: Any) -> bytes | str:
        return json.dumps(obj.to_dict())

    def load(self, data: bytes | str) -> Any:
        return self._framework().AgentSession.from_dict(json.loads(data))

    def texts(self, restored: Any) -> list[str]:
        return [message.text for message in restored.state[self.state_key]["messages"]]


class LlamaindexRoundTrip(RoundTrip):
    """ChatMemoryBuffer.to_string / from_string (via from_dict, to hand back the
    tokenizer, which is excluded from the JSON and would otherwise be fetched)."""

    name = "LlamaIndex ChatMemoryBuffer.to_string / from_dict"
    distribution = "llama-index-core"

    @staticmethod
    def tokenizer_fn(text: str) -> range:
        return range(count_text(text))

    def build(self, history: Sequence[Pair]) -> Any:
        memory_class, _, _ = _llamaindex()
        return memory_class.from_defaults(
            chat_history=[llamaindex_message(r, t) for r, t in history],
            token_limit=8000,
            tokenizer_fn=self.tokenizer_fn,
        )

    def dump(self, obj: Any) -> bytes | str:
        return obj.to_string()  # type: ignore[no-any-return]

    def load(self, data: bytes | str) -> Any:
        memory_class, _, _ = _llamaindex()
        # from_string is json.loads + from_dict; from_dict lets us pass the tokenizer.
        return memory_class.from_dict({**json.loads(data), "tokenizer_fn": self.tokenizer_fn})

    def texts(self, restored: Any) -> list[str]:
        return [str(message.content) for message in restored.get_all()]


ROUND_TRIPS: list[type[RoundTrip]] = [
    ChathistoryRoundTrip,
    OrjsonRoundTrip,
    LangchainRoundTrip,
    LangchainOrjsonRoundTrip,
    SemanticKernelRoundTrip,
    AgentFrameworkRoundTrip,
    LlamaindexRoundTrip,
]


# --- context window (the window suite) -----------------------------------------
#
# A conversation turn as each library runs it: the user's message arrives, the
# library lays out the prompt, the assistant's reply is appended. Each adapter
# records which conversation message every object it creates stands for
# (`source`), so that prompts from different libraries compare message by
# message. Every library counts with `chat_message_tokens`: chathistory's
# accounting (OpenAI's: 3 per message + the role + the text, 3 priming per prompt).

PRIMING_TOKENS = 3


def chat_message_tokens(role: str, text: str) -> int:
    """One message in OpenAI's chat accounting, exactly as chathistory counts it."""
    return PER_MESSAGE_OVERHEAD + count_text(role) + count_text(text)


def run_sync(coroutine: Any) -> Any:
    """Run a coroutine that never suspends (the async reducers and compaction
    strategies measured here do no I/O) without an event loop, so no loop
    overhead is charged to the library."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the coroutine suspended: it needs an event loop")


class WindowPeer:
    """One library's context window over a growing conversation."""

    name = ""
    distribution = ""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._index: dict[int, int] = {}
        self._alive: list[Any] = []  # keeps every object alive, so id() stays unique
        self._next = 0

    def _register(self, obj: Any) -> Any:
        self._index[id(obj)] = self._next
        self._alive.append(obj)
        self._next += 1
        return obj

    def source(self, obj: Any) -> int:
        """Position in the conversation (0 = the system prompt) of a prompt message."""
        return self._index[id(obj)]

    def start(self, system: str) -> None:
        """Untimed set-up: an empty conversation with its system prompt."""
        raise NotImplementedError

    def user(self, text: str) -> list[Any]:
        """The user's message arrives: append it and return this turn's prompt
        (a new list, oldest first)."""
        raise NotImplementedError

    def assistant(self, text: str) -> None:
        """Append the assistant's reply."""
        raise NotImplementedError


class ChathistoryWindowPeer(WindowPeer):
    """`ContextWindow(budget, **options).plan(history)` after each user message."""

    distribution = "chathistory"

    def __init__(self, budget: int, name: str = "", **options: Any) -> None:
        super().__init__(budget)
        self.options = options
        self.name = name or f"chathistory ContextWindow({budget})"
        self.plans: list[Any] = []  # every WindowPlan, to check its own numbers

    def source(self, obj: Any) -> int:
        """By message id: selections (``by_tokens``) return copies of the stored messages,
        which keep the id but are other objects."""
        return self._by_id[obj.id]

    def _register(self, obj: Any) -> Any:
        self._by_id[obj.id] = self._next
        return super()._register(obj)

    def start(self, system: str) -> None:
        module = _chathistory()
        from chathistory.window import ContextWindow

        self._by_id: dict[str, int] = {}

        self.history = module.History(counter=ENCODING)
        self.history.add(self._register(module.Message.system(system)))
        self.window = ContextWindow(self.budget, ENCODING, **self.options)
        self.message = module.Message

    def user(self, text: str) -> list[Any]:
        self.history.add(self._register(self.message.user(text)))
        plan = self.window.plan(self.history)
        self.plans.append(plan)
        return plan.messages  # type: ignore[no-any-return]

    def assistant(self, text: str) -> None:
        self.history.add(self._register(self.message.assistant(text)))


class ChathistorySlidingPeer(ChathistoryWindowPeer):
    """`History.by_tokens(budget, keep_system=True)` every turn: a sliding window."""

    def __init__(self, budget: int) -> None:
        super().__init__(budget, name=f"chathistory by_tokens({budget}, keep_system) sliding")

    def user(self, text: str) -> list[Any]:
        self.history.add(self._register(self.message.user(text)))
        return self.history.by_tokens(self.budget, keep_system=True)  # type: ignore[no-any-return]


_LANGCHAIN_ROLE = {"human": "user", "ai": "assistant", "system": "system"}


def _make_langchain_chat_counter() -> Callable[..., int]:
    base_message = _langchain_messages().BaseMessage

    def count_langchain_chat_message(message: base_message) -> int:  # type: ignore[valid-type]
        content = message.content
        text = content if isinstance(content, str) else str(content)
        role = _LANGCHAIN_ROLE.get(message.type, message.type)
        tokens = chat_message_tokens(role, text)
        if message.name:
            tokens += NAME_OVERHEAD + count_text(message.name)
        return tokens

    return count_langchain_chat_message


class LangchainWindowPeer(WindowPeer):
    """`trim_messages(strategy="last", include_system=True, start_on="human")` over
    the whole conversation each turn, budget minus the reply priming."""

    distribution = "langchain-core"

    def __init__(self, budget: int, memoize: bool = False) -> None:
        super().__init__(budget)
        self.memoize = memoize
        self.name = "LangChain trim_messages (sliding)" + (
            " + app-memoized counts" if memoize else ""
        )

    def start(self, system: str) -> None:
        lc = _langchain_messages()
        self.lc = lc
        self.trim_messages = lc.trim_messages
        counter = _make_langchain_chat_counter()
        if self.memoize:
            base_message = lc.BaseMessage
            memo: dict[int, int] = {}  # by object identity; the list keeps them alive

            def memoized(message: base_message) -> int:  # type: ignore[valid-type]
                key = id(message)
                found = memo.get(key)
                if found is None:
                    found = memo[key] = counter(message)
                return found

            self.counter = memoized
        else:
            self.counter = counter
        self.messages = [self._register(lc.SystemMessage(system))]

    def preload(self, pairs: Sequence[Pair]) -> None:
        """Untimed: continue from a conversation already this far along."""
        lc = self.lc
        for user, reply in pairs:
            self.messages.append(self._register(lc.HumanMessage(user)))
            self.messages.append(self._register(lc.AIMessage(reply)))

    def user(self, text: str) -> list[Any]:
        message = self._register(self.lc.HumanMessage(text))
        self.messages.append(message)
        if self.memoize:
            self.counter(message)  # the app pays the new message's count once
        return self.trim_messages(  # type: ignore[no-any-return]
            self.messages,
            max_tokens=self.budget - PRIMING_TOKENS,
            strategy="last",
            token_counter=self.counter,
            include_system=True,
            start_on="human",
        )

    def assistant(self, text: str) -> None:
        message = self._register(self.lc.AIMessage(text))
        self.messages.append(message)
        if self.memoize:
            self.counter(message)


class LlamaindexWindowPeer(WindowPeer):
    """`ChatMemoryBuffer.from_defaults(token_limit=budget, tokenizer_fn=...)`: `put`
    each message, `get(initial_token_count=...)` each turn, the system prompt kept
    outside the buffer as a prefix, the way its chat engines (SimpleChatEngine)
    do. It counts the joined message texts, without per-message overhead."""

    name = "LlamaIndex ChatMemoryBuffer"
    distribution = "llama-index-core"

    @staticmethod
    def tokenizer_fn(text: str) -> range:
        # Only len() of the result is used: a range of the exact count.
        return range(count_text(text))

    def start(self, system: str) -> None:
        memory_class, _, _ = _llamaindex()
        self.system = self._register(llamaindex_message("system", system))
        self.memory = memory_class.from_defaults(
            token_limit=self.budget, tokenizer_fn=self.tokenizer_fn
        )
        self.initial_tokens = len(self.tokenizer_fn(system))

    def user(self, text: str) -> list[Any]:
        self.memory.put(self._register(llamaindex_message("user", text)))
        return [self.system, *self.memory.get(initial_token_count=self.initial_tokens)]

    def assistant(self, text: str) -> None:
        self.memory.put(self._register(llamaindex_message("assistant", text)))


class SemanticKernelWindowPeer(WindowPeer):
    """`ChatHistoryTruncationReducer(target_count, threshold_count)`: add the message,
    `await reduce()` each turn (count-based: it knows no tokens)."""

    distribution = "semantic-kernel"

    def __init__(self, budget: int, target_count: int, threshold_count: int) -> None:
        super().__init__(budget)
        self.target_count = target_count
        self.threshold_count = threshold_count
        self.name = (
            f"Semantic Kernel ChatHistoryTruncationReducer({target_count}, {threshold_count})"
        )

    def start(self, system: str) -> None:
        try:
            from semantic_kernel.contents import AuthorRole, ChatMessageContent
            from semantic_kernel.contents.history_reducer.chat_history_truncation_reducer import (
                ChatHistoryTruncationReducer,
            )
        except Exception as error:
            raise Unavailable(f"semantic-kernel not importable: {error!r}") from error
        self.content = ChatMessageContent
        self.user_role, self.assistant_role = AuthorRole.USER, AuthorRole.ASSISTANT
        self.reducer = ChatHistoryTruncationReducer(
            target_count=self.target_count, threshold_count=self.threshold_count
        )
        self.reducer.add_message(
            self._register(ChatMessageContent(role=AuthorRole.SYSTEM, content=system))
        )

    def user(self, text: str) -> list[Any]:
        self.reducer.add_message(self._register(self.content(role=self.user_role, content=text)))
        run_sync(self.reducer.reduce())
        return list(self.reducer.messages)

    def assistant(self, text: str) -> None:
        self.reducer.add_message(
            self._register(self.content(role=self.assistant_role, content=text))
        )


class AgentFrameworkChatTokenizer:
    """Agent Framework's `TokenizerProtocol`: it is handed each message serialized
    as JSON; this reads the role and text back out and counts them as chathistory does."""

    def count_tokens(self, text: str) -> int:
        payload = json.loads(text)
        body = "".join(c.get("text", "") for c in payload.get("contents", ()))
        return chat_message_tokens(payload["role"], body)


class AgentFrameworkWindowPeer(WindowPeer):
    """`TruncationStrategy(max_n, compact_to, tokenizer)` run by `apply_compaction`
    each turn over the message list (what its chat client does before a model
    call). Token-based, with hysteresis: past `max_n` it
    excludes the oldest groups until at most `compact_to`."""

    distribution = "agent-framework-core"

    def __init__(self, budget: int, compact_to: int) -> None:
        super().__init__(budget)
        self.max_n = budget - PRIMING_TOKENS
        self.compact_to = compact_to
        self.name = f"Agent Framework TruncationStrategy({self.max_n} -> {compact_to})"

    def start(self, system: str) -> None:
        try:
            import agent_framework as af
        except Exception as error:
            raise Unavailable(f"agent-framework-core not importable: {error!r}") from error
        self.af = af
        self.tokenizer = AgentFrameworkChatTokenizer()
        self.strategy = af.TruncationStrategy(
            max_n=self.max_n, compact_to=self.compact_to, tokenizer=self.tokenizer
        )
        self.messages: list[Any] = []
        self._add("system", system)

    def _add(self, role: str, text: str) -> None:
        # A plain append, as an agent's message list grows; apply_compaction
        # annotates (groups, token counts) the new tail incrementally.
        self.messages.append(self._register(self.af.Message(role, [text])))

    def user(self, text: str) -> list[Any]:
        self._add("user", text)
        return run_sync(  # type: ignore[no-any-return]
            self.af.apply_compaction(
                self.messages, strategy=self.strategy, tokenizer=self.tokenizer
            )
        )

    def assistant(self, text: str) -> None:
        self._add("assistant", text)
