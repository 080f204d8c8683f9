"""Run ``ctxbudget`` in a child process that cannot hang a test: a timeout, then its whole
process group (workers included) is killed and the test fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

TIMEOUT_S = 60


def start(args: list[str], **kw: object) -> subprocess.Popen[str]:
    """``ctxbudget ARGS`` in a new process group, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "ctxbudget.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,  # type: ignore[arg-type]
    )


def finish(child: subprocess.Popen[str], timeout: float = TIMEOUT_S) -> tuple[int, str, str]:
    """Wait for the child; on timeout kill its whole group (the workers too) and fail."""
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail(f"ctxbudget replay did not end within {timeout} s")
    return child.returncode, out, err


def group_gone(pgid: int, within_s: float = 10) -> bool:
    """True once no process of the group is left (the workers ended with their parent)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
