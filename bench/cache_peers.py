"""The peers on the agent replay of ``python -m bench cache`` (issue 21).

LangChain ``trim_messages``, Agent Framework compaction and Semantic Kernel's truncation
reducer get the agent session's messages in their own types: assistant tool calls and
tool results as the framework's function-call / function-result content (LangChain
``AIMessage.tool_calls`` and ``ToolMessage``, Agent Framework ``function_call`` /
``function_result`` contents, Semantic Kernel ``FunctionCallContent`` /
``FunctionResultContent``), reasoning as its reasoning content. Before each model
request the framework lays out the prompt; each object of it is mapped back to the
chathistory message it stands for (a message the framework wrote itself, such as Agent
Framework's tool-result summary, becomes a chathistory message once, with the
framework's id), so ``bench.cache.replay`` scores every policy's prompts alike.

Every framework counts tokens with chathistory's count of the message an object stands
for (o200k_base, ``cached_count``), so that budgets mean the same thing for all.

No ``from __future__ import annotations`` here: LangChain's ``trim_messages`` reads the
*runtime* annotation of the counter's first parameter (``is BaseMessage``) to decide
that it counts one message at a time.
"""

import json
from collections.abc import Callable, Sequence
from typing import Any

from . import peers


class AgentPeer:
    """One framework's context management over a growing agent session."""

    name = ""
    distribution = ""

    def __init__(self, budget: int) -> None:
        from chathistory.tokens import get_counter

        self.budget = budget
        self.counter = get_counter(peers.ENCODING)
        self._source: dict[int, Any] = {}  # id(framework object) -> chathistory Message
        self._alive: list[Any] = []  # keeps every object alive, so id() stays unique

    def stands_for(self, obj: Any, message: Any) -> Any:
        self._source[id(obj)] = message
        self._alive.append(obj)
        return obj

    def source(self, obj: Any) -> Any:
        return self._source[id(obj)]

    def count(self, message: Any) -> int:
        from chathistory.tokens import cached_count

        return cached_count(message, self.counter)

    def add(self, message: Any) -> None:
        """Append one chathistory message, converted to the framework's type."""
        raise NotImplementedError

    def prompt(self) -> list[Any]:
        """This request's prompt as chathistory messages, oldest first."""
        raise NotImplementedError


def one(converted: Sequence[Any], message: Any) -> Any:
    """The single framework object a message converts to (the session has no message
    carrying several tool results, which some frameworks split)."""
    if len(converted) != 1:
        raise ValueError(f"message {message.id} became {len(converted)} objects")
    return converted[0]


# --- LangChain -------------------------------------------------------------------------


class LangchainAgentPeer(AgentPeer):
    """``trim_messages(strategy="last", include_system=True, start_on=...)`` over the
    whole session before each request, budget minus the reply priming. ``start_on``
    is how LangChain keeps a tool message after the AI message that called it: the
    kept tail may begin only on those types (its docs: ``"human"``)."""

    distribution = "langchain-core"

    def __init__(self, budget: int, start_on: tuple[str, ...] = ("human",)) -> None:
        super().__init__(budget)
        from langchain_core.messages import BaseMessage, trim_messages

        from chathistory.integrations.langchain import to_langchain

        self.start_on = start_on
        self.name = (f"LangChain trim_messages({budget - peers.PRIMING_TOKENS}, "
                     f"start_on={'/'.join(start_on)})")
        self.trim_messages = trim_messages
        self.to_langchain = to_langchain
        self.messages: list[Any] = []

        def count_langchain_message(message: BaseMessage) -> int:
            return self.count(self.source(message))

        self.token_counter = count_langchain_message

    def add(self, message: Any) -> None:
        self.messages.append(self.stands_for(one(self.to_langchain([message]), message), message))

    def prompt(self) -> list[Any]:
        kept = self.trim_messages(
            self.messages, max_tokens=self.budget - peers.PRIMING_TOKENS, strategy="last",
            token_counter=self.token_counter, include_system=True,
            start_on=list(self.start_on))
        return [self.source(m) for m in kept]


# --- Agent Framework ---------------------------------------------------------------------


class AgentFrameworkTokenizer:
    """Agent Framework's ``TokenizerProtocol``: it is handed each message serialized as
    JSON; this finds the chathistory message by the serialized ``message_id`` and counts
    it (a message Agent Framework wrote, by the chathistory message made for it)."""

    def __init__(self, peer: "AgentFrameworkAgentPeer") -> None:
        self.peer = peer

    def count_tokens(self, text: str) -> int:
        payload = json.loads(text)
        return self.peer.count(self.peer.by_id(payload["message_id"], payload))


class AgentFrameworkAgentPeer(AgentPeer):
    """A compaction strategy run by ``apply_compaction`` before each request over the
    session's message list (what its chat client does before a model call); the
    projection (included messages) is the prompt."""

    distribution = "agent-framework-core"

    def __init__(self, budget: int, name: str, make_strategy: Callable[[Any, Any], Any]) -> None:
        super().__init__(budget)
        import agent_framework as af

        from chathistory.integrations.agent_framework import to_agent_framework

        self.af = af
        self.name = name
        self.to_agent_framework = to_agent_framework
        self.tokenizer = AgentFrameworkTokenizer(self)
        self.strategy = make_strategy(af, self.tokenizer)
        self.messages: list[Any] = []
        self._by_id: dict[str, Any] = {}
        self.written = 0  # messages Agent Framework wrote (tool-result summaries)

    def add(self, message: Any) -> None:
        converted = one(self.to_agent_framework([message]), message)
        self._by_id[converted.message_id] = message
        self.messages.append(converted)

    def by_id(self, message_id: str, payload: dict[str, Any]) -> Any:
        """The chathistory message for an Agent Framework message id; one it wrote
        becomes an assistant message (its text contents) under its id, once."""
        from chathistory import Message

        found = self._by_id.get(message_id)
        if found is None:
            if payload.get("role") != "assistant":
                raise ValueError(f"Agent Framework wrote a {payload.get('role')} message")
            text = "".join(c.get("text", "") for c in payload.get("contents", ()))
            found = self._by_id[message_id] = Message.assistant(text, id=message_id)
            self.written += 1
        return found

    def prompt(self) -> list[Any]:
        from agent_framework._compaction import _serialize_message

        projected = peers.run_sync(self.af.apply_compaction(
            self.messages, strategy=self.strategy, tokenizer=self.tokenizer))
        return [self.by_id(m.message_id, json.loads(_serialize_message(m)))
                for m in projected]


def agent_framework_truncation(budget: int, compact_to: int) -> AgentFrameworkAgentPeer:
    max_n = budget - peers.PRIMING_TOKENS
    return AgentFrameworkAgentPeer(
        budget, f"Agent Framework TruncationStrategy({max_n} -> {compact_to})",
        lambda af, tokenizer: af.TruncationStrategy(max_n=max_n, compact_to=compact_to,
                                                    tokenizer=tokenizer))


def agent_framework_context_window(budget: int) -> AgentFrameworkAgentPeer:
    """``ContextWindowCompactionStrategy``, its defaults for agents: past 50% of the input
    budget older tool-call groups (all but the newest 4) collapse into a summary message
    of their results (at most 4,096 characters); past 80%, truncation of the oldest
    groups down to 50%. The input budget is the window less the reply priming."""
    return AgentFrameworkAgentPeer(
        budget, f"Agent Framework ContextWindowCompactionStrategy({budget}, "
        f"output {peers.PRIMING_TOKENS})",
        lambda af, tokenizer: af.ContextWindowCompactionStrategy(
            max_context_window_tokens=budget, max_output_tokens=peers.PRIMING_TOKENS,
            tokenizer=tokenizer))


# --- Semantic Kernel ---------------------------------------------------------------------


class SemanticKernelAgentPeer(AgentPeer):
    """``ChatHistoryTruncationReducer(target_count, threshold_count)``: add the message,
    ``await reduce()`` before each request. It counts messages, not tokens; its
    ``locate_safe_reduction_index`` steps back so that a function call and its result
    are not cut apart."""

    distribution = "semantic-kernel"

    def __init__(self, budget: int, target_count: int, threshold_count: int) -> None:
        super().__init__(budget)
        from semantic_kernel.contents import (
            AuthorRole,
            ChatMessageContent,
            FunctionCallContent,
            FunctionResultContent,
            ReasoningContent,
            TextContent,
        )
        from semantic_kernel.contents.history_reducer.chat_history_truncation_reducer import (
            ChatHistoryTruncationReducer,
        )

        self.name = (f"Semantic Kernel ChatHistoryTruncationReducer({target_count}, "
                     f"{threshold_count})")
        self.types = (ChatMessageContent, FunctionCallContent, FunctionResultContent,
                      ReasoningContent, TextContent)
        self.roles = {"system": AuthorRole.SYSTEM, "developer": AuthorRole.DEVELOPER,
                      "user": AuthorRole.USER, "assistant": AuthorRole.ASSISTANT,
                      "tool": AuthorRole.TOOL}
        self.reducer = ChatHistoryTruncationReducer(target_count=target_count,
                                                    threshold_count=threshold_count)

    def convert(self, message: Any) -> Any:
        """The Semantic Kernel message for a chathistory one (text, reasoning, tool
        calls and text tool results: what the agent session holds)."""
        from chathistory.model import Reasoning, TextPart, ToolCall, ToolResult

        chat_message, call, result, reasoning, text = self.types
        items: list[Any] = []
        for part in message.parts:
            match part:
                case TextPart():
                    items.append(text(text=part.text))
                case Reasoning():
                    items.append(reasoning(text=part.text or ""))
                case ToolCall():
                    items.append(call(id=part.id, call_id=part.id, name=part.name,
                                      arguments=json.dumps(part.arguments)))
                case ToolResult() if isinstance(part.content, str):
                    items.append(result(id=part.call_id, call_id=part.call_id,
                                        name=part.name, result=part.content))
                case _:
                    raise ValueError(f"no Semantic Kernel item for {type(part).__name__}")
        return chat_message(role=self.roles[message.role], items=items)

    def add(self, message: Any) -> None:
        self.reducer.add_message(self.stands_for(self.convert(message), message))

    def prompt(self) -> list[Any]:
        peers.run_sync(self.reducer.reduce())
        return [self.source(m) for m in self.reducer.messages]


def semantic_kernel_counts(message_tokens: Sequence[int], budget: int) -> tuple[int, int]:
    """(target_count, threshold_count) as the window suite picks them: as many messages
    as the budget holds at the session's mean message size, trimmed to 62.5% of that."""
    from . import window

    mean = sum(message_tokens) / max(1, len(message_tokens))
    capacity = max(1, int((budget - peers.PRIMING_TOKENS) // mean))
    target = max(1, round(capacity * window.PEER_LOW_WATER_RATIO))
    return target, max(0, capacity - target)


# --- OpenAI Agents SDK ---------------------------------------------------------------------


class ToolOutputTrimmerPeer(AgentPeer):
    """The Agents SDK's ``ToolOutputTrimmer`` (its defaults: the items from the second
    newest user message on are kept whole; older tool outputs over 500 characters become
    a 200-character preview), run as the ``call_model_input_filter`` it is, before each
    request, over the whole session as Responses items (``to_openai_responses``, the
    system prompt as ``instructions``). It trims, it never drops: it keeps no budget.
    An item it kept maps back to its message; a trimmed output becomes a tool message of
    its own, one per call and text, so that later prompts share it as the SDK's would."""

    distribution = "openai-agents"

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        from agents.extensions import ToolOutputTrimmer
        from agents.run_config import CallModelData, ModelInputData

        from chathistory.formats import to_openai_responses

        self.name = "Agents SDK ToolOutputTrimmer() (no budget)"
        self.trimmer = ToolOutputTrimmer()
        self.data, self.model_input = CallModelData, ModelInputData
        self.encode = to_openai_responses
        self.system: Any = None
        self.items: list[Any] = []
        self.owner: dict[int, Any] = {}  # id(item) -> chathistory message
        self.trimmed: dict[tuple[str, str], Any] = {}

    def add(self, message: Any) -> None:
        if message.role == "system":
            self.system = message
            return
        for item in self.encode([message]):
            self.owner[id(item)] = message
            self.items.append(item)

    def prompt(self) -> list[Any]:
        from chathistory import Message
        from chathistory.model import ToolResult

        filtered = self.trimmer(self.data(
            model_data=self.model_input(input=list(self.items),
                                        instructions=self.system and self.system.text),
            agent=None, context=None))  # type: ignore[arg-type]
        out: list[Any] = [self.system] if self.system is not None else []
        for item in filtered.input:
            message = self.owner.get(id(item))
            if message is None:  # an output it trimmed: a message of its own, once
                key = (item["call_id"], str(item.get("output")))
                message = self.trimmed.get(key)
                if message is None:
                    message = self.trimmed[key] = Message(role="tool", parts=[ToolResult(
                        call_id=item["call_id"], content=str(item.get("output")))])
            if not out or out[-1] is not message:
                out.append(message)
        return out


# --- checks ------------------------------------------------------------------------------


def invalid_prompts(prompts: Sequence[Sequence[Any]], newest: Sequence[Any]
                    ) -> tuple[int, int]:
    """How many prompts split a tool call from its result (a result without its call,
    or a call whose result the history holds without it), and how many lack the
    request's newest message (``newest[i]``: what the model is asked to answer)."""
    split = missing = 0
    for prompt, last in zip(prompts, newest, strict=False):
        calls = {c.id for m in prompt for c in m.tool_calls}
        results = {r.call_id for m in prompt for r in m.tool_results}
        split += calls != results  # every call before a request has its result
        missing += all(m.id != last.id for m in prompt)
    return split, missing
