"""The window a server really serves, asked of the server: Ollama's ``GET /api/ps``.

Ollama serves a model with the context it was loaded with (``num_ctx``: ``OLLAMA_CONTEXT_LENGTH``,
the Modelfile, or 4,096 by default on small GPUs), not with the model's trained maximum that
``POST /api/show`` reports. ``/api/ps`` lists each loaded model with that loaded ``context_length``
(ollama/ollama api/types.go ``ProcessModelResponse``; server/routes.go ``PsHandler`` fills it from
the runner's ``NumCtx``, the very number its truncation uses), so that is the window adopted.
Pure functions here; the request is `OpenAICompatibleProvider.served_window`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ctxbudget.messages.jsondepth import load_json

__all__ = ["PS_PATH", "SERVED_BODY_BYTES", "SERVED_TIMEOUT", "ps_url", "served_context_length"]

PS_PATH = "/api/ps"
SERVED_TIMEOUT = 10.0
"""Seconds for the whole ``/api/ps`` request: a local server answers it from memory at once."""
SERVED_BODY_BYTES = 256 * 1024
"""The most of its body read: a model's entry is a few hundred bytes."""


def server_url(base_url: str) -> str:
    """The server behind an OpenAI-compatible ``base_url``: the URL without its ``/v1`` (a
    server under a path prefix, ``https://host/ollama/v1``, keeps the prefix). The server's own
    routes (``/api/ps``, ``/props``) are under it."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def ps_url(base_url: str) -> str:
    """``/api/ps`` on the server of an OpenAI-compatible ``base_url`` (Ollama's is ``.../v1``)."""
    return server_url(base_url) + PS_PATH


def served_context_length(body_text: str, model: str) -> int | None:
    """The ``context_length`` ``/api/ps`` lists for ``model``, or None when it lists none.

    Ollama names a model without a tag as ``NAME:latest``; no other model's entry is ever taken
    (another loaded model may have another context).
    """
    try:
        body: Any = load_json(body_text)
    except ValueError:
        return None
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return None
    wanted = _tagged(model)
    for entry in models:
        if not isinstance(entry, dict):
            continue
        names = {entry.get("name"), entry.get("model")}
        if wanted in {_tagged(n) for n in names if isinstance(n, str)}:
            length = entry.get("context_length")
            ok = isinstance(length, int) and not isinstance(length, bool) and length > 0
            return length if ok else None
    return None


def _tagged(name: str) -> str:
    """``name`` with Ollama's default tag when it has none (``qwen3`` is ``qwen3:latest``)."""
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"
