"""Fixtures for replay tests: the shared real traces and small hand-made sessions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import data_file

TRACES = {
    "claude-code": "claude-code_guideai-session-processing_claude-code-sample-1.jsonl",
    "codex": "codex-cli_guideai-session-processing_sample-codex-session.jsonl",
    "mini-swe-agent": "mini-swe-agent_deepseek-chat_pydicom-901.traj.json",
    "pi": "pi-agent_pinion05-agent-complex-task_03-raddit-dashboard-pr.jsonl",
}


def shared_trace(fmt: str) -> Path:
    """A real recorded session the repo carries under tests/data/traces."""
    return data_file("traces", TRACES[fmt])


def char_estimator(text: str) -> int:
    """A stand-in estimator for tests: one token per four characters, rounded up."""
    return -(-len(text) // 4)


def openai_pair(messages: list[dict[str, Any]], prompt: int, completion: int, **kw: Any) -> str:
    """One line of an OpenAI {request, response} log."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if "reasoning" in kw:
        usage["completion_tokens_details"] = {"reasoning_tokens": kw["reasoning"]}
    reply = {"role": "assistant", "content": kw.get("reply", "ok")}
    return json.dumps(
        {
            "request": {"model": kw.get("model", "gpt-4o"), "messages": messages},
            "response": {
                "model": kw.get("model", "gpt-4o"),
                "choices": [{"message": reply}],
                "usage": usage,
            },
        }
    )


@pytest.fixture
def write_log(tmp_path: Path) -> Callable[[list[str]], Path]:
    """Write lines to a fresh .jsonl file."""

    def write(lines: list[str]) -> Path:
        path = tmp_path / "session.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write
