"""``/healthz`` and the graceful shutdown, on a real uvicorn process: a stream in flight when
SIGTERM arrives ends whole, new connections are refused, a drain keeps serving while ``/healthz``
says so, and a stream that never ends cannot hold the process past its timeout."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from tests.gateway.ops_server import running

from ctxbudget.gateway.lifecycle import Health, healthz_route


@pytest.fixture
def status_file(tmp_path: Path) -> Path:
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"upstream": {"url": "x"}, "conversations": []}), encoding="utf-8")
    return path


def ended_by_signal(code: int) -> bool:
    """uvicorn re-raises the signal it shut down on once it is done (or exits 0)."""
    return code in (0, -signal.SIGTERM)


def refused(url: str, within: float) -> bool:
    """True once a new connection to ``url`` is refused (within ``within`` seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/healthz", timeout=0.5)
        except httpx.TransportError:
            return True
        time.sleep(0.05)
    return False


def test_healthz_says_ok_then_draining() -> None:
    health = Health()
    with TestClient(Starlette(routes=[healthz_route(health)])) as client:
        ok = client.get("/healthz")
        health.draining = True
        draining = client.get("/healthz")
    assert ok.status_code == 200 and ok.json()["status"] == "ok"
    assert ok.json()["uptime_s"] >= 0
    assert draining.status_code == 503 and draining.json() == {"status": "draining"}


def test_a_stream_in_flight_ends_whole_after_sigterm(status_file: Path) -> None:
    with running(status_file) as server:
        with httpx.stream("GET", server.url + "/stream?n=20&delay=0.15", timeout=20) as reply:
            lines = reply.iter_lines()
            first = next(lines)
            server.stop(signal.SIGTERM)
            # The listener closes long before the stream's 3 s are over; the stream goes on.
            assert refused(server.url, within=2)
            assert server.process.poll() is None
            rest = list(lines)
        assert reply.status_code == 200
        assert [first, *rest] == [f"chunk {i}" for i in range(20)]
        assert ended_by_signal(server.wait(timeout=15))
        log = server.log.read_text(encoding="utf-8")
    assert '"event":"request"' in log  # the stream's own end was logged before the exit


def test_a_drain_keeps_serving_while_healthz_says_draining(status_file: Path) -> None:
    with running(status_file, "--drain", "2.5") as server:
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
        stopped = time.monotonic()
        server.stop(signal.SIGTERM)
        deadline = time.monotonic() + 1.5
        while httpx.get(server.url + "/healthz", timeout=5).status_code == 200:
            assert time.monotonic() < deadline, "/healthz never said draining"
            time.sleep(0.05)
        health = httpx.get(server.url + "/healthz", timeout=5)
        served = httpx.get(server.url + "/stream?n=2&delay=0", timeout=5)  # still served
        assert health.status_code == 503 and health.json() == {"status": "draining"}
        assert served.text == "chunk 0\nchunk 1\n"
        assert ended_by_signal(server.wait(timeout=15))
        assert time.monotonic() - stopped >= 2.4  # not before the drain was over


def test_a_stream_that_never_ends_is_cut_at_the_shutdown_timeout(status_file: Path) -> None:
    with running(status_file, "--shutdown-timeout", "1") as server:
        with httpx.stream("GET", server.url + "/forever", timeout=20) as reply:
            lines = reply.iter_lines()
            assert next(lines) == "tick"
            stopped = time.monotonic()
            server.stop(signal.SIGTERM)
            with pytest.raises(httpx.TransportError):  # cut mid-body, not a clean end
                for _ in lines:
                    assert time.monotonic() - stopped < 6, "the stream outlived the timeout"
        assert ended_by_signal(server.wait(timeout=15))


# -- the real gateway: a streamed chat completion in flight when SIGTERM arrives ------------


SLOW_EVENTS = 12


@pytest.fixture
def slow_upstream() -> Iterator[str]:
    """An OpenAI-compatible upstream on a loopback port whose streamed reply takes ~1.8 s."""
    import asyncio
    import socket
    import threading

    import uvicorn
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def chat(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            for i in range(SLOW_EVENTS):
                delta = {"choices": [{"index": 0, "delta": {"content": f"part {i} "}}]}
                yield b"data: " + json.dumps(delta).encode() + b"\n\n"
                await asyncio.sleep(0.15)
            done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield b"data: " + json.dumps(done).encode() + b"\n\n"
            usage = {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 12}}
            yield b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.mark.reliability  # ~7 s: the gateway process loads its counter first
def test_the_gateway_finishes_a_streamed_reply_after_sigterm(
    status_file: Path, slow_upstream: str
) -> None:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    with running(status_file, "--upstream", slow_upstream) as server:
        with httpx.stream(
            "POST", server.url + "/v1/chat/completions", json=body, timeout=30
        ) as reply:
            data = (line for line in reply.iter_lines() if line.startswith("data: "))
            first = next(data)
            server.stop(signal.SIGTERM)
            rest = list(data)
        assert reply.status_code == 200 and reply.headers["x-ctxbudget-window"] == "8192"
        events = [first, *rest]
        parts = [e for e in events if '"content"' in e]
        assert len(parts) == SLOW_EVENTS and events[-1] == "data: [DONE]"
        assert ended_by_signal(server.wait(timeout=15))
        assert refused(server.url, within=1)
