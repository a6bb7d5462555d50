"""The request builders with a cache plan: each request checked against the provider
SDK's own request types (Gemini's also sent through the SDK to a mock transport, to
see the wire request); the plan refused for another provider or other messages."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from format_helpers import assert_sdk_valid, check_anthropic, check_gemini
from google import genai
from google.genai import types as genai_types
from google.genai.models import Models
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from chathistory import InvalidMessage, Message, TextPart, ToolCall, ToolResult, plan_cache
from chathistory.cache import CachePlan, prompt_cache_key
from chathistory.formats import (
    anthropic_request,
    gemini_request,
    openai_chat_request,
    openai_responses_request,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)

CACHE = "cachedContents/abc123"


def _turn(steps: int = 6) -> list[Message]:
    """A system prompt over every minimum, then a tool loop: system, user, then an
    assistant call and its tool result per step."""
    msgs = [Message.system("You are careful. " * 600, id="sys"), Message.user("Go.", id="go")]
    for i in range(steps):
        call = ToolCall(id=f"c{i}", name="step", arguments={"n": i})
        msgs.append(Message.assistant(tool_calls=[call], id=f"a{i}"))
        msgs.append(Message(role="tool", parts=[ToolResult(call_id=f"c{i}", content="ok")],
                            id=f"r{i}"))
    return msgs


def _plan(msgs: list[Message], provider: str, **options: Any) -> CachePlan:
    return plan_cache(msgs, provider=provider, counter="approx", **options)


def check_gemini_request(request: dict[str, Any]) -> None:
    """The keyword arguments of ``Models.generate_content``, each checked against the
    SDK's types (contents through JSON, as on the wire; unknown fields are refused)."""
    inspect.signature(Models.generate_content).bind(None, **request)
    check_gemini({"contents": request["contents"]})
    genai_types.GenerateContentConfig.model_validate_json(json.dumps(request["config"]))


def sent_to_gemini(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON body google-genai sends for ``generate_content(**request)`` (to a mock
    transport: no network)."""
    bodies: list[dict[str, Any]] = []

    def reply(sent: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(sent.content))
        return httpx.Response(200, json={"candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}}]})

    http = httpx.Client(transport=httpx.MockTransport(reply))
    client = genai.Client(api_key="test", http_options={"httpx_client": http})
    client.models.generate_content(**request)
    (body,) = bodies
    return body


# ---------------------------------------------------------------- OpenAI

OPENAI = [
    (openai_chat_request, "messages", to_openai_chat, CompletionCreateParamsNonStreaming),
    (openai_responses_request, "input", to_openai_responses, ResponseCreateParamsNonStreaming),
]


@pytest.mark.parametrize(("build", "field", "encode", "params"), OPENAI)
def test_openai_requests_validate_with_and_without_a_plan(
        build: Callable[..., dict[str, Any]], field: str, encode: Callable[..., Any],
        params: Any) -> None:
    msgs = _turn()
    bare = build(msgs, model="gpt-4o")
    assert bare == {"model": "gpt-4o", field: encode(msgs)}
    assert_sdk_valid(params, bare)
    plan = _plan(msgs, "openai", model="gpt-4o", session_id="session-7")
    planned = build(msgs, model="gpt-4o", cache_plan=plan)
    assert planned == {**bare, "prompt_cache_key": plan.prompt_cache_key}
    assert_sdk_valid(params, planned)
    assert encode(msgs, cache_plan=plan) == encode(msgs)  # the list itself is unchanged
    keyless = build(msgs, model="gpt-4o", cache_plan=_plan(msgs, "openai"))
    assert keyless == bare  # a plan without a session id has no key


@pytest.mark.parametrize(("build", "field", "encode", "params"), OPENAI)
def test_openai_key_is_the_sessions_on_every_turn(
        build: Callable[..., dict[str, Any]], field: str, encode: Callable[..., Any],
        params: Any) -> None:
    msgs = _turn()
    keys = []
    previous = None
    for end in (2, 6, len(msgs)):  # three turns of one session, the prompt growing
        previous = _plan(msgs[:end], "openai", session_id="session-7", previous=previous)
        keys.append(build(msgs[:end], model="gpt-4o", cache_plan=previous)["prompt_cache_key"])
    assert keys == [prompt_cache_key("session-7")] * 3
    other = build(msgs, model="gpt-4o", cache_plan=_plan(msgs, "openai", session_id="session-8"))
    assert other["prompt_cache_key"] != keys[0]


# ---------------------------------------------------------------- Anthropic


def _cache_controls(request: dict[str, Any]) -> list[Any]:
    system = request.get("system")
    blocks = list(system) if isinstance(system, list) else []
    blocks += [b for turn in request["messages"] if isinstance(turn["content"], list)
               for b in turn["content"]]
    return [b["cache_control"] for b in blocks if "cache_control" in b]


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_anthropic_request_validates_with_the_plans_breakpoints(ttl: str) -> None:
    msgs = _turn()
    bare = anthropic_request(msgs, model="claude-sonnet-4-5", max_tokens=1024)
    assert_sdk_valid(MessageCreateParamsNonStreaming, bare)
    assert _cache_controls(bare) == []
    plan = _plan(msgs, "anthropic", model="claude-sonnet-4-5", ttl=ttl)
    request = anthropic_request(msgs, model="claude-sonnet-4-5", max_tokens=1024,
                                cache_plan=plan)
    assert_sdk_valid(MessageCreateParamsNonStreaming, request)
    assert list(request) == ["model", "max_tokens", "system", "messages"]
    assert request == {"model": "claude-sonnet-4-5", "max_tokens": 1024,
                       **to_anthropic(msgs, cache_plan=plan)}
    check_anthropic({k: request[k] for k in ("system", "messages")})
    control = {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}
    assert plan.breakpoint_ids
    assert _cache_controls(request) == [control] * len(plan.breakpoint_ids)


# ---------------------------------------------------------------- Gemini


def test_gemini_request_validates_with_and_without_a_plan() -> None:
    msgs = _turn()
    bare = gemini_request(msgs, model="gemini-2.5-flash")
    encoded = to_gemini(msgs)
    assert bare == {"model": "gemini-2.5-flash", "contents": encoded["contents"],
                    "config": {"system_instruction": encoded["system_instruction"]}}
    check_gemini_request(bare)
    plan = _plan(msgs, "gemini", model="gemini-2.5-flash")
    assert plan.explicit_cache_messages == 0
    assert gemini_request(msgs, model="gemini-2.5-flash", cache_plan=plan) == bare
    assert to_gemini(msgs, cache_plan=plan) == encoded  # the implicit cache takes no field
    body = sent_to_gemini(bare)
    assert body["systemInstruction"]["parts"] == [{"text": msgs[0].text}]
    assert "cachedContent" not in body
    assert len(body["contents"]) == len(encoded["contents"])


@pytest.mark.parametrize("held", [1, 2, 3, 6])
def test_gemini_cached_content_leaves_out_exactly_the_cached_prefix(held: int) -> None:
    """The cache holds the first ``held`` messages (system, user, then an assistant call
    and its result per step): its contents and the request's make the whole prompt."""
    msgs = _turn()
    plan = _plan(msgs, "gemini", model="gemini-2.5-flash", explicit_cache_messages=held)
    request = gemini_request(msgs, model="gemini-2.5-flash", cache_plan=plan,
                             cached_content=CACHE)
    check_gemini_request(request)
    assert request["config"] == {"cached_content": CACHE}
    cached = to_gemini(msgs[:held])  # what the caller put in client.caches.create
    assert cached["contents"] + request["contents"] == to_gemini(msgs)["contents"]
    body = sent_to_gemini(request)
    assert body["cachedContent"] == CACHE
    assert "systemInstruction" not in body
    assert len(body["contents"]) == len(request["contents"])


def test_gemini_result_after_the_cache_keeps_its_calls_name() -> None:
    """The call is in the cache, its result is sent: the result still names the tool,
    which ``to_gemini`` of the remaining messages alone could not find."""
    msgs = _turn()
    plan = _plan(msgs, "gemini", explicit_cache_messages=3)  # sys, go, a0 (the call)
    request = gemini_request(msgs, model="gemini-2.5-flash", cache_plan=plan,
                             cached_content=CACHE)
    first = request["contents"][0]
    assert first["parts"][0]["functionResponse"]["name"] == "step"
    with pytest.raises(InvalidMessage):
        to_gemini(msgs[3:])


def test_explicit_cache_carries_over_while_its_prefix_is_unchanged() -> None:
    msgs = _turn()
    first = _plan(msgs[:4], "gemini", explicit_cache_messages=4)
    later = _plan(msgs, "gemini", previous=first)
    assert later.explicit_cache_messages == 4
    request = gemini_request(msgs, model="gemini-2.5-flash", cache_plan=later,
                             cached_content=CACHE)
    assert to_gemini(msgs[:4])["contents"] + request["contents"] == to_gemini(msgs)["contents"]
    edited = [msgs[0], Message.user("Go now.", id="go"), *msgs[2:]]
    assert _plan(edited, "gemini", previous=first).explicit_cache_messages == 0
    assert _plan(msgs, "gemini", previous=later,
                 explicit_cache_messages=0).explicit_cache_messages == 0


def test_explicit_cache_count_is_checked() -> None:
    msgs = _turn(1)
    with pytest.raises(ValueError, match="Gemini's, not openai's"):
        _plan(msgs, "openai", explicit_cache_messages=1)
    with pytest.raises(ValueError, match="explicit cache of 5 messages"):
        _plan(msgs, "gemini", explicit_cache_messages=5)


@pytest.mark.parametrize(("plan_options", "reason"), [
    (None, "cached_content needs a cache plan"),
    ({}, "cached_content needs a cache plan"),
    ({"explicit_cache_messages": 4}, "nothing is left to send"),
])
def test_gemini_cached_content_needs_a_plan_that_leaves_something(
        plan_options: dict[str, Any] | None, reason: str) -> None:
    msgs = _turn(1)
    plan = None if plan_options is None else _plan(msgs, "gemini", **plan_options)
    with pytest.raises(InvalidMessage, match=reason) as err:
        gemini_request(msgs, model="gemini-2.5-flash", cache_plan=plan, cached_content=CACHE)
    assert err.value.path == "$.cache_plan"


def test_gemini_cache_must_hold_every_system_message() -> None:
    msgs = [*_turn(1), Message.system("Be brief.", id="sys2")]
    plan = _plan(msgs, "gemini", explicit_cache_messages=1)  # only "sys" of the two
    assert plan.message_ids[:2] == ("sys", "sys2")  # request order: system first
    with pytest.raises(InvalidMessage, match="system message is not in the explicit cache"):
        gemini_request(msgs, model="gemini-2.5-flash", cache_plan=plan, cached_content=CACHE)
    both = _plan(msgs, "gemini", explicit_cache_messages=2)
    request = gemini_request(msgs, model="gemini-2.5-flash", cache_plan=both,
                             cached_content=CACHE)
    assert request["contents"] == to_gemini(msgs)["contents"]  # both were in the config


def test_gemini_checker_refuses_what_the_sdk_does_not_take() -> None:
    request = gemini_request(_turn(1), model="gemini-2.5-flash")
    with pytest.raises(TypeError):
        check_gemini_request({**request, "cached_content": CACHE})  # not a keyword
    with pytest.raises(ValueError):
        check_gemini_request({**request, "config": {"cache": CACHE}})


# ---------------------------------------------------------------- refused plans

ENCODERS: dict[str, Callable[..., Any]] = {
    "openai_chat": to_openai_chat,
    "openai_responses": to_openai_responses,
    "anthropic": to_anthropic,
    "gemini": to_gemini,
    "openai_chat_request": lambda m, **o: openai_chat_request(m, model="gpt-4o", **o),
    "openai_responses_request": lambda m, **o: openai_responses_request(m, model="gpt-4o", **o),
    "anthropic_request": lambda m, **o: anthropic_request(m, model="claude", max_tokens=9, **o),
    "gemini_request": lambda m, **o: gemini_request(m, model="gemini-2.5-flash", **o),
}
PROVIDER = {"openai_chat": "openai", "openai_responses": "openai", "anthropic": "anthropic",
            "gemini": "gemini"}


def _provider(name: str) -> str:
    return PROVIDER[name.removesuffix("_request")]


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_plan_for_another_provider_is_refused(name: str) -> None:
    msgs = _turn(1)
    other = "gemini" if _provider(name) != "gemini" else "openai"
    with pytest.raises(InvalidMessage, match=f"a cache plan for {other}, not") as err:
        ENCODERS[name](msgs, cache_plan=_plan(msgs, other))
    assert err.value.path == "$.cache_plan"


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_plan_for_other_messages_is_refused(name: str) -> None:
    msgs = _turn(2)
    plan = _plan(msgs, _provider(name))
    encode = ENCODERS[name]
    encode([*msgs, Message.user("And then?")], cache_plan=plan)  # appended after: fine
    call = ToolCall(id="c0", name="step", arguments={"n": 9})  # a0's call, edited
    edited = [*msgs[:2], Message.assistant(tool_calls=[call], id="a0"), *msgs[3:]]
    with pytest.raises(InvalidMessage, match=r"differ from the planned prompt at its "
                                             r"message 2 \('a0'\)") as err:
        encode(edited, cache_plan=plan)
    assert err.value.path == "$.cache_plan"
    with pytest.raises(InvalidMessage, match=r"end before the planned prompt's message 4 "
                                             r"\('a1'\)") as err:
        encode(msgs[:4], cache_plan=plan)
    assert err.value.path == "$.cache_plan"


@pytest.mark.parametrize("name", ["anthropic", "gemini"])
def test_system_messages_match_in_request_order(name: str) -> None:
    """Anthropic and Gemini take system messages out in front, so the plan orders them
    first: a system message further down the list still matches the plan."""
    msgs = [Message.user("Hi.", id="hi"), Message.system("Be kind. " * 900, id="sys")]
    plan = _plan(msgs, name)
    assert plan.message_ids == ("sys", "hi")
    ENCODERS[name](msgs, cache_plan=plan)
    with pytest.raises(InvalidMessage, match="message 0"):
        ENCODERS[name]([Message.user("Hi.", id="hi")], cache_plan=plan)


@pytest.mark.parametrize("name", [n for n in ENCODERS if n.endswith("_request")])
def test_builders_pass_the_encoders_options_on(name: str) -> None:
    msgs = [Message.user("Hi."), Message(role="agent", parts=[TextPart(text="Hello.")])]
    with pytest.raises(InvalidMessage) as err:
        ENCODERS[name](msgs)
    assert err.value.path == "$[1].role"
    request = ENCODERS[name](msgs, role_map={"agent": "assistant"})
    assert "Hello." in json.dumps(request)
