"""A cache plan through the encoders: Anthropic's breakpoints and TTL on the blocks,
OpenAI's ``prompt_cache_key`` in the request; each request checked against the SDK's
own request types."""

from __future__ import annotations

from typing import Any

import pytest
from format_helpers import assert_sdk_valid, check_anthropic, check_gemini
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from chathistory import InvalidMessage, Message, ToolCall, ToolResult, plan_cache
from chathistory.formats import (
    cache_request_fields,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)


def _agent_turn() -> list[Message]:
    """A system prompt over the minimum, then a tool loop of 30 blocks."""
    msgs = [Message.system("You are careful. " * 600, id="sys"), Message.user("Go.", id="go")]
    for i in range(15):
        call = ToolCall(id=f"c{i}", name="step", arguments={"n": i})
        msgs.append(Message.assistant(tool_calls=[call], id=f"a{i}"))
        msgs.append(Message(role="tool", parts=[ToolResult(call_id=f"c{i}", content="ok")],
                            id=f"r{i}"))
    return msgs


def _marked(request: dict[str, Any]) -> list[dict[str, Any]]:
    system = request.get("system")
    blocks = list(system) if isinstance(system, list) else []
    blocks += [b for turn in request["messages"] for b in turn["content"]]
    return [b["cache_control"] for b in blocks if "cache_control" in b]


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_anthropic_places_the_plans_breakpoints_with_its_ttl(ttl: str) -> None:
    msgs = _agent_turn()
    first = plan_cache(msgs[:4], provider="anthropic", model="claude-sonnet-4-5", ttl=ttl,
                       counter="approx")
    plan = plan_cache(msgs, provider="anthropic", model="claude-sonnet-4-5", ttl=ttl,
                      counter="approx", previous=first)
    assert len(plan.breakpoint_ids) >= 2  # 26 blocks after the entry: one more to reach it
    request = to_anthropic(msgs, cache_plan=plan)
    check_anthropic(request)
    control = {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}
    assert _marked(request) == [control] * len(plan.breakpoint_ids)
    assert request["system"][-1]["cache_control"] == control  # "sys" is one of them
    assert cache_request_fields(plan) == {}


def test_a_plan_for_another_provider_is_refused() -> None:
    msgs = [Message.user("hi")]
    plan = plan_cache(msgs, provider="openai", session_id="s", counter="approx")
    with pytest.raises(InvalidMessage, match="a cache plan for openai") as err:
        to_anthropic(msgs, cache_plan=plan)
    assert err.value.path == "$.cache_plan"


def test_openai_requests_carry_the_key_and_validate() -> None:
    msgs = _agent_turn()
    plan = plan_cache(msgs, provider="openai", model="gpt-4o", session_id="session-7",
                      counter="approx")
    fields = cache_request_fields(plan)
    assert fields == {"prompt_cache_key": plan.prompt_cache_key}
    assert isinstance(plan.prompt_cache_key, str)
    chat = {"model": "gpt-4o", "messages": to_openai_chat(msgs), **fields}
    assert_sdk_valid(CompletionCreateParamsNonStreaming, chat)
    responses = {"model": "gpt-4o", "input": to_openai_responses(msgs), **fields}
    assert_sdk_valid(ResponseCreateParamsNonStreaming, responses)
    keyless = plan_cache(msgs, provider="openai", counter="approx")
    assert cache_request_fields(keyless) == {}


def test_gemini_implicit_cache_needs_no_field() -> None:
    msgs = _agent_turn()
    plan = plan_cache(msgs, provider="gemini", model="gemini-2.5-pro", counter="approx")
    assert cache_request_fields(plan) == {}
    check_gemini(to_gemini(msgs))


def test_mixed_ttls_go_on_their_breakpoints_longest_first() -> None:
    """A plan that chose 1h for the pinned head and 5m after it (``plan_cache(now=...,
    expected_gap=...)``): each block carries its breakpoint's ttl, the 1h ones first, and
    the request passes the SDK's types."""
    msgs = _agent_turn()
    first = plan_cache(msgs[:4], provider="anthropic", model="claude-sonnet-4-5",
                       counter="approx", now=0.0, pinned=2)
    plan, at = first, 0.0
    for step in range(1, 6):  # gaps: 4 short, 1 past 5 minutes
        at += 900.0 if step == 3 else 60.0
        plan = plan_cache(msgs[:4 + 2 * step], provider="anthropic", model="claude-sonnet-4-5",
                          counter="approx", now=at, previous=plan, pinned=2)
    # then a long message: its new tokens are read once, cheaper written at 5m
    prompt = [*msgs[:14], Message.user("Here is the log. " * 800, id="log")]
    plan = plan_cache(prompt, provider="anthropic", model="claude-sonnet-4-5", counter="approx",
                      now=at + 60.0, previous=plan, pinned=2)
    assert plan.breakpoint_ttls[0] == "1h" and plan.breakpoint_ttls[-1] == "5m"
    request = to_anthropic(prompt, cache_plan=plan)
    check_anthropic(request)
    assert _marked(request) == [{"type": "ephemeral", "ttl": "1h"} if t == "1h"
                                else {"type": "ephemeral"} for t in plan.breakpoint_ttls]


def test_openai_extended_retention_is_a_request_field() -> None:
    msgs = _agent_turn()
    plan = plan_cache(msgs, provider="openai", model="gpt-5", session_id="s", ttl="24h",
                      counter="approx", now=0.0)
    fields = cache_request_fields(plan)
    assert fields == {"prompt_cache_key": plan.prompt_cache_key, "prompt_cache_retention": "24h"}
    chat = {"model": "gpt-5", "messages": to_openai_chat(msgs), **fields}
    assert_sdk_valid(CompletionCreateParamsNonStreaming, chat)
    responses = {"model": "gpt-5", "input": to_openai_responses(msgs), **fields}
    assert_sdk_valid(ResponseCreateParamsNonStreaming, responses)
