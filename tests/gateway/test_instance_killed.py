"""Two `ctxbudget serve` processes on one Redis: one is killed with SIGKILL in the middle of a
streamed reply, and the other serves the conversation on, with the compaction the first stored
(issue 29; `make test-redis`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import REPO, free_port
from tests.gateway.helpers import long_text, user
from tests.redis_server import running_redis

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM

pytestmark = pytest.mark.redis

WINDOW = 2_048
CHUNKS = 30
"""Chunks of a streamed reply, 0.1 s apart: a stream long enough to be cut in the middle."""


class SlowUpstream(ThreadingHTTPServer):
    """Chat Completions on loopback: summaries at once, replies streamed slowly."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.summaries = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: SlowUpstream

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body["messages"][0]["content"] == SUMMARIZER_SYSTEM:
            with self.server.lock:
                self.server.summaries += 1
            self._json({"choices": [{"index": 0, "message": {
                "role": "assistant", "content": "## Goal\nAnswer the questions."},
                "finish_reason": "stop"}]})  # fmt: skip
            return
        if not body.get("stream"):
            self._json({"choices": [{"index": 0, "message": {
                "role": "assistant", "content": "Noted."}, "finish_reason": "stop"}]})  # fmt: skip
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for n in range(CHUNKS):
            delta = {"choices": [{"index": 0, "delta": {"content": f"part {n} "}}]}
            try:
                self.wfile.write(b"data: " + json.dumps(delta).encode() + b"\n\n")
                self.wfile.flush()
            except OSError:
                return  # the gateway went away
            time.sleep(0.1)
        self.wfile.write(b"data: [DONE]\n\n")

    def _json(self, reply: dict[str, Any]) -> None:
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _serve(
    upstream: str, state: str, folder: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    command = [sys.executable, "-m", "ctxbudget.cli.main", "serve", "--upstream", upstream]
    command += ["--window", str(WINDOW), "--tokenizer", "qwen3", "--state", state]
    command += ["--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(folder)}
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "ctxbudget serve ended at start"
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "ctxbudget serve did not start"
                time.sleep(0.1)
        yield url, process
    finally:
        process.kill()
        process.wait(10)


def test_an_instance_killed_mid_stream_leaves_the_conversation_to_the_other(
    tmp_path: Path,
) -> None:
    upstream = SlowUpstream()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with (
            running_redis(tmp_path / "redis") as state,
            _serve(upstream.url, state, tmp_path / "a") as (first, killed),
            _serve(upstream.url, state, tmp_path / "b") as (second, _),
        ):
            messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
            compacted = False
            for turn in range(1, 30):  # on the first instance, until it has compacted
                messages.append(user(long_text(f"topic {turn}", 40)))
                reply = httpx.post(
                    f"{first}/v1/chat/completions",
                    json={"model": "m", "messages": messages},
                    timeout=60,
                )
                assert reply.status_code == 200, reply.text
                messages.append(reply.json()["choices"][0]["message"])
                if reply.headers["x-ctxbudget-compacted"] == "1":
                    compacted = True
                    break
            assert compacted and upstream.summaries >= 1
            summaries = upstream.summaries
            messages.append(user("one more question"))
            body = {"model": "m", "messages": messages, "stream": True}
            with httpx.stream(
                "POST", f"{first}/v1/chat/completions", json=body, timeout=60
            ) as stream:
                lines = stream.iter_lines()
                assert next(line for line in lines if line.startswith("data:"))
                killed.send_signal(signal.SIGKILL)  # mid-stream
                with pytest.raises(httpx.HTTPError):
                    for _ in lines:
                        pass
            # The client tries the same request on the other instance.
            with httpx.stream(
                "POST", f"{second}/v1/chat/completions", json=body, timeout=60
            ) as stream:
                assert stream.status_code == 200
                assert stream.headers["x-ctxbudget-compacted"] == "1"
                assert int(stream.headers["x-ctxbudget-tokens"]) < WINDOW
                text = "".join(stream.iter_lines())
            assert f"part {CHUNKS - 1}" in text and "[DONE]" in text
            assert upstream.summaries == summaries  # the stored compaction, not a new one
    finally:
        upstream.shutdown()
