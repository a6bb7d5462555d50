"""The CLI and RemoteStore against a real server that requires keys (issue 19): a 401
says where the key comes from (``CHATHISTORY_API_KEY``), and an import through the
server says which tenant (its key's) it wrote to."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clikit import FIXTURES, Run

pytest.importorskip("uvicorn")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from serverkit import Served

from chathistory.stores.remote import RemoteError, RemoteStore


def test_a_401_without_a_key_names_chathistory_api_key(keyed_server: Served,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATHISTORY_API_KEY", raising=False)
    store = RemoteStore(keyed_server.url, retries=0)
    try:
        with pytest.raises(RemoteError) as refused:
            store.list_sessions()
    finally:
        store.close()
    assert refused.value.status == 401
    assert "sent no API key: set CHATHISTORY_API_KEY to a key of this server" \
        in str(refused.value)
    assert "chathistory keys create TENANT" in str(refused.value)


def test_a_401_for_a_refused_key_says_where_it_came_from(keyed_server: Served, cli: Run,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("CHATHISTORY_API_KEY", "chk_0123456789abcdef_" + "x" * 40)
    result = cli("sessions", "--store", keyed_server.url)
    assert result.code == 2
    assert result.err.startswith("chathistory sessions: 401 unauthorized: unknown or revoked")
    assert "does not accept the API key this client sent (from CHATHISTORY_API_KEY" \
        in result.err
    monkeypatch.delenv("CHATHISTORY_API_KEY")
    missing = cli("sessions", "--store", keyed_server.url)
    assert missing.code == 2 and "set CHATHISTORY_API_KEY" in missing.err


def test_import_through_a_server_says_its_keys_tenant(keyed_server: Served, cli: Run,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATHISTORY_API_KEY", keyed_server.keys["B"])
    result = cli("import", FIXTURES / "openai_tools.jsonl", "--store", keyed_server.url)
    assert result.code == 0, result.err
    assert "(openai) into tenant 'B': 4 conversations read; 3 sessions" in result.out
    assert result.err == ""  # its key sees what it wrote
    assert len(keyed_server.store.list_sessions(tenant="B").items) == 3
    assert keyed_server.store.list_sessions(tenant="A").items == []
