"""OpenAI Responses API input items <-> our messages (used by the SDK guard and the Agents SDK).

A ``function_call`` item is an assistant message with one tool call, a ``function_call_output``
its tool result (so are a ``custom_tool_call``, whose free-form ``input`` is its arguments, and
its ``custom_tool_call_output``); reasoning and hosted-tool items carry nothing we count.

Read item by item, each call is an assistant message of its own. A server reads a turn spread
over several items as one assistant message: `turns` groups the items that way, `read_turn`
reads a group, `rebuild_turn` maps a compacted message back onto its group's items.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxbudget.messages.model import ContentPart, ImagePart, Message, TextPart, ToolCall, ToolSpec
from ctxbudget.messages.openai import image_detail, image_from_url

__all__ = [
    "Turn",
    "as_item",
    "read_item",
    "read_turn",
    "rebuild_item",
    "rebuild_turn",
    "tool_specs",
    "turns",
]

Item = dict[str, Any]
Turn = tuple[Item, ...]
"""Items read as one unit: an assistant turn's items (`turns`), or any other single item."""

_CALL_TYPES = ("function_call", "custom_tool_call")


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


def turns(items: Sequence[Item]) -> list[Turn]:
    """``items`` grouped as a server reads them: each run of the assistant's items (its
    messages and calls, with the items we read nothing from among them, such as reasoning)
    one turn, every other item a turn of its own.

    llama.cpp's server (``convert_responses_to_chatcmpl``, tools/server/server-common.cpp;
    ``server_chat_convert_responses_to_chatcmpl`` in server-chat.cpp of older ones) merges an
    assistant message, function call or reasoning item into the message before it when that
    one is the assistant's; OpenAI's Agents SDK (its ``Converter.items_to_messages``) puts
    calls on the assistant message before them too. One assistant message per item would
    count a turn frame more for each extra item."""
    out: list[Turn] = []
    run: list[Item] = []
    for item in items:
        if _assistant_side(item):
            run.append(item)
            continue
        if run:
            out.append(tuple(run))
            run = []
        out.append((item,))
    if run:
        out.append(tuple(run))
    return out


def read_turn(turn: Turn) -> tuple[Message, ...]:
    """The messages of a turn: an assistant turn's items as one assistant message (its texts
    in order, then its calls in order), another item's messages as `read_item` reads them."""
    messages = [m for item in turn for m in read_item(item)]
    if len(messages) <= 1:
        return tuple(messages)
    contents = [m.content for m in messages if m.content]
    content: str | tuple[ContentPart, ...] = ""
    if len(contents) == 1:
        content = contents[0]
    elif contents:  # several texts: their parts in order, as the server keeps them
        content = tuple(p for c in contents for p in ((TextPart(c),) if isinstance(c, str) else c))
    calls = tuple(call for m in messages for call in m.tool_calls)
    return (dataclasses.replace(messages[0], content=content, tool_calls=calls),)


def rebuild_turn(original: Turn | None, group: list[Message]) -> Turn:
    """The items for a message compaction made or changed: `rebuild_item` for a turn of one
    item that is not the assistant's; for an assistant turn its own items, each kept verbatim
    where compaction left its part alone (reasoning always, calls still made with the same
    arguments, the texts if unchanged), a changed text put in its first message item."""
    if original is None or not any(_assistant_side(i) and read_item(i) for i in original):
        return (rebuild_item(None if original is None else original[0], group),)
    new = group[0]
    old = read_turn(original)
    same_text = bool(old) and old[0].content == new.content
    calls = {call.id: call for call in new.tool_calls}
    out: list[Item] = []
    placed = False
    for item in original:
        if item.get("type") in _CALL_TYPES:
            call = calls.get(item["call_id"])
            if call is not None:  # else compaction dropped the call (with its output)
                out.append(_with_arguments(item, call))
        elif read_item(item):  # an assistant message
            if same_text:
                out.append(item)
            elif new.text and not placed:
                out.append(rebuild_item(item, [new]))
                placed = True
            # (its other message items: their text is now in the one placed)
        else:
            out.append(item)  # reasoning and other items we read nothing from, verbatim
    if not same_text and new.text and not placed:
        first_call = next((i for i, x in enumerate(out) if x.get("type") in _CALL_TYPES), len(out))
        out.insert(first_call, rebuild_item({"role": "assistant"}, [new]))
    return tuple(out)


def _assistant_side(item: Item) -> bool:
    """An item of the assistant's turn: its message, a call, or an item we read nothing from
    (reasoning, hosted tools), which a server folds into the turn it is part of."""
    if item.get("type") in _CALL_TYPES:
        return True
    if item.get("type") in (None, "message"):
        return item.get("role") == "assistant"
    return not read_item(item)


def _with_arguments(item: Item, call: ToolCall) -> Item:
    """A call item with ``call``'s arguments (itself when they are unchanged)."""
    key = "arguments" if item.get("type") == "function_call" else "input"
    return item if str(item.get(key, "")) == call.arguments else {**item, key: call.arguments}


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
            _parameters(t) if t.get("type") == "function" else _CUSTOM_TOOL_PARAMETERS,
        )
        for t in tools
        if t.get("type") in ("function", "custom") and isinstance(t.get("name"), str)
    )


def _parameters(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """A function tool's parameters as sent: an empty schema (``{}``) stays empty, as the server
    renders it (and as the Chat Completions reader keeps it); only a tool without any gets
    ``{"type": "object"}``."""
    parameters = tool.get("parameters")
    return {"type": "object"} if parameters is None else parameters


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
