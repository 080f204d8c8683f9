"""``ctxbudget serve``: the budget as an OpenAI-compatible gateway in front of a model server."""

from __future__ import annotations

import asyncio
import ipaddress
import os
from typing import TYPE_CHECKING

import click

from ctxbudget.budget.rules import POLICY_NAMES, validate_window
from ctxbudget.compaction.strategies import STRATEGY_NAMES
from ctxbudget.errors import ConfigError

if TYPE_CHECKING:
    from ctxbudget.gateway.config import GatewayConfig

__all__ = ["serve_command"]

SERVE_EXTRA = "pip install 'ctxbudget[serve]'"
_SERVE_PACKAGES = ("starlette", "uvicorn", "httpx", "orjson", "prometheus_client")


@click.command("serve")
@click.option(
    "--upstream",
    required=True,
    help="The model server's OpenAI base URL (http://127.0.0.1:8080/v1), or 'mock' for the "
    "embedded mock model (no server needed).",
)
@click.option(
    "--window",
    type=int,
    default=None,
    help="The upstream's context window in tokens. Default: asked of the server (llama.cpp, "
    "vLLM, LM Studio, Ollama).",
)
@click.option(
    "--tokenizer",
    default=None,
    help="Count with this tokenizer (qwen3, o200k_base...) or hf:PATH, a model folder with its "
    "chat template. Default: chosen from each request's model name, else the calibrated "
    "estimator.",
)
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="ctxbudget", show_default=True)
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="layered", show_default=True)
@click.option(
    "--max-output", type=int, default=None, help="Reply room reserved (tokens). Default: a share."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8788, show_default=True)
@click.option(
    "--state",
    default=None,
    help="Where conversations' state lives: a SQLite file (created 0600), or redis://HOST:PORT/DB "
    "shared by several gateway instances. Default: state.sqlite3 in the user cache folder.",
)
@click.option(
    "--api-key-env",
    default=None,
    help="Environment variable holding the key clients must present (Authorization: Bearer or "
    "x-api-key). Required to listen on a non-loopback address.",
)
@click.option(
    "--upstream-key-env",
    default=None,
    help="Environment variable holding the upstream's API key (never logged, echoed or "
    "archived). Default: the client's own Authorization header is forwarded.",
)
@click.option(
    "--summary-model",
    default=None,
    help="The model that writes compaction summaries. Default: the model each request names.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="One log line per request, as text or as JSON.",
)
@click.option(
    "--log-messages",
    is_flag=True,
    help="Also log the conversation forwarded (off: logs carry numbers, never message text).",
)
@click.option(
    "--shutdown-timeout",
    type=click.IntRange(0, 3600),
    default=30,
    show_default=True,
    help="On SIGTERM, seconds in-flight streams get to finish.",
)
@click.option(
    "--drain",
    type=click.FloatRange(0, 3600),
    default=0.0,
    show_default=True,
    help="On SIGTERM, seconds /healthz answers 503 (draining) while requests are still served, "
    "so a load balancer stops sending new ones first.",
)
def serve_command(
    upstream: str,
    window: int | None,
    tokenizer: str | None,
    policy: str,
    strategy: str,
    max_output: int | None,
    host: str,
    port: int,
    state: str | None,
    api_key_env: str | None,
    upstream_key_env: str | None,
    summary_model: str | None,
    log_format: str,
    log_messages: bool,
    shutdown_timeout: int,
    drain: float,
) -> None:
    """Serve the OpenAI Chat Completions API in front of a model server, keeping every
    conversation inside its window.

    \b
    Examples:
      ctxbudget serve --upstream http://127.0.0.1:8080/v1      llama.cpp, window from /props
      ctxbudget serve --upstream http://127.0.0.1:11434/v1 --window 8192
      ctxbudget serve --upstream mock                            try it with no server
    Then point the client's base URL at http://127.0.0.1:8788/v1.
    """
    _check_extra()
    from ctxbudget.gateway.config import MOCK_UPSTREAM, GatewayConfig
    from ctxbudget.gateway.logs import configure_logging

    # Before anything is said: with --log-format json every line on stderr is JSON.
    configure_logging(log_format, log_messages=log_messages)

    if upstream != MOCK_UPSTREAM:
        from ctxbudget.providers.endpoint import checked_url

        upstream = checked_url(upstream)
    if window is not None:
        window = validate_window(window, "--window")
    client_key = _key_from_env(api_key_env, "--api-key-env")
    if client_key is None and not _is_loopback(host):
        raise ConfigError(
            f"--host {host} listens beyond this machine: require a client key with "
            "--api-key-env VAR (or bind 127.0.0.1)"
        )
    config = GatewayConfig(
        upstream=upstream,
        window=window,
        tokenizer=tokenizer,
        policy=policy,
        strategy=strategy,
        max_output_tokens=max_output,
        host=host,
        port=port,
        state=state,
        client_key=client_key,
        upstream_key=_key_from_env(upstream_key_env, "--upstream-key-env"),
        summary_model=summary_model,
        log_messages=log_messages,
    )
    if config.window is None and not config.is_mock:
        config = _discovered(config)
    _run(config, log_format=log_format, shutdown_timeout=shutdown_timeout, drain=drain)


def _check_extra() -> None:
    """One line naming the extra when one of its packages is missing."""
    import importlib.util

    missing = [name for name in _SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"ctxbudget serve needs {', '.join(missing)}: {SERVE_EXTRA}")


def _key_from_env(variable: str | None, flag: str) -> str | None:
    if variable is None:
        return None
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ConfigError(f"{flag} {variable}: that environment variable is not set or empty")
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _discovered(config: GatewayConfig) -> GatewayConfig:
    """``config`` with the window the upstream states, or one line naming ``--window``."""
    import dataclasses

    from ctxbudget.gateway.discover import discover_window, missing_window
    from ctxbudget.gateway.upstream import Upstream

    async def ask() -> tuple[int, str] | str:
        client = Upstream(config)
        try:
            found = await discover_window(client, client.headers(()))
            if found is None:
                return await missing_window(client, client.headers(()))
        finally:
            await client.aclose()
        return found.window, found.source

    found = asyncio.run(ask())
    if isinstance(found, str):
        raise ConfigError(found)
    _say(f"ctxbudget serve: window {found[0]:,} tokens ({found[1]})")
    return dataclasses.replace(config, window=found[0])


def _run(config: GatewayConfig, *, log_format: str, shutdown_timeout: int, drain: float) -> None:
    # uvicorn: the ASGI server the Starlette ecosystem runs on; pure Python with h11 (nothing to
    # compile), streams responses as they are yielded, and notices a client that went away
    # (the stream's generator is cancelled and the upstream reply closed).
    from ctxbudget.gateway.app import create_app
    from ctxbudget.gateway.lifecycle import GracefulServer, server_config

    app = create_app(config)
    where = "the embedded mock model" if config.is_mock else config.upstream
    _say(
        f"ctxbudget serve: http://{config.host}:{config.port}/v1 -> {where}"
        f" (window {app.state.gateway.window or 'from the server'})"
    )
    server_settings = server_config(
        app,
        host=config.host,
        port=config.port,
        log_format=log_format,
        log_messages=config.log_messages,
        shutdown_timeout_s=shutdown_timeout,
        lifespan="on",
    )
    GracefulServer(server_settings, health=app.state.gateway.health, drain_s=drain).run()


def _say(line: str) -> None:
    """A start-up line, through the gateway's log (JSON with --log-format json)."""
    import logging

    from ctxbudget.gateway.logs import GATEWAY_LOGGER

    logging.getLogger(GATEWAY_LOGGER).info(line)
