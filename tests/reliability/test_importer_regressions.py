"""Inputs the fuzz tests found that once escaped the importers as non-ctxbudget errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbudget.errors import TraceFormatError
from ctxbudget.replay.importers import detect_format, load_trace
from ctxbudget.replay.importers._lines import MAX_DEPTH, as_int, too_deep

DEEP = "[" * 5000 + "]" * 5000
NEARLY_DEEP = "[" * 900 + "]" * 900  # parses, but printing or walking it recursively would not


def openai_line(prompt: object, content: str = '"hi"') -> str:
    line = json.dumps(
        {
            "request": {"messages": [{"role": "user", "content": "@"}]},
            "response": {"usage": {"prompt_tokens": prompt, "completion_tokens": 1}},
        }
    )
    return line.replace('"@"', content)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_token_counts_read_as_zero(value: float) -> None:
    assert as_int(value) == 0


@pytest.mark.parametrize(
    ("depth", "expected"), [(MAX_DEPTH, False), (MAX_DEPTH + 1, True), (3, False)]
)
def test_too_deep(depth: int, expected: bool) -> None:
    value: object = 1
    for _ in range(depth):
        value = [value]
    assert too_deep(value) is expected
    assert too_deep({"a": value}) is (depth + 1 > MAX_DEPTH)


@pytest.mark.parametrize(
    ("lines", "calls"),
    [
        # Infinity (once an OverflowError in int()): the usage reader rejects it, line skipped
        ([openai_line(1e999), openai_line(7)], 1),
        ([openai_line(5, DEEP), openai_line(7)], 1),  # RecursionError in json.loads
        ([openai_line(5, NEARLY_DEEP), openai_line(7)], 1),  # RecursionError in block_text
    ],
)
def test_hostile_lines_are_skipped(tmp_path: Path, lines: list[str], calls: int) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    trace = load_trace(path, "openai-log")
    assert len(trace.calls) == calls
    assert trace.calls[-1].context_tokens == 7


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        ('{"type": ["user"], "sessionId": "s"}', None),  # an unhashable "type" in a set lookup
        ('{"type": "response_item", "payload": {"type": {"a": 1}}}', "codex"),
        ('{"type": {"x": 1}, "message": {}}', "ctxbudget"),
        ('{"\\n": null}', None),  # a key with a newline, quoted into the error message
        ("{\n" + '"messages": ' + DEEP + "}", None),  # a trajectory too deep to parse
        ("{\n" + '"info": {}, "messages": [' + NEARLY_DEEP + "]}", None),
    ],
)
def test_hostile_files_give_one_line_errors(tmp_path: Path, content: str, fmt: str | None) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt)
    assert str(info.value).splitlines() == [str(info.value)]
    assert str(path) in str(info.value)


def test_detect_format_names_keys_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text('{"a\\nb": 1, "c\\u2028d": 2}\n', encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r'"a\\nb", "c\\u2028d"'):
        detect_format(path)
