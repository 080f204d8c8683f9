"""Convert between the OpenAI chat-completions request format and our Request and Message values.

Leading system/developer messages become ``Request.system`` (an empty one an empty system
prompt, ``""``; none at all None); later ones become user messages tagged
``meta["openai_role"]`` so that writing the request back restores them in place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from ctxbudget.messages._checks import (
    JsonObject,
    as_list,
    as_object,
    choice,
    fail,
    join,
    optional_positive_int,
    optional_str,
    required,
    required_str,
    type_name,
)
from ctxbudget.messages.imagesize import image_size, image_size_of_bytes, parse_data_url
from ctxbudget.messages.model import (
    ContentPart,
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCall,
    ToolSpec,
    join_system,
)

__all__ = [
    "OPENAI_ROLES",
    "ROLE_META_KEY",
    "image_detail",
    "image_from_bytes",
    "image_from_url",
    "message_from_openai",
    "message_to_openai",
    "messages_from_openai",
    "request_from_openai",
    "request_to_openai",
]

OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
ROLE_META_KEY = "openai_role"
"""``Message.meta`` key holding the OpenAI role when it differs from ours (system, developer)."""

_PART_TYPES = ("text", "image_url", "refusal")
_DETAILS = ("auto", "low", "high")


def messages_from_openai(messages: object, *, path: str = "messages") -> tuple[Message, ...]:
    """Read an OpenAI ``messages`` list; system and developer messages keep the role "system"."""
    return tuple(
        message_from_openai(m, join(path, i)) for i, m in enumerate(as_list(messages, path))
    )


def message_from_openai(message: object, path: str = "message") -> Message:
    """Read one OpenAI chat message (any role, legacy ``function`` role included)."""
    obj = as_object(message, path)
    role = choice(required(obj, "role", path), join(path, "role"), OPENAI_ROLES, "role")
    if role in ("system", "developer"):
        return Message(
            role="system",
            content=_content(obj.get("content"), join(path, "content"), text_only=True),
            name=optional_str(obj, "name", path),
            meta={ROLE_META_KEY: "developer"} if role == "developer" else {},
        )
    if role == "assistant":
        return _assistant(obj, path)
    if role in ("tool", "function"):
        return Message(
            role="tool",
            content=_content(obj.get("content"), join(path, "content")),
            tool_call_id=optional_str(obj, "tool_call_id", path),
            name=required_str(obj, "name", path) if role == "function" else _name(obj, path),
        )
    return Message(
        role="user",
        content=_content(obj.get("content"), join(path, "content")),
        name=_name(obj, path),
    )


def request_from_openai(body: object) -> Request:
    """Read an OpenAI chat-completions request body (``messages``, ``tools``, ``max_tokens``...)."""
    obj = as_object(body, "request")
    read = messages_from_openai(required(obj, "messages", ""))
    lead = 0
    while lead < len(read) and read[lead].role == "system":
        lead += 1
    return Request(
        system=join_system(m.text for m in read[:lead]),
        tools=_tools(obj),
        messages=tuple(_demote_system(m) for m in read[lead:]),
        max_output_tokens=_max_tokens(obj),
        model=optional_str(obj, "model", ""),
    )


def message_to_openai(message: Message, *, include_reasoning: bool = True) -> dict[str, Any]:
    """One message as an OpenAI chat dict; ``reasoning`` goes out as ``reasoning_content``."""
    out: dict[str, Any] = {"role": _openai_role(message)}
    content = message.content
    if isinstance(content, str):
        empty_call = message.role == "assistant" and message.tool_calls and not content
        out["content"] = None if empty_call else content
    else:
        out["content"] = [_part_to_openai(p) for p in content]
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if include_reasoning and message.reasoning is not None:
        out["reasoning_content"] = message.reasoning
    return out


def request_to_openai(
    request: Request,
    *,
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    include_reasoning: bool = True,
) -> dict[str, Any]:
    """The request as an OpenAI chat-completions body; the system prompt is the first message
    (an empty one too: only a request without a system prompt has no system message).

    ``max_tokens`` is the default field because every OpenAI-compatible local server reads it;
    OpenAI's reasoning models need ``max_completion_tokens``.
    """
    out: dict[str, Any] = {}
    if request.model is not None:
        out["model"] = request.model
    system = request.system
    messages = [{"role": "system", "content": system}] if system is not None else []
    for m in request.messages:
        messages.append(message_to_openai(m, include_reasoning=include_reasoning))
    out["messages"] = messages
    if request.tools:
        out["tools"] = [_tool_to_openai(t) for t in request.tools]
    if request.max_output_tokens is not None:
        out[max_tokens_field] = request.max_output_tokens
    return out


def _assistant(obj: JsonObject, path: str) -> Message:
    calls = [
        _tool_call(c, join(join(path, "tool_calls"), i))
        for i, c in enumerate(_optional_list(obj, "tool_calls", path))
    ]
    legacy = obj.get("function_call")
    if legacy is not None:
        call_path = join(path, "function_call")
        calls.append(_function(as_object(legacy, call_path), call_path, call_id=""))
    reasoning = optional_str(obj, "reasoning_content", path)
    return Message(
        role="assistant",
        content=_content(obj.get("content"), join(path, "content")),
        tool_calls=tuple(calls),
        name=_name(obj, path),
        reasoning=reasoning if reasoning is not None else optional_str(obj, "reasoning", path),
    )


def _tool_call(value: object, path: str) -> ToolCall:
    obj = as_object(value, path)
    if "type" in obj:
        choice(obj["type"], join(path, "type"), ("function",), "tool call type")
    call_id = optional_str(obj, "id", path) or ""
    fn_path = join(path, "function")
    return _function(as_object(required(obj, "function", path), fn_path), fn_path, call_id=call_id)


def _function(obj: JsonObject, path: str, *, call_id: str) -> ToolCall:
    name = required_str(obj, "name", path)
    return ToolCall(id=call_id, name=name, arguments=required_str(obj, "arguments", path))


def _content(value: object, path: str, *, text_only: bool = False) -> str | tuple[ContentPart, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list | tuple):
        fail(path, f"expected a string, an array of content parts or null, got {type_name(value)}")
    return tuple(_part(p, join(path, i), text_only=text_only) for i, p in enumerate(value))


def _part(value: object, path: str, *, text_only: bool) -> ContentPart:
    obj = as_object(value, path)
    kind = choice(required(obj, "type", path), join(path, "type"), _PART_TYPES, "content part type")
    if kind == "image_url":
        if text_only:
            fail(path, "a system or developer message may only hold text parts")
        return _image(required(obj, "image_url", path), join(path, "image_url"))
    return TextPart(required_str(obj, kind, path))  # "text" and "refusal" hold their text so


def _image(value: object, path: str) -> ImagePart:
    # Early clients sent image_url as a bare string; the API now wants {"url", "detail"}.
    if isinstance(value, str):
        return image_from_url(value)
    obj = as_object(value, path)
    url = required_str(obj, "url", path)
    detail = obj.get("detail")
    if detail is not None:
        detail = choice(detail, join(path, "detail"), _DETAILS, "image detail")
    return image_from_url(url, cast("Literal['auto', 'low', 'high'] | None", detail))


def image_detail(value: object) -> Literal["auto", "low", "high"] | None:
    """OpenAI's ``detail`` when ``value`` is one (adapters pass what a framework holds)."""
    if isinstance(value, str) and value in _DETAILS:
        return cast("Literal['auto', 'low', 'high']", value)
    return None


def image_from_bytes(
    data: bytes, media_type: str | None, detail: Literal["auto", "low", "high"] | None = None
) -> ImagePart:
    """An image part for raw image bytes (a framework's binary content): its pixel size when
    the header is PNG, JPEG, GIF or WebP, as for a data URL."""
    return _sized(image_size_of_bytes(data), None, detail, media_type)


def image_from_url(url: str, detail: Literal["auto", "low", "high"] | None = None) -> ImagePart:
    """An image part for a URL; a base64 data URL also gives its media type and, when the
    header is PNG, JPEG, GIF or WebP, its pixel size."""
    data = parse_data_url(url)
    if data is None:
        return ImagePart(url=url, detail=detail)
    media_type, payload = data
    return _sized(image_size(payload), url, detail, media_type)


def _sized(
    size: tuple[int, int] | None,
    url: str | None,
    detail: Literal["auto", "low", "high"] | None,
    media_type: str | None,
) -> ImagePart:
    width, height = size if size else (None, None)
    return ImagePart(
        url=url, detail=detail, media_type=media_type or None, width=width, height=height
    )


def _tools(obj: JsonObject) -> tuple[ToolSpec, ...]:
    specs = [_tool(t, join("tools", i)) for i, t in enumerate(_optional_list(obj, "tools", ""))]
    specs += [
        _function_spec(f, join("functions", i))
        for i, f in enumerate(_optional_list(obj, "functions", ""))
    ]
    return tuple(specs)


def _tool(value: object, path: str) -> ToolSpec:
    obj = as_object(value, path)
    choice(required(obj, "type", path), join(path, "type"), ("function",), "tool type")
    return _function_spec(required(obj, "function", path), join(path, "function"))


def _function_spec(value: object, path: str) -> ToolSpec:
    obj = as_object(value, path)
    params = obj.get("parameters")
    if params is not None:
        params = as_object(params, join(path, "parameters"))
    return ToolSpec(
        name=required_str(obj, "name", path),
        description=optional_str(obj, "description", path) or "",
        parameters={"type": "object"} if params is None else params,
    )


def _max_tokens(obj: JsonObject) -> int | None:
    # max_completion_tokens replaced max_tokens in OpenAI's API; when both are sent it wins.
    old = optional_positive_int(obj, "max_tokens", "")
    new = optional_positive_int(obj, "max_completion_tokens", "")
    return new if new is not None else old


def _optional_list(obj: JsonObject, key: str, path: str) -> Sequence[Any]:
    value = obj.get(key)
    return () if value is None else as_list(value, join(path, key))


def _name(obj: JsonObject, path: str) -> str | None:
    return optional_str(obj, "name", path)


def _demote_system(message: Message) -> Message:
    # Request.messages never holds a system message. A system or developer message in mid
    # conversation is an instruction the harness injected at that point; it stays in place
    # as a user message (what Anthropic-style APIs require) and remembers its role.
    if message.role != "system":
        return message
    meta = {**message.meta, ROLE_META_KEY: message.meta.get(ROLE_META_KEY, "system")}
    return dataclasses.replace(message, role="user", meta=meta)


def _openai_role(message: Message) -> str:
    tagged = message.meta.get(ROLE_META_KEY)
    if message.role in ("system", "user") and tagged in ("system", "developer"):
        return cast(str, tagged)
    return message.role


def _part_to_openai(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    image: dict[str, Any] = {"url": part.url or ""}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def _tool_to_openai(tool: ToolSpec) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": tool.name}
    if tool.description:
        fn["description"] = tool.description
    fn["parameters"] = dict(tool.parameters) if isinstance(tool.parameters, Mapping) else {}
    return {"type": "function", "function": fn}
