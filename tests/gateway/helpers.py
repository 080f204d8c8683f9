"""The gateway's test parts: a scripted upstream (the mock model, recording what it gets, with
a stalling and an endless model), a loopback server in a thread, and a gateway in process."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.mock_upstream import mock_app
from ctxbudget.providers.mock import MockProvider

STALL = "stall"
"""A model name the scripted upstream never answers for."""
ENDLESS = "endless"
"""A model name whose stream the scripted upstream never ends."""


@dataclass
class Upstream:
    """The scripted upstream's record: every request (path, headers, JSON body) and how many
    endless streams are still open."""

    provider: MockProvider
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    open_streams: int = 0
    closed_streams: int = 0

    def chat_bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests, in order."""
        return [b for p, _, b in self.requests if p == "/v1/chat/completions"]


def scripted(provider: MockProvider) -> tuple[ASGIApp, Upstream]:
    """The mock model as an OpenAI-compatible server, recording requests; model ``stall``
    never answers, model ``endless`` streams forever."""
    inner = mock_app(provider)
    record = Upstream(provider)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        raw = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        body = orjson.loads(raw) if raw else None
        record.requests.append((scope["path"], headers, body))
        model = body.get("model") if isinstance(body, dict) else None
        if model == STALL:
            await _disconnected(receive)  # never answers; ends when the client goes away
            return
        if model == ENDLESS:
            await _endless(send, receive, record)
            return
        await inner(scope, replaying(raw, receive), send)

    return app, record


async def read_body(receive: Receive) -> bytes:
    """The whole request body, read from ``receive``."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def replaying(raw: bytes, receive: Receive) -> Receive:
    """``receive`` for an app behind one that read the request body already: that body once,
    whole, then whatever the client sends next (its disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replay


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _endless(send: Send, receive: Receive, record: Upstream) -> None:
    record.open_streams += 1
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        chunk = {"choices": [{"index": 0, "delta": {"content": "la "}}]}
        while not gone.done():
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + orjson.dumps(chunk) + b"\n\n",
                    "more_body": True,
                }
            )
            await asyncio.sleep(0.02)
    finally:
        gone.cancel()
        record.open_streams -= 1
        record.closed_streams += 1


def config(tmp_path: Path, **settings: Any) -> GatewayConfig:
    """A gateway config on a test upstream, its state under ``tmp_path``."""
    values: dict[str, Any] = {
        "upstream": "http://upstream.test/v1",
        "tokenizer": "qwen3",
        "state": tmp_path / "state.sqlite3",
    }
    values.update(settings)
    return GatewayConfig(**values)


@asynccontextmanager
async def gateway(
    tmp_path: Path, upstream_app: ASGIApp, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """An in-process gateway on ``upstream`` (through httpx's ASGI transport; with an
    ``upstream=URL`` setting, over the network to that URL instead): the client and the
    `Gateway`. The client reaches the gateway through the ASGI transport."""
    transport = None if "upstream" in settings else httpx.ASGITransport(app=upstream_app)
    app = create_app(config(tmp_path, **settings), transport=transport)
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway.test", timeout=60
    )
    try:
        yield client, app.state.gateway
    finally:
        await client.aclose()
        await app.state.gateway.aclose()


@contextmanager
def loopback(app: ASGIApp) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="error", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the loopback server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def user(text: str) -> dict[str, str]:
    """A user message."""
    return {"role": "user", "content": text}


def long_text(tag: str, words: int = 120) -> str:
    """A user message of about ``words`` words, tagged with ``tag``."""
    return f"{tag}: " + " ".join(f"{tag}-word{i}" for i in range(words))
