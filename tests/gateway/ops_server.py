"""A small gateway-shaped server for the operations tests, run as a real uvicorn process:
the status page, a status JSON read from a file, /metrics, /healthz and streaming routes; with
``--upstream URL``, the real gateway with those routes mounted.

``python tests/gateway/ops_server.py --status FILE [--key KEY] [--drain S] [--shutdown-timeout S]
[--log-format json]`` prints ``port N`` once it listens on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxbudget.gateway.lifecycle import GracefulServer, Health, healthz_route, server_config
from ctxbudget.gateway.logs import RequestLog, log_request
from ctxbudget.gateway.metrics import GatewayMetrics, metrics_route
from ctxbudget.gateway.status_page import status_page_route


def build_app(status_file: Path, key: str | None, health: Health) -> Starlette:
    """The test app: the pieces the gateway mounts, plus a fake status endpoint and streams."""
    metrics = GatewayMetrics(conversations=lambda: 0)

    async def status(request: Request) -> Response:
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            return JSONResponse({"error": "key"}, status_code=401)
        return JSONResponse(json.loads(status_file.read_text(encoding="utf-8")))

    async def stream(request: Request) -> Response:
        count = int(request.query_params.get("n", "10"))
        delay = float(request.query_params.get("delay", "0.1"))

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(count):
                yield f"chunk {i}\n".encode()
                await asyncio.sleep(delay)
            metrics.request("chat", "ok")
            log_request(RequestLog(api="chat", path="/stream", status=200, outcome="ok"))

        return StreamingResponse(chunks(), media_type="text/plain")

    async def forever(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            while True:
                yield b"tick\n"
                await asyncio.sleep(0.05)

        return StreamingResponse(chunks(), media_type="text/plain")

    return Starlette(
        routes=[
            status_page_route(refresh_ms=500),
            Route("/ctxbudget/status", status),
            metrics_route(metrics),
            healthz_route(health),
            Route("/stream", stream),
            Route("/forever", forever),
        ]
    )


def gateway_app(upstream: str, folder: Path, health: Health) -> Starlette:
    """The real gateway (`create_app`) in front of ``upstream``, the operator's routes mounted
    as the gateway mounts them."""
    from ctxbudget.gateway.app import create_app
    from ctxbudget.gateway.config import GatewayConfig
    from ctxbudget.gateway.lifecycle import mount_ops, ops_routes

    config = GatewayConfig(
        upstream=upstream, window=8192, tokenizer="qwen3", state=folder / "state.sqlite3"
    )
    app = create_app(config)
    mount_ops(app, ops_routes(GatewayMetrics(), health))
    return app


def main() -> None:
    """Listen on a free loopback port, say which, serve until a signal."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--upstream", help="serve the real gateway in front of this URL")
    parser.add_argument("--key")
    parser.add_argument("--drain", type=float, default=0.0)
    parser.add_argument("--shutdown-timeout", type=int, default=30)
    parser.add_argument("--log-format", default="json")
    args = parser.parse_args()
    health = Health()
    if args.upstream:
        app = gateway_app(args.upstream, args.status.parent, health)
    else:
        app = build_app(args.status, args.key, health)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before uvicorn runs wait in the backlog
    config = server_config(
        app,
        host="127.0.0.1",
        port=sock.getsockname()[1],
        log_format=args.log_format,
        shutdown_timeout_s=args.shutdown_timeout,
    )
    server = GracefulServer(config, health=health, drain_s=args.drain)
    print(f"port {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    sys.exit(0)


@dataclass
class Running:
    """A started ops_server process, its base URL and its log file (stderr)."""

    process: subprocess.Popen[str]
    url: str
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the server."""
        self.process.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for the process to end; its return code."""
        return self.process.wait(timeout=timeout)


@contextmanager
def running(status_file: Path, *args: str) -> Iterator[Running]:
    """Start the server (``args``: its flags; its logs go to ``server.log`` beside
    ``status_file``), yield it, kill it if still running."""
    log = status_file.parent / "server.log"
    with log.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, __file__, "--status", str(status_file), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "" when it died first
        assert line.startswith("port "), f"ops_server did not start: {log.read_text()}"
        yield Running(process, f"http://127.0.0.1:{int(line.split()[1])}", log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    main()
