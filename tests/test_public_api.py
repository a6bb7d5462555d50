"""The public surface is pinned: what `from chathistory import *` gives, and where each
name comes from."""

from __future__ import annotations

import importlib
from importlib.metadata import version

import chathistory

# name -> the module that defines it (the package re-exports it)
HOMES = {
    "AsyncStore": "chathistory.stores.aio",
    "Attachment": "chathistory.model",
    "AudioPart": "chathistory.model",
    "CachePlan": "chathistory.cache.plan",
    "ChatHistoryError": "chathistory.errors",
    "Compaction": "chathistory.model",
    "Conflict": "chathistory.errors",
    "ContextWindow": "chathistory.window",
    "DuplicateMessage": "chathistory.errors",
    "FilePart": "chathistory.model",
    "History": "chathistory.history",
    "HistoryProvider": "chathistory.provider",
    "IdReused": "chathistory.errors",
    "ImagePart": "chathistory.model",
    "InvalidArgument": "chathistory.errors",
    "InvalidMessage": "chathistory.errors",
    "KVStatus": "chathistory.model",
    "Message": "chathistory.model",
    "MissingDependency": "chathistory.errors",
    "NotFound": "chathistory.errors",
    "Part": "chathistory.model",
    "ProviderConflict": "chathistory.provider",
    "ProviderSessionState": "chathistory.provider",
    "Reasoning": "chathistory.model",
    "Role": "chathistory.model",
    "Session": "chathistory.stores",
    "StorageFull": "chathistory.errors",
    "Store": "chathistory.stores",
    "StoreUnavailable": "chathistory.errors",
    "TextPart": "chathistory.model",
    "TokenCounter": "chathistory.tokens",
    "ToolCall": "chathistory.model",
    "ToolResult": "chathistory.model",
    "Usage": "chathistory.model",
    "get_counter": "chathistory.tokens",
    "open_async_store": "chathistory.stores.aio",
    "open_store": "chathistory.stores",
    "plan_cache": "chathistory.cache.plan",
}
EXPECTED = sorted([*HOMES, "__version__"])


def test_all_is_pinned() -> None:
    assert chathistory.__all__ == EXPECTED  # sorted, each name once


def test_star_import_gives_exactly_all_each_from_its_home() -> None:
    namespace: dict[str, object] = {}
    exec("from chathistory import *", namespace)
    del namespace["__builtins__"]
    assert sorted(namespace) == EXPECTED
    for name, home in HOMES.items():
        assert namespace[name] is getattr(importlib.import_module(home), name), name
    assert namespace["__version__"] == version("chathistory")


def test_error_tree() -> None:
    from chathistory import (
        ChatHistoryError,
        Conflict,
        DuplicateMessage,
        InvalidArgument,
        InvalidMessage,
        MissingDependency,
        NotFound,
    )

    for cls in (Conflict, InvalidArgument, InvalidMessage, MissingDependency, NotFound,
                DuplicateMessage):
        assert issubclass(cls, ChatHistoryError)
    assert issubclass(InvalidMessage, ValueError)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(DuplicateMessage, InvalidMessage)
    duplicate = DuplicateMessage("m1", "$[2].id")
    assert (duplicate.message_id, duplicate.path) == ("m1", "$[2].id")
    moved = duplicate.under("$.messages[0]")  # re-rooted, still a DuplicateMessage
    assert isinstance(moved, DuplicateMessage) and moved.path == "$.messages[0][2].id"
    import chathistory.errors

    tree = chathistory.errors.__doc__ or ""
    assert "└── DuplicateMessage" in tree  # drawn under InvalidMessage
    assert issubclass(MissingDependency, ImportError)
    assert "pip install 'chathistory[postgres]'" in str(MissingDependency("psycopg", "postgres"))


def test_py_typed_ships() -> None:
    from importlib import resources

    assert resources.files("chathistory").joinpath("py.typed").is_file()
