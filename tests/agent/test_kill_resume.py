"""Archive durability: SIGKILL a running ``ctxbudget demo`` at 50+ moments and resume each time.

Acknowledged = a complete line in the archive when the process died. None may ever be lost;
a torn last line is reported and skipped, and the file stays appendable.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ctxbudget.compaction.archive import load_archive
from ctxbudget.providers.scenarios import CodingScenario

KILLS = 50
TURNS = 40


def _demo(archive: Path) -> list[str]:
    args = ["--scenario", "coding", "--window", "3000", "--turns", str(TURNS)]
    cli = [sys.executable, "-m", "ctxbudget.cli.main", "demo"]
    return [*cli, *args, "--archive", str(archive), "--json"]


def _complete_lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]  # the part after the last newline is not acknowledged


def _run_until_grown(archive: Path, rng: random.Random) -> tuple[bytes, int | None]:
    """Start the demo, kill it after a random number of new bytes; return (file, exit code)."""
    before = archive.stat().st_size if archive.exists() else 0
    grow = rng.randint(1, 12_000)
    proc = subprocess.Popen(_demo(archive), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        size = archive.stat().st_size if archive.exists() else 0
        if size - before >= grow:
            time.sleep(rng.random() * 0.01)
            break
        time.sleep(0.002)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stderr is not None
    proc.stderr.close()
    return archive.read_bytes(), proc.returncode


def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    archive = tmp_path / "session.jsonl"
    acknowledged: list[bytes] = []
    kills = torn_seen = 0
    while kills < KILLS:
        data, code = _run_until_grown(archive, rng)
        lines = _complete_lines(data)
        # Append-only: every line acknowledged before is still there, in place.
        assert lines[: len(acknowledged)] == acknowledged
        acknowledged = lines
        if code == -signal.SIGKILL:
            kills += 1
        if data and not data.endswith(b"\n"):
            torn_seen += 1
        if kills == KILLS // 2:
            # A writer killed in the middle of a record: force one torn last line.
            with archive.open("ab") as f:
                f.write(b'{"type":"message","seq":99999,"message":{"role":"us')
            kills += 1
            torn_seen += 1
    # Resume to the end; the torn lines are reported, skipped, and appends go on after them.
    done = subprocess.run(_demo(archive), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["turns"] == TURNS and summary["archive"] == str(archive)
    final = archive.read_bytes()
    assert _complete_lines(final)[: len(acknowledged)] == acknowledged
    state = load_archive(archive)
    assert len([w for w in state.warnings if "torn" in w or "unreadable" in w]) >= 1
    assert torn_seen >= 1
    # Every acknowledged message is in the history, and each user turn appears exactly once.
    history_records = [json.dumps(m.text) for m in state.history]
    for raw in acknowledged:
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a torn record completed by the next append's newline: reported, skipped
        if record.get("type") == "message":
            assert json.dumps(record["message"].get("content", "")) in history_records
    users = [m.text for m in state.history if m.role == "user"]
    scenario = CodingScenario(0)
    assert users == [scenario.user_message(t) for t in range(1, TURNS + 1)]
    # Each tool call was answered exactly once.
    calls = [c.id for m in state.history for c in m.tool_calls]
    answers = [m.tool_call_id for m in state.history if m.role == "tool"]
    assert sorted(calls) == sorted(answers) and len(set(calls)) == len(calls)
    assert os.path.getsize(archive) == len(final)
