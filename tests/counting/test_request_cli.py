"""``ctxbudget request``: the JSON contract and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxbudget.cli.request import request_command

BODY = {
    "model": "qwen3-8b",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "List files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
    ],
    "tools": [{"type": "function", "function": {"name": "ls", "description": "List a folder.",
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
}  # fmt: skip


@pytest.mark.parametrize(
    "flags", [[], ["--tokenizer", "qwen3"], ["--tokenizer", "cl100k_base"], ["--model", "gpt-4o"]]
)
def test_json_breakdown_adds_up(tmp_path: Path, flags: list[str]) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(BODY), encoding="utf-8")
    result = CliRunner().invoke(request_command, [str(path), "--json", *flags])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    parts = out["breakdown"]
    assert parts["system"] + parts["tools"] + parts["messages"] == out["tokens"]
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool"]
    assert sum(m["tokens"] for m in out["messages"]) == parts["messages"]
    assert out["floor"] == parts["system"] + parts["tools"]


def test_body_model_picks_the_exact_qwen_count() -> None:
    result = CliRunner().invoke(request_command, ["-", "--json"], input=json.dumps(BODY))
    out = json.loads(result.output)
    assert (out["counter"], out["kind"]) == ("qwen3", "exact")


def test_table_has_a_row_per_part() -> None:
    result = CliRunner().invoke(
        request_command, ["-", "--tokenizer", "qwen3"], input=json.dumps(BODY)
    )
    assert result.exit_code == 0
    for part in ("system", "tools", "messages"):
        assert part in result.output
