"""Windows and counts read from a session file are checked: an absurd one is a one-line input
error (a window) or a skipped record (a count), never an internal error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.replay.conftest import openai_pair

from ctxbudget.budget.rules import MAX_WINDOW
from ctxbudget.cli.main import main
from ctxbudget.errors import TraceFormatError
from ctxbudget.replay import load_trace, replay_file


def codex_rollout(path: Path, window: Any, usages: list[dict[str, Any]]) -> Path:
    """A Codex rollout: a task, then one token_count event per usage, with ``window``."""
    lines: list[dict[str, Any]] = [
        {"type": "turn_context", "payload": {"model": "gpt-5-codex"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "go"}},
    ]
    for n, usage in enumerate(usages):
        info = {
            "total_token_usage": {"input_tokens": n + 1},
            "last_token_usage": usage,
            "model_context_window": window,
        }
        lines.append({"type": "event_msg", "payload": {"type": "token_count", "info": info}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    return path


def archive(path: Path, window: Any) -> Path:
    lines = [
        {"type": "header", "model": "m", "window": window},
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "usage", "usage": {"input_tokens": 10, "output_tokens": 5}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    return path


def replay_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(["replay", *args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SMALL = {"input_tokens": 1000, "output_tokens": 100}
BAD_WINDOWS = [2**63, 2**63 - 1, 1e300, MAX_WINDOW + 1, 0, -5, "272000", 272000.5]


@pytest.mark.parametrize("window", BAD_WINDOWS, ids=repr)
@pytest.mark.parametrize("kind", ["codex", "archive"])
def test_a_recorded_window_out_of_range_is_a_one_line_input_error(
    tmp_path: Path, kind: str, window: object, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    codex_rollout(path, window, [SMALL]) if kind == "codex" else archive(path, window)
    with pytest.raises(TraceFormatError, match=r"line [0-9]+: (model_context_)?window must be"):
        load_trace(path)
    code, out, err = replay_cli([str(path)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "the file is damaged" in err


@pytest.mark.parametrize("window", [1, 272_000, MAX_WINDOW, 272_000.0, None])
def test_a_plausible_or_missing_window_is_read(tmp_path: Path, window: object) -> None:
    trace = load_trace(codex_rollout(tmp_path / "s.jsonl", window, [SMALL]))
    assert trace.window == (None if window is None else int(window))  # type: ignore[call-overload]


def test_reasoning_past_any_window_is_skipped_not_summed_into_an_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each count fitted 8 bytes, but a task's reasoning summed past 2^63 (OverflowError).
    huge = 2**62 + 2**61
    usages = [{"input_tokens": 100, "output_tokens": huge, "reasoning_output_tokens": huge}] * 3
    path = codex_rollout(tmp_path / "s.jsonl", 272_000, [*usages, SMALL])
    result = replay_file(path)
    assert len(result.trace.calls) == 1 and result.trace.skipped_lines == 3
    assert all("a token count above 100,000,000" in w for w in result.trace.warnings)
    code, out, _ = replay_cli([str(path), "--json"], capsys)
    assert code == 0 and json.loads(out)["trace"]["skipped_lines"] == 3


@pytest.mark.parametrize("count", [MAX_WINDOW + 1, 2**63 - 1])
def test_a_usage_count_larger_than_any_window_skips_its_line(tmp_path: Path, count: int) -> None:
    path = tmp_path / "log.jsonl"
    lines = [
        openai_pair([{"role": "user", "content": "a"}], count, 2),
        openai_pair([{"role": "user", "content": "b"}], MAX_WINDOW, 2),
    ]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    trace = load_trace(path)
    assert [c.context_tokens for c in trace.calls] == [MAX_WINDOW]
    assert trace.skipped_lines == 1
