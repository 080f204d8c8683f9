"""`ctxbudget replay PATH...` and `--scan`: many sessions, a corpus table, JSON, plot, page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.conftest import data_file
from tests.replay.conftest import TRACES, shared_trace

from ctxbudget.cli.main import cli
from ctxbudget.errors import CtxbudgetError
from ctxbudget.replay import replay_file, result_json


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["replay", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_a_folder_of_all_traces_in_one_call(tmp_path: Path) -> None:
    png, page = tmp_path / "c.png", tmp_path / "c.html"
    code, out, _ = invoke(
        str(data_file("traces")), "--window", "200000", "--workers", "2", "--json",
        "--plot", str(png), "--html", str(page),
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert [s["trace"]["format"] for s in doc["sessions"]] == sorted(
        ["claude-code", "codex", "mini-swe-agent", "pi"]
    )
    # Each session is today's document, number for number.
    alone = result_json(replay_file(shared_trace("pi"), windows=[200_000]))
    pi = next(s for s in doc["sessions"] if s["trace"]["format"] == "pi")
    assert pi["windows"] == alone["windows"] and pi["calls"] == alone["calls"]
    rules = {r["name"]: r for r in doc["aggregate"]["rules"]}
    assert rules["pi"]["sessions"] == 4 and rules["pi"]["segments"] == 5  # Pi's 1 compaction
    late = sum(p["late_segments"] for s in doc["sessions"] for p in s["windows"][0]["policies"]
               if p["name"] == "pi")  # fmt: skip
    assert rules["pi"]["late_segments"] == late == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text("utf-8")
    assert html.count("<tr>") == 4 + 6 + 2  # sessions, rules, two header rows
    assert "<script" not in html


def test_table_lists_each_session_and_the_aggregate() -> None:
    code, out, _ = invoke(str(data_file("traces", TRACES["pi"])), str(data_file("traces",
                          TRACES["codex"])), "--window", "128000", "--workers", "1")  # fmt: skip
    assert code == 0
    assert "2 sessions" in out and "aggregate per window and rule" in out
    assert "glm-5.2" in out and "gpt-5-codex" in out


def test_scan_reads_the_default_folders_with_subagents(tmp_path: Path) -> None:
    claude = tmp_path / "claude" / "projects" / "-repo"
    (claude / "s1" / "subagents").mkdir(parents=True)
    shutil.copy(shared_trace("claude-code"), claude / "s1.jsonl")
    shutil.copy(data_file("claude_shapes", "subagents", "agent-sample.jsonl"),
                claude / "s1" / "subagents" / "agent-a.jsonl")  # fmt: skip
    codex = tmp_path / "codex" / "sessions" / "2025" / "09"
    codex.mkdir(parents=True)
    shutil.copy(shared_trace("codex"), codex / "rollout.jsonl")
    pi = tmp_path / "pi" / "sessions" / "--repo--"
    pi.mkdir(parents=True)
    shutil.copy(shared_trace("pi"), pi / "s.jsonl")
    (pi / "broken.jsonl").write_text('{"not": "closed"\n', "utf-8")
    env = {
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "CODEX_HOME": str(tmp_path / "codex"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "pi"),
    }
    code, out, err = invoke("--scan", "--window", "200000", "--json", env=env)
    assert code == 0
    doc = json.loads(out)
    sources = sorted(Path(s["trace"]["source"]).name for s in doc["sessions"])
    assert sources == ["agent-a.jsonl", "rollout.jsonl", "s.jsonl", "s1.jsonl"]
    warnings = [line for line in err.splitlines() if "broken.jsonl" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ")


def test_scan_with_no_folder_is_one_line_error(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": str(tmp_path / "no")}
    result = CliRunner().invoke(cli, ["replay", "--scan"], env=env)
    # main() prints a CtxbudgetError as one line and exits 2 (tests/test_cli_errors).
    assert isinstance(result.exception, CtxbudgetError)
    assert "--scan found no session folder" in str(result.exception)


@pytest.mark.parametrize("pattern", ["*.jsonl", "**/*.jsonl"])
def test_globs_expand(pattern: str) -> None:
    code, out, _ = invoke(str(data_file("traces") / pattern), "--window", "64000", "--json")
    assert code == 0
    assert len(json.loads(out)["sessions"]) == 3  # the .traj.json does not match
