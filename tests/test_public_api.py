"""The public surface is pinned: what `from chathistory import *` gives."""

from __future__ import annotations

import chathistory

EXPECTED = {
    "Attachment", "AudioPart", "ChatHistoryError", "Conflict", "FilePart", "History",
    "ImagePart", "InvalidMessage", "KVStatus", "Message", "MissingDependency", "NotFound",
    "Part", "Reasoning", "Role", "TextPart", "TokenCounter", "ToolCall", "ToolResult",
    "__version__", "get_counter", "AsyncStore", "ContextWindow", "Session", "Store",
    "open_async_store", "open_store", "HistoryProvider", "ProviderConflict",
}


def test_all_is_pinned() -> None:
    assert set(chathistory.__all__) == EXPECTED


def test_every_name_in_all_exists() -> None:
    for name in chathistory.__all__:
        assert getattr(chathistory, name) is not None, name


def test_error_tree() -> None:
    from chathistory import ChatHistoryError, Conflict, InvalidMessage, MissingDependency, NotFound

    for cls in (Conflict, InvalidMessage, MissingDependency, NotFound):
        assert issubclass(cls, ChatHistoryError)
    assert issubclass(InvalidMessage, ValueError)
    assert issubclass(MissingDependency, ImportError)
    assert "pip install 'chathistory[postgres]'" in str(MissingDependency("psycopg", "postgres"))


def test_py_typed_ships() -> None:
    from importlib import resources

    assert resources.files("chathistory").joinpath("py.typed").is_file()
