"""Chat messages, requests and provider usage, and their conversion from provider formats."""

from ctxbudget.messages.model import (
    ROLES,
    ContentPart,
    ImagePart,
    Message,
    Request,
    Role,
    TextPart,
    ToolCall,
    ToolSpec,
)
from ctxbudget.messages.usage import Usage

__all__ = [
    "ROLES",
    "ContentPart",
    "ImagePart",
    "Message",
    "Request",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolSpec",
    "Usage",
]
