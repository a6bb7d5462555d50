"""The message model: values and their one codec. Imports nothing else of ours
but ``chathistory.errors``."""

from .message import KEPT_ROLES, PROVIDER_ROLES, KVStatus, Message, ProviderRole, Role
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
from .usage import Usage

__all__ = [
    "KEPT_ROLES",
    "PROVIDER_ROLES",
    "Attachment",
    "AudioPart",
    "Compaction",
    "FilePart",
    "ImagePart",
    "KVStatus",
    "MediaPart",
    "Message",
    "Part",
    "ProviderRole",
    "Reasoning",
    "ResultPart",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "Usage",
    "new_id",
]
