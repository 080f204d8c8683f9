"""Huge inputs stream: a child `ctxbudget` process's peak memory stays well below its input's size.

Uses bench/memory.py's file generators and peak-RSS measurement (the child's own high-water mark,
not its parent's pages); the benchmark runs the same at 1 GB / 500 MB (bench/memory.md).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tests.conftest import load_bench

MB = 2**20
BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("memory")


def growth_mb(bench: ModuleType, args: list[str], tiny: Path, big: Path) -> float:
    """Peak RSS of ``ctxbudget ARGS BIG`` minus that of the same command on a tiny file, in MB."""
    base = bench.measure("tiny", [args[0], str(tiny), *args[1:]])
    run = bench.measure("big", [args[0], str(big), *args[1:]])
    assert base.exit_code == 0 and run.exit_code == 0, (base, run)
    return float(run.peak_rss_kb - base.peak_rss_kb) / 1024


@pytest.mark.parametrize(
    ("size_mb", "flags", "bound_mb"),
    [
        (96, ["--estimator", "ctxbudget"], 64),  # measured growth: about 34 MB, flat in size
        (16, ["--tokenizer", "cl100k_base"], 48),  # about 24 MB; a held list of ids is > 100 MB
    ],
)
def test_count_streams_a_big_file(
    bench: ModuleType, tmp_path: Path, size_mb: int, flags: list[str], bound_mb: int
) -> None:
    tiny, big = tmp_path / "tiny.txt", tmp_path / "big.txt"
    bench.make_text(tiny, 1)
    assert bench.make_text(big, size_mb * MB) >= size_mb * MB
    assert growth_mb(bench, ["count", "--json", *flags], tiny, big) < bound_mb


@pytest.fixture(scope="module")
def sessions(
    bench: ModuleType, tmp_path_factory: pytest.TempPathFactory, traces_dir: Path
) -> tuple[Path, Path]:
    """A one-copy Pi session and a 48 MB one (about 8,200 calls) of the same lines."""
    folder = tmp_path_factory.mktemp("sessions")
    tiny, big = folder / "tiny.jsonl", folder / "big.jsonl"
    bench.make_session(tiny, 1, "pi", traces_dir)
    assert bench.make_session(big, 48 * MB, "pi", traces_dir) >= 48 * MB
    return tiny, big


# Growth over the one-copy session, measured: 0.1 MB streamed, 1.4 MB for the table (its capped
# previews). Before the columns: 9.2 MB for the table, 18.6 MB with --json; the text alone
# (most of the 48 MB) would be more.
REPLAY_BOUND_MB = 4


def test_replay_table_keeps_no_message_text(bench: ModuleType, sessions: tuple[Path, Path]) -> None:
    tiny, big = sessions
    assert growth_mb(bench, ["replay"], tiny, big) < REPLAY_BOUND_MB


def test_replay_json_streams_and_stays_flat(bench: ModuleType, sessions: tuple[Path, Path]) -> None:
    tiny, big = sessions
    assert growth_mb(bench, ["replay", "--json"], tiny, big) < REPLAY_BOUND_MB


# Issue 17 item 6. Each bound sits between the growth now and the old code's at the same size
# (bench/memory.md), measured: 16 MB of whitespace-free text, count ~60 MB (old 159); a 16 MB
# file, estimators ~27 MB (old 200); one 16 MB session line, replay ~55 MB (old 221).
def test_count_streams_text_without_whitespace(bench: ModuleType, tmp_path: Path) -> None:
    tiny, big = tmp_path / "tiny.txt", tmp_path / "big.txt"
    bench.make_unspaced_text(tiny, 1)
    assert bench.make_unspaced_text(big, 16 * MB) >= 16 * MB
    assert growth_mb(bench, ["count", "--json"], tiny, big) < 90


def test_estimators_stream_a_big_file(bench: ModuleType, tmp_path: Path) -> None:
    tiny, big = tmp_path / "tiny.txt", tmp_path / "big.txt"
    bench.make_text(tiny, 1)
    assert bench.make_text(big, 16 * MB) >= 16 * MB
    assert growth_mb(bench, ["estimators", "--json"], tiny, big) < 64


def test_replay_of_one_huge_line_keeps_estimates_bounded(
    bench: ModuleType, tmp_path: Path, traces_dir: Path
) -> None:
    # What is left is the reader's copies of the line (replay/); the estimators add none.
    tiny, big = tmp_path / "tiny.jsonl", tmp_path / "long.jsonl"
    bench.make_session(tiny, 1, "pi", traces_dir)
    assert bench.make_long_line_session(big, 16 * MB, traces_dir) >= 16 * MB
    assert growth_mb(bench, ["replay", "--json"], tiny, big) < 100
