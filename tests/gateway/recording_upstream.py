"""A recording upstream that speaks Chat Completions, Responses and Anthropic Messages (whole
and streamed as Anthropic streams), for the gateway's wiring tests: it records each request's
path, query string and body, writes a summary for ctxbudget's summarizer requests, and refuses a
reply limit its window cannot hold."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.api import WireApi
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.messages_api import MESSAGES
from ctxbudget.gateway.responses import RESPONSES

WINDOW = 8_192
TOKENIZER = "o200k_base"
SUMMARY = "## Task\nAnswer the questions.\n## Progress\nAnswered the early ones."


@dataclass
class Upstream:
    """A server that speaks the three APIs and records what it got. It refuses a request
    whose prompt plus reply limit exceeds its window (as vLLM and the Anthropic API do), with
    an error that is not an overflow, and stops its reply at the limit asked when
    ``fill_limit`` (reporting a prompt ``undercount`` tokens smaller than the exact count)."""

    window: int = WINDOW
    fill_limit: bool = False
    undercount: int = 0
    summary_delay: float = 0.0
    """Seconds a summary takes (concurrent requests then overlap it)."""
    counter: RequestCounter = field(default_factory=lambda: RequestCounter(TOKENIZER))
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(path, query, body) of each request."""
    summaries: int = 0

    def app(self) -> Starlette:
        apis: dict[str, WireApi] = {api.path: api for api in (CHAT, RESPONSES, MESSAGES)}

        async def answer(http: HttpRequest) -> Response:
            body = json.loads(await http.body())
            self.calls.append((http.url.path, http.url.query, body))
            api = apis[http.url.path]
            request = api.parse(body).request
            tokens = self.counter.count(request).total
            limit = request.max_output_tokens
            if limit is not None and tokens + limit > self.window:
                return JSONResponse({"error": {"message": "reply limit too large"}}, 400)
            if request.system == SUMMARIZER_SYSTEM:
                self.summaries += 1
                await asyncio.sleep(self.summary_delay)
            text = SUMMARY if request.system == SUMMARIZER_SYSTEM else "Fine."
            cut = self.fill_limit and limit is not None
            out = limit if cut and limit is not None else 7
            reported = tokens - self.undercount
            if api is MESSAGES:
                return _message(text, reported, out, cut, stream=bool(body.get("stream")))
            if api is RESPONSES:
                return JSONResponse(_response(text, reported, out, cut))
            return JSONResponse(_completion(text, reported, out, cut))

        return Starlette(routes=[Route(path, answer, methods=["POST"]) for path in apis])


def _completion(text: str, tokens: int, out: int, cut: bool) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if cut else "stop",
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out},
    }


def _response(text: str, tokens: int, out: int, cut: bool) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": tokens, "output_tokens": out, "total_tokens": tokens + out},
    }


def _message(text: str, tokens: int, out: int, cut: bool, *, stream: bool) -> Response:
    cached = tokens // 2  # Anthropic reports the cached part apart
    usage = {
        "input_tokens": tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": out,
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "max_tokens" if cut else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if not stream:
        return JSONResponse(message)

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [
        event("message_start", {"message": start}),
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        event("content_block_stop", {"index": 0}),
        # As Anthropic sends it: the stop reason and the reply's tokens, no prompt counts.
        event(
            "message_delta",
            {"delta": {"stop_reason": message["stop_reason"]}, "usage": {"output_tokens": out}},
        ),
        event("message_stop", {}),
    ]
    return StreamingResponse(iter(events), media_type="text/event-stream")
