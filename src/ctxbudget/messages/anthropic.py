"""Read the Anthropic Messages request format into our Request and Message values.

``tool_result`` blocks become separate ``tool`` messages, in their place among the user's blocks.
An empty ``system`` is no system prompt (``Request.system`` None): see ``_system``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxbudget.messages._checks import (
    JsonObject,
    as_list,
    as_object,
    as_str,
    choice,
    fail,
    join,
    json_text,
    optional_positive_int,
    optional_str,
    required,
    required_str,
    type_name,
)
from ctxbudget.messages.imagesize import image_size
from ctxbudget.messages.model import (
    ContentPart,
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCall,
)
from ctxbudget.messages.model import ToolSpec as _ToolSpec

__all__ = [
    "ANTHROPIC_BLOCK_TYPES",
    "anthropic_message_groups",
    "messages_from_anthropic",
    "request_from_anthropic",
]

_USER_BLOCKS = ("text", "image", "tool_result")
_ASSISTANT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")
_RESULT_BLOCKS = ("text", "image")
ANTHROPIC_BLOCK_TYPES = frozenset(_USER_BLOCKS + _ASSISTANT_BLOCKS)
"""Content block types this reader understands."""


def request_from_anthropic(body: object) -> Request:
    """Read an Anthropic Messages request body (``system``, ``messages``, ``tools``...)."""
    obj = as_object(body, "request")
    return Request(
        system=_system(obj.get("system")),
        tools=tuple(_tool(t, join("tools", i)) for i, t in enumerate(_list(obj, "tools"))),
        messages=messages_from_anthropic(required(obj, "messages", "")),
        max_output_tokens=optional_positive_int(obj, "max_tokens", ""),
        model=optional_str(obj, "model", ""),
    )


def messages_from_anthropic(messages: object, *, path: str = "messages") -> tuple[Message, ...]:
    """Read an Anthropic ``messages`` list; one user message may give several of ours."""
    return tuple(m for group in anthropic_message_groups(messages, path=path) for m in group)


def anthropic_message_groups(
    messages: object, *, path: str = "messages"
) -> tuple[tuple[Message, ...], ...]:
    """`messages_from_anthropic`, one group per Anthropic message: the messages of ours each
    one gives (a user message's ``tool_result`` blocks each give one, the blocks between them
    one more), for callers that map our messages back to the wire's."""
    names: dict[str, str] = {}  # tool_use id -> tool name, to name the tool messages
    return tuple(
        tuple(_message(value, join(path, i), names))
        for i, value in enumerate(as_list(messages, path))
    )


def _message(value: object, path: str, names: dict[str, str]) -> list[Message]:
    obj = as_object(value, path)
    role_path = join(path, "role")
    role = as_str(required(obj, "role", path), role_path)
    if role not in ("user", "assistant", "system"):
        fail(role_path, f"unknown role {role!r}; expected one of: user, assistant, system")
    content = required(obj, "content", path)
    content_path = join(path, "content")
    if role == "system":
        # A system turn inside the conversation: Claude Code 2.1.332 sends its environment
        # notes as {"role": "system", "content": "# Environment..."} among the messages.
        return [Message(role="system", content=_system_texts(content, content_path))]
    if isinstance(content, str):
        return [Message(role="user" if role == "user" else "assistant", content=content)]
    blocks = as_list(content, content_path)
    if role == "assistant":
        return [_assistant(blocks, content_path, names)]
    return _user(blocks, content_path, names)


def _user(blocks: Sequence[Any], path: str, names: dict[str, str]) -> list[Message]:
    out: list[Message] = []
    parts: list[ContentPart] = []
    for i, value in enumerate(blocks):
        block, kind = _block(value, join(path, i), _USER_BLOCKS)
        if kind != "tool_result":
            parts.append(_part(block, kind, join(path, i)))
            continue
        if parts:
            out.append(Message(role="user", content=tuple(parts)))
            parts = []
        out.append(_tool_result(block, join(path, i), names))
    if parts or not out:
        out.append(Message(role="user", content=tuple(parts)))
    return out


def _assistant(blocks: Sequence[Any], path: str, names: dict[str, str]) -> Message:
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    thoughts: list[str] = []
    for i, value in enumerate(blocks):
        block_path = join(path, i)
        block, kind = _block(value, block_path, _ASSISTANT_BLOCKS)
        if kind == "text":
            parts.append(TextPart(required_str(block, "text", block_path)))
        elif kind == "thinking":
            thoughts.append(required_str(block, "thinking", block_path))
        elif kind == "redacted_thinking":
            # Opaque encrypted thinking; it is sent back verbatim, so it is kept as reasoning.
            thoughts.append(required_str(block, "data", block_path))
        else:
            call = _tool_use(block, block_path)
            names[call.id] = call.name
            calls.append(call)
    return Message(
        role="assistant",
        content=tuple(parts),
        tool_calls=tuple(calls),
        reasoning="\n\n".join(thoughts) if thoughts else None,
    )


def _block(value: object, path: str, allowed: Sequence[str]) -> tuple[JsonObject, str]:
    block = as_object(value, path)
    kind = choice(required(block, "type", path), join(path, "type"), allowed, "block type")
    return block, kind


def _part(block: JsonObject, kind: str, path: str) -> ContentPart:
    if kind == "text":
        return TextPart(required_str(block, "text", path))
    return _image(block, path)


def _image(block: JsonObject, path: str) -> ImagePart:
    source_path = join(path, "source")
    source = as_object(required(block, "source", path), source_path)
    kinds = ("base64", "url", "file")
    kind = choice(required(source, "type", source_path), join(source_path, "type"), kinds, "source")
    if kind == "url":
        return ImagePart(url=required_str(source, "url", source_path))
    if kind == "file":
        required_str(source, "file_id", source_path)
        return ImagePart()  # an uploaded file: neither its bytes nor its size are in the request
    media_type = required_str(source, "media_type", source_path)
    data = required_str(source, "data", source_path)
    size = image_size(data)
    return ImagePart(
        url=f"data:{media_type};base64,{data}",  # the OpenAI form, so the image converts over
        media_type=media_type,
        width=size[0] if size else None,
        height=size[1] if size else None,
    )


def _tool_use(block: JsonObject, path: str) -> ToolCall:
    arguments = required(block, "input", path)
    as_object(arguments, join(path, "input"))
    return ToolCall(
        id=required_str(block, "id", path),
        name=required_str(block, "name", path),
        arguments=json_text(arguments, join(path, "input")),
    )


def _tool_result(block: JsonObject, path: str, names: dict[str, str]) -> Message:
    call_id = required_str(block, "tool_use_id", path)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        fail(join(path, "is_error"), f"expected true or false, got {type_name(is_error)}")
    return Message(
        role="tool",
        content=_result_content(block.get("content"), join(path, "content")),
        tool_call_id=call_id,
        name=names.get(call_id),
        meta={"is_error": True} if is_error else {},
    )


def _result_content(value: object, path: str) -> str | tuple[ContentPart, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    parts: list[ContentPart] = []
    for i, item in enumerate(as_list(value, path)):
        block, kind = _block(item, join(path, i), _RESULT_BLOCKS)
        parts.append(_part(block, kind, join(path, i)))
    return tuple(parts)


def _system(value: object) -> str | None:
    # Anthropic has no system turn to leave empty: the system prompt is text put before the
    # conversation, so an empty one ("", no blocks, or blocks without text, which the API
    # refuses: "system: text content blocks must be non-empty") is no system prompt (None).
    if value is None:
        return None
    return _system_texts(value, "system") or None


def _system_texts(value: object, path: str) -> str:
    """System text given as a string or as a list of text blocks (joined)."""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(as_list(value, path)):
        block, _ = _block(item, join(path, i), ("text",))
        texts.append(required_str(block, "text", join(path, i)))
    # How Anthropic joins system blocks is not documented; llama.cpp's server, which speaks the
    # API in front of open models, concatenates them with nothing between (it appends each text
    # block's text to one system message: `convert_anthropic_to_oai` in
    # tools/server/server-common.cpp, `server_chat_convert_anthropic_to_oai` in
    # tools/server/server-chat.cpp of the version the server tier pins), so we count that.
    return "".join(texts)


def _tool(value: object, path: str) -> _ToolSpec:
    obj = as_object(value, path)
    name = required_str(obj, "name", path)
    kind = obj.get("type")
    if kind is not None:
        as_str(kind, join(path, "type"))
    schema = obj.get("input_schema")
    if schema is None and kind in (None, "custom"):
        fail(join(path, "input_schema"), "missing; a custom tool needs a JSON schema")
    params: Mapping[str, Any] = (
        {"type": "object"} if schema is None else as_object(schema, join(path, "input_schema"))
    )
    return _ToolSpec(
        name=name, description=optional_str(obj, "description", path) or "", parameters=params
    )


def _list(obj: JsonObject, key: str) -> Sequence[Any]:
    value = obj.get(key)
    return () if value is None else as_list(value, key)
