"""Chat messages, requests and provider usage, and their conversion from provider formats."""

from ctxbudget.messages.anthropic import messages_from_anthropic, request_from_anthropic
from ctxbudget.messages.detect import detect_request_format, parse_request_json, request_from_json
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
from ctxbudget.messages.openai import (
    message_from_openai,
    message_to_openai,
    messages_from_openai,
    request_from_openai,
    request_to_openai,
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
    "detect_request_format",
    "message_from_openai",
    "message_to_openai",
    "messages_from_anthropic",
    "messages_from_openai",
    "parse_request_json",
    "request_from_anthropic",
    "request_from_json",
    "request_from_openai",
    "request_to_openai",
]
