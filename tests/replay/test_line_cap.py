"""Session lines are read up to `MAX_LINE_BYTES`; a longer one is skipped without being held
whole (tests/reliability/test_session_line_cap.py checks a 1 GB line's memory)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tests.replay.conftest import openai_pair

from ctxbudget.replay import load_trace
from ctxbudget.replay.importers import _lines
from ctxbudget.replay.importers._lines import bounded_lines


def test_the_cap_counts_the_line_without_its_newline() -> None:
    lines = [b"12345678\n", b"123456789\n", b"\n", b"abc", b""]
    text = b"".join(lines)
    got = list(bounded_lines(io.BytesIO(text), 8))
    assert got == [(b"12345678\n", 9), (None, 10), (b"\n", 1), (b"abc", 3)]
    assert list(bounded_lines(io.BytesIO(b"123456789"), 8)) == [(None, 9)]


def test_a_long_line_passes_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lines, "_SKIP_PIECE_BYTES", 4)
    text = b"x" * 50 + b"\nnext\n"
    assert list(bounded_lines(io.BytesIO(text), 8)) == [(None, 51), (b"next\n", 5)]


def test_a_line_over_the_cap_is_skipped_and_the_rest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 1000)
    small = openai_pair([{"role": "user", "content": "a"}], 10, 2)
    big = openai_pair([{"role": "user", "content": "b" * 5000}], 20, 2)
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([small, big, small]) + "\n", "utf-8")
    trace = load_trace(path)
    assert len(trace.calls) == 2 and trace.skipped_lines == 1
    size = len(big) + 1
    assert trace.warnings == (f"s.jsonl: line 2 skipped: {size:,} bytes, longer than the 0 MiB "
                              "a line may be",)  # fmt: skip


def test_the_cap_is_the_archives_record_cap() -> None:
    from ctxbudget.compaction.archive import MAX_RECORD_BYTES

    assert _lines.MAX_LINE_BYTES == MAX_RECORD_BYTES == 64 * 2**20
