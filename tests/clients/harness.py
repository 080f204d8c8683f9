"""Run the real coding-agent CLIs (Pi, Codex, Claude Code, OpenCode) against a loopback base URL.

Each run gets its own HOME and config folders under a temporary directory, and every URL it is
given is on 127.0.0.1: nothing reaches the network. The CLIs come from
``scripts/install_clients.sh`` (pinned, cached outside the clone); the tests never install them.
How each CLI is pointed at a base URL: /work/shared/HARNESSES.md's notes, checked on these pins.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TASK",
    "ClientRun",
    "clients_folder",
    "run_claude",
    "run_codex",
    "run_opencode",
    "run_pi",
]

ROOT = Path(__file__).resolve().parents[2]
# The task each client is given. It never says "summary": the scripted upstream answers a request
# whose last user text asks for one with text instead of a tool call.
TASK = (
    "Print each task file with the shell tool, one command at a time, as the model asks, "
    "then give the final answer."
)
# A client that hangs is a failure, not a stuck CI run.
RUN_TIMEOUT_S = 420


@dataclass(frozen=True, slots=True)
class ClientRun:
    """What one CLI run did: exit status, its output and how long it took."""

    name: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        """Everything about the run, for an assertion message."""
        return (
            f"{self.name} exited {self.returncode} after {self.seconds:.1f}s\n"
            f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"
        )


def clients_folder() -> Path:
    """The folder ``scripts/install_clients.sh`` installed the pinned CLIs in.

    Raises AssertionError (a failed test, never a skip) saying how to install them.
    """
    folder = os.environ.get("CTXBUDGET_CLIENTS_DIR")
    if not folder:
        script = ROOT / "scripts" / "install_clients.sh"
        folder = subprocess.run(
            [str(script), "--path"], check=True, capture_output=True, text=True
        ).stdout.strip()
    path = Path(folder)
    assert (path / ".complete").is_file(), (
        f"the pinned clients are not installed in {path}: run `make test-clients` "
        "(or scripts/install_clients.sh) first"
    )
    return path


def _bin(name: str) -> str:
    return str(clients_folder() / "node_modules" / ".bin" / name)


def _base_env(home: Path) -> dict[str, str]:
    """A clean environment: own HOME, no proxies, no inherited keys or config folders."""
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "NO_COLOR": "1",
            "CI": "1",
            "NO_PROXY": "127.0.0.1,localhost",
        }
    )
    return env


def _run(name: str, argv: list[str], env: dict[str, str], cwd: Path) -> ClientRun:
    start = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return ClientRun(name, -9, out, err + "\n[timed out]", time.monotonic() - start)
    return ClientRun(name, done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def run_pi(base_url: str, tmp: Path, *, window: int, max_tokens: int = 4096) -> ClientRun:
    """``pi -p`` with a custom Chat Completions provider at ``base_url`` (``.../v1``)."""
    home = tmp / "pi-home"
    env = _base_env(home)
    env["PI_OFFLINE"] = "1"
    model = {
        "id": "m",
        "name": "m",
        "contextWindow": window,
        "maxTokens": max_tokens,
        "input": ["text"],
        "reasoning": False,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }
    provider = {
        "baseUrl": base_url,
        "api": "openai-completions",
        "apiKey": "none",
        "models": [model],
    }
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "models.json").write_text(json.dumps({"providers": {"local": provider}}))
    argv = [
        _bin("pi"),
        "-p",
        "--offline",
        "--provider",
        "local",
        "--model",
        "m",
        "--no-session",
        TASK,
    ]
    return _run("pi", argv, env, tmp)


def run_codex(base_url: str, tmp: Path, *, window: int | None = None) -> ClientRun:
    """``codex exec`` with a Responses provider at ``base_url`` (``.../v1``), own CODEX_HOME."""
    home = tmp / "codex-home"
    env = _base_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    env["CODEX_HOME"] = str(codex_home)
    env["OPENAI_API_KEY"] = "none"
    lines = [
        'model = "m"',
        'model_provider = "local"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
    ]
    if window is not None:
        lines.append(f"model_context_window = {window}")
    lines += [
        "",
        "[model_providers.local]",
        'name = "local"',
        f'base_url = "{base_url}"',
        'wire_api = "responses"',
        'env_key = "OPENAI_API_KEY"',
    ]
    (codex_home / "config.toml").write_text("\n".join(lines) + "\n")
    argv = [
        _bin("codex"),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        TASK,
    ]
    return _run("codex", argv, env, tmp)


def run_claude(base_url: str, tmp: Path) -> ClientRun:
    """``claude -p`` with ``ANTHROPIC_BASE_URL`` at ``base_url`` (no ``/v1``), extra traffic off."""
    home = tmp / "claude-home"
    env = _base_env(home)
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-none",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
        }
    )
    argv = [_bin("claude"), "-p", "--dangerously-skip-permissions", TASK]
    return _run("claude", argv, env, tmp)


def run_opencode(base_url: str, tmp: Path, *, window: int, max_tokens: int = 4096) -> ClientRun:
    """``opencode run`` with an openai-compatible provider at ``base_url`` (``.../v1``)."""
    home = tmp / "opencode-home"
    env = _base_env(home)
    env.update(
        {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "PWD": str(tmp),
        }
    )
    model = {"name": "m", "tool_call": True, "limit": {"context": window, "output": max_tokens}}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": "local/m",
        "small_model": "local/m",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"*": "allow"},
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "local",
                "options": {"baseURL": base_url, "apiKey": "none"},
                "models": {"m": model},
            }
        },
    }
    folder = Path(env["XDG_CONFIG_HOME"]) / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opencode.json").write_text(json.dumps(config))
    return _run("opencode", [_bin("opencode"), "run", TASK], env, tmp)
