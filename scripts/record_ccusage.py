"""Record ccusage's per-session totals for the repo's sessions (tests/data/ccusage/totals.json).

    cd /tmp/ccu && npm install ccusage@20.0.24    # once; the CLI ships a native binary
    python scripts/record_ccusage.py /tmp/ccu/node_modules/.bin/ccusage

Each session is copied alone into a temporary Claude Code / Codex / Pi layout (ccusage dedupes
Claude lines across files, so sessions that share message ids must not meet) and read offline.
ccusage has no reader for mini-swe-agent trajectories; that trace has no entry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
# (file under tests/data, ccusage command, where the file goes in the layout)
SESSIONS = (
    (
        "traces/claude-code_guideai-session-processing_claude-code-sample-1.jsonl",
        "claude",
        "claude/projects/-repo/session.jsonl",
    ),
    ("claude_shapes/parallel-tools.jsonl", "claude", "claude/projects/-repo/session.jsonl"),
    (
        "claude_shapes/subagents/agent-sample.jsonl",
        "claude",
        "claude/projects/-repo/session/subagents/agent-sample.jsonl",
    ),
    (
        "traces/codex-cli_guideai-session-processing_sample-codex-session.jsonl",
        "codex",
        "codex/sessions/2025/09/25/rollout-2025-09-25T00-00-00-sample.jsonl",
    ),
    (
        "traces/pi-agent_pinion05-agent-complex-task_03-raddit-dashboard-pr.jsonl",
        "pi",
        "pi/sessions/--repo--/session.jsonl",
    ),
)


def ccusage(binary: str, root: Path, command: str, report: str) -> dict[str, object]:
    env = dict(
        os.environ,
        HOME=str(root / "home"),
        CLAUDE_CONFIG_DIR=str(root / "claude"),
        CODEX_HOME=str(root / "codex"),
        PI_AGENT_DIR=str(root / "pi" / "sessions"),
    )
    out = subprocess.run(
        [binary, command, report, "--json", "--offline"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def totals(binary: str, name: str, command: str, place: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        target = root / place
        target.parent.mkdir(parents=True)
        shutil.copyfile(DATA / name, target)
        (session,) = ccusage(binary, root, command, "session")["sessions"]
        calls = None  # only the Claude reports count entries (`blocks`)
        if command == "claude":
            calls = sum(b["entries"] for b in ccusage(binary, root, command, "blocks")["blocks"])
    return {
        "file": name,
        "input": session["inputTokens"],
        "output": session["outputTokens"],
        "cache_write": session["cacheCreationTokens"],
        "cache_read": session["cacheReadTokens"],
        "calls": calls,
    }


def main(binary: str) -> None:
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    doc = {
        "ccusage": version.strip(),
        "command": "python scripts/record_ccusage.py PATH/TO/ccusage",
        "sessions": [totals(binary, *s) for s in SESSIONS],
    }
    out = DATA / "ccusage" / "totals.json"
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
