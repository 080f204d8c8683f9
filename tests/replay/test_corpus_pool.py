"""Many sessions in worker processes: every one replays, and an ended run leaves nothing behind.

Each test runs ``ctxbudget replay`` in a child process of its own session (process group) with
a timeout, so a run that hangs fails the test instead of hanging CI, and its workers are killed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from tests.replay.children import TIMEOUT_S, finish, group_gone, start
from tests.replay.conftest import openai_pair, shared_trace

from ctxbudget.replay import corpus


def tiny_sessions(folder: Path, count: int) -> None:
    folder.mkdir()
    for n in range(count):
        line = openai_pair([{"role": "user", "content": f"hi {n}"}], 10 + n, 2)
        (folder / f"s{n:03}.jsonl").write_text(line + "\n", "utf-8")


def test_more_sessions_than_fifty_per_worker_all_replay(tmp_path: Path) -> None:
    # 101 > 2 workers x 50: a pool whose workers retire after 50 tasks hung here forever.
    tiny_sessions(tmp_path / "many", 101)
    child = start(["replay", str(tmp_path / "many"), "--workers", "2", "--window", "1000",
                   "--json"])  # fmt: skip
    code, out, err = finish(child)
    assert code == 0, err
    sessions = json.loads(out)["sessions"]
    assert len(sessions) == 101
    assert {Path(s["trace"]["source"]).name for s in sessions} == {
        f"s{n:03}.jsonl" for n in range(101)
    }


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_ended_run_removes_its_folder_and_workers(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(300):  # far more than the run gets through before the signal
        shutil.copy(shared_trace("claude-code"), corpus / f"s{n:03}.jsonl")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    child = start(["replay", str(corpus), "--workers", "2", "--window", "200000", "--json"],
                  env=env)  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    # Wait until the workers have written a session's document into the run's folder.
    while not any(f for d in temp.glob("ctxbudget-replay-*") for f in d.iterdir()):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no session document was written"
        time.sleep(0.05)
    child.send_signal(signum)
    returncode, _, err = finish(child)
    assert returncode == code, err
    assert "Traceback" not in err
    assert list(temp.iterdir()) == []
    assert group_gone(child.pid)


def ended(pid: int) -> bool:
    """The process is gone or a zombie. Not ``is_alive()``: the pool's own thread reaps its
    workers, and a ``waitpid`` that loses that race reads as alive (one stop in six here)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_stopping_the_pool_ends_its_workers_mid_job() -> None:
    """``_stop`` ends workers busy with a job at once. It read the pool's process table after
    ``shutdown()``, which drops it: no worker was ever terminated, and an interrupted run's
    workers went on writing into the folder being removed ("Directory not empty")."""
    for _ in range(20):  # the reaping race above showed in about one stop in six
        pool = ProcessPoolExecutor(max_workers=2, initializer=corpus._worker_signals)
        for _ in range(2):
            pool.submit(time.sleep, 60)
        processes = list(pool._processes.values())  # the test's own look at the workers
        try:
            assert len(processes) == 2
            corpus._stop(pool)
            # Stopped means exiting: its files are closed. The kernel finishes the exit a moment
            # later; a worker still sleeping would outlive this wait by a minute.
            deadline = time.monotonic() + 5
            while not all(ended(p.pid) for p in processes):
                assert time.monotonic() < deadline, "a worker outlived _stop"
                time.sleep(0.01)
        finally:
            for p in processes:
                p.kill()
