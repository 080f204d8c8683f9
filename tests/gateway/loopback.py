"""The gateway with the Responses and Messages APIs, served by uvicorn on a loopback port in a
thread, in front of the scripted upstream (reached in-process): what the real clients' tests
point an SDK at. `serve_on_loopback` serves any app so (the server tier's gateway too)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp
from tests.gateway import scripted_upstream
from tests.gateway.scripted_upstream import Script

from ctxbudget.gateway.app import create_app
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.messages_api import MESSAGES
from ctxbudget.gateway.responses import RESPONSES


@dataclass
class Served:
    """A gateway on loopback: its base URL (no ``/v1``) and the scripted upstream's state."""

    url: str
    script: Script
    headers: list[httpx.Headers]
    """The gateway's response headers, one per guarded call the clients made."""


@contextmanager
def gateway(
    tmp_path: Path, *, window: int = scripted_upstream.WINDOW, steps: int = scripted_upstream.STEPS
) -> Iterator[Served]:
    """A gateway told ``window`` (the upstream's, unless a test says otherwise), in front of
    an upstream scripted for ``steps`` tool calls."""
    script = Script(total=steps)
    config = GatewayConfig(
        upstream="http://upstream.invalid/v1",
        window=window,
        tokenizer=scripted_upstream.TOKENIZER,
        state=tmp_path / "state.sqlite3",
        archive_dir=tmp_path / "archives",
        port=0,
    )
    app = create_app(
        config,
        apis=(CHAT, RESPONSES, MESSAGES),
        transport=httpx.ASGITransport(app=scripted_upstream.app(script)),
    )
    with serve_on_loopback(app) as url:
        yield Served(url, script, [])


@contextmanager
def serve_on_loopback(app: ASGIApp) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread: its base URL (no
    ``/v1``), until the block ends."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the gateway did not start on loopback")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
