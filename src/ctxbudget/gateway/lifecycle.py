"""The gateway's life as a server: ``GET /healthz``, and a graceful shutdown that lets every
in-flight request finish, streams included.

On SIGTERM or SIGINT, uvicorn stops accepting connections, lets each open response run to its
end (a streamed reply keeps streaming; its connection closes after it), then exits. Two bounds
are ours (`GracefulServer`):

- ``drain_s`` (default 0): for that long after the signal, ``/healthz`` answers 503
  ``{"status": "draining"}`` while the gateway still serves, so a load balancer that polls it
  takes the instance out before it stops listening;
- ``shutdown_timeout_s`` (default `DEFAULT_SHUTDOWN_TIMEOUT`): how long the in-flight requests
  may take after that; the ones still running are then cancelled (an upstream that never ends its
  stream cannot keep the process alive). A second Ctrl-C quits at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from ctxbudget.gateway.logs import uvicorn_log_config
from ctxbudget.gateway.metrics import GatewayMetrics, metrics_route
from ctxbudget.gateway.status_page import status_page_route

__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "GracefulServer",
    "Health",
    "healthz_route",
    "mount_ops",
    "ops_routes",
    "server_config",
]

DEFAULT_SHUTDOWN_TIMEOUT: Final = 30
"""Seconds the in-flight requests get to finish after a shutdown signal: a local model writes a
long reply in tens of seconds."""


@dataclass(slots=True)
class Health:
    """What ``/healthz`` reports: serving, or draining before a shutdown."""

    draining: bool = False
    started: float = field(default_factory=time.monotonic)


def healthz_route(health: Health, path: str = "/healthz") -> Route:
    """``GET /healthz``: 200 ``{"status": "ok", "uptime_s": ...}``, or 503
    ``{"status": "draining"}`` once a shutdown began. It asks nothing of the upstream (a
    liveness check; ``/ctxbudget/status`` tells the upstream's window)."""

    async def healthz(request: Request) -> Response:
        if health.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        uptime = round(time.monotonic() - health.started, 3)
        return JSONResponse({"status": "ok", "uptime_s": uptime})

    return Route(path, healthz, methods=["GET"], name="healthz")


def ops_routes(
    metrics: GatewayMetrics,
    health: Health,
    *,
    status_path: str = "/ctxbudget/status",
    refresh_ms: int = 2_000,
) -> list[Route]:
    """The operator's routes: ``GET /`` (the status page, reading ``status_path``),
    ``GET /metrics`` and ``GET /healthz``. None of them asks for a key: the page holds no data
    (its script sends the key to ``status_path``), the metrics no request text."""
    return [
        status_page_route("/", status_path=status_path, refresh_ms=refresh_ms),
        metrics_route(metrics),
        healthz_route(health),
    ]


def mount_ops(app: Starlette, routes: list[Route]) -> None:
    """Put ``routes`` first in ``app``'s routes, ahead of a catch-all passthrough route."""
    app.router.routes[0:0] = routes


def server_config(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    log_format: str = "text",
    log_messages: bool = False,
    log_level: str = "info",
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT,
    **extra: Any,
) -> uvicorn.Config:
    """The uvicorn settings of the gateway: our log formatter on uvicorn's loggers, the
    bounded graceful shutdown, no ``Server`` header. ``extra`` goes to ``uvicorn.Config``."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=uvicorn_log_config(log_format, log_messages=log_messages, level=log_level),
        log_level=log_level,
        timeout_graceful_shutdown=shutdown_timeout_s,
        server_header=False,
        **extra,
    )


class GracefulServer(uvicorn.Server):
    """uvicorn's server, draining first: the first signal marks ``health`` draining and, after
    ``drain_s``, starts uvicorn's shutdown (which lets in-flight responses finish)."""

    def __init__(self, config: uvicorn.Config, *, health: Health, drain_s: float = 0.0) -> None:
        super().__init__(config)
        self.health = health
        self.drain_s = max(0.0, drain_s)
        self._pending: tuple[int, float] | None = None
        """The signal that began the drain and when the drain ends."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The first SIGTERM/SIGINT drains (when ``drain_s``), a second one goes on as
        uvicorn does (shutdown; a second SIGINT quits at once)."""
        self.health.draining = True
        if self.drain_s > 0 and self._pending is None and not self.should_exit:
            self._pending = (sig, time.monotonic() + self.drain_s)
            return
        self._pending = None  # a second signal during the drain: shut down now
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s); starts the shutdown when the drain is over."""
        if self._pending is not None and time.monotonic() >= self._pending[1]:
            sig, _ = self._pending
            self._pending = None
            super().handle_exit(sig, None)
        return await super().on_tick(counter)
