"""chathistory: conversation history for LLM applications.

Keep the messages of a conversation, and build for every turn the part of it
that goes to the model: by count or token budget, pair-safe, cache-friendly.
"""

from .errors import ChatHistoryError, Conflict, InvalidMessage, MissingDependency, NotFound
from .history import History
from .model import (
    Attachment,
    AudioPart,
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
)
from .tokens import TokenCounter, get_counter

__version__ = "0.1.0"

__all__ = [
    "Attachment",
    "AudioPart",
    "ChatHistoryError",
    "Conflict",
    "FilePart",
    "History",
    "ImagePart",
    "InvalidMessage",
    "KVStatus",
    "Message",
    "MissingDependency",
    "NotFound",
    "Part",
    "Reasoning",
    "Role",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "ToolResult",
    "__version__",
    "get_counter",
]
