"""The SDK's own ``SQLiteSession`` as the oracle for ``ChatHistorySession``, on every backend.

A corpus of items, every type of ``openai.types.responses.ResponseInputItemParam``
among them, is added to an in-memory ``SQLiteSession("x")`` and to a
``ChatHistorySession`` over each store backend (memory, SQLite, PostgreSQL, Redis):
as one batch, one item at a time, and in turns of three. Then both answer the same
calls and the answers are compared dict for dict: ``get_items()``,
``get_items(limit=k)`` for every ``k``, and ``pop_item()`` until the session is empty
(with every read again after each pop).

Where the two differ on purpose (the adapter's docstring says why), the expected
answer is computed here, from outside chathistory: a limit that would cut a group
is widened to the whole group, so ours is SQLiteSession's answer plus the rest of
its oldest group. Groups come from the SDK's own table of which output type answers
which call type (``agents.run_internal.items._TOOL_CALL_TO_OUTPUT_TYPE``): a result
joins everything from its call to itself to one group, and a reasoning item joins
the item after it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest
from agents.memory import SQLiteSession
from agents.run_internal.items import _TOOL_CALL_TO_OUTPUT_TYPE
from openai.types.responses import response_input_item_param

from chathistory import InvalidMessage
from chathistory.integrations.openai_agents import ChatHistorySession
from chathistory.model import ToolCall, ToolResult
from chathistory.stores import BaseStore


@pytest.fixture
def store(backend: BaseStore) -> BaseStore:
    """Every store backend here (conftest's ``backend``), not only memory and SQLite."""
    return backend


Item = dict[str, Any]

# The SDK's call type -> output type table, as written in agents/run_internal/items.py
# (test_the_group_table_is_the_sdks checks that it still is).
CALL_TO_OUTPUT = {
    "program": "program_output",
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "tool_search_call": "tool_search_output",
}

PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"
       "2mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
PDF = "data:application/pdf;base64,JVBERi0xLjQKJcTl8uXrCg=="

MESSAGES: list[Item] = [
    {"role": "system", "content": "Be brief."},
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules"}]},
    {"role": "user", "content": "Hello"},
    {"role": "user", "content": ""},
    {"type": "message", "role": "user", "status": "completed", "content": [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
        {"type": "input_image", "file_id": "file-img", "detail": "high"},
        {"type": "input_file", "file_id": "file-123"},
        {"type": "input_file", "file_data": PDF, "filename": "report.pdf"},
        {"type": "input_file", "file_url": "https://example.com/report.pdf"},
    ]},
    {"role": "assistant", "content": "Hi!"},
    {"role": "assistant", "content": "Final.", "phase": "final_answer"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "phase": "commentary", "content": [
         {"type": "output_text", "text": "See [1] and [2].", "logprobs": [],
          "annotations": [
              {"type": "url_citation", "start_index": 4, "end_index": 7,
               "url": "https://example.com", "title": "Example"},
              {"type": "file_citation", "file_id": "file-123", "filename": "report.pdf",
               "index": 12},
              {"type": "container_file_citation", "container_id": "cntr_1",
               "file_id": "cfile", "filename": "out.csv", "start_index": 0, "end_index": 1},
              {"type": "file_path", "file_id": "file-9", "index": 3}]},
         {"type": "refusal", "refusal": "I can't help with that part."}]},
    {"type": "message", "role": "assistant", "id": "msg_2", "status": "incomplete",
     "content": [{"type": "refusal", "refusal": "No."}]},
]

PARALLEL_CALLS: list[Item] = [  # as the SDK stores a turn with two parallel calls
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two"}],
     "encrypted_content": "gAAAAB-opaque"},
    {"type": "function_call", "call_id": "call_1", "name": "weather",
     "arguments": '{"city": "Paris"}', "id": "fc_1", "status": "completed"},
    {"type": "function_call", "call_id": "call_2", "name": "weather",
     "arguments": '{"city":"Rome"}', "id": "fc_2", "status": "completed",
     "namespace": "tools"},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
    {"type": "function_call_output", "call_id": "call_2", "id": "fco_2", "status": "completed",
     "output": [{"type": "input_text", "text": "21C"},
                {"type": "input_image", "image_url": PNG, "detail": "auto"}]},
    {"type": "message", "role": "assistant", "id": "msg_3", "status": "completed",
     "content": [{"type": "output_text", "text": "18C and 21C.", "annotations": []}]},
]

REASONING: list[Item] = [
    {"role": "user", "content": "Think."},
    {"type": "reasoning", "id": "rs_2", "summary": []},  # stored reasoning: the id only
    {"type": "reasoning", "id": "rs_3", "status": "completed",
     "summary": [{"type": "summary_text", "text": "First"},
                 {"type": "summary_text", "text": "Second"}],
     "content": [{"type": "reasoning_text", "text": "raw thoughts"}],
     "encrypted_content": "gAAAAB-more"},
    {"role": "assistant", "content": "Thought."},
    {"type": "reasoning", "id": "rs_4", "summary": [], "encrypted_content": "gAAAAB-last"},
]

HOSTED_TOOLS: list[Item] = [
    {"role": "user", "content": "Use the hosted tools."},
    {"type": "file_search_call", "id": "fs_1", "queries": ["q1", "q2"], "status": "completed",
     "results": [{"file_id": "file-1", "filename": "a.txt", "score": 0.875, "text": "hit",
                  "attributes": {"year": 2024, "draft": False}}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "news",
                "sources": [{"type": "url", "url": "https://example.com"}]}},
    {"type": "web_search_call", "id": "ws_2", "status": "completed",
     "action": {"type": "open_page", "url": "https://example.com/page"}},
    {"type": "image_generation_call", "id": "ig_1", "status": "completed",
     "result": PNG.split(",", 1)[1]},
    {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
     "code": "print(6 * 7)", "container_id": "cntr_1",
     "outputs": [{"type": "logs", "logs": "42\n"},
                 {"type": "image", "url": "https://example.com/plot.png"}]},
    {"type": "mcp_list_tools", "id": "ml_1", "server_label": "deepwiki",
     "tools": [{"name": "ask", "input_schema": {"type": "object", "properties": {}},
                "description": "Ask a question", "annotations": None}]},
    {"type": "mcp_approval_request", "id": "mr_1", "arguments": '{"q": "x"}', "name": "ask",
     "server_label": "deepwiki"},
    {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": True,
     "reason": "fine"},
    {"type": "mcp_call", "id": "mc_1", "arguments": '{"q": "x"}', "name": "ask",
     "server_label": "deepwiki", "output": "answer", "status": "completed",
     "approval_request_id": "mr_1"},
    {"type": "mcp_call", "id": "mc_2", "arguments": "{}", "name": "ask",
     "server_label": "deepwiki", "status": "failed",
     "error": {"type": "tool_execution_error", "message": "boom"}},
    {"role": "assistant", "content": "Done."},
]

CLIENT_TOOLS: list[Item] = [
    {"role": "user", "content": "Use the client tools."},
    {"type": "computer_call", "id": "cu_1", "call_id": "cc_1", "status": "completed",
     "action": {"type": "click", "button": "left", "x": 10, "y": 20},
     "pending_safety_checks": [{"id": "sc_1", "code": "malicious", "message": "careful"}]},
    {"type": "computer_call_output", "call_id": "cc_1", "id": "cuo_1", "status": "completed",
     "output": {"type": "computer_screenshot", "image_url": PNG},
     "acknowledged_safety_checks": [{"id": "sc_1", "code": "malicious", "message": "careful"}]},
    {"type": "local_shell_call", "id": "ls_1", "call_id": "lsc_1", "status": "completed",
     "action": {"type": "exec", "command": ["ls", "-la"], "env": {"A": "1"},
                "timeout_ms": 1000, "working_directory": "/tmp"}},
    # as the SDK writes it (call_id) ...
    {"type": "local_shell_call_output", "call_id": "lsc_1", "output": '{"stdout": "x"}'},
    {"type": "local_shell_call", "id": "ls_2", "call_id": "lsc_2", "status": "completed",
     "action": {"type": "exec", "command": ["pwd"], "env": {}}},
    # ... and as the API type declares it (the call's id in id): not a pair, for the
    # SDK either
    {"type": "local_shell_call_output", "id": "lsc_2", "output": "/tmp", "status": "completed"},
    {"type": "shell_call", "call_id": "sh_1", "id": "shc_1", "status": "completed",
     "action": {"commands": ["echo hi", "false"], "timeout_ms": 5000,
                "max_output_length": 1000},
     "environment": {"type": "local"}},
    {"type": "shell_call_output", "call_id": "sh_1", "max_output_length": 1000,
     "output": [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                {"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 1}}]},
    {"type": "apply_patch_call", "call_id": "ap_1", "status": "completed",
     "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@\n-a\n+b\n"}},
    {"type": "apply_patch_call_output", "call_id": "ap_1", "status": "completed",
     "output": "patched"},
    {"type": "apply_patch_call", "call_id": "ap_2", "status": "completed",
     "operation": {"type": "delete_file", "path": "b.py"}},
    {"type": "apply_patch_call_output", "call_id": "ap_2", "status": "failed"},
    {"type": "custom_tool_call", "call_id": "ct_1", "name": "sql", "input": "SELECT 1;",
     "id": "ctc_1"},
    {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "1"},
    {"type": "custom_tool_call", "call_id": "ct_2", "name": "sql", "input": "SELECT 2;"},
    {"type": "custom_tool_call_output", "call_id": "ct_2",
     "output": [{"type": "input_text", "text": "2"}]},
    {"type": "tool_search_call", "call_id": "ts_1", "execution": "client",
     "arguments": {"query": "weather"}, "status": "completed"},
    {"type": "tool_search_output", "call_id": "ts_1", "execution": "client",
     "status": "completed",
     "tools": [{"type": "function", "name": "weather", "strict": True,
                "parameters": {"type": "object", "properties": {}}}]},
    {"type": "tool_search_call", "execution": "server", "arguments": {"query": "x"}},
    {"type": "tool_search_output", "execution": "server", "tools": []},
    {"role": "assistant", "content": "All done."},
]

PROGRAM: list[Item] = [  # programmatic tool calling: the program is the call
    {"role": "user", "content": "Sum the two lookups."},
    {"type": "reasoning", "id": "rs_5", "summary": [], "encrypted_content": "gAAAAB-prog"},
    {"type": "program", "id": "prg_1", "call_id": "pc_1", "fingerprint": "fp-1",
     "code": "const a = await tools.lookup({q: 'a'}); return a;"},
    {"type": "function_call", "call_id": "call_p1", "name": "lookup", "arguments": '{"q":"a"}',
     "caller": {"type": "program", "caller_id": "pc_1"}},
    {"type": "function_call_output", "call_id": "call_p1", "output": "1",
     "caller": {"type": "program", "caller_id": "pc_1"}},
    {"type": "program_output", "id": "po_1", "call_id": "pc_1", "result": "1",
     "status": "completed"},
    {"role": "assistant", "content": "It is 1."},
    {"type": "program", "id": "prg_2", "call_id": "pc_2", "fingerprint": "fp-2",
     "code": "return 2;"},
    {"type": "program_output", "id": "po_2", "call_id": "pc_2", "output": "2",
     "status": "incomplete"},  # the hand-built shape: output instead of result
]

OTHER: list[Item] = [
    {"type": "item_reference", "id": "msg_0"},
    {"id": "msg_00"},  # an item reference without its (optional) type
    {"type": "item_reference", "id": "msg_000"},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-compacted"},
    {"type": "additional_tools", "role": "developer", "id": "at_1",
     "tools": [{"type": "function", "name": "late", "parameters": {}, "strict": False}]},
    {"type": "configuration_update", "id": "cu_9", "reasoning": {"effort": "low"},
     "text": {"format": {"type": "text"}}},
    {"role": "user", "content": "Go on."},
    {"type": "compaction_trigger"},
]

JSON_VALUES: list[Item] = [  # what json.dumps / json.loads do to values, kept alike
    {"role": "user", "content": "unicode: こんにちは 😊 Привет \u0000 \u2028 \t \" \\ '"},
    {"type": "function_call", "call_id": "call_j", "name": "numbers",
     "arguments": '{"a": 1.0, "b": 1e300}'},
    {"type": "function_call_output", "call_id": "call_j",
     "output": [{"type": "input_text", "text": "ok"}],
     "extra": {"float": 0.1, "tiny": 5e-324, "neg_zero": -0.0, "whole": 1.0, "big": 2**70,
               "neg": -(2**63) - 1, "nested": {"empty": {}, "list": [[], [None, True]]},
               "tuple": (1, 2), 3: "an int key"}},
    {"role": "assistant", "content": "The end."},
]

SCENARIOS: dict[str, list[Item]] = {
    "messages": MESSAGES,
    "parallel_calls": PARALLEL_CALLS,
    "reasoning": REASONING,
    "hosted_tools": HOSTED_TOOLS,
    "client_tools": CLIENT_TOOLS,
    "program": PROGRAM,
    "other": OTHER,
    "json_values": JSON_VALUES,
    "everything": [*MESSAGES, *PARALLEL_CALLS, *REASONING, *HOSTED_TOOLS, *CLIENT_TOOLS,
                   *PROGRAM, *OTHER, *JSON_VALUES],
}
MODES: dict[str, Callable[[list[Item]], list[list[Item]]]] = {
    "batch": lambda items: [items],
    "one_by_one": lambda items: [[item] for item in items],
    "turns_of_3": lambda items: [items[i:i + 3] for i in range(0, len(items), 3)],
}


# ---------------------------------------------------------------- the expectation


def group_starts(items: Sequence[Item]) -> list[bool]:
    """``starts[k]``: whether a cut just before item ``k`` keeps every group whole."""
    starts = [True] * len(items)
    calls: dict[tuple[str, str], int] = {}  # (output type, call_id) -> index of the call
    for i, item in enumerate(items):
        if i and items[i - 1].get("type") == "reasoning":
            starts[i] = False
        kind, call_id = item.get("type"), item.get("call_id")
        if not isinstance(kind, str) or not isinstance(call_id, str):
            continue
        if kind in CALL_TO_OUTPUT:
            calls[(CALL_TO_OUTPUT[kind], call_id)] = i
        elif (kind, call_id) in calls:
            for k in range(calls[(kind, call_id)] + 1, i + 1):
                starts[k] = False
    return starts


def widened(everything: Sequence[Any], newest: Sequence[Any]) -> list[Any]:
    """``newest`` (a suffix of ``everything``) grown back to the start of its oldest group."""
    assert everything[len(everything) - len(newest):] == newest
    if not newest:
        return []
    start, starts = len(everything) - len(newest), group_starts(everything)
    while start > 0 and not starts[start]:
        start -= 1
    return list(everything[start:])


# ---------------------------------------------------------------- running both


async def add_both(sdk: SQLiteSession, ours: ChatHistorySession, items: list[Item],
                   mode: str) -> None:
    for chunk in MODES[mode](items):
        await sdk.add_items(chunk)  # type: ignore[arg-type]
        await ours.add_items(chunk)  # type: ignore[arg-type]


async def assert_reads_agree(sdk: SQLiteSession, ours: ChatHistorySession,
                             exact: ChatHistorySession) -> None:
    everything = await sdk.get_items()
    assert await ours.get_items() == everything
    n = len(everything)
    for limit in [None, -1, *range(n + 3)]:
        expected = await sdk.get_items(limit=limit)
        got = await ours.get_items(limit=limit)
        assert got == widened(everything, expected), f"limit={limit} of {n}"
        assert await exact.get_items(limit=limit) == expected, f"pair_safe=False, limit={limit}"


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_reads_agree_with_sqlite_session(scenario: str, mode: str, store: BaseStore) -> None:
    items = SCENARIOS[scenario]

    async def go() -> None:
        sdk = SQLiteSession("x")
        ours = ChatHistorySession("x", store)
        await add_both(sdk, ours, items, mode)
        assert await sdk.get_items() == json.loads(json.dumps(items))  # the oracle's own view
        await assert_reads_agree(sdk, ours, ChatHistorySession("x", store, pair_safe=False))
        sdk.close()

    asyncio.run(go())


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "everything"])
def test_pop_item_agrees_with_sqlite_session(scenario: str, mode: str,
                                             store: BaseStore) -> None:
    items = SCENARIOS[scenario]

    async def go() -> None:
        sdk = SQLiteSession("x")
        ours = ChatHistorySession("x", store)
        exact = ChatHistorySession("x", store, pair_safe=False)
        await add_both(sdk, ours, items, mode)
        for _ in range(len(items)):
            popped = await sdk.pop_item()
            assert popped is not None
            assert await ours.pop_item() == popped
            await assert_reads_agree(sdk, ours, exact)  # the groups a pop leaves behind
        assert await sdk.pop_item() is None and await ours.pop_item() is None
        assert await ours.get_items() == []
        sdk.close()

    asyncio.run(go())


def test_everything_pops_agree(store: BaseStore) -> None:
    items = SCENARIOS["everything"]

    async def go() -> None:
        sdk = SQLiteSession("x")
        ours = ChatHistorySession("x", store)
        await add_both(sdk, ours, items, "turns_of_3")
        while (popped := await sdk.pop_item()) is not None:
            assert await ours.pop_item() == popped
            assert await ours.get_items() == await sdk.get_items()
        assert await ours.pop_item() is None
        sdk.close()

    asyncio.run(go())


# ---------------------------------------------------------------- parallel calls and programs


def test_parallel_calls_are_never_split(store: BaseStore) -> None:
    """``[user, reasoning, call_1, call_2, out_1, out_2, answer]``, one item each as the
    SDK emits them: no limit hands the model a result without its call."""
    items = PARALLEL_CALLS

    async def go() -> None:
        sdk = SQLiteSession("x")
        ours = ChatHistorySession("x", store)
        await add_both(sdk, ours, items, "batch")
        assert await sdk.get_items(limit=4) == items[3:]  # call_2, out_1, out_2, answer
        assert await ours.get_items(limit=1) == items[6:]
        for limit in range(2, 7):  # the whole group: the reasoning, both calls, both results
            assert await ours.get_items(limit=limit) == items[1:], limit
        assert await ours.get_items(limit=7) == items
        sdk.close()

    asyncio.run(go())


def test_program_output_answers_its_program(store: BaseStore) -> None:
    items = PROGRAM[:6]

    async def go() -> None:
        ours = ChatHistorySession("x", store)
        await ours.add_items(items)  # type: ignore[arg-type]
        stored = store.range("x")
        program, output = stored[2].parts[0], stored[5].parts[0]
        assert isinstance(program, ToolCall) and (program.id, program.name) == ("pc_1", "program")
        assert program.arguments == {"code": items[2]["code"], "fingerprint": "fp-1"}
        assert isinstance(output, ToolResult) and (output.call_id, output.content) == ("pc_1", "1")
        assert [m.role for m in stored] == ["user", "assistant", "assistant", "assistant",
                                            "tool", "tool"]
        assert await ours.get_items() == items  # returned, and as given
        # the newest item is the program's output: the program, the call it made, and
        # the reasoning before it come along
        assert await ours.get_items(limit=1) == items[1:]
        assert await ours.pop_item() == items[5]
        # the program is open again: its tool call and that call's result are a group
        assert await ours.get_items(limit=1) == items[3:5]
        assert await ours.get_items() == items[:5]

    asyncio.run(go())


# ---------------------------------------------------------------- the differences, pinned


def test_a_result_without_its_call_is_not_returned(store: BaseStore) -> None:
    items: list[Item] = [{"role": "user", "content": "Hi"},
                         {"type": "function_call_output", "call_id": "never", "output": "x"},
                         {"type": "program_output", "id": "po", "call_id": "gone", "result": "y",
                          "status": "completed"},
                         {"role": "assistant", "content": "Hello"}]

    async def go() -> None:
        sdk = SQLiteSession("x")
        ours = ChatHistorySession("x", store)
        await add_both(sdk, ours, items, "one_by_one")
        assert await sdk.get_items() == items
        assert await ours.get_items() == [items[0], items[3]]  # providers reject the orphans
        sdk.close()

    asyncio.run(go())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "\ud800"])
def test_items_json_cannot_write_strictly_are_refused(bad: Any, store: BaseStore) -> None:
    item: Item = {"type": "function_call_output", "call_id": "c", "output": "x", "extra": bad}

    async def go() -> None:
        sdk = SQLiteSession("x")
        await sdk.add_items([item])  # type: ignore[list-item]  # stored as NaN / an escape
        assert len(await sdk.get_items()) == 1
        ours = ChatHistorySession("x", store)
        with pytest.raises(InvalidMessage) as caught:
            await ours.add_items([{"role": "user", "content": "ok"}, item])  # type: ignore
        assert caught.value.path == "$[1]"
        assert await ours.get_items() == []
        sdk.close()

    asyncio.run(go())


# ---------------------------------------------------------------- the corpus is complete


def test_the_group_table_is_the_sdks() -> None:
    assert CALL_TO_OUTPUT == _TOOL_CALL_TO_OUTPUT_TYPE


def test_the_corpus_has_every_item_type() -> None:
    declared: set[str] = set()
    for typed in get_args(response_input_item_param.ResponseInputItemParam):
        declared.update(_strings(get_type_hints(typed)["type"]))
    used = {item.get("type", "message") for item in SCENARIOS["everything"]}
    assert len(declared) > 30 and declared - used == set()


def _strings(annotation: Any) -> set[str]:
    """The strings of the ``Literal`` in a field's type (``Optional`` and unions walked)."""
    args = get_args(annotation)
    if get_origin(annotation) is Literal:
        return {a for a in args if isinstance(a, str)}
    return {s for a in args for s in _strings(a)}
