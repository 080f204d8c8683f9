"""JSON records of messages and usage for the archive: a lossless round trip, checked on read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxbudget.errors import ConfigError, MessageFormatError
from ctxbudget.messages._checks import (
    as_list,
    as_object,
    choice,
    fail,
    join,
    optional_str,
    required,
    required_str,
)
from ctxbudget.messages.model import ROLES, ContentPart, ImagePart, Message, TextPart, ToolCall
from ctxbudget.messages.usage import Usage

__all__ = [
    "check_no_secrets",
    "message_from_record",
    "message_to_record",
    "usage_from_record",
    "usage_to_record",
]

_USAGE_INTS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)
# Keys that name credentials; free-form meta carrying one is refused, so no key is ever archived.
_SECRET_KEY = re.compile(
    r"api[_-]?key|authori[sz]ation|secret|password|passwd|access[_-]?token|bearer", re.I
)


def check_no_secrets(value: object, path: str = "meta") -> None:
    """Refuse meta whose keys name credentials (API keys, Authorization headers, passwords)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if _SECRET_KEY.search(str(key)):
                raise ConfigError(f"{path}.{key}: credentials are never archived; remove this key")
            check_no_secrets(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_no_secrets(item, f"{path}[{i}]")


def usage_to_record(usage: Usage) -> dict[str, Any]:
    """The usage as a JSON object; zero and missing fields are left out."""
    record: dict[str, Any] = {k: getattr(usage, k) for k in _USAGE_INTS if getattr(usage, k)}
    if usage.compaction_id is not None:
        record["compaction_id"] = usage.compaction_id
    if usage.timestamp is not None:
        record["timestamp"] = usage.timestamp
    return record


def usage_from_record(value: object, path: str = "usage") -> Usage:
    """The usage a record holds; a wrong shape is a MessageFormatError at its path."""
    obj = as_object(value, path)
    ints: dict[str, int] = {}
    for key in _USAGE_INTS:
        item = obj.get(key, 0)
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            fail(join(path, key), f"expected a non-negative integer, got {item!r}")
        ints[key] = item
    stamp = obj.get("timestamp")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int | float)):
        fail(join(path, "timestamp"), f"expected a number, got {stamp!r}")
    return Usage(
        **ints,
        compaction_id=optional_str(obj, "compaction_id", path),
        timestamp=None if stamp is None else float(stamp),
    )


def _part_to_record(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"kind": "text", "text": part.text}
    fields = ("url", "width", "height", "detail", "media_type")
    return {
        "kind": "image",
        **{k: getattr(part, k) for k in fields if getattr(part, k) is not None},
    }


def message_to_record(message: Message) -> dict[str, Any]:
    """The message as a JSON object; default fields are left out. Meta naming secrets is refused."""
    check_no_secrets(message.meta)
    content = message.content
    record: dict[str, Any] = {
        "role": message.role,
        "content": content if isinstance(content, str) else [_part_to_record(p) for p in content],
    }
    if message.tool_calls:
        record["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    for key in ("tool_call_id", "name", "reasoning"):
        if getattr(message, key) is not None:
            record[key] = getattr(message, key)
    if message.usage is not None:
        record["usage"] = usage_to_record(message.usage)
    if message.meta:
        record["meta"] = dict(message.meta)
    return record


def _optional_int(obj: Mapping[str, Any], key: str, path: str) -> int | None:
    value = obj.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        fail(join(path, key), f"expected an integer, got {value!r}")
    return value


def _part_from_record(value: object, path: str) -> ContentPart:
    obj = as_object(value, path)
    kind = choice(required(obj, "kind", path), join(path, "kind"), ("text", "image"), "part kind")
    if kind == "text":
        return TextPart(required_str(obj, "text", path))
    detail = obj.get("detail")
    if detail is not None:
        choice(detail, join(path, "detail"), ("auto", "low", "high"), "image detail")
    return ImagePart(
        url=optional_str(obj, "url", path),
        width=_optional_int(obj, "width", path),
        height=_optional_int(obj, "height", path),
        detail=detail,
        media_type=optional_str(obj, "media_type", path),
    )


def _content_from_record(value: object, path: str) -> str | tuple[ContentPart, ...]:
    if isinstance(value, str):
        return value
    return tuple(_part_from_record(p, join(path, i)) for i, p in enumerate(as_list(value, path)))


def _call_from_record(value: object, path: str) -> ToolCall:
    obj = as_object(value, path)
    return ToolCall(
        id=required_str(obj, "id", path),
        name=required_str(obj, "name", path),
        arguments=required_str(obj, "arguments", path),
    )


def message_from_record(value: object, path: str = "message") -> Message:
    """The message a record holds; a wrong shape is a MessageFormatError at its path."""
    obj = as_object(value, path)
    role = choice(required(obj, "role", path), join(path, "role"), ROLES, "role")
    calls = as_list(obj.get("tool_calls", []), join(path, "tool_calls"))
    usage = obj.get("usage")
    meta = as_object(obj.get("meta", {}), join(path, "meta"))
    try:
        return Message(
            role=role,  # type: ignore[arg-type]  # checked against ROLES above
            content=_content_from_record(obj.get("content", ""), join(path, "content")),
            tool_calls=tuple(
                _call_from_record(c, join(join(path, "tool_calls"), i)) for i, c in enumerate(calls)
            ),
            tool_call_id=optional_str(obj, "tool_call_id", path),
            name=optional_str(obj, "name", path),
            reasoning=optional_str(obj, "reasoning", path),
            usage=None if usage is None else usage_from_record(usage, join(path, "usage")),
            meta=dict(meta),
        )
    except TypeError as exc:  # defensive: a dataclass rejecting a value the checks let by
        raise MessageFormatError(path, str(exc)) from exc
