"""The embedded mock model as an OpenAI-compatible server (an ASGI app): ``serve --upstream
mock`` tries the gateway with no server at all, and the tests use it as a loopback upstream.

It answers ``POST /v1/chat/completions`` (streamed and not) with `MockProvider`'s replies and
its usage (the exact ``qwen3`` count of the rendered request), rejects a request over its window
with vLLM's own error text and status (400), writes a summarizer request's summary
(extractively, offline), and lists itself on ``GET /v1/models`` with vLLM's ``max_model_len``,
so window discovery finds its window as it finds vLLM's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.errors import ContextOverflowError, CtxbudgetError
from ctxbudget.messages.openai import message_to_openai, request_from_openai
from ctxbudget.providers.base import Completion
from ctxbudget.providers.mock import MockProvider

__all__ = ["MOCK_MODEL", "mock_app"]

MOCK_MODEL = "mock"


def mock_app(provider: MockProvider) -> Starlette:
    """``provider`` served as an OpenAI-compatible server (`MockProvider` is not thread-safe:
    one call at a time)."""
    lock = threading.Lock()
    # Its own thread, not the default executor's: when the mock serves a gateway in the same
    # process, the gateway's compactions wait in default-executor threads for a summary this
    # mock writes, and a shared pool could be full of them.
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxbudget-mock")

    def call(body: dict[str, Any]) -> Completion | str:
        request = request_from_openai(body)
        with lock:
            if request.system == SUMMARIZER_SYSTEM:
                return provider.summarize(request)
            return provider.complete(request)

    async def chat(http: HttpRequest) -> Response:
        try:
            body = orjson.loads(await http.body())
            result = await asyncio.get_running_loop().run_in_executor(worker, call, body)
        except ContextOverflowError as exc:
            # vLLM's error body (its OpenAI server's ErrorResponse).
            error = {"message": str(exc), "type": "BadRequestError", "param": None, "code": 400}
            return JSONResponse({"object": "error", **error}, status_code=400)
        except (CtxbudgetError, orjson.JSONDecodeError) as exc:
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)
        model = body.get("model") or MOCK_MODEL
        if isinstance(result, str):
            message: dict[str, Any] = {"role": "assistant", "content": result}
            usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            finish = "stop"
        else:
            message = message_to_openai(result.message, include_reasoning=False)
            u = result.usage
            usage = {
                "prompt_tokens": u.input_tokens,
                "completion_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.output_tokens,
            }
            finish = "tool_calls" if result.message.tool_calls else "stop"
        if body.get("stream") is True:
            options = body.get("stream_options") or {}
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(
                _chunks(model, message, finish, usage if with_usage else None),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def models(http: HttpRequest) -> Response:
        entry: dict[str, Any] = {"id": MOCK_MODEL, "object": "model", "owned_by": "ctxbudget"}
        if provider.window is not None:
            entry["max_model_len"] = provider.window
        return JSONResponse({"object": "list", "data": [entry]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


async def _chunks(
    model: str, message: dict[str, Any], finish: str, usage: dict[str, int] | None
) -> AsyncIterator[bytes]:
    """The reply as chat-completion chunks, as OpenAI-compatible servers stream it."""
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": model}

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n"

    yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
    content = message.get("content") or ""
    for start in range(0, len(content), 16):
        yield event([{"index": 0, "delta": {"content": content[start : start + 16]}}])
    for i, call in enumerate(message.get("tool_calls") or ()):
        yield event([{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}}])
    yield event([{"index": 0, "delta": {}, "finish_reason": finish}])
    if usage is not None:
        yield event([], usage=usage)
    yield b"data: [DONE]\n\n"
