"""The public surface is pinned: what `from chathistory import *` gives."""

from __future__ import annotations

import chathistory

EXPECTED = {
    "Attachment", "AudioPart", "ChatHistoryError", "Conflict", "DuplicateMessage", "FilePart",
    "History",
    "ImagePart", "InvalidMessage", "KVStatus", "Message", "MissingDependency", "NotFound",
    "Part", "Reasoning", "Role", "TextPart", "TokenCounter", "ToolCall", "ToolResult",
    "__version__", "get_counter", "AsyncStore", "ContextWindow", "Session", "Store",
    "open_async_store", "open_store", "HistoryProvider", "ProviderConflict",
    "ProviderSessionState", "StorageFull", "StoreUnavailable",
}


def test_all_is_pinned() -> None:
    assert set(chathistory.__all__) == EXPECTED


def test_every_name_in_all_exists() -> None:
    for name in chathistory.__all__:
        assert getattr(chathistory, name) is not None, name


def test_error_tree() -> None:
    from chathistory import (
        ChatHistoryError,
        Conflict,
        DuplicateMessage,
        InvalidMessage,
        MissingDependency,
        NotFound,
    )

    for cls in (Conflict, InvalidMessage, MissingDependency, NotFound, DuplicateMessage):
        assert issubclass(cls, ChatHistoryError)
    assert issubclass(InvalidMessage, ValueError)
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
