"""Deep nesting is a one-line error or plain text, never a ``RecursionError``.

The CLI cases run ``ctxbudget`` in a child process under a memory limit and a timeout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.providers.hostile import run_bounded

from ctxbudget.errors import MessageFormatError
from ctxbudget.messages import ToolCall, ToolSpec
from ctxbudget.messages.jsondepth import MAX_JSON_DEPTH, JsonTooDeep, json_depth, load_json


def nested(depth: int) -> object:
    value: object = "leaf"
    for level in range(depth):
        value = {"x": value} if level % 2 else [value]
    return value


def schema(depth: int) -> dict[str, object]:
    """A JSON schema nesting ``properties`` ``depth`` times (2 JSON levels each)."""
    value: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


@pytest.mark.parametrize("depth", [0, 1, 5, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 5000])
def test_depth_is_measured_without_recursion(depth: int) -> None:
    value = nested(depth)
    expected = min(depth, MAX_JSON_DEPTH + 1)
    assert json_depth(value) == expected, "stops counting just past the cap"
    assert json_depth(value, limit=10**6) == depth


@pytest.mark.parametrize(
    "text", ["[" * 1500, "[" * 100_000, '{"a":' * 600 + "1" + "}" * 600, "[" * 129 + "]" * 129]
)
def test_deep_json_text_is_too_deep(text: str) -> None:
    with pytest.raises(JsonTooDeep, match="nested deeper than 128 levels"):
        load_json(text)
    call = ToolCall("c1", "read_file", text)
    assert call.parsed_arguments() == text, "too deep is text, as any non-JSON"
    assert "nested deeper than 128 levels" in (call.argument_problem() or "")


def test_shallow_json_and_blank_arguments_are_fine() -> None:
    assert load_json("[" * 128 + "]" * 128) is not None
    assert ToolCall("c", "f", '{"path": "a"}').argument_problem() is None
    assert ToolCall("c", "f", "").argument_problem() is None
    assert "not valid JSON" in (ToolCall("c", "f", '{"path": ').argument_problem() or "")


@pytest.mark.parametrize("depth", [300, 480])
def test_a_deep_tool_schema_is_refused(depth: int) -> None:
    with pytest.raises(MessageFormatError, match="tool 'f' parameters: JSON nested deeper"):
        ToolSpec("f", parameters=schema(depth // 2))


def request_file(tmp_path: Path, body: dict[str, object]) -> str:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def call_message(arguments: str) -> dict[str, object]:
    function = {"name": "read_file", "arguments": arguments}
    return {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": function}],
    }


CASES = {
    "600-deep arguments": {"messages": [call_message('{"a":' * 600 + "1" + "}" * 600)]},
    "1,500 unclosed [": {"messages": [call_message("[" * 1500)]} | {"tools": []},
    "schema 300 deep": {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(150)}}],
    },
    "schema 480 deep": {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(240)}}],
    },
}


@pytest.mark.parametrize("tokenizer", ["qwen3", "ctxbudget"])
@pytest.mark.parametrize("case", CASES)
def test_request_with_deep_json_is_one_line(tmp_path: Path, case: str, tokenizer: str) -> None:
    source = request_file(tmp_path, CASES[case])
    child = run_bounded(["request", source, "--tokenizer", tokenizer], timeout=60, max_mb=600)
    assert child.code == 2, child.stderr
    (line,) = child.stderr.splitlines()
    assert line.startswith(f"ctxbudget: {source}: ") and "nested deeper than 128 levels" in line
