"""The prompt floor: system prompt + tools, paid by every request, must leave room for a reply.

Refuse before sending and name the largest parts (letta-code assertPromptFloorFitsContextWindow).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from ctxbudget.budget.rules import validate_window
from ctxbudget.counting.result import RequestCount
from ctxbudget.errors import ConfigError, PromptFloorExceeded
from ctxbudget.messages.model import Request, ToolSpec

__all__ = [
    "OLLAMA_MIN_CONTEXT",
    "OLLAMA_PORT",
    "check_prompt_floor",
    "floor_parts",
    "is_ollama",
    "ollama_context_length",
    "one_line",
    "request_floor_parts",
]

OLLAMA_PORT = 11434  # Ollama's default listening port
OLLAMA_MIN_CONTEXT = 8192  # the smallest OLLAMA_CONTEXT_LENGTH we suggest


def _tool_text(tool: ToolSpec) -> str:
    """The tool as a provider receives it: name, description and JSON-schema parameters."""
    spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return json.dumps(spec, ensure_ascii=False, sort_keys=True, default=str)


def floor_parts(request: Request, count: Callable[[str], int]) -> list[tuple[str, int]]:
    """Labelled sizes of the floor: ``("system prompt", n)`` and ``("tool: NAME", n)`` each."""
    parts = [("system prompt", count(request.system))] if request.system else []
    parts += [(f"tool: {tool.name}", count(_tool_text(tool))) for tool in request.tools]
    return parts


def request_floor_parts(request: Request, result: RequestCount) -> list[tuple[str, int]]:
    """Floor parts in the counter's own tokens: the system prompt as counted, and the tools'
    total shared out by the length of each tool's JSON. The system part is listed whenever it
    costs tokens: an empty system turn's framing, a template's default prompt (Qwen2.5)."""
    parts = [("system prompt", result.system)] if result.system else []
    lengths = [len(_tool_text(tool)) for tool in request.tools]
    total = sum(lengths)
    if total:
        parts += [
            (f"tool: {tool.name}", round(result.tools * n / total))
            for tool, n in zip(request.tools, lengths, strict=True)
        ]
    return parts


def is_ollama(provider_name: str | None = None, base_url: str | None = None) -> bool:
    """True for a provider named ollama, or a base URL on Ollama's port 11434."""
    if provider_name is not None and provider_name.strip().lower() == "ollama":
        return True
    if not base_url:
        return False
    try:
        return urlsplit(base_url if "//" in base_url else f"//{base_url}").port == OLLAMA_PORT
    except ValueError:  # a malformed port is not Ollama's
        return False


def ollama_context_length(floor: int, reserve: int) -> int:
    """The next power of two >= max(8192, floor + reserve), for OLLAMA_CONTEXT_LENGTH."""
    need = max(OLLAMA_MIN_CONTEXT, floor + reserve)
    return 1 << (need - 1).bit_length()


def one_line(text: str) -> str:
    """``text`` with every run of whitespace made one space."""
    return " ".join(text.split())


def _largest(parts: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    return sorted(parts, key=lambda p: p[1], reverse=True)[:3]


def check_prompt_floor(
    count: RequestCount,
    window: int,
    reserve: int,
    *,
    provider_name: str | None = None,
    base_url: str | None = None,
    request: Request | None = None,
    parts: Sequence[tuple[str, int]] | None = None,
) -> None:
    """Raise `PromptFloorExceeded` when ``count.floor + reserve > window``.

    ``reserve`` is what the reply needs (the ctxbudget rule passes its reply reserve, or reply +
    compaction reserve to also leave compaction room). ``parts`` labels the floor's pieces; when
    absent they are derived from ``request``. The message is one line.
    """
    w = validate_window(window)
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
        raise ConfigError(f"reserve must be a non-negative integer, got {reserve!r}")
    if count.floor + reserve <= w:
        return
    if parts is None:
        parts = request_floor_parts(request, count) if request is not None else []
    largest = _largest(parts)
    message = (
        f"prompt floor {count.floor:,} tokens (system prompt + tools) + reply reserve "
        f"{reserve:,} > window {w:,}"
    )
    if largest:
        message += "; largest parts: " + ", ".join(
            f"{one_line(label)} {n:,}" for label, n in largest
        )
    message += (
        f"; shorten the system prompt, drop unused tools, lower max output or use a model with "
        f"a window of at least {count.floor + reserve:,}"
    )
    if is_ollama(provider_name, base_url):
        size = ollama_context_length(count.floor, reserve)
        message += f"; for Ollama restart it with: OLLAMA_CONTEXT_LENGTH={size} ollama serve"
    raise PromptFloorExceeded(
        message, floor=count.floor, reserve=reserve, window=w, largest=list(largest)
    )
