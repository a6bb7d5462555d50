"""The store commands against temporary SQLite stores: sessions, show, export /
import round trips, stats, keys, migrate and serve."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from clikit import FIXTURES, Run

from chathistory import open_store
from chathistory.server import auth

CHATGPT = FIXTURES / "chatgpt_conversations.json"
SHAREGPT = FIXTURES / "sharegpt_truncated.json"
OPENAI = FIXTURES / "openai_tools.jsonl"


@pytest.fixture
def loaded(cli: Run, store_url: str) -> str:
    """A store holding all three fixtures."""
    for path in (CHATGPT, SHAREGPT, OPENAI):
        assert cli("import", path, "--store", store_url).code == 0
    return store_url


def session_ids(cli: Run, url: str, *filters: str) -> list[str]:
    items = cli("sessions", "--all", "--json", "--store", url, *filters).json()["items"]
    return [item["id"] for item in items]


def main_chatgpt_session(cli: Run, url: str) -> str:
    items = cli("sessions", "--json", "--store", url, "--metadata", "title=Plotting sine"
                ).json()["items"]
    return next(i["id"] for i in items if "branch_of" not in i["metadata"]
                and not i.get("parent_id"))


def test_sessions_listing(cli: Run, loaded: str) -> None:
    # chatgpt: 3 sessions + 1 fork; sharegpt: 3 + 1 fork; openai: 3
    assert len(session_ids(cli, loaded)) == 11
    assert len(session_ids(cli, loaded, "--metadata", "source=chatgpt")) == 4
    assert len(session_ids(cli, loaded, "--metadata", "source=openai")) == 3
    page = cli("sessions", "--limit", "3", "--json", "--store", loaded).json()
    assert len(page["items"]) == 3 and page["next_cursor"]
    rest = cli("sessions", "--limit", "1000", "--cursor", page["next_cursor"], "--json",
               "--store", loaded).json()
    assert len(rest["items"]) == 8 and rest["next_cursor"] is None
    text = cli("sessions", "--store", loaded).out
    assert text.splitlines()[0].split() == ["id", "title", "branch", "messages", "tokens",
                                            "updated", "fork", "of"]
    assert "Plotting sine" in text and "11 sessions" in text
    assert "2 of 2 at #" in text  # the ChatGPT export's alternative, told apart
    assert "more with --cursor" in cli("sessions", "--limit", "2", "--store", loaded).out


def test_show_renders_roles_names_files_and_tokens(cli: Run, loaded: str) -> None:
    sid = main_chatgpt_session(cli, loaded)
    result = cli("show", sid, "--store", loaded)
    assert result.code == 0, result.err
    out = result.out
    assert f"session {sid} - Plotting sine" in out
    assert "6 messages" in out and "source chatgpt" in out
    assert "#0 user · " in out and "[File: data.csv]" in out
    assert "#1 assistant · " in out and "-> call python" in out
    assert "#2 tool (python) · " in out and "<- result python" in out
    assert "[Image 800x600: file-service://file-img777]" in out
    assert "Done: cos(x) is plotted." in out

    data = cli("show", sid, "--json", "--store", loaded).json()
    assert data["session"]["id"] == sid and data["counter"] == "o200k_base"
    assert [m["position"] for m in data["messages"]] == list(range(6))
    assert all(m["tokens"] > 0 for m in data["messages"])
    assert sum(m["tokens"] for m in data["messages"]) == data["session"]["token_count"]
    for m in data["messages"]:
        assert f"#{m['position']} {m['role']}" in out and f"· {m['tokens']} tokens" in out


def test_show_window_tail_and_brief(cli: Run, loaded: str) -> None:
    sid = main_chatgpt_session(cli, loaded)
    full = cli("show", sid, "--json", "--store", loaded).json()["messages"]
    budget = full[-1]["tokens"] + full[-2]["tokens"] + 3  # the last user/assistant pair
    data = cli("show", sid, "--max-tokens", str(budget), "--json", "--store", loaded).json()
    assert [m["in_window"] for m in data["messages"]] == [False] * 4 + [True] * 2
    assert data["window"]["message_ids"] == [m["id"] for m in full[-2:]]
    assert data["window"]["tokens"] <= budget
    text = cli("show", sid, "--max-tokens", str(budget), "--store", loaded).out
    assert "> #4 user" in text and "  #3 assistant" in text
    assert f"a window of {budget} tokens holds 2 of the 6 messages shown" in text
    tail = cli("show", sid, "--tail", "2", "--json", "--store", loaded).json()["messages"]
    assert [m["position"] for m in tail] == [4, 5]
    brief = cli("show", sid, "--brief", "--store", loaded).out
    assert len([line for line in brief.splitlines() if line.startswith("  #")]) == 6
    approx = cli("show", sid, "--counter", "approx", "--json", "--store", loaded).json()
    assert approx["counter"] == "approx:4"


def test_show_unknown_session(cli: Run, store_url: str) -> None:
    result = cli("show", "no-such-session", "--store", store_url)
    assert result.code == 1 and "no session 'no-such-session'" in result.err


def test_export_import_round_trip(cli: Run, loaded: str, other_store_url: str,
                                  tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    exported = cli("export", "--output", dump, "--store", loaded)
    assert exported.code == 0
    lines = dump.read_text().splitlines()
    assert sum(json.loads(line)["kind"] == "session" for line in lines) == 11
    assert len(lines) == 11 + 39
    assert exported.out == f"wrote 11 sessions and 39 messages to {dump}\n"
    report = cli("import", dump, "--store", other_store_url, "--json").json()
    assert report["format"] == "chathistory"
    assert report["conversations"] == 11
    assert (report["sessions_created"], report["forks_created"]) == (9, 2)
    assert report["messages_added"] == 15 + 10 + 14
    again = cli("import", dump, "--store", other_store_url, "--json").json()
    assert (again["sessions_created"], again["messages_added"]) == (0, 0)
    # the second store exports the same sessions and messages
    second = tmp_path / "second.jsonl"
    cli("export", "--output", second, "--store", other_store_url)

    def content(path: Path) -> list[str]:
        # (Store.import_ gives an imported fork a new created_at, so the listing
        # order of forks may differ: compare as sorted records)
        out = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "session":
                s = record["session"]
                out.append(json.dumps([s["id"], s.get("parent_id"), s.get("fork_seq"),
                                       s["message_count"], s["token_count"], s["metadata"]]))
            else:
                out.append(json.dumps([record["session_id"], record["message"]]))
        return sorted(out)

    assert content(second) == content(dump)
    # the same through a pipe, on standard output
    sid = session_ids(cli, loaded)[0]
    one = cli("export", "--session", sid, "--store", loaded).out.splitlines()  # no summary
    assert json.loads(one[0])["session"]["id"] == sid and len(one) > 1
    assert all(json.loads(line)["kind"] == "message" for line in one[1:])


def test_import_export_with_limit(cli: Run, loaded: str, other_store_url: str,
                                  tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    cli("export", "-o", dump, "--store", loaded)
    report = cli("import", dump, "--limit", "2", "--store", other_store_url, "--json").json()
    assert report["conversations"] == 2
    assert len(session_ids(cli, other_store_url)) == 2


def test_stats(cli: Run, loaded: str) -> None:
    stats = cli("stats", "--json", "--store", loaded).json()
    assert stats["sessions"] == 11 and stats["forks"] == 2
    assert stats["stored"] == 15 + 10 + 14  # every message once
    assert stats["messages"] == stats["stored"] + 3 + 1  # forks show their shared prefix
    assert stats["by_source"]["chatgpt"]["sessions"] == 4
    assert stats["by_source"]["sharegpt"] == {"sessions": 3 + 1, "forks": 1, "messages": 11,
                                              "stored": 10, "tokens":
                                              stats["by_source"]["sharegpt"]["tokens"]}
    deep = cli("stats", "--roles", "--json", "--store", loaded).json()
    assert sum(deep["by_role"].values()) == stats["stored"]
    assert deep["by_role"]["tool"] == 3 + 4  # chatgpt: python, dalle image and note
    assert deep["parts"]["tool_call"] == 2 + 4 and deep["parts"]["file"] == 1
    assert 0 < deep["stored_tokens"] <= stats["tokens"]
    text = cli("stats", "--roles", "--store", loaded).out
    assert "total" in text and "chatgpt" in text and "assistant" in text


def test_stats_usage_sums_observed_usage_per_session(cli: Run, store_url: str) -> None:
    """``stats --usage``: per session, the prompt, cached, written and output tokens the
    provider reported, the hit rate and the input cost relative to no caching by the
    cache rules (Anthropic: reads 0.1x, 5-minute writes 1.25x, 1-hour writes 2x)."""
    from chathistory import Message, Usage

    store = open_store(store_url)
    try:
        for sid, usages in {"a": [Usage(input_tokens=1000, cache_write_tokens=900,
                                        output_tokens=10, provider="anthropic",
                                        model="claude-sonnet-4-5"),
                                  Usage(input_tokens=1100, cache_read_tokens=900,
                                        cache_write_tokens=100, cache_write_1h_tokens=100,
                                        output_tokens=20, provider="anthropic",
                                        model="claude-sonnet-4-5")],
                            "b": [Usage(input_tokens=2000, cache_read_tokens=1024,
                                        output_tokens=5, provider="openai", model="gpt-4.1")],
                            "none": []}.items():
            store.create_session(sid)
            messages = [Message.user("hi")]
            for k, usage in enumerate(usages):
                answer = Message.assistant(f"answer {k}")
                answer.usage = usage
                messages += [answer, Message.user("more")]
            store.append(sid, messages)
    finally:
        store.close()
    stats = cli("stats", "--usage", "--json", "--store", store_url).json()["usage"]
    assert set(stats["sessions"]) == {"a", "b"}
    a = stats["sessions"]["a"]
    assert {k: a[k] for k in ("responses", "input_tokens", "cache_read_tokens",
                              "cache_write_tokens", "output_tokens")} == {
        "responses": 2, "input_tokens": 2100, "cache_read_tokens": 900,
        "cache_write_tokens": 1000, "output_tokens": 30}
    assert a["hit_rate"] == pytest.approx(900 / 2100)
    # (100 + 900 * 1.25) + (100 + 900 * 0.1 + 100 * 2.0), of 2,100 prompt tokens
    assert a["relative_input_cost"] == pytest.approx((1225 + 390) / 2100)
    b = stats["sessions"]["b"]
    assert b["relative_input_cost"] == pytest.approx((976 + 1024 * 0.5) / 2000)
    assert stats["total"]["input_tokens"] == 4100 and stats["total"]["responses"] == 3
    text = cli("stats", "--usage", "--store", store_url).out
    assert "observed usage" in text and "42.9%" in text  # a's hit rate


def test_keys(cli: Run, store_url: str) -> None:
    created = cli("keys", "create", "acme", "--name", "backend", "--json", "--store", store_url)
    assert created.code == 0, created.err
    key = created.json()
    assert key["tenant"] == "acme" and key["secret"].startswith("chk_")
    plain = cli("keys", "create", "other", "--store", store_url)
    assert "shown only now" in plain.out
    listed = cli("keys", "list", "--json", "--store", store_url).json()
    assert {k["tenant"] for k in listed} == {"acme", "other"}
    assert all("secret" not in k and "hash" not in k for k in listed)
    assert [k["id"] for k in cli("keys", "list", "--tenant", "acme", "--json", "--store",
                                 store_url).json()] == [key["id"]]
    store = open_store(store_url)
    try:
        assert auth.authenticate(store, key["secret"]) == "acme"
    finally:
        store.close()
    revoked = cli("keys", "revoke", key["id"], "--store", store_url)
    assert revoked.code == 0 and "revoked" in revoked.out
    store = open_store(store_url)
    try:
        assert auth.authenticate(store, key["secret"], cache=auth.KeyCache()) is None
    finally:
        store.close()
    table = cli("keys", "list", "--store", store_url).out
    assert "yes" in table and "2 keys" in table
    assert cli("keys", "revoke", "0000000000000000", "--store", store_url).code == 1
    reserved = cli("keys", "create", "__keys__", "--store", store_url)
    assert reserved.code == 2 and "reserved" in reserved.err
    remote = cli("keys", "list", "--store", "http://127.0.0.1:9")
    assert remote.code == 2 and "not a server's http(s) URL" in remote.err
    assert "keys revoke" in cli("keys", "revoke", "--help").out


def test_reserved_tenant_refused(cli: Run, store_url: str) -> None:
    result = cli("sessions", "--tenant", "__keys__", "--store", store_url)
    assert result.code == 2 and "reserved" in result.err


def test_migrate(cli: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = cli("migrate", "--json", "--store", url).json()
    assert first["backend"] == "SQLiteStore"
    steps = ["m001_initial", "m002_updated_at", "m003_regroup", "m004_search",
             "m005_search_watermarks", "m006_search_tenant_column"]
    assert first["schema_version"] == 6 and first["migrations"] == steps
    assert first["applied_now"] == steps and first["up_to_date"]
    again = cli("migrate", "--store", url).out
    assert "schema version 6 (m006_search_tenant_column), nothing to apply" in again
    memory = cli("migrate", "--store", "memory://").out
    assert "MemoryStore has no schema migrations" in memory


def test_default_store_from_environment(cli: Run, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("import", OPENAI, "--json").json()["messages_added"] == 14
    assert (tmp_path / "chathistory.db").exists()  # sqlite:///chathistory.db
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("CHATHISTORY_STORE", url)
    assert cli("stats", "--json").json()["sessions"] == 0
    assert (tmp_path / "env.db").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve(tmp_path: Path, store_url: str) -> None:
    port = _free_port()
    env = {**os.environ, "CHATHISTORY_STORE": store_url}
    process = subprocess.Popen(
        [sys.executable, "-m", "chathistory", "serve", "--port", str(port), "--asset-dir",
         str(tmp_path / "assets"), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path, text=True)
    try:
        deadline = time.monotonic() + 30
        body = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    body = (r.status, r.read())
                    break
            except OSError:
                time.sleep(0.1)
        assert body is not None, process.stderr.read() if process.poll() is not None else ""
        assert body[0] == 200
    finally:
        process.terminate()
        try:
            _, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
    assert f"http://127.0.0.1:{port}/" in err
    assert "without authentication" in err  # no keys: loopback only, said at start


def test_serve_refuses_public_host_without_keys(cli: Run, store_url: str) -> None:
    result = cli("serve", "--host", "0.0.0.0", "--port", "1", "--store", store_url)
    assert result.code == 2 and "refusing to serve 0.0.0.0" in result.err



@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port with a real listener on 127.0.0.1."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_serve_on_a_busy_port(cli: Run, store_url: str, host: str, busy_port: int) -> None:
    port = busy_port
    result = cli("serve", "--host", host, "--port", str(port), "--store", store_url)
    assert result.code == 3  # docs/cli.md: the address cannot be listened on
    assert result.err.splitlines() == [
        f"chathistory serve: cannot listen on {host}:{port}: the port is in use (another "
        f"chathistory serve?); stop that server or pick another port with --port, e.g. "
        f"--port {port + 1}"]
    assert "serving" not in result.out + result.err  # said before anything else


def test_serve_exit_status_of_a_busy_port_from_the_shell(store_url: str, busy_port: int
                                                         ) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chathistory", "serve", "--port", str(busy_port), "--store",
         store_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert f"127.0.0.1:{busy_port}: the port is in use" in done.stderr
