"""Controls: each real client alone against the scripted upstream's small window fails the task.

These pin the problem the gateway solves (and prove the gateway tests are not vacuous): the same
client, task and upstream, with no gateway in between, never reaches the scripted final answer.
Outcomes seen on the pinned versions: Pi exits 0 with no output after tool call 8 (it compacts once,
then stops at the second overflow); Codex exits 1 "ran out of room in the model's context window";
Claude Code compacts twice and exits 1 "Prompt is too long · automatic compaction failed";
OpenCode compacts, goes on, and exits 1 with the upstream's overflow error printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.gateway.scripted_http_upstream import FINAL_ANSWER, ScriptedUpstream

from .conftest import DECLARED_WINDOW, STEPS
from .harness import run_claude, run_codex, run_opencode, run_pi

pytestmark = pytest.mark.clients


def _assert_failed_the_task(up: ScriptedUpstream, stdout: str, describe: str) -> None:
    assert up.rejected(), describe
    assert up.steps_served < STEPS, describe
    assert FINAL_ANSWER not in stdout, describe


def test_pi_alone_stops_silently(upstream_for: dict[str, ScriptedUpstream], tmp_path: Path) -> None:
    up = upstream_for["pi"]
    run = run_pi(f"{up.url}/v1", tmp_path, window=DECLARED_WINDOW)
    _assert_failed_the_task(up, run.stdout, run.describe())
    assert run.returncode == 0 and run.stdout.strip() == "", run.describe()


def test_codex_alone_runs_out_of_room(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["codex"]
    run = run_codex(f"{up.url}/v1", tmp_path)
    _assert_failed_the_task(up, run.stdout, run.describe())
    assert run.returncode == 1 and "ran out of room" in run.stderr, run.describe()


def test_claude_code_alone_fails_to_compact(
    upstream_for: dict[str, ScriptedUpstream], tmp_path: Path
) -> None:
    up = upstream_for["claude"]
    run = run_claude(up.url, tmp_path)
    _assert_failed_the_task(up, run.stdout, run.describe())
    assert run.returncode == 1 and "Prompt is too long" in run.stdout, run.describe()


def test_opencode_alone_errors(upstream_for: dict[str, ScriptedUpstream], tmp_path: Path) -> None:
    up = upstream_for["opencode"]
    run = run_opencode(f"{up.url}/v1", tmp_path, window=DECLARED_WINDOW)
    assert up.rejected(), run.describe()
    assert run.returncode == 1 and "exceeds the available context size" in run.stderr, (
        run.describe()
    )
