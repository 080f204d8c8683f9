"""A session line is read up to 64 MiB; a longer one is skipped a piece at a time, so a 1 GB line
costs no more memory than a 64 MiB one (it took 3.1 GB, and MemoryError under 2.1 GB).

Each file is sparse (a 1 GiB hole after a short head), so it takes no disk; ``ctxbudget replay``
runs in a child under a 768 MiB address-space limit (it needs about 400 MiB; the old reader
needed three times the line) and a timeout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.child import run_cli
from tests.conftest import data_file

GIB = 2**30
LIMIT_BYTES = 768 * 2**20
TIMEOUT_S = 300
PI = "pi-agent_pinion05-agent-complex-task_03-raddit-dashboard-pr.jsonl"
# A user message whose text runs on for a gigabyte: its first 9,000 bytes are text, the rest a
# hole (NUL bytes, never read whole).
HEAD = b'{"type":"message","message":{"role":"user","content":"' + b"x" * 9000


def huge_line(f: object) -> None:
    """Write the head, skip a gigabyte (a hole), close the line."""
    assert hasattr(f, "write") and hasattr(f, "seek")
    f.write(HEAD)
    f.seek(GIB, 1)
    f.write(b'"}}\n')


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("replay", str(path), "--json", memory=LIMIT_BYTES, timeout=TIMEOUT_S)


@pytest.mark.reliability
def test_a_one_line_gigabyte_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as f:
        huge_line(f)
    assert path.stat().st_size > GIB
    done = replay(path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxbudget: "), done.stderr[-2000:]
    assert "longer than the 64 MiB a line may be" in lines[0]


@pytest.mark.reliability
def test_a_gigabyte_line_inside_a_session_is_skipped_and_the_rest_replayed(
    tmp_path: Path,
) -> None:
    lines = data_file("traces", PI).read_bytes().splitlines(keepends=True)
    plain, mixed = tmp_path / "plain.jsonl", tmp_path / "mixed.jsonl"
    plain.write_bytes(b"".join(lines))
    with mixed.open("wb") as f:
        f.writelines(lines[:40])
        huge_line(f)
        f.writelines(lines[40:])
    expected, got = replay(plain), replay(mixed)
    assert expected.returncode == 0 and got.returncode == 0, got.stderr[-2000:]
    want, have = json.loads(expected.stdout), json.loads(got.stdout)
    assert have["calls"] == want["calls"]
    assert have["trace"]["skipped_lines"] == want["trace"]["skipped_lines"] + 1
    assert "line 41 skipped: 1,073,750,882 bytes, longer than the 64 MiB" in got.stderr
