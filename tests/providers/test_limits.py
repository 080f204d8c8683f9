"""Deadlines and caps against hostile servers: stalls, trickles, endless or huge bodies.

Each ``chat`` runs in a child process under a 512 MB address-space limit and a timeout, so a
cap that does not hold fails the test by ``MemoryError`` or ``TimeoutExpired``, not by luck.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from ctxbudget.errors import ConfigError, ProviderError
from ctxbudget.messages import Message, Request
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider
from ctxbudget.providers.retry import RetryPolicy
from ctxbudget.providers.streaming import ReplyLimitError, sse_events

from . import bodies
from .fakeserver import FakeServer, Reply
from .hostile import SSE_HEADERS, RawServer, endless, headers, json_reply, run_bounded

HELLO = Request(messages=(Message(role="user", content="hi"),), max_output_tokens=64)
CHUNK = {"choices": [{"index": 0, "delta": {"content": "blah " * 40}}]}
MB = 2**20


def provider(server: RawServer, **kw: object) -> OpenAICompatibleProvider:
    kw.setdefault("retry", RetryPolicy(max_retries=4, base_delay=0.0))
    return OpenAICompatibleProvider(
        base_url=server.base_url,
        model="m",
        api_key_env=None,
        **kw,  # type: ignore[arg-type]
    )


def chat_args(server: RawServer, archive: Path, *extra: str) -> list[str]:
    return ["chat", "--base-url", server.base_url, "--model", "m", "--window", "8192",
            "--max-output", "64", "--archive", str(archive), "--json", *extra]  # fmt: skip


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("ctxbudget:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def test_headers_then_silence_ends_at_the_request_deadline() -> None:
    def stall(conn: socket.socket, n: int) -> None:
        conn.sendall(headers(200, 1000))
        server.pause(60)

    with RawServer(stall) as server:
        start = time.monotonic()
        with pytest.raises(ProviderError, match=r"within 1\.5 s, the request deadline"):
            provider(server, request_timeout=1.5).complete(HELLO)
        took = time.monotonic() - start
    assert 1.4 < took < 4, took  # the 600 s read timeout would have kept it for 50 minutes


@pytest.mark.parametrize("stream", [True, False])
def test_a_trickle_of_keep_alives_cannot_hold_the_request_open(stream: bool) -> None:
    def trickle(conn: socket.socket, n: int) -> None:
        conn.sendall(SSE_HEADERS if stream else headers(200, 10**6))
        while not server.stopped.is_set():
            conn.sendall(b": keep-alive\n\n" if stream else b" ")
            server.pause(0.1)  # each byte well inside the 600 s read timeout

    with RawServer(trickle) as server:
        start = time.monotonic()
        with pytest.raises(ProviderError, match="request deadline"):
            provider(server, request_timeout=1.5, stream=stream).complete(HELLO)
        took = time.monotonic() - start
    assert took < 4, took
    assert server.connections == 1, "a deadline is final, not retried"


def test_retries_stop_at_the_deadline() -> None:
    def busy(conn: socket.socket, n: int) -> None:
        conn.sendall(json_reply(bodies.OPENAI_RATE_LIMIT, status=429)[:-1].replace(
            b"Connection: close", b"Retry-After: 1\r\nConnection: close"
        ) + b"}")  # fmt: skip

    with RawServer(busy) as server:
        start = time.monotonic()
        with pytest.raises(ProviderError, match=r"request deadline.*HTTP 429"):
            provider(server, request_timeout=1.5).complete(HELLO)
        assert time.monotonic() - start < 3
        assert server.connections == 2, "one retry after 1 s; the next wait passes the deadline"


def test_an_endless_stream_stops_at_what_max_tokens_allows(tmp_path: Path) -> None:
    piece = f"data: {json.dumps(CHUNK)}\n\n".encode()

    def flood(conn: socket.socket, n: int) -> None:
        conn.sendall(SSE_HEADERS)
        endless(conn, piece, server)

    with RawServer(flood) as server:
        child = run_bounded(chat_args(server, tmp_path / "a.jsonl", "--stream"), "hi\n", timeout=60)
    assert child.code == 2
    line = one_line_error(child.stderr)
    # 64 tokens * 32 + 16,384 margin
    assert "the reply passed 18,432 characters, more than max_tokens=64 allows" in line
    assert server.connections == 1


@pytest.mark.parametrize(
    ("name", "reply", "expected"),
    [
        ("stream of keep-alives", SSE_HEADERS, "reply larger than the 1,048,576-byte cap"),
        ("stream with no newline", SSE_HEADERS, "stream line or event longer than"),
        ("500 MB JSON body", headers(200, 500 * MB), "reply larger than the 1,048,576-byte cap"),
    ],
    ids=["keep-alives", "no-newline", "500MB-body"],
)
def test_a_huge_reply_is_cut_at_the_cap(
    tmp_path: Path, name: str, reply: bytes, expected: str
) -> None:
    body = b"x" * 65536 if "newline" in name else b": keep-alive\n\n" * 4096
    if "JSON" in name:
        body = b" " * 65536

    def huge(conn: socket.socket, n: int) -> None:
        conn.sendall(reply)
        endless(conn, body, server)

    archive = tmp_path / "a.jsonl"
    cap = 8 * MB if "newline" in name else MB  # the 4 MiB line cap comes first
    extra = ["--max-reply-bytes", str(cap)] + (["--stream"] if "stream" in name else [])
    with RawServer(huge) as server:
        child = run_bounded(chat_args(server, archive, *extra), "hi\n", timeout=60, max_mb=400)
    assert child.code == 2, child.stderr
    assert expected in one_line_error(child.stderr)
    assert max(len(line) for line in archive.read_bytes().splitlines()) < 4096, "not archived"


def test_the_sse_parser_is_linear_and_caps_a_line() -> None:
    start = time.monotonic()
    pieces = (b"x" * 1024 for _ in range(64 * 1024))  # 64 MB, no newline, in 1 KB pieces
    with pytest.raises(ReplyLimitError, match="longer than 1,048,576 bytes"):
        list(sse_events(pieces, max_line_bytes=MB))
    # 1,025 pieces to pass the cap; the old parser re-split the whole buffer each time.
    events = list(sse_events([b"data: a\n\n" * 50_000 + b"data: ", b"b\n\n"]))
    assert len(events) == 50_001 and events[-1] == "b"
    assert time.monotonic() - start < 2


def test_a_huge_error_body_is_read_up_to_a_cap_then_classified() -> None:
    error = json.dumps(bodies.OPENAI_RATE_LIMIT).encode()

    def throttled_then_fine(conn: socket.socket, n: int) -> None:
        if n == 0:
            conn.sendall(headers(429, len(error) + 64 * MB) + error)
            endless(conn, b" " * 65536, server)
        else:
            conn.sendall(json_reply(bodies.OPENAI_CHAT))

    with RawServer(throttled_then_fine) as server:
        start = time.monotonic()
        completion = provider(server).complete(HELLO)
        assert time.monotonic() - start < 10
    assert completion.message.text == "Hello! How can I assist you today?"
    assert server.connections == 2, "the 429 was recognised from its first bytes and retried"


@pytest.mark.parametrize(
    ("setting", "value"),
    [("request_timeout", 0), ("read_timeout", float("inf")), ("max_reply_bytes", 10)],
)
def test_bad_limits_are_config_errors(setting: str, value: object) -> None:
    with pytest.raises(ConfigError, match=setting):
        OpenAICompatibleProvider(
            base_url="http://127.0.0.1:1/v1",
            model="m",
            api_key_env=None,
            **{setting: value},  # type: ignore[arg-type]
        )


def test_the_cli_flags_set_the_deadline(tmp_path: Path) -> None:
    def trickle(conn: socket.socket, n: int) -> None:
        conn.sendall(SSE_HEADERS)
        while not server.stopped.is_set():
            conn.sendall(b": keep-alive\n\n")
            server.pause(0.2)

    with RawServer(trickle) as server:
        flags = ["--stream", "--request-timeout", "2", "--read-timeout", "30"]
        child = run_bounded(chat_args(server, tmp_path / "a.jsonl", *flags), "hi\n", timeout=60)
    assert child.code == 2
    assert "no complete reply within 2 s, the request deadline" in one_line_error(child.stderr)
    assert child.seconds < 15  # interpreter start included; the trickle alone never ends


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_silence_after_the_first_bytes_ends_at_the_deadline(stream: bool) -> None:
    """The read timeout (600 s) would wait; the deadline's watchdog shuts the socket."""

    def start_then_stall(conn: socket.socket, n: int) -> None:
        conn.sendall(SSE_HEADERS + f"data: {json.dumps(CHUNK)}\n\n".encode() if stream
                     else headers(200, 5000) + b'{"choices": [')  # fmt: skip
        server.pause(60)

    with RawServer(start_then_stall) as server:
        start = time.monotonic()
        with pytest.raises(ProviderError, match="request deadline"):
            provider(server, request_timeout=1.0, stream=stream).complete(HELLO)
        took = time.monotonic() - start
    assert 0.9 < took < 3, took


def test_bodies_are_asked_for_uncompressed() -> None:
    """The byte cap counts what is read; a gzip bomb would decode past it."""
    with FakeServer(Reply(body=bodies.OPENAI_CHAT)) as server:
        OpenAICompatibleProvider(base_url=server.base_url, model="m", api_key_env=None).complete(
            HELLO
        )
    assert server.requests[0].headers["Accept-Encoding"] == "identity"
