"""Reading what an OpenAI-compatible server sends back: JSON bodies, messages, stop reasons,
and short one-line descriptions of failures. Pure functions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxbudget.messages import Message
from ctxbudget.messages.jsondepth import JsonTooDeep, load_json
from ctxbudget.providers.base import StopReason

__all__ = [
    "cause",
    "is_quota",
    "is_transport_error",
    "json_object",
    "normalised_message",
    "safe_text",
    "short",
    "stop_reason",
]

_FINISH: Mapping[str, StopReason] = {
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def safe_text(response: Any) -> str:
    try:
        return str(response.text)
    except Exception:  # a body cut short: the status alone must still be reported
        return ""


def is_transport_error(err: BaseException) -> bool:
    """An error of the SDK's HTTP library while reading a body (httpx, or httpx2 in openai 3)."""
    return any(
        cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
        for cls in type(err).__mro__
    )


def is_quota(text: str) -> bool:
    """OpenAI's 429 insufficient_quota: billing, not load; retrying cannot help."""
    lowered = text.lower()
    return "insufficient_quota" in lowered or "exceeded your current quota" in lowered


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in ``text``; None for anything else. Raises `JsonTooDeep` for nesting
    past ``MAX_JSON_DEPTH`` (a server that does that will do it again: not worth a retry)."""
    try:
        body = load_json(text)
    except JsonTooDeep:
        raise
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def normalised_message(raw: dict[str, Any]) -> dict[str, Any]:
    """Tolerate the small liberties servers take: no role, arguments as an object."""
    message = {**raw, "role": raw.get("role") or "assistant"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [_call_with_text_arguments(c) for c in calls]
    return message


def _call_with_text_arguments(call: object) -> object:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = call["function"]
    arguments = function.get("arguments")
    if isinstance(arguments, dict | list):
        function = {**function, "arguments": json.dumps(arguments, ensure_ascii=False)}
    elif arguments is None:
        function = {**function, "arguments": "{}"}
    return {**call, "function": function}


def stop_reason(finish: object, message: Message) -> StopReason:
    if isinstance(finish, str):
        return _FINISH.get(finish, "other")
    # llama.cpp and older servers may leave finish_reason null on a normal stop.
    return "tool_calls" if message.tool_calls else "stop"


def cause(err: BaseException) -> str:
    """The transport's own words: "ReadError: [Errno 104] Connection reset by peer"."""
    cause = err.__cause__ or err
    detail = short(str(cause), 80)
    return f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__


def short(text: str, max_chars: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= max_chars else flat[: max_chars - 3] + "..."
