"""The upstream's window, asked of the server itself at start-up.

Asked in turn, the first answer wins:

1. llama.cpp: ``GET /props``, its ``default_generation_settings.n_ctx`` (the context of one
   slot, what a request may fill; older servers put ``n_ctx`` at the top level).
2. vLLM: ``GET /v1/models``, the ``max_model_len`` of the model (the smallest when it lists
   several).
3. LM Studio: ``GET /api/v0/models``, the ``loaded_context_length`` of the loaded models.
4. Ollama: ``GET /api/ps``, the ``context_length`` each loaded model was loaded with
   (`served_context_length`, the very number Ollama's truncation uses), not the trained
   maximum ``/api/show`` reports.

Each request is bounded by `SERVED_TIMEOUT` and `SERVED_BODY_BYTES`; a server that answers none
of them leaves the window to ``--window`` (the CLI says so in one line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ctxbudget.gateway.upstream import Upstream, UpstreamError
from ctxbudget.providers.served import SERVED_BODY_BYTES, SERVED_TIMEOUT, served_context_length

__all__ = ["Discovered", "discover_window", "window_from_lmstudio", "window_from_props"]


@dataclass(frozen=True, slots=True)
class Discovered:
    """A window and where it was read (``"llama.cpp /props"``...)."""

    window: int
    source: str


def _positive(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None  # type: ignore[return-value]


def window_from_props(body: Any) -> int | None:
    """llama.cpp's ``/props``: the slot's ``n_ctx``."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
        return _positive(settings.get("n_ctx"))
    return _positive(body.get("n_ctx"))


def window_from_models(body: Any) -> int | None:
    """vLLM's ``/v1/models``: the smallest ``max_model_len`` listed."""
    found = [_positive(m.get("max_model_len")) for m in _entries(body)]
    sizes = [n for n in found if n is not None]
    return min(sizes) if sizes else None


def window_from_lmstudio(body: Any) -> int | None:
    """LM Studio's ``/api/v0/models``: the smallest ``loaded_context_length`` of a loaded
    model."""
    found = [_positive(m.get("loaded_context_length")) for m in _entries(body)]
    sizes = [n for n in found if n is not None]
    return min(sizes) if sizes else None


def window_from_ps(text: str) -> int | None:
    """Ollama's ``/api/ps``: the smallest context a loaded model was loaded with."""
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    names = [m.get("name") for m in _entries(body, "models")]
    found = [served_context_length(text, n) for n in names if isinstance(n, str)]
    sizes = [n for n in found if n is not None]
    return min(sizes) if sizes else None


def _entries(body: Any, key: str = "data") -> list[dict[str, Any]]:
    entries = body.get(key) if isinstance(body, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


_PROBES: tuple[tuple[str, str, Callable[[str], int | None]], ...] = (
    ("/props", "llama.cpp /props n_ctx", lambda t: window_from_props(_json(t))),
    ("/v1/models", "vLLM /v1/models max_model_len", lambda t: window_from_models(_json(t))),
    (
        "/api/v0/models",
        "LM Studio /api/v0/models loaded_context_length",
        lambda t: window_from_lmstudio(_json(t)),
    ),
    ("/api/ps", "Ollama /api/ps context_length", window_from_ps),
)


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


async def discover_window(upstream: Upstream, headers: dict[str, str]) -> Discovered | None:
    """The upstream's window from the first server endpoint that states one, else None."""
    for path, source, read in _PROBES:
        try:
            reply = await upstream.request(
                "GET", path, headers=headers, timeout=SERVED_TIMEOUT, max_bytes=SERVED_BODY_BYTES
            )
        except UpstreamError:
            continue
        if reply.status != 200:
            continue
        window = read(reply.body.decode("utf-8", errors="replace"))
        if window is not None:
            return Discovered(window, source)
    return None
