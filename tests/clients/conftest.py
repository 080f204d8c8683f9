"""Fixtures of the real-clients tier: the scripted upstream, its task files, the gateway."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.conftest import free_port
from tests.gateway.scripted_http_upstream import ScriptedUpstream, write_task_files

STEPS = 30
# The upstream's window per client: its first request plus about eight of the thirty steps
# (each step adds ~1,480 tokens of tool output), so a client alone overflows around step 8-9.
# First requests measured on the pinned versions (o200k_base + overhead, the upstream's count):
# Pi 1,438, Codex 8,522, Claude Code 11,626, OpenCode 7,072.
WINDOW = {"pi": 13_000, "codex": 20_000, "claude": 23_000, "opencode": 19_000}
# What each client is told the window is (the gateway stands between it and the real one).
DECLARED_WINDOW = 131_072


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    """The thirty files the scripted task prints, in the run's own folder."""
    folder = tmp_path / "task"
    write_task_files(folder, STEPS)
    return folder


def scripted(window: int, task_dir: Path, advertised: int | None = None) -> ScriptedUpstream:
    """A scripted upstream with the tier's step count (start it with ``with``); ``advertised``:
    the larger window its ``/props`` states (its overflow errors state the real one)."""
    return ScriptedUpstream(
        window=window, task_dir=task_dir, steps=STEPS, advertised_window=advertised
    )


@pytest.fixture
def upstream_for(task_dir: Path) -> Iterator[dict[str, ScriptedUpstream]]:
    """``upstream_for[client]`` starts (once) the upstream sized for that client."""
    started: dict[str, ScriptedUpstream] = {}

    class Lazy(dict[str, ScriptedUpstream]):
        def __missing__(self, client: str) -> ScriptedUpstream:
            up = scripted(WINDOW[client], task_dir).start()
            started[client] = up
            self[client] = up
            return up

    yield Lazy()
    for up in started.values():
        up.stop()


@dataclass
class Gateway:
    """A running ``ctxbudget serve`` subprocess: its base URL and its log."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_tail(self) -> str:
        """The end of the gateway's output, for an assertion message."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return f"--- gateway log ---\n{text[-4000:]}"


@contextmanager
def serve(upstream: str, tmp: Path, *extra: str) -> Iterator[Gateway]:
    """Run ``ctxbudget serve --upstream UPSTREAM`` on a free loopback port until the block ends.

    The window is not given: the gateway discovers it from the upstream (``/props``).
    """
    port = free_port()
    log = tmp / f"gateway-{port}.log"
    argv = [
        sys.executable,
        "-c",
        "from ctxbudget.cli.main import main; main()",
        "serve",
        "--upstream",
        upstream,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--state",
        str(tmp / "gateway-state.sqlite3"),
        "--tokenizer",
        "o200k_base",
        *extra,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
    gateway = Gateway(f"http://127.0.0.1:{port}", log, process)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (
                f"the gateway exited {process.returncode}\n{gateway.log_tail()}"
            )
            try:
                if httpx.get(f"{gateway.url}/ctxbudget/status", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the gateway did not start\n{gateway.log_tail()}"
            time.sleep(0.1)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
