"""A scripted Agents SDK ``Model`` that keeps every input, for tests that compare two
runs of one script call by call, and builders of the output items a model returns."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from agents.items import TResponseOutputItem
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary
from test_openai_agents import FakeModel


class ScriptedModel(FakeModel):
    """``test_openai_agents.FakeModel`` given its whole script at once (call ``i`` answers
    ``script[i]``), keeping a copy of every call's ``input`` in ``inputs``, not only the
    last."""

    def __init__(self, script: Sequence[list[TResponseOutputItem]]) -> None:
        super().__init__()
        self.outputs = [list(output) for output in script]
        self.inputs: list[Any] = []

    def _next(self, input: Any) -> list[Any]:
        # a copy: the runner goes on to reuse and change the lists it passed
        self.inputs.append(copy.deepcopy(input))
        return super()._next(input)


def say(text: str, item_id: str) -> ResponseOutputMessage:
    """An assistant message, as a model returns it."""
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def call(name: str, arguments: str, call_id: str, item_id: str) -> ResponseFunctionToolCall:
    """A function call, as a model returns it."""
    return ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name,
                                    arguments=arguments, id=item_id, status="completed")


def think(item_id: str, summary: str, encrypted: str) -> ResponseReasoningItem:
    """A reasoning item with a summary and encrypted content, as a model returns it."""
    return ResponseReasoningItem(
        id=item_id, type="reasoning", encrypted_content=encrypted,
        summary=[Summary(type="summary_text", text=summary)])
