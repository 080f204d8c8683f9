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
of them leaves the window to ``--window``, said in one line (`missing_window`).

Ollama with no model loaded. Its ``/api/ps`` then lists nothing, and nothing else states what
it will serve: ``/api/show``'s ``model_info.*.context_length`` is the model's trained maximum,
not the ``num_ctx`` it is loaded with (4,096 by default on small GPUs), and a Modelfile's
``num_ctx`` parameter is one model's while the gateway's window covers every conversation,
whatever model it names (``--summary-model`` included). Adopting either could give a window
larger than the one a conversation is served with, so neither is: the start-up line says
Ollama has no model loaded and to load it first or pass ``--window``.

After start-up, each conversation asks ``/api/ps`` for its own model when the server shows it
truncated a prompt (`ServedWindows`, the session's ``served_window``): the window then adopted
is the context that model is loaded with, never a larger one (`served_overflow` takes it only
between the prompt the server kept and the one it was sent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ctxbudget.gateway.upstream import Upstream, UpstreamError
from ctxbudget.providers.served import (
    PS_PATH,
    SERVED_BODY_BYTES,
    SERVED_TIMEOUT,
    served_context_length,
)

__all__ = [
    "Discovered",
    "ServedWindows",
    "discover_window",
    "missing_window",
    "window_from_lmstudio",
    "window_from_props",
]

log = logging.getLogger("ctxbudget.gateway")


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
    (PS_PATH, "Ollama /api/ps context_length", window_from_ps),
)


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


async def discover_window(upstream: Upstream, headers: dict[str, str]) -> Discovered | None:
    """The upstream's window from the first server endpoint that states one, else None."""
    for path, source, read in _PROBES:
        text = await _get(upstream, path, headers)
        window = read(text) if text is not None else None
        if window is not None:
            return Discovered(window, source)
    return None


async def missing_window(upstream: Upstream, headers: dict[str, str]) -> str:
    """The one line said when `discover_window` found nothing: which flag to pass, and when the
    upstream is an Ollama with no model loaded, that loading one first would do too."""
    loaded = await _ollama_models(upstream, headers)
    where = upstream.shown()
    if loaded == 0:
        return (
            f"the window of the upstream at {where} is unknown: it is Ollama with no model "
            "loaded (its /api/ps lists none), and the context a model will be served with is "
            "known only once it is loaded; load it first (ollama run MODEL) and start again, "
            "or pass --window N (the num_ctx Ollama serves it with)"
        )
    if loaded is not None:
        return (
            f"the window of the upstream at {where} is unknown: it is Ollama, but its /api/ps "
            "lists no context_length (an older Ollama); pass --window N (the num_ctx Ollama "
            "serves the model with)"
        )
    return (
        f"the window of the upstream at {where} is unknown: it answers none of llama.cpp's "
        "/props, vLLM's /v1/models, LM Studio's /api/v0/models or Ollama's /api/ps; "
        "pass --window N"
    )


async def _ollama_models(upstream: Upstream, headers: dict[str, str]) -> int | None:
    """How many models Ollama's ``/api/ps`` lists, or None when the upstream is no Ollama (or
    does not answer it)."""
    text = await _get(upstream, PS_PATH, headers)
    body = _json(text) if text is not None else None
    models = body.get("models") if isinstance(body, dict) else None
    return len(models) if isinstance(models, list) else None


async def _get(
    upstream: Upstream, path: str, headers: dict[str, str], timeout: float = SERVED_TIMEOUT
) -> str | None:
    """The body of ``GET path`` on the upstream's server when it answers 200, else None; within
    ``timeout`` seconds and `SERVED_BODY_BYTES`."""
    try:
        reply = await upstream.request(
            "GET", path, headers=headers, timeout=timeout, max_bytes=SERVED_BODY_BYTES
        )
    except UpstreamError:
        return None
    if reply.status != 200:
        return None
    return reply.body.decode("utf-8", errors="replace")


class ServedWindows:
    """The context a model is served with, asked of the upstream when a conversation's session
    finds a truncated prompt (`BudgetSession.served_window`): Ollama's ``GET /api/ps``, the
    ``context_length`` it lists for that model (`served_context_length`).

    The session asks from a worker thread (its checks run off the event loop); the request goes
    through the gateway's own upstream client on the gateway's event loop, so it has that
    client's origin, transport and caps: at most ``timeout`` seconds (`SERVED_TIMEOUT`, or the
    upstream's whole-exchange limit when smaller) and `SERVED_BODY_BYTES`, once, no retry.
    Make it on the event loop (it keeps that loop).

    Its headers are ``upstream.headers(())``: none of the client's, and the upstream key only
    when one is configured. Ollama needs no key; one behind a proxy that asks for one (the
    reason to configure ``--upstream-key-env`` at all) asks for it on ``/api/ps`` too, and the
    key goes to the very server it was given for, as the start-up discovery already sends it.
    """

    def __init__(self, upstream: Upstream, *, timeout: float = SERVED_TIMEOUT) -> None:
        self.upstream = upstream
        self.timeout = min(timeout, upstream.config.request_timeout)
        self.loop = asyncio.get_running_loop()

    def reader(self, model: str | None) -> Callable[[], int | None] | None:
        """What a session for a conversation with ``model`` calls (None when it names none:
        ``/api/ps`` is read per model, another model's context is never taken)."""
        return functools.partial(self.served_window, model) if model else None

    def served_window(self, model: str) -> int | None:
        """The ``context_length`` ``/api/ps`` lists for ``model``; None on any failure (another
        server, the model not loaded, a stall, a body that is no JSON), never an exception.
        Blocks the calling thread, never the event loop (called on it, it answers None)."""
        if _running_loop() is self.loop or self.loop.is_closed():
            return None  # on the loop, waiting would stall the very loop that must answer
        ask = self._ask(model)
        try:
            call = asyncio.run_coroutine_threadsafe(ask, self.loop)
        except RuntimeError:  # the loop closed meanwhile: the gateway is stopping
            ask.close()
            return None
        try:
            return call.result(timeout=self.timeout + 1.0)  # the request ends by itself first
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            call.cancel()
            return None
        except Exception as exc:  # never the session's failure: the window is only not known
            log.debug("%s not read: %s", PS_PATH, exc)
            return None

    async def _ask(self, model: str) -> int | None:
        text = await _get(self.upstream, PS_PATH, self.upstream.headers(()), self.timeout)
        return None if text is None else served_context_length(text, model)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
