"""chathistory: conversation history for LLM applications.

Keep the messages of a conversation, and build for every turn the part of it
that goes to the model: by count or token budget, pair-safe, cache-friendly.
"""

from .cache import CachePlan, plan_cache
from .errors import (
    ChatHistoryError,
    Conflict,
    DuplicateMessage,
    IdReused,
    InvalidArgument,
    InvalidMessage,
    MissingDependency,
    NotFound,
    StorageFull,
    StoreUnavailable,
)
from .history import History
from .model import (
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    KVStatus,
    Message,
    Part,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from .provider import HistoryProvider, ProviderConflict, ProviderSessionState
from .stores import Session, Store, open_store
from .stores.aio import AsyncStore, open_async_store
from .tokens import TokenCounter, get_counter
from .window import ContextWindow

__version__ = "0.1.0"

__all__ = [
    "AsyncStore",
    "Attachment",
    "AudioPart",
    "CachePlan",
    "ChatHistoryError",
    "Compaction",
    "Conflict",
    "ContextWindow",
    "DuplicateMessage",
    "FilePart",
    "History",
    "HistoryProvider",
    "IdReused",
    "ImagePart",
    "InvalidArgument",
    "InvalidMessage",
    "KVStatus",
    "Message",
    "MissingDependency",
    "NotFound",
    "Part",
    "ProviderConflict",
    "ProviderSessionState",
    "Reasoning",
    "Role",
    "Session",
    "StorageFull",
    "Store",
    "StoreUnavailable",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "ToolResult",
    "Usage",
    "__version__",
    "get_counter",
    "open_async_store",
    "open_store",
    "plan_cache",
]
