"""The message model: values and their one codec. Imports nothing else of ours
but ``chathistory.errors``."""

from .message import KEPT_ROLES, KVStatus, Message, Role
from .parts import (
    Attachment,
    AudioPart,
    Compaction,
    FilePart,
    ImagePart,
    MediaPart,
    Part,
    Reasoning,
    ResultPart,
    TextPart,
    ToolCall,
    ToolResult,
    new_id,
)

__all__ = [
    "KEPT_ROLES",
    "Attachment",
    "AudioPart",
    "Compaction",
    "FilePart",
    "ImagePart",
    "KVStatus",
    "MediaPart",
    "Message",
    "Part",
    "Reasoning",
    "ResultPart",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "new_id",
]
