"""Run ctxbudget in a child process with an address-space limit and a timeout: code that aborts
the interpreter (Rust's "memory allocation failed"), runs out of memory or hangs fails the test,
not the run."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import ctxbudget

SRC = str(Path(ctxbudget.__file__).resolve().parents[1])
GIB = 1 << 30
CLI = "import sys; from ctxbudget.cli.main import main; sys.argv[0] = 'ctxbudget'; main()"


def run_python(
    code: str, *args: str, memory: int = GIB, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` with at most ``memory`` bytes of address space, given ``stdin``
    (none: an empty input); a run past ``timeout`` seconds raises ``subprocess.TimeoutExpired``
    (the child is killed)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "PYTHONPATH": SRC, "RUST_BACKTRACE": "0"}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env=env,
        check=False,
    )


def run_cli(
    *args: str, memory: int = GIB, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``ctxbudget args`` as :func:`run_python` runs code."""
    return run_python(CLI, *args, memory=memory, timeout=timeout)


def one_line_error(run: subprocess.CompletedProcess[str]) -> str:
    """The CLI's error when it ended as promised: exit 2 and one line on stderr."""
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    return lines[0]
