"""`ctxbudget serve`'s own flags, as a process: the state store named by URL, JSON logs, and a
SIGTERM that ends the server cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tests.conftest import REPO, free_port

COMMAND = [sys.executable, "-m", "ctxbudget.cli.main", "serve", "--upstream", "mock"]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def test_a_redis_state_url_is_a_store_not_a_file_name(tmp_path: Path) -> None:
    # --state was a path: "redis://127.0.0.1:P/0" became the SQLite file "redis:/127.0.0.1:P/0"
    # and the gateway started on it. Now it is the Redis store, and an unreachable one is one line.
    state = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [*COMMAND, "--state", state, "--port", str(free_port())],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot reach Redis" in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no file named after the URL


def test_json_logs_are_json_from_the_first_line_and_sigterm_ends_the_server(
    tmp_path: Path,
) -> None:
    port = free_port()
    command = [*COMMAND, "--port", str(port), "--state", str(tmp_path / "state.sqlite3")]
    process = subprocess.Popen(
        [*command, "--log-format", "json"], env=ENV, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "ctxbudget serve did not start"
                time.sleep(0.1)
        secret = "a sentence that must stay out of the logs"
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "mock", "messages": [{"role": "user", "content": secret}]},
            timeout=60,
        )
        assert reply.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    # uvicorn finishes its shutdown, then re-raises the signal it caught (exit by SIGTERM).
    assert process.returncode in (0, -signal.SIGTERM), err
    records = [json.loads(line) for line in err.splitlines()]  # every line, the banner too
    assert records[-1]["event"].startswith("Finished server process")
    assert any("ctxbudget serve: http://" in r.get("event", "") for r in records)
    requests = [r for r in records if r.get("event") == "request"]
    assert len(requests) == 1 and requests[0]["status"] == 200
    assert secret not in err
