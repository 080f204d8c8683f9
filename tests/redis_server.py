"""A real ``redis-server`` for the Redis tier (``make test-redis``): started on a free loopback
port in a temporary folder, with no persistence, and stopped afterwards. A missing binary fails
the test (never a skip): the tier exists to run against the real server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.conftest import free_port

INSTALL = "apt-get install -y redis-server"
START_TIMEOUT_S = 10.0


def redis_server_binary() -> str:
    """The ``redis-server`` on PATH; the test fails with the install line when there is none."""
    found = shutil.which("redis-server")
    if found is None:
        pytest.fail(f"redis-server is not installed ({INSTALL}); make test-redis needs it")
    return found


@contextmanager
def running_redis(folder: Path) -> Iterator[str]:
    """A fresh redis-server on 127.0.0.1 (no RDB, no AOF, its files in ``folder``); yields its
    URL ``redis://127.0.0.1:PORT/0`` once it answers, and stops it."""
    binary = redis_server_binary()
    folder.mkdir(parents=True, exist_ok=True)
    for _attempt in range(3):  # another process may take the free port before the server does
        port = free_port()
        log = folder / f"redis-{port}.log"
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(folder), "--logfile", str(log), "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            if _answers(port, server):
                yield f"redis://127.0.0.1:{port}/0"
                return
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
                server.kill()
                server.wait()
    text = log.read_text(errors="replace")[-1000:] if log.exists() else ""
    pytest.fail(f"redis-server did not start: {text}")


def _answers(port: int, server: subprocess.Popen[bytes]) -> bool:
    """True once the server on ``port`` answers PING; False when it exited (port taken)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False
