"""An Ollama-like upstream (an ASGI app the gateway reaches in process) for the silent-truncation
tests: it serves a model loaded with a context of ``num_ctx`` tokens and truncates silently.

- ``POST /v1/chat/completions`` (streamed and not): a prompt over ``num_ctx`` tokens loses its
  oldest messages (system messages and the newest one stay) until it fits, and is answered 200
  with ``usage.prompt_tokens`` the size of what was kept, as Ollama does (ollama/ollama
  server/prompt.go ``chatPrompt``; the same drop as ``ollama_like`` in tests/agent/test_silent.py).
  The reply is the embedded mock model's (`helpers.scripted`), whose usage is the exact ``qwen3``
  count of what it got: what the gateway counts with ``--tokenizer qwen3``.
- ``GET /api/ps``: the model listed as loaded with ``context_length`` ``num_ctx`` (ollama/ollama
  api/types.go ``ProcessModelResponse``); or, by ``ps``, a stall, a body that is no JSON, or no
  model loaded.

`OllamaRecord` keeps what it was sent: each chat request's size, what was kept, and every
``/api/ps`` request's headers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send
from tests.gateway.helpers import read_body, replaying, scripted

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.openai import request_from_openai
from ctxbudget.providers.mock import MockProvider

MODEL = "qwen3"
"""The model the conversations name; ``/api/ps`` lists it as Ollama does, tagged ``:latest``."""

Ps = Literal["loaded", "stall", "garbage", "idle"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One chat request: its size, the size kept, and whether it asked for a summary."""

    tokens: int
    kept: int
    summary: bool
    truncated: bool
    """It was over the context: Ollama dropped part of it (a newest message alone over the
    context, which Ollama cuts to about half the context, is passed on whole here, but it is
    still marked truncated)."""


@dataclass
class OllamaRecord:
    """What the upstream was sent."""

    num_ctx: int
    prompts: list[Prompt] = field(default_factory=list)
    ps_headers: list[dict[str, str]] = field(default_factory=list)
    chat_headers: list[dict[str, str]] = field(default_factory=list)

    def turns(self) -> list[Prompt]:
        """The conversation's requests (summary requests left out)."""
        return [p for p in self.prompts if not p.summary]


def ollama(num_ctx: int, ps: Ps = "loaded") -> tuple[ASGIApp, OllamaRecord]:
    """The upstream and its record."""
    inner, _ = scripted(MockProvider("chat"))
    record = OllamaRecord(num_ctx)
    counter = RequestCounter("qwen3")

    def count(body: dict[str, Any]) -> int:
        return counter.count(request_from_openai(body)).total

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["path"] == "/api/ps":
            record.ps_headers.append(headers)
            await _ps(send, ps, num_ctx)
            return
        raw = await read_body(receive)
        if scope["path"] == "/v1/chat/completions":
            record.chat_headers.append(headers)
            body = orjson.loads(raw)
            tokens = count(body)
            kept = _kept(body, num_ctx, count)
            summary = request_from_openai(body).system == SUMMARIZER_SYSTEM
            record.prompts.append(Prompt(tokens, count(kept), summary, tokens > num_ctx))
            raw = orjson.dumps(kept)
        await inner(scope, replaying(raw, receive), send)

    return app, record


def _kept(body: dict[str, Any], num_ctx: int, count: Any) -> dict[str, Any]:
    """``body`` with its oldest non-system messages dropped until it fits ``num_ctx`` (the
    newest message always stays)."""
    messages = body["messages"]
    system = [m for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    start = 0
    while start < len(rest) - 1 and count({**body, "messages": [*system, *rest[start:]]}) > num_ctx:
        start += 1
    return {**body, "messages": [*system, *rest[start:]]}


async def _ps(send: Send, ps: Ps, num_ctx: int) -> None:
    if ps == "stall":
        await asyncio.sleep(60)  # the gateway gives up first (its request is cancelled)
    if ps == "garbage":
        body = b"\x00\xffnot json{{"
    else:
        loaded = {
            "name": f"{MODEL}:latest",
            "model": f"{MODEL}:latest",
            "size_vram": 5_000_000_000,
            "context_length": num_ctx,
        }
        body = orjson.dumps({"models": [] if ps == "idle" else [loaded]})
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
