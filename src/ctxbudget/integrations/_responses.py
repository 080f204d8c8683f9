"""OpenAI Responses API input items <-> our messages (used by the SDK guard and the Agents SDK).

A ``function_call`` item is an assistant message with one tool call, a ``function_call_output``
its tool result (so are a ``custom_tool_call``, whose free-form ``input`` is its arguments, and
its ``custom_tool_call_output``); reasoning and hosted-tool items carry nothing we count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxbudget.messages.model import ImagePart, Message, TextPart, ToolCall, ToolSpec
from ctxbudget.messages.openai import image_detail, image_from_url

__all__ = ["as_item", "read_item", "rebuild_item", "tool_specs"]

Item = dict[str, Any]


def as_item(item: Any) -> Item:
    """An input item as a dict: items are TypedDicts, but SDK objects (pydantic models) too."""
    if isinstance(item, str):
        return {"role": "user", "content": item}
    dump = getattr(item, "model_dump", None)
    return dict(dump(exclude_unset=True, exclude_none=True)) if callable(dump) else dict(item)


def read_item(item: Item) -> tuple[Message, ...]:
    """The messages of one input item (none for items the model reads no text from)."""
    kind = item.get("type")
    if kind == "function_call":
        call = ToolCall(id=item["call_id"], name=item["name"], arguments=item.get("arguments", ""))
        return (Message(role="assistant", tool_calls=(call,)),)
    if kind == "custom_tool_call":
        call = ToolCall(id=item["call_id"], name=item["name"], arguments=str(item.get("input", "")))
        return (Message(role="assistant", tool_calls=(call,)),)
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = _text(item.get("output"))
        return (Message(role="tool", content=output, tool_call_id=item["call_id"]),)
    role = item.get("role")
    if kind not in (None, "message") or role not in ("user", "assistant", "system", "developer"):
        return ()  # reasoning and hosted-tool items: nothing of ours to count
    content = _content(item.get("content"))
    return (Message(role="system" if role == "developer" else role, content=content),)


def rebuild_item(original: Item | None, group: list[Message]) -> Item:
    """The item for a message compaction made or changed (the summary, a cleared output)."""
    text = group[0].text
    if original is None:  # the handoff summary
        return {"role": "user", "content": text}
    if original.get("type") in ("function_call_output", "custom_tool_call_output"):
        return {**original, "output": text}
    if original.get("role") == "assistant":
        return {**original, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return {**original, "content": text}


# A custom tool takes free text, not JSON arguments; it is counted as a tool of one string
# argument, its grammar (``format``) left out: a server that renders it sees about as much.
_CUSTOM_TOOL_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}}


def tool_specs(tools: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    """Function tools in the Responses format (``{"type": "function", "name", ...}``) and custom
    (free-form) tools (``{"type": "custom", "name", ...}``)."""
    return tuple(
        ToolSpec(
            str(t["name"]),
            str(t.get("description") or ""),
            (t.get("parameters") or {"type": "object"})
            if t.get("type") == "function"
            else _CUSTOM_TOOL_PARAMETERS,
        )
        for t in tools
        if t.get("type") in ("function", "custom") and isinstance(t.get("name"), str)
    )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return json.dumps(value, default=str)


def _content(value: Any) -> str | tuple[TextPart | ImagePart, ...]:
    if isinstance(value, str) or value is None:
        return value or ""
    parts: list[TextPart | ImagePart] = []
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(str(part.get("text", ""))))
        elif kind == "refusal":
            parts.append(TextPart(str(part.get("refusal", ""))))
        elif kind == "input_image":  # a URL or data URL (its size decides), or a file id
            url, detail = part.get("image_url"), image_detail(part.get("detail"))
            parts.append(
                image_from_url(url, detail) if isinstance(url, str) else ImagePart(detail=detail)
            )
    return tuple(parts)
