"""The backend contract (``stores/backend.py``) is enforced when a store is built:
a backend missing a primitive is a ``TypeError`` at construction, not an error at
its first call (issue 23)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import pytest

from chathistory.stores import BaseStore, MemoryStore
from chathistory.stores.backend import AppendTxn, Backend
from chathistory.stores.engine import Engine
from chathistory.stores.model import Row, Session

REQUIRED = sorted(Backend.__abstractmethods__)
OPTIONAL = ["_b_clock", "_b_count_sessions", "_b_first_user_rows", "_b_held",
            "_b_tail_probe", "_b_window_probe"]


def _backend_classes() -> list[type[BaseStore]]:
    """Every store class the package ships, for the backends whose driver is installed."""
    found: list[type[BaseStore]] = [MemoryStore]
    for module, name in (("chathistory.stores.sqlite", "SQLiteStore"),
                         ("chathistory.stores.postgres", "PostgresStore"),
                         ("chathistory.stores.redis", "RedisStore")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ImportError:  # the driver is an extra
            continue
    return found


def test_the_contract_lists_every_primitive() -> None:
    """Adding or dropping a primitive is a change of this list, made on purpose."""
    assert REQUIRED == [
        "_b_append", "_b_children", "_b_delete_session", "_b_expired", "_b_find_calls",
        "_b_gc_assets", "_b_get_asset", "_b_get_session", "_b_insert_session",
        "_b_kept_rows", "_b_list_sessions", "_b_overrides", "_b_rewrite_from",
        "_b_row_by_id", "_b_rows", "_b_save_session", "_b_seq_at_cum", "_b_set_status",
        "_b_tree", "_b_truncate"]
    declared = sorted(n for n in vars(Backend) if n.startswith("_b_"))
    assert declared == sorted(REQUIRED + OPTIONAL)
    for name in declared:  # each says what it must do
        assert (getattr(Backend, name).__doc__ or "").strip(), name


def test_the_engine_and_base_store_are_abstract() -> None:
    for cls in (Engine, BaseStore):
        with pytest.raises(TypeError, match="abstract"):
            cls()


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_backend_missing_a_primitive_cannot_be_constructed(missing: str) -> None:
    methods = {name: getattr(MemoryStore, name) for name in REQUIRED if name != missing}
    partial = type("Partial", (BaseStore,), methods)
    with pytest.raises(TypeError, match=missing):
        partial()


def test_a_backend_with_every_primitive_is_constructed() -> None:
    complete = type("Complete", (BaseStore,),
                    {name: getattr(MemoryStore, name) for name in REQUIRED})
    assert isinstance(complete(), Backend)  # the optional primitives have defaults


@pytest.mark.parametrize("cls", _backend_classes(), ids=lambda c: c.__name__)
def test_every_backend_implements_every_primitive(cls: type[BaseStore]) -> None:
    assert not cls.__abstractmethods__
    for name in REQUIRED:
        assert getattr(cls, name) is not getattr(Backend, name), name


def test_the_shipped_store_classes_are_all_concrete() -> None:
    """Any ``BaseStore`` subclass the package defines (a backend added later too)."""
    _backend_classes()  # imports them
    pending, seen = list(BaseStore.__subclasses__()), set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("chathistory.stores."):
            assert not cls.__abstractmethods__, (cls, sorted(cls.__abstractmethods__))
    assert MemoryStore in seen


class _NoWrite(AppendTxn):
    session: Session | None = None

    def existing(self, ids: Sequence[str]) -> dict[str, int]:
        return {}

    def calls(self, call_ids: Sequence[str]) -> dict[str, int]:
        return {}


def test_a_transaction_missing_a_method_cannot_be_constructed() -> None:
    with pytest.raises(TypeError, match="write"):
        _NoWrite()  # type: ignore[abstract]

    class Complete(_NoWrite):
        def write(self, rows: list[Row], calls: dict[str, int],
                  clear: tuple[int, int] | None, session: Session,
                  assets: dict[str, tuple[bytes, str]]) -> None:
            pass

    assert AppendTxn in type(Complete()).__mro__


@pytest.mark.parametrize("module", ["chathistory.stores.memory", "chathistory.stores.sqlite"])
def test_the_backends_transactions_subclass_append_txn(module: str) -> None:
    txn: Any = importlib.import_module(module)._Txn
    assert AppendTxn in txn.__mro__
    assert not txn.__abstractmethods__
