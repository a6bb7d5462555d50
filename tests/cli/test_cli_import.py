"""``chathistory import``: detection, the three outside formats, idempotency,
truncated files, branches as forks, --limit and invalid records."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from clikit import FIXTURES, Run

from chathistory import InvalidMessage, ToolCall, ToolResult, open_store
from chathistory.importers import detect_format, import_file
from chathistory.model import FilePart, ImagePart, Reasoning

CHATGPT = FIXTURES / "chatgpt_conversations.json"
SHAREGPT = FIXTURES / "sharegpt_truncated.json"
OPENAI = FIXTURES / "openai_tools.jsonl"


def sessions(cli: Run, url: str) -> list[dict[str, object]]:
    result = cli("sessions", "--all", "--json", "--store", url)
    assert result.code == 0, result.err
    items: list[dict[str, object]] = result.json()["items"]
    return items


@pytest.mark.parametrize(("path", "expected"), [
    (CHATGPT, "chatgpt"), (SHAREGPT, "sharegpt"), (OPENAI, "openai")])
def test_detects_each_fixture(path: Path, expected: str) -> None:
    assert detect_format(path.read_bytes()) == expected


def test_detection_rules() -> None:
    assert detect_format(b'\xef\xbb\xbf  [{"conversations": []}]') == "sharegpt"
    assert detect_format(b"[]") == "empty"
    assert detect_format(b'{"kind": "session", "session": {}}\n') == "chathistory"
    assert detect_format(b'{"conversations": [{"from": "human", "value": "x"}]}\n') == "sharegpt"
    assert detect_format(b'[{"mapping": {}, "title": "t"}') == "chatgpt"  # first element whole
    assert detect_format(b'[{"mapping": {', complete=False) is None  # needs more bytes
    assert detect_format(b'{"messages": [', complete=False) is None
    with pytest.raises(InvalidMessage, match="unrecognized record"):
        detect_format(b'[{"foo": 1}]')
    with pytest.raises(InvalidMessage, match="does not start with"):
        detect_format(b"hello")
    with pytest.raises(InvalidMessage, match="empty"):
        detect_format(b"  \n")


def test_sharegpt_truncated_file(cli: Run, store_url: str) -> None:
    result = cli("import", SHAREGPT, "--store", store_url, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["format"] == "sharegpt"
    assert report["conversations"] == 5  # the 6th record is cut short
    assert report["sessions_created"] == 3  # a_0, b_0, d_0 (c_0 is empty)
    assert report["forks_created"] == 1  # the second a_0 shares "Hello", then differs
    assert report["messages_added"] == 10
    assert report["skipped"] == {"empty conversation": 1, "empty message": 2}
    assert "record 5" in report["truncated"] and "incomplete" in report["truncated"]

    items = sessions(cli, store_url)
    by_source_id = {}
    for item in items:
        meta = item["metadata"]
        assert isinstance(meta, dict)
        by_source_id.setdefault(meta["source_id"], []).append(item)
    assert sorted(by_source_id) == ["a_0", "b_0", "d_0"]
    fork = next(i for i in by_source_id["a_0"] if i.get("parent_id"))
    assert fork["fork_seq"] == 1 and fork["message_count"] == 2

    store = open_store(store_url)
    try:
        b = next(i for i in items if i["metadata"]["source_id"] == "b_0")  # type: ignore[index]
        messages = store.range(str(b["id"]))
        assert [m.role for m in messages] == ["system", "user", "assistant"]
        d = next(i for i in items if i["metadata"]["source_id"] == "d_0")  # type: ignore[index]
        bing = store.range(str(d["id"]))[1]
        assert bing.role == "assistant" and bing.metadata == {"from": "bing"}
        assert store.range(str(d["id"]))[0].text == "Who are you? \u00e9\u00e8 \U0001f600"
        a = next(i for i in by_source_id["a_0"] if not i.get("parent_id"))
        joke = store.range(str(a["id"]))[2].text
        assert joke == 'Tell me a joke about "brackets" ] } like these.'
    finally:
        store.close()


def test_plain_report_and_warning(cli: Run, store_url: str) -> None:
    result = cli("import", SHAREGPT, "--store", store_url)
    assert result.code == 0
    assert ("(sharegpt) into tenant 'default': 5 conversations read; 3 sessions and 1 forks "
            "created, 10 messages") in result.out
    assert "left out: 1 empty conversation, 2 empty message" in result.out
    assert "warning: the file is cut short: record 5" in result.err


@pytest.mark.parametrize("path", [SHAREGPT, CHATGPT, OPENAI])
def test_import_is_idempotent(cli: Run, store_url: str, path: Path) -> None:
    first = cli("import", path, "--store", store_url, "--json").json()
    assert first["messages_added"] > 0
    before = sessions(cli, store_url)
    again = cli("import", path, "--store", store_url, "--json").json()
    assert (again["sessions_created"], again["forks_created"], again["messages_added"]) == (
        0, 0, 0)
    after = sessions(cli, store_url)
    assert [(s["id"], s["version"]) for s in after] == [(s["id"], s["version"]) for s in before]


def test_limit(cli: Run, store_url: str) -> None:
    report = cli("import", SHAREGPT, "--limit", "2", "--store", store_url, "--json").json()
    assert report["conversations"] == 2 and report["truncated"] is None
    assert len(sessions(cli, store_url)) == 2
    # the rest later: only what is new is added
    rest = cli("import", SHAREGPT, "--store", store_url, "--json").json()
    assert rest["sessions_created"] == 1 and rest["forks_created"] == 1
    out = cli("import", SHAREGPT, "--limit", "1", "--store", store_url).out
    assert "stopped after --limit 1" in out


def test_chatgpt_tree(cli: Run, store_url: str) -> None:
    report = cli("import", CHATGPT, "--store", store_url, "--json").json()
    assert report["format"] == "chatgpt"
    assert report["conversations"] == 2
    # conversation 1: main path, the regenerated answer (a fork after the tool
    # result), the edited first prompt (shares nothing visible: its own session);
    # conversation 2: one session
    assert report["sessions_created"] == 3 and report["forks_created"] == 1
    assert report["messages_added"] == 15
    assert report["skipped"] == {"hidden node": 2, "reasoning recap": 1}

    items = sessions(cli, store_url)
    plot = [s for s in items if s["metadata"]["title"] == "Plotting sine"]  # type: ignore[index]
    main = next(s for s in plot if "branch_of" not in s["metadata"])  # type: ignore[operator]
    regenerated = next(s for s in plot if s.get("parent_id"))
    edited = next(s for s in plot if not s.get("parent_id") and s is not main)
    assert regenerated["parent_id"] == main["id"] and regenerated["fork_seq"] == 3
    assert edited["metadata"]["branch_of"] == main["id"]  # type: ignore[index]

    store = open_store(store_url)
    try:
        path = store.range(str(main["id"]))
        assert [m.role for m in path] == ["user", "assistant", "tool", "assistant", "user",
                                          "assistant"]
        attachment = path[0].parts[-1]
        assert isinstance(attachment, FilePart) and attachment.filename == "data.csv"
        call = path[1].parts[0]
        assert isinstance(call, ToolCall) and call.name == "python"
        assert call.arguments == {"code": "import numpy as np\nplot(np.sin(x))"}
        result = path[2].parts[0]
        assert isinstance(result, ToolResult) and result.call_id == call.id
        assert result.name == "python" and result.content == "Plot saved to sin.png"
        assert path[2].name == "python"
        image = path[4].parts[0]
        assert isinstance(image, ImagePart) and image.dimensions == (800, 600)
        assert path[5].text == "Done: cos(x) is plotted."
        assert path[0].created_at.timestamp() == 1700000010.0
        branch = store.range(str(regenerated["id"]))
        assert [m.id for m in branch[:3]] == [m.id for m in path[:3]]
        assert branch[3].text == "Regenerated: the sine curve is ready."
        assert [m.text for m in store.range(str(edited["id"]))] == [
            "Plot tan(x) instead.", "tan(x) has asymptotes at pi/2 + k*pi."]

        cat = next(s for s in items if s["metadata"]["title"] == "A cat picture")  # type: ignore[index]
        messages = store.range(str(cat["id"]))
        assert [m.role for m in messages] == ["user", "assistant", "assistant", "tool", "tool",
                                              "assistant"]
        assert isinstance(messages[1].parts[0], Reasoning)
        dalle = messages[2].parts[0]
        assert isinstance(dalle, ToolCall) and dalle.name == "dalle.text2im"
        assert dalle.arguments == {"prompt": "a friendly cartoon cat", "size": "1024x1024"}
        picture = messages[3].parts[0]
        assert isinstance(picture, ToolResult) and picture.call_id == dalle.id
        assert messages[4].name == "dalle.text2im"  # a second tool message: plain text
        assert messages[4].text.startswith("DALL-E displayed")
    finally:
        store.close()


def test_chatgpt_reexport_after_switching_branch(tmp_path: Path, store_url: str) -> None:
    """A later export whose current node is on another branch, with one more
    message there: only that message is added, to the branch's session."""
    data = json.loads(CHATGPT.read_text())
    store = open_store(store_url)
    try:
        first = import_file(store, CHATGPT)
        conv = data[0]
        conv["mapping"]["n-a2b"]["children"] = ["n-u3"]
        conv["mapping"]["n-u3"] = {
            "id": "n-u3", "parent": "n-a2b", "children": [],
            "message": {"id": "n-u3", "author": {"role": "user"}, "recipient": "all",
                        "content": {"content_type": "text", "parts": ["Thanks!"]},
                        "metadata": {}}}
        conv["current_node"] = "n-u3"
        later = tmp_path / "later.json"
        later.write_text(json.dumps(data))
        report = import_file(store, later)
        assert (report.sessions_created, report.forks_created, report.messages_added) == (
            0, 0, 1)
        counts = sorted(s.message_count for s in store.list_sessions(limit=100).items)
        assert first.messages_added == 15
        assert counts == [2, 5, 6, 6]  # the regenerated branch: 3 shared + 2 of its own
    finally:
        store.close()


def test_chatgpt_zip(tmp_path: Path, cli: Run, store_url: str) -> None:
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("chat.html", "<html></html>")
        z.write(CHATGPT, "conversations.json")
    report = cli("import", archive, "--store", store_url, "--json").json()
    assert report["format"] == "chatgpt" and report["messages_added"] == 15


def test_openai_jsonl_with_tool_calls(cli: Run, store_url: str) -> None:
    report = cli("import", OPENAI, "--store", store_url, "--json").json()
    assert report["format"] == "openai"
    assert report["conversations"] == 4  # the last line repeats the first one
    assert report["sessions_created"] == 3 and report["messages_added"] == 14
    store = open_store(store_url)
    try:
        items = store.list_sessions(limit=10).items
        weather = next(s for s in items if "openai" in s.state and "tools" in s.state["openai"])
        messages = store.range(weather.id)
        assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
        call = messages[2].tool_calls[0]
        assert (call.id, call.name, call.arguments) == ("call_w1", "get_weather",
                                                        {"city": "Paris"})
        assert messages[3].tool_results[0].call_id == "call_w1"
        assert messages[2].metadata == {"weight": 0} and messages[4].metadata == {"weight": 1}
        parallel = next(s for s in items if s.state.get("openai", {}).get("parallel_tool_calls"))
        rows = store.range(parallel.id)
        assert len(rows[1].tool_calls) == 2
        assert [r.tool_results[0].call_id for r in rows[2:4]] == ["call_a", "call_b"]
        legacy = next(s for s in items if s.message_count == 4)
        rows = store.range(legacy.id)
        assert rows[1].tool_calls[0].name == "add"
        assert rows[2].role == "tool" and rows[2].tool_results[0].call_id == \
            rows[1].tool_calls[0].id
    finally:
        store.close()


def test_truncated_jsonl_last_line(tmp_path: Path, cli: Run, store_url: str) -> None:
    cut = tmp_path / "cut.jsonl"
    data = OPENAI.read_bytes()
    cut.write_bytes(data[: data.rindex(b"\n") - 40])  # the 4th line loses its end
    report = cli("import", cut, "--store", store_url, "--json").json()
    assert report["conversations"] == 3 and report["messages_added"] == 14
    assert "line 5" in report["truncated"]  # (line 3 is blank)


def test_standard_input(cli: Run, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    class Stdin:
        buffer = io.BytesIO(OPENAI.read_bytes())

    monkeypatch.setattr("sys.stdin", Stdin)
    report = cli("import", "-", "--store", store_url, "--json").json()
    assert report["format"] == "openai" and report["messages_added"] == 14


def test_invalid_record(tmp_path: Path, cli: Run, store_url: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([
        {"id": "ok", "conversations": [{"from": "human", "value": "fine"}]},
        {"id": "bad", "conversations": [{"from": "human", "value": 42}]},
        {"id": "ok2", "conversations": [{"from": "human", "value": "also fine"}]},
    ]))
    result = cli("import", bad, "--store", store_url)
    assert result.code == 2
    assert "record 1" in result.err and "$[1].conversations[0].value" in result.err
    assert len(sessions(cli, store_url)) == 1  # the record before it stays stored
    report = cli("import", bad, "--skip-invalid", "--store", store_url, "--json").json()
    assert report["conversations"] == 3 and report["sessions_created"] == 1
    assert len(report["invalid"]) == 1 and "$[1].conversations[0].value" in report["invalid"][0]


def test_forced_format_and_errors(tmp_path: Path, cli: Run, store_url: str) -> None:
    wrong = cli("import", OPENAI, "--format", "sharegpt", "--store", store_url)
    assert wrong.code == 2 and "conversations" in wrong.err
    missing = cli("import", tmp_path / "nope.json", "--store", store_url)
    assert missing.code == 2 and "nope.json" in missing.err
    unknown = tmp_path / "u.json"
    unknown.write_text('[{"prompt": "x", "completion": "y"}]')
    result = cli("import", unknown, "--store", store_url)
    assert result.code == 2 and "unrecognized record (completion, prompt)" in result.err
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert cli("import", empty, "--store", store_url, "--json").json()["format"] == "empty"
