"""Shape checks shared by the format readers; each failure is a MessageFormatError at a path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ctxbudget.errors import MessageFormatError

JsonObject = Mapping[str, Any]


def shown(value: object) -> str:
    """``value`` as a message quotes it: a huge integer by its size (its digits could run to
    pages, and Python refuses to print more than 4,300 of them), anything else cut short."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def type_name(value: object) -> str:
    """The short name of a JSON value's Python type, as error messages show it."""
    return "None" if value is None else type(value).__name__


def fail(path: str, problem: str) -> NoReturn:
    """Raise the one error every reader raises for a malformed value."""
    raise MessageFormatError(path, problem)


def join(path: str, key: str | int) -> str:
    """The path of a member: ``messages`` + 3 -> ``messages[3]``; + ``role`` -> ``.role``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def as_object(value: object, path: str) -> JsonObject:
    """The value as a JSON object, or an error naming what it was instead."""
    if not isinstance(value, Mapping):
        fail(path, f"expected a JSON object, got {type_name(value)}")
    return value


def as_list(value: object, path: str) -> Sequence[Any]:
    """The value as a JSON array (a list or tuple; never a string)."""
    if not isinstance(value, list | tuple):
        fail(path, f"expected a JSON array, got {type_name(value)}")
    return value


def as_str(value: object, path: str) -> str:
    """The value as a string."""
    if not isinstance(value, str):
        fail(path, f"expected a JSON string, got {type_name(value)}")
    return value


def required(obj: JsonObject, key: str, path: str) -> Any:
    """The member ``key`` of ``obj``; missing is an error."""
    if key not in obj:
        fail(join(path, key), "missing")
    return obj[key]


def required_str(obj: JsonObject, key: str, path: str) -> str:
    """A required string member."""
    return as_str(required(obj, key, path), join(path, key))


def optional_str(obj: JsonObject, key: str, path: str) -> str | None:
    """A string member that may be missing or null."""
    value = obj.get(key)
    return None if value is None else as_str(value, join(path, key))


def optional_positive_int(obj: JsonObject, key: str, path: str) -> int | None:
    """A member that is a positive integer when present (booleans are not integers)."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        fail(join(path, key), f"expected a positive integer, got {type_name(value)}")
    if value < 1:
        fail(join(path, key), f"expected a positive integer, got {value}")
    return value


def choice(value: object, path: str, allowed: Sequence[str], what: str) -> str:
    """A string that must be one of ``allowed``; the error lists them."""
    text = as_str(value, path)
    if text not in allowed:
        fail(path, f"unknown {what} {text!r}; expected one of: {', '.join(allowed)}")
    return text


def json_text(value: object, path: str) -> str:
    """JSON text of a parsed value, e.g. Anthropic's tool ``input``; too deep is an error."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError, TypeError) as exc:
        fail(path, f"cannot be written as JSON ({type(exc).__name__})")
