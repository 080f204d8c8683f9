"""Hostile input and a misbehaving upstream: one clear error each, and the gateway keeps serving."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from tests.gateway.helpers import ENDLESS, STALL, config, gateway, loopback, scripted, user

from ctxbudget.gateway.app import create_app
from ctxbudget.providers.mock import MockProvider

HELLO = {"model": "mock", "messages": [user("hello")]}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str) and "\n" not in body["error"]["message"]
    return dict(body["error"])


def test_malformed_and_deep_json_are_one_clear_error_each(tmp_path: Path) -> None:
    app, _ = scripted(MockProvider("chat", window=4096))

    async def go() -> list[httpx.Response]:
        async with gateway(tmp_path, app, window=4096) as (client, _):
            post = client.post
            path = "/v1/chat/completions"
            return [
                await post(path, content=b'{"model": "mock", "messages": [}'),
                await post(path, content=b"[" * 10_000 + b"]" * 10_000),
                await post(path, content=b'{"messages": ' + b"[" * 200 + b"]" * 200 + b"}"),
                await post(path, content=b'"just a string"'),
                await post(path, json={"model": "mock", "messages": [{"role": "wizard"}]}),
                await post(path, json=HELLO),
            ]

    malformed, deep, deep_under_parser, scalar, bad_role, good = run(go())
    assert malformed.status_code == 400 and "not JSON" in _error(malformed)["message"]
    assert deep.status_code == 400 and "deeper than 128" in _error(deep)["message"]
    assert deep_under_parser.status_code == 400
    assert "deeper than 128" in _error(deep_under_parser)["message"]
    assert scalar.status_code == 400 and "JSON object" in _error(scalar)["message"]
    assert bad_role.status_code == 400 and "role" in _error(bad_role)["message"]
    assert good.status_code == 200


def test_a_body_over_the_cap_is_refused_without_reading_it(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=4096))
    sent = 0

    async def body() -> Any:
        nonlocal sent
        for _ in range(8):
            sent += 1 << 20
            yield b" " * (1 << 20)

    async def go() -> httpx.Response:
        async with gateway(tmp_path, app, window=4096, max_body_bytes=2 << 20) as (client, _):
            response = await client.post("/v1/chat/completions", content=body())
            assert (await client.post("/v1/chat/completions", json=HELLO)).status_code == 200
            return response

    response = run(go())
    assert response.status_code == 413 and "cap" in _error(response)["message"]
    assert sent <= 3 << 20  # the reading stopped at the cap
    assert len(upstream.chat_bodies()) == 1


def test_a_100_mb_declared_body_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    app, _ = scripted(MockProvider("chat", window=4096))
    gateway_app = create_app(config(tmp_path, window=4096), transport=httpx.ASGITransport(app=app))
    with loopback(gateway_app) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                f"Content-Type: application/json\r\nContent-Length: {100 << 20}\r\n\r\n"
            )
            sock.sendall(head.encode() + b"{" + b" " * 65536)
            reply = ""
            while "}" not in reply:  # the head and the JSON error body
                piece = sock.recv(65536).decode("latin-1")
                assert piece, reply
                reply += piece
        assert reply.startswith("HTTP/1.1 413"), reply[:200]
        assert "over the gateway's cap" in reply
        ok = httpx.post(f"{url}/v1/chat/completions", json=HELLO, timeout=30)
        assert ok.status_code == 200


def test_a_stalling_upstream_is_a_timeout_error(tmp_path: Path) -> None:
    app, _ = scripted(MockProvider("chat", window=4096))
    with loopback(app) as upstream_url:

        async def go() -> tuple[httpx.Response, float, httpx.Response]:
            async with gateway(
                tmp_path, app, window=4096, read_timeout=0.5, upstream=f"{upstream_url}/v1"
            ) as (client, _):
                started = time.monotonic()
                stalled = await client.post("/v1/chat/completions", json={**HELLO, "model": STALL})
                took = time.monotonic() - started
                return stalled, took, await client.post("/v1/chat/completions", json=HELLO)

        stalled, took, good = run(go())
    assert stalled.status_code == 504
    assert _error(stalled)["type"] == "timeout_error"
    assert took < 5
    assert good.status_code == 200


def test_a_never_ending_stream_ends_with_an_error_event(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=4096))
    with loopback(app) as upstream_url:

        async def go() -> tuple[httpx.Response, float, httpx.Response]:
            async with gateway(
                tmp_path, app, window=4096, request_timeout=1.0, upstream=f"{upstream_url}/v1"
            ) as (client, _):
                started = time.monotonic()
                body = {**HELLO, "model": ENDLESS, "stream": True}
                endless = await client.post("/v1/chat/completions", json=body)
                took = time.monotonic() - started
                good = await client.post("/v1/chat/completions", json=HELLO)
                return endless, took, good

        endless, took, good = run(go())
        deadline = time.monotonic() + 5
        while upstream.open_streams and time.monotonic() < deadline:
            time.sleep(0.05)
    assert endless.status_code == 200
    last = endless.text.strip().split("\n\n")[-1]
    assert last.startswith("data: ")
    error = orjson.loads(last[6:])["error"]
    assert error["type"] == "timeout_error" and "deadline" in error["message"]
    assert 0.9 < took < 5
    assert good.status_code == 200
    assert upstream.open_streams == 0 and upstream.closed_streams == 1


def test_a_client_that_goes_away_mid_stream_closes_the_upstream(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=4096))
    with loopback(app) as upstream_url:
        gateway_app = create_app(config(tmp_path, window=4096, upstream=f"{upstream_url}/v1"))
        with loopback(gateway_app) as url:
            body = {**HELLO, "model": ENDLESS, "stream": True}
            with (
                httpx.Client(timeout=10) as client,
                client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
            ):
                assert response.status_code == 200
                first = next(response.iter_bytes())
                assert first.startswith(b"data: ")
            deadline = time.monotonic() + 10
            while upstream.open_streams and time.monotonic() < deadline:
                time.sleep(0.05)
            assert upstream.open_streams == 0 and upstream.closed_streams == 1
            ok = httpx.post(f"{url}/v1/chat/completions", json=HELLO, timeout=30)
            assert ok.status_code == 200
