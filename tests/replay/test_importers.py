"""Importers on the shared real sessions and on malformed files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.replay.conftest import openai_pair, shared_trace

from ctxbudget.errors import TraceFormatError, UnknownNameError
from ctxbudget.replay import detect_format, load_trace

# Call counts from tests/data/traces/SOURCES.md (as recorded by the traces' publisher).
EXPECTED = [("claude-code", 17), ("codex", 169), ("mini-swe-agent", 61), ("pi", 253)]


@pytest.mark.parametrize(("fmt", "calls"), EXPECTED)
def test_shared_trace_call_counts(fmt: str, calls: int) -> None:
    trace = load_trace(shared_trace(fmt))
    assert trace.format == fmt
    assert len(trace.calls) == calls
    assert [c.index for c in trace.calls] == list(range(calls))
    assert all(c.context_tokens > 0 for c in trace.calls)
    assert trace.calls[0].task_start


@pytest.mark.parametrize(("fmt", "_calls"), EXPECTED)
def test_detect_format_matches_forced(fmt: str, _calls: int) -> None:
    path = shared_trace(fmt)
    assert detect_format(path) == fmt
    assert len(load_trace(path, fmt).calls) == len(load_trace(path).calls)


def test_pi_bad_escape_line_is_skipped_and_named() -> None:
    trace = load_trace(shared_trace("pi"))
    assert trace.skipped_lines == 1
    assert "line 31" in trace.warnings[0]
    # Pi's input excludes cache reads: context = input + cacheRead + cacheWrite (2336 + 10240).
    assert trace.calls[0].context_tokens == 2336 + 10240
    assert trace.calls[0].output_tokens == 168


def test_codex_dedupes_token_events_and_records_window() -> None:
    trace = load_trace(shared_trace("codex"))
    assert trace.window == 272_000
    assert trace.model == "gpt-5-codex"
    first = trace.calls[0]
    assert (first.context_tokens, first.output_tokens, first.cache_read_tokens) == (3037, 73, 2048)
    assert trace.calls[1].context_tokens == 3174  # not a repeat of the first event
    assert sum(c.task_start for c in trace.calls) == 13  # one per user_message event
    assert any(c.reasoning_tokens > 0 for c in trace.calls)


def test_claude_code_uses_last_line_of_each_message_id() -> None:
    trace = load_trace(shared_trace("claude-code"))
    first = trace.calls[0]
    # msg_016n7...: first line says output 1 (a start snapshot), the last says 242.
    assert first.output_tokens == 242
    assert first.context_tokens == 4 + 10215 + 4802
    assert first.cache_write_tokens == 10215
    assert sum(c.task_start for c in trace.calls) == 2


def test_mini_swe_usage() -> None:
    trace = load_trace(shared_trace("mini-swe-agent"))
    assert trace.model == "deepseek-chat"
    assert (trace.calls[0].context_tokens, trace.calls[0].output_tokens) == (1560, 94)
    assert trace.calls[0].cache_read_tokens == 320


def test_progress_reports_bytes() -> None:
    path = shared_trace("claude-code")
    seen: list[tuple[int, int]] = []
    load_trace(path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (path.stat().st_size, path.stat().st_size)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_skipped_line_number(write_log: Callable[[list[str]], Path]) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    path = write_log([openai_pair(msgs, 10, 2), "{not json", openai_pair(msgs, 12, 2)])
    trace = load_trace(path)
    assert trace.skipped_lines == 1
    assert "line 2" in trace.warnings[0]
    assert len(trace.calls) == 2


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"   \n\n", "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "binary"),
        (b"not json at all\n", "no line is a JSON object"),
        (b'{"foo": 1}\n{"bar": 2}\n', "not a known session format"),
        (b"[1, 2]\n", "no line is a JSON object"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert problem in str(info.value)
    assert "\n" not in str(info.value)


def test_no_call_with_usage(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "message": {"role": "user", "content": "x"},
    }
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(TraceFormatError, match="no model call with usage"):
        load_trace(path)


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(UnknownNameError):
        load_trace(shared_trace("pi"), "word")


def test_oversized_trajectory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxbudget.replay.importers import mini_swe

    monkeypatch.setattr(mini_swe, "MAX_TRAJECTORY_BYTES", 10)
    with pytest.raises(TraceFormatError, match="parsed whole"):
        load_trace(shared_trace("mini-swe-agent"))


def test_ctxbudget_archive_records(write_log: Callable[[list[str]], Path]) -> None:
    lines = [
        {"type": "message", "message": {"role": "user", "content": "task"}},
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": "a",
                "usage": {"input_tokens": 100, "output_tokens": 5},
            },
        },
        {"type": "message", "message": {"role": "tool", "content": "result"}},
        {"type": "usage", "input_tokens": 130, "output_tokens": 7, "reasoning_tokens": 3},
        {"type": "compaction", "id": "c1"},
        {"type": "usage", "input_tokens": 40, "output_tokens": 7},
    ]
    trace = load_trace(write_log([json.dumps(x) for x in lines]))
    assert trace.format == "ctxbudget"
    assert [c.context_tokens for c in trace.calls] == [100, 130, 40]
    assert trace.calls[1].reasoning_tokens == 3
    assert [c.after_compaction for c in trace.calls] == [False, False, True]
    assert trace.calls[0].task_start and not trace.calls[1].task_start
