"""Read a request body of either shape (OpenAI chat completions or Anthropic Messages)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from ctxbudget.errors import InputError, MessageFormatError
from ctxbudget.messages._checks import as_object
from ctxbudget.messages.anthropic import request_from_anthropic
from ctxbudget.messages.jsondepth import JsonTooDeep, load_json
from ctxbudget.messages.model import Request
from ctxbudget.messages.openai import request_from_openai

__all__ = ["detect_request_format", "parse_request_json", "request_from_json"]

# Block types that only Anthropic's format has; OpenAI's are "text", "image_url", "refusal".
_ANTHROPIC_ONLY = frozenset(
    {"image", "tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
)


def detect_request_format(body: Mapping[str, Any]) -> Literal["openai", "anthropic"]:
    """ "anthropic" when the body shows a sign only that format has, else "openai".

    Signs: a top-level ``system`` (OpenAI puts it in ``messages``), a tool with
    ``input_schema``, or a content block of an Anthropic-only type such as ``tool_use``.
    """
    if "system" in body:
        return "anthropic"
    tools = body.get("tools")
    if isinstance(tools, list) and any(
        isinstance(t, Mapping) and "input_schema" in t for t in tools
    ):
        return "anthropic"
    messages = body.get("messages")
    if isinstance(messages, list) and any(_has_anthropic_block(m) for m in messages):
        return "anthropic"
    return "openai"


def request_from_json(body: object) -> Request:
    """Read a parsed JSON request body of either format (see ``detect_request_format``)."""
    obj = as_object(body, "request")
    if detect_request_format(obj) == "anthropic":
        return request_from_anthropic(obj)
    return request_from_openai(obj)


def parse_request_json(text: str | bytes, source: str) -> Request:
    """Parse JSON text from ``source`` (a file name, ``-``) into a Request of either format.

    Every failure is an InputError whose message starts with ``source``.
    """
    try:
        body = load_json(text)
    except JsonTooDeep as exc:
        raise InputError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{source}: not JSON (line {exc.lineno} col {exc.colno}): {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # bad UTF-8, a 5,000-digit number, deep nesting
        raise InputError(f"{source}: not JSON: {type(exc).__name__}: {exc}") from None
    try:
        request = request_from_json(body)
        _check_argument_depth(request)
    except MessageFormatError as exc:
        exc.args = (f"{source}: {exc}",)
        raise
    return request


def _check_argument_depth(request: Request) -> None:
    """Tool-call arguments are JSON text parsed later for templates: too deep is an error."""
    for i, message in enumerate(request.messages):
        for call in message.tool_calls:
            try:
                load_json(call.arguments)
            except JsonTooDeep as exc:
                where = f"messages[{i}] tool call {call.id!r} arguments"
                raise MessageFormatError(where, str(exc)) from None
            except ValueError:
                pass  # text that is not JSON is counted as text, as vLLM renders it


def _has_anthropic_block(message: object) -> bool:
    if not isinstance(message, Mapping):
        return False
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and _is_anthropic_type(b.get("type")) for b in content
    )


def _is_anthropic_type(kind: object) -> bool:
    return isinstance(kind, str) and kind in _ANTHROPIC_ONLY  # a list "type" is unhashable
