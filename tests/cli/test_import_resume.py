"""An import stopped after any of its writes, then run again, ends exactly as one
whole import does: the same sessions (forks, ``branch_of``, "k of n"), messages,
metadata and state. For the outside formats (a ChatGPT export with branches) and
for a chathistory export holding forks (``Store.import_``), on every backend."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from clikit import FIXTURES

from chathistory.importers import import_file
from chathistory.stores import BaseStore, MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stores"))
from storekit import BACKENDS

CHATGPT = FIXTURES / "chatgpt_conversations.json"
SHAREGPT = FIXTURES / "sharegpt_truncated.json"
WRITES = ("create_session", "fork", "update_session", "append", "_fork_at", "_insert_fresh")
"""The store calls that write (the inner ones too: ``Store.import_`` calls them)."""


class Stop(Exception):
    """The injected failure."""


def failing(base: type[BaseStore]) -> type[BaseStore]:
    """``base`` whose ``fail_at``-th write raises ``Stop`` before it runs."""

    def wrap(name: str) -> Any:
        real = getattr(base, name)

        def write(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            if self.writes == self.fail_at:
                raise Stop(name)
            return real(self, *args, **kwargs)

        return write

    return type(f"Failing{base.__name__}", (base,),
                {"writes": 0, "fail_at": 0, **{name: wrap(name) for name in WRITES}})


def make(backend: str, tmp_path: Path, name: str) -> Any:
    """A store of ``backend`` (storekit's constructors) made a ``failing`` one."""
    folder = tmp_path / name
    folder.mkdir()
    store = BACKENDS[backend](folder)
    store.__class__ = failing(type(store))
    return store


def snapshot(store: BaseStore, times: bool) -> list[Any]:
    """Every session and its messages, without what only says when they were written
    (a message's time too, unless the source gives it: ``times``)."""
    out = []
    for session in store.list_sessions(limit=100).items:
        messages = []
        for message in store.range(session.id):
            data = msgspec.to_builtins(message)
            if not times:
                data.pop("created_at")
            messages.append(data)
        out.append((session.id, session.parent_id, session.fork_seq, session.metadata,
                    session.state, session.message_count, messages))
    return sorted(out, key=lambda s: s[0])


def export_lines(tmp_path: Path) -> list[bytes]:
    """A chathistory export with forks: the ChatGPT fixture, imported and exported."""
    source = MemoryStore(counter="approx")
    import_file(source, CHATGPT)
    first = source.list_sessions(limit=100).items[0]
    source.update_session(first.id, state={"step": 1})
    return list(source.export())


def run_import(store: Any, what: str, tmp_path: Path) -> None:
    if what == "export":
        store.import_(iter(export_lines(tmp_path)))
    else:
        import_file(store, CHATGPT if what == "chatgpt" else SHAREGPT)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("what", ["chatgpt", "sharegpt", "export"])
def test_a_rerun_after_a_stop_at_any_write_ends_as_a_whole_import(
        tmp_path: Path, backend: str, what: str) -> None:
    clean = make(backend, tmp_path, "clean")
    run_import(clean, what, tmp_path)
    expected = snapshot(clean, what != "sharegpt")  # ShareGPT gives no times
    steps = clean.writes
    assert any(s[1] for s in expected)  # forks, whose metadata comes in a step of its own
    clean.close()
    for k in range(1, steps + 1):
        store = make(backend, tmp_path, f"stopped{k}")
        store.fail_at = k
        with pytest.raises(Stop):
            run_import(store, what, tmp_path)
        store.fail_at = 0
        run_import(store, what, tmp_path)
        assert snapshot(store, what != "sharegpt") == expected, f"stopped at write {k}"
        store.close()
