"""A model's deeply nested tool call is stored and answered; a deeply nested body is one line.

``chat`` runs in a child process under a memory limit and a timeout.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ctxbudget.agent.loop import Agent
from ctxbudget.messages import Message, ToolCall, ToolSpec
from ctxbudget.providers.mock import MockProvider

from . import bodies
from .fakeserver import FakeServer, Reply
from .hostile import run_bounded

UNCLOSED = "[" * 1500  # what a small model stuck in a loop can emit


def without_usage(body: dict[str, Any]) -> dict[str, Any]:
    # The canned bodies' usage belongs to other prompts; reported far below what ctxbudget counts
    # exactly, it would read as a server that truncated the prompt (agent/silent.py).
    return {k: v for k, v in copy.deepcopy(body).items() if k != "usage"}


def bad_call_reply() -> Reply:
    body = without_usage(bodies.VLLM_TOOL_CALL)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = UNCLOSED
    return Reply(body=body)


def chat(server: FakeServer, archive: Path, stdin: str) -> tuple[int, str, str]:
    # qwen3: its template parses tool-call arguments, the walk that used to recurse.
    args = ["chat", "--base-url", server.base_url, "--model", "qwen3:8b", "--window", "32768",
            "--max-output", "256", "--archive", str(archive), "--json"]  # fmt: skip
    child = run_bounded(args, stdin, timeout=60)
    return child.code, child.stdout, child.stderr


def test_a_deep_tool_call_is_stored_answered_and_resumable(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsonl"
    with FakeServer(bad_call_reply(), Reply(body=without_usage(bodies.OPENAI_CHAT))) as server:
        code, out, err = chat(server, archive, "hello\n")
    assert code == 0, err
    assert json.loads(out)["turns"] == 1
    records = [json.loads(line) for line in archive.read_text(encoding="utf-8").splitlines()]
    messages = [r["message"] for r in records if r["type"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["arguments"] == UNCLOSED, "stored as the model wrote it"
    assert messages[2]["content"].startswith("error: ")
    with FakeServer(
        Reply(body=without_usage(bodies.OPENAI_CHAT))
    ) as server:  # resume: counts the bad call
        code, out, err = chat(server, archive, "and again\n")
    assert code == 0, err
    assert json.loads(out)["turns"] == 2


def test_a_body_nested_100k_deep_is_one_line(tmp_path: Path) -> None:
    deep = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with FakeServer(Reply(body=deep)) as server:
        code, out, err = chat(server, tmp_path / "a.jsonl", "hello\n")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert "HTTP 200 with JSON nested deeper than 128 levels" in line, line
    assert len(server.requests) == 1, "not retried: the server would send the same"


def test_an_executor_never_sees_a_malformed_call() -> None:
    seen: list[ToolCall] = []

    def executor(call: ToolCall) -> str:
        seen.append(call)
        return "ran"

    bad = ToolCall("c1", "read_file", UNCLOSED)
    good = ToolCall("c2", "read_file", '{"path": "a"}')
    provider = MockProvider()
    provider.enqueue(Message(role="assistant", tool_calls=(bad, good)), "done")
    agent = Agent(
        provider,
        window=32768,
        tools=(ToolSpec("read_file"),),
        tool_executor=executor,
        counter="qwen3",
    )
    assert agent.run_turn("go").text == "done"
    results = {m.tool_call_id: m.content for m in agent.history if m.role == "tool"}
    assert (
        results["c1"]
        == "error: the arguments of 'read_file' are JSON nested deeper than 128 levels; flatten it"
    )
    assert results["c2"] == "ran" and seen == [good]
