"""Isolation, short: the harness's isolation checks in quick mode (every route of
the table, metrics, logs, keys, SQL and asset paths), and the checks themselves,
which must catch the leaks they are there to catch."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
isolation = importlib.import_module("reliability.isolation")
fuzz = importlib.import_module("reliability.fuzz")

from chathistory.errors import NotFound  # noqa: E402


def test_isolation_quick() -> None:
    results = isolation.run(quick=True)
    assert {r.check for r in results} >= {"isolation: every route", "isolation: API keys",
                                          "isolation: metrics and logs",
                                          "static: SQL built from parameters",
                                          "static: asset paths"}
    for result in results:
        assert result.passed, f"{result.check}: {result.detail}"


def test_a_404_that_hints_is_caught() -> None:
    """A store that says "not yours" where it should say "no such session" fails the check."""
    with fuzz.served(tenants=("alpha", "beta")) as world:
        a = isolation._make_data(world, "alpha", seed=1)
        store = world.store
        original = store.get_session

        def hinting(session_id: str, *, tenant: str = "default") -> object:
            if tenant == "beta" and store._b_get_session("alpha", session_id) is not None:
                raise NotFound(f"session {session_id!r} belongs to another tenant")
            return original(session_id, tenant=tenant)

        store.get_session = hinting  # type: ignore[method-assign]
        result = isolation.routes_check(world, a, "beta")
    assert not result.passed
    assert "differs from a never-existing id's" in result.detail


def test_sql_built_from_input_is_caught() -> None:
    source = '''
def find(conn, table, user_id):
    conn.execute(f"SELECT * FROM {table} WHERE id = {user_id}")
    conn.execute("DELETE FROM t WHERE id = " + user_id)
    conn.execute("SELECT * FROM t WHERE id = {}".format(user_id))
    conn.execute(SCRIPT.replace("{name}", table))
    conn.execute("SELECT * FROM t WHERE id = ?", (user_id,))
'''
    found = [expression for _, expression in isolation.sql_interpolations(source)]
    assert found.count("user_id") == 3 and found.count("table") == 2
    assert all(e in isolation.SQL_FRAGMENTS["postgres.py"] for e in ("s", "key"))


def test_a_path_from_input_is_caught() -> None:
    source = "def path(self, tenant, name):\n    return self.root / tenant / name\n"
    parts = {expression for _, expression in isolation.path_parts(source)}
    assert parts == {"self.root", "tenant", "name"}
    assert not parts <= set(isolation.PATH_PARTS)
