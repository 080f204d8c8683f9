"""A request as chat templates receive it: the message and tool dicts a server passes to Jinja.

The shapes follow what vLLM hands a Hugging Face template: tool-call arguments parsed from their
JSON text, text parts joined with a newline, the system prompt as the first message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxbudget.messages.model import Message, Request, TextPart, ToolCall, ToolSpec


def message_text(message: Message) -> str:
    """The text a text-only template sees: text parts joined with ``\\n``.

    vLLM's "string" content format joins a message's text parts with a newline
    (vllm/entrypoints/chat_utils.py, ``_parse_chat_message_content_parts``).
    """
    if isinstance(message.content, str):
        return message.content
    return "\n".join(p.text for p in message.content if isinstance(p, TextPart))


def plain(value: Any) -> Any:
    """``value`` with every Mapping made a dict and tuple a list, so ``json.dumps`` takes it."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def tojson(value: Any) -> str:
    """transformers' ``tojson``: ``json.dumps`` with ``ensure_ascii=False``, keys in order."""
    return json.dumps(plain(value), ensure_ascii=False)


def tool_dict(tool: ToolSpec) -> dict[str, Any]:
    """A tool as an OpenAI-format request carries it (key order matters to ``tojson``)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": plain(tool.parameters),
        },
    }


def call_arguments(call: ToolCall) -> Any:
    """The arguments a template sees: parsed from JSON as vLLM does; text that is not JSON stays."""
    return plain(call.parsed_arguments())


def call_dict(call: ToolCall) -> dict[str, Any]:
    """An assistant tool call in OpenAI shape, arguments parsed."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call_arguments(call)},
    }


def message_dict(message: Message) -> dict[str, Any]:
    """One message as a template dict; ``reasoning_content`` only when the message has reasoning."""
    out: dict[str, Any] = {"role": message.role, "content": message_text(message)}
    if message.tool_calls:
        out["tool_calls"] = [call_dict(c) for c in message.tool_calls]
    if message.reasoning is not None:
        out["reasoning_content"] = message.reasoning
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def template_messages(request: Request) -> list[dict[str, Any]]:
    """The messages list for a template: the system prompt first when there is one (an empty
    one too: the template renders its turn, as transformers does for an empty system message)."""
    system = request.system
    head = [{"role": "system", "content": system}] if system is not None else []
    return [*head, *(message_dict(m) for m in request.messages)]


def template_tools(request: Request) -> list[dict[str, Any]] | None:
    """The tools list for a template, or None when the request has no tools (as servers pass)."""
    return [tool_dict(t) for t in request.tools] or None
