"""A scripted HTTP server on 127.0.0.1 for provider tests: canned replies, faults, a request log."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Action = Literal["respond", "reset", "close_mid_body"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted answer.

    ``reset`` drops the connection with a TCP RST before any byte of the reply;
    ``close_mid_body`` sends the headers and half the body, then closes.

    With ``chunks`` the reply is a server-sent event stream: one ``data:`` event per chunk
    (a dict is sent as JSON, a str as is), then ``data: [DONE]`` when ``done``. ``cut_after=k``
    closes the connection after k chunks, without ``[DONE]`` and, when ``chunked``, without
    the chunked body's last empty chunk (what a crashed server or a dropped proxy leaves).
    """

    status: int = 200
    body: str | bytes | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (read timeouts)."""
    action: Action = "respond"
    chunks: tuple[dict[str, Any] | str, ...] | None = None
    cut_after: int | None = None
    done: bool = True
    chunked: bool = True
    """Send the stream with chunked transfer encoding (as uvicorn does), else close-delimited."""
    chunk_delay: float = 0.0

    def body_bytes(self) -> bytes:
        if isinstance(self.body, dict):
            return json.dumps(self.body).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


@dataclass(frozen=True, slots=True)
class Recorded:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# Answered when the script runs out, so a test that sends more requests than it scripted fails.
UNSCRIPTED = Reply(status=599, body={"error": "fake server: no scripted reply left"})


class FakeServer:
    """A threaded server that pops one ``Reply`` per request; use as a context manager.

    ``responder``, when given, answers each request the script has no reply left for (a
    server with behaviour, such as ``ollama_like`` in tests/agent/test_silent.py).
    """

    def __init__(
        self, *replies: Reply, responder: Callable[[Recorded], Reply] | None = None
    ) -> None:
        self.replies: deque[Reply] = deque(replies)
        self.responder = responder
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            if self.replies:
                return self.replies.popleft()
        return self.responder(recorded) if self.responder is not None else UNSCRIPTED

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _serve(self) -> None:
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up first (a read timeout test); nothing to answer.
                self.close_connection = True

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            recorded = Recorded(self.command, self.path, dict(self.headers.items()), body)
            reply = server.next_reply(recorded)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.action == "reset":
                self._reset()
                return
            if reply.chunks is not None:
                self._stream(reply)
                return
            payload = reply.body_bytes()
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            if reply.action == "close_mid_body":
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self._reset()
                return
            self.wfile.write(payload)
            self.close_connection = True

        def _stream(self, reply: Reply) -> None:
            self.send_response(reply.status)
            headers = {"Content-Type": "text/event-stream", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            if reply.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            assert reply.chunks is not None
            for sent, chunk in enumerate(reply.chunks):
                if sent == reply.cut_after:
                    self._close()
                    return
                data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                self._write(reply, f"data: {data}\n\n".encode())
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
            if reply.cut_after is not None:
                self._close()
                return
            if reply.done:
                self._write(reply, b"data: [DONE]\n\n")
            if reply.chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True

        def _write(self, reply: Reply, data: bytes) -> None:
            if reply.chunked:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            self.wfile.write(data)
            self.wfile.flush()

        def _close(self) -> None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def _reset(self) -> None:
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            linger = struct.pack("ii", 1, 0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.close_connection = True
            self.connection.close()

    return Handler


class Blackhole:
    """A listening socket whose accept queue is full, so new connects hang (connect timeouts)."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self._fillers: list[socket.socket] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> Blackhole:
        # Linux queues backlog + 1 connections; fill them so the next SYN is dropped.
        for _ in range(3):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", self._listener.getsockname()[1]))
            self._fillers.append(filler)
        return self

    def __exit__(self, *exc: object) -> None:
        for filler in self._fillers:
            filler.close()
        self._listener.close()


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
