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
    base_message = _langchain_messages().BaseMessage

    def count_langchain_message(message: base_message) -> int:  # type: ignore[valid-type]
        content = message.content
        text = content if isinstance(content, str) else str(content)
        overhead = PER_MESSAGE_OVERHEAD + (NAME_OVERHEAD if message.name else 0)
        return count_text(text) + overhead

    return count_langchain_message


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
