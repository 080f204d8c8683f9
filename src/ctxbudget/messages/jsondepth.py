"""How deep a JSON value nests, measured without recursion, and a JSON reader capped in depth.

Every later walk over a value (templates, counting, ``json.dumps``) is recursive; a value read
through `load_json` or checked with `check_depth` is shallow enough for all of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxbudget.errors import MessageFormatError

__all__ = ["MAX_JSON_DEPTH", "JsonTooDeep", "check_depth", "json_depth", "load_json"]

MAX_JSON_DEPTH = 128
"""The deepest nesting accepted: 128 is serde_json's recursion limit (its ``recursion_limit``
default); real tool schemas and arguments nest under 20."""


class JsonTooDeep(ValueError):
    """JSON nested deeper than the cap (a ValueError, as for any other text that is not JSON)."""


def json_depth(value: object, limit: int = MAX_JSON_DEPTH) -> int:
    """Levels of lists and objects in ``value`` (a scalar is 0); stops counting past ``limit``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, raising `JsonTooDeep` for nesting past ``max_depth`` levels."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonTooDeep(_too_deep(max_depth)) from None
    if json_depth(value, max_depth) > max_depth:
        raise JsonTooDeep(_too_deep(max_depth))
    return value


def check_depth(value: object, path: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ``MessageFormatError`` at ``path`` when ``value`` nests past ``max_depth``."""
    if json_depth(value, max_depth) > max_depth:
        raise MessageFormatError(path, _too_deep(max_depth))


def _too_deep(max_depth: int) -> str:
    return f"JSON nested deeper than {max_depth} levels; flatten it"
