"""A raw-socket server on 127.0.0.1 for hostile replies (stalls, trickles, endless bodies), and
``ctxbudget`` run in a child process under a memory limit and a timeout."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Script = Callable[[socket.socket, int], None]
"""Writes a reply on the connection; the int is the connection's number (0, 1, ...)."""

SRC = str(Path(__file__).resolve().parents[2] / "src")
SSE_HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


class RawServer:
    """Reads each request, then hands the socket to ``script``; stops writing when closed."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.stopped = threading.Event()
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        self._listener.settimeout(0.05)  # a closed listener does not wake accept()
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            number, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._answer, args=(conn, number), daemon=True).start()

    def _answer(self, conn: socket.socket, number: int) -> None:
        with conn, contextlib.suppress(OSError):
            _read_request(conn)
            self.script(conn, number)

    def pause(self, seconds: float) -> None:
        """Sleep in the script, ending early when the server stops."""
        self.stopped.wait(seconds)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536) or b"x" * length


def headers(status: int, length: int | None, content_type: str = "application/json") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{size}Connection: close\r\n\r\n"
    ).encode()


def json_reply(body: dict[str, Any], status: int = 200) -> bytes:
    payload = json.dumps(body).encode()
    return headers(status, len(payload)) + payload


def endless(conn: socket.socket, piece: bytes, server: RawServer) -> None:
    """Write ``piece`` until the client hangs up or the server stops."""
    while not server.stopped.is_set():
        conn.sendall(piece)


@dataclass(frozen=True, slots=True)
class Child:
    code: int
    stdout: str
    stderr: str
    seconds: float


@contextlib.contextmanager
def no_key() -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    yield {**env, "PYTHONPATH": SRC}


def run_bounded(
    args: list[str],
    stdin: str = "",
    *,
    timeout: float,
    max_mb: int = 512,
    env: dict[str, str] | None = None,
) -> Child:
    """``ctxbudget ARGS`` in a child limited to ``max_mb`` of address space; killed past
    ``timeout`` seconds (the test then fails on ``subprocess.TimeoutExpired``)."""
    limit = max_mb * 2**20

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with no_key() as base:
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "ctxbudget.cli.main", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**base, **(env or {})},
            preexec_fn=limit_memory,
        )
    return Child(done.returncode, done.stdout, done.stderr, time.monotonic() - start)
