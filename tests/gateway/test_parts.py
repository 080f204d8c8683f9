"""The gateway's parts alone: the SSE parser, window discovery, the Chat Completions module."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.gateway.helpers import config

from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.discover import discover_window
from ctxbudget.gateway.sse import SseParser
from ctxbudget.gateway.upstream import Upstream
from ctxbudget.providers.served import ps_url
from ctxbudget.providers.streaming import ReplyLimitError

STREAM = (
    b": keep-alive\n\n"
    b'event: message_start\r\ndata: {"a": 1}\r\n\r\n'
    b"data: line one\ndata: line two\n\n"
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_sse_events_are_the_same_however_the_bytes_are_cut(size: int) -> None:
    parser = SseParser()
    events = []
    for start in range(0, len(STREAM), size):
        events.extend(parser.feed(STREAM[start : start + size]))
    assert [(e.name, e.data) for e in events] == [
        (None, None),
        ("message_start", '{"a": 1}'),
        (None, "line one\nline two"),
        (None, "[DONE]"),
    ]
    assert b"".join(e.raw for e in events) == STREAM  # forwarded exactly as it came
    assert parser.flush() == b""


def test_sse_an_event_past_the_cap_stops_the_reading() -> None:
    parser = SseParser(max_event_bytes=1024)
    with pytest.raises(ReplyLimitError, match="1,024 bytes"):
        for _ in range(100):
            parser.feed(b"data: " + b"x" * 100)  # one line that never ends
    parser = SseParser(max_event_bytes=1024)
    with pytest.raises(ReplyLimitError):
        for _ in range(100):
            parser.feed(b"data: " + b"x" * 100 + b"\n")  # lines of an event that never ends


def _server(routes: dict[str, Any]) -> httpx.ASGITransport:
    def endpoint(body: Any) -> Any:
        async def answer(_: Any) -> JSONResponse:
            return JSONResponse(body)

        return answer

    app = Starlette(routes=[Route(p, endpoint(b)) for p, b in routes.items()])
    return httpx.ASGITransport(app=app)


@pytest.mark.parametrize(
    ("routes", "window", "source"),
    [
        ({"/props": {"default_generation_settings": {"n_ctx": 2048}}}, 2048, "llama.cpp"),
        ({"/props": {"n_ctx": 4096}}, 4096, "llama.cpp"),
        ({"/v1/models": {"data": [{"id": "q", "max_model_len": 32768}]}}, 32768, "vLLM"),
        (
            {"/api/v0/models": {"data": [{"id": "q", "loaded_context_length": 8192}]}},
            8192,
            "LM Studio",
        ),
        (
            {"/api/ps": {"models": [{"name": "qwen3:8b", "context_length": 4096}]}},
            4096,
            "Ollama",
        ),
    ],
)
def test_the_window_is_discovered_from_the_server(
    tmp_path: Path, routes: dict[str, Any], window: int, source: str
) -> None:
    async def go() -> Any:
        upstream = Upstream(config(tmp_path), _server(routes))
        try:
            return await discover_window(upstream, {})
        finally:
            await upstream.aclose()

    found = asyncio.run(go())
    assert found is not None and found.window == window and source in found.source


@pytest.mark.parametrize(
    ("base", "server"),
    [
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434"),
        ("https://host.test/ollama/v1", "https://host.test/ollama"),
    ],
)
def test_the_servers_own_routes_are_where_the_library_asks_them(
    tmp_path: Path, base: str, server: str
) -> None:
    # /props and /api/ps live beside /v1: behind a path prefix they keep it, as the library's
    # OpenAICompatibleProvider.served_window asks (ps_url). They were under the bare origin.
    upstream = Upstream(config(tmp_path, upstream=base))
    try:
        assert upstream.url("/api/ps") == ps_url(base) == server + "/api/ps"
        assert upstream.url("/props") == server + "/props"
        assert upstream.url("/v1/models") == server + "/v1/models"
    finally:
        asyncio.run(upstream.aclose())


def test_no_window_is_discovered_from_a_server_that_states_none(tmp_path: Path) -> None:
    async def go() -> Any:
        upstream = Upstream(config(tmp_path), _server({"/v1/models": {"data": [{"id": "x"}]}}))
        try:
            return await discover_window(upstream, {})
        finally:
            await upstream.aclose()

    assert asyncio.run(go()) is None


def test_chat_forward_body_keeps_unchanged_items_verbatim() -> None:
    body = {
        "model": "m",
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "first", "x_vendor": {"keep": True}},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second", "name": "bob"},
        ],
    }
    parsed = CHAT.parse(body)
    assert CHAT.forward_body(body, parsed, parsed.request, None) == body
    kept = parsed.request.with_messages(parsed.request.messages[2:])
    out = CHAT.forward_body(body, parsed, kept, 64)
    assert out["messages"] == [body["messages"][0], *body["messages"][3:]]
    assert out["temperature"] == 0.2 and out["max_tokens"] == 64
    assert body["messages"][1]["x_vendor"] == {"keep": True}  # the client's body is unchanged


def test_a_bare_server_address_means_its_v1_api() -> None:
    # `--upstream http://127.0.0.1:8080` forwarded /v1/chat/completions to /chat/completions.
    from ctxbudget.gateway.config import GatewayConfig
    from ctxbudget.gateway.upstream import Upstream

    for given in ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"):
        upstream = Upstream(GatewayConfig(upstream=given, window=4096))
        assert upstream.url("/v1/chat/completions") == "http://127.0.0.1:8080/v1/chat/completions"
        assert upstream.url("/props") == "http://127.0.0.1:8080/props"
    custom = Upstream(GatewayConfig(upstream="http://h:1/openai/v1", window=4096))
    assert custom.url("/v1/responses") == "http://h:1/openai/v1/responses"
