"""`ctxbudget request` and `ctxbudget replay` on any file: exit 0, or exit 2 with one line on
stderr starting "ctxbudget: " (never exit 1, an internal error, never a traceback).

``make fuzz`` runs these with the "fuzz" Hypothesis profile (10,000+ examples each).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reliability_strategies import json_values, mutated_record, read_samples, session_bytes

from ctxbudget.cli.main import main

pytestmark = pytest.mark.fuzz

OPENAI_BODY = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
        }
    ],
}
ANTHROPIC_BODY = {
    "model": "claude-sonnet-4",
    "system": "be brief",
    "max_tokens": 1024,
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi <think>"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a"}]},
    ],
}


def run_cli(args: list[str]) -> tuple[int, str]:
    """Run the CLI in-process; return (exit code, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


def check_exit(args: list[str]) -> None:
    code, stderr = run_cli(args)
    assert "Traceback" not in stderr
    assert code in (0, 2), stderr
    errors = [line for line in stderr.splitlines() if not line.startswith("warning: ")]
    if code == 2:
        assert len(errors) == 1 and errors[0].startswith("ctxbudget: "), stderr
        assert len(errors[0]) > len("ctxbudget: ")


@pytest.fixture(scope="module")
def samples(traces_dir: Path) -> dict[str, list[Any]]:
    return read_samples(traces_dir)


@pytest.fixture(scope="module")
def input_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-fuzz") / "input.json"


request_files = (
    st.binary(max_size=400)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.sampled_from([OPENAI_BODY, ANTHROPIC_BODY])
    .flatmap(mutated_record)
    .map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
)
request_flags = st.sampled_from(
    [[], ["--tokenizer", "qwen3"], ["--tokenizer", "cl100k_base"], ["--model", "gpt-4o"],
     ["--tokenizer", "pi"], ["--model", "claude-sonnet-4"]]
)  # fmt: skip


@given(content=request_files, flags=request_flags)
def test_request_on_any_file(input_path: Path, content: bytes, flags: list[str]) -> None:
    input_path.write_bytes(content)
    check_exit(["request", str(input_path), "--json", *flags])


replay_flags = st.sampled_from(
    [[], ["--window", "128000"], ["--window", "0"], ["--format", "pi"], ["--format", "codex"],
     ["--window", "200000", "--policy", "pi"], ["--format", "mini-swe-agent", "--window", "9"]]
)  # fmt: skip


@given(data=st.data(), flags=replay_flags)
def test_replay_on_any_file(
    samples: dict[str, list[Any]], input_path: Path, data: st.DataObject, flags: list[str]
) -> None:
    input_path.write_bytes(data.draw(session_bytes(samples)))
    check_exit(["replay", str(input_path), "--json", *flags])
