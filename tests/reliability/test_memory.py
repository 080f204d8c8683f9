"""Huge inputs stream: a child `ctxbudget` process's peak memory stays well below its input's size.

Uses bench/memory.py's file generators and its wait4-based peak-RSS measurement; the benchmark
runs the same at 1 GB / 500 MB (bench/memory.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

MB = 2**20
BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ctxbudget_bench_memory", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


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


def test_replay_keeps_no_message_text(bench: ModuleType, tmp_path: Path, traces_dir: Path) -> None:
    tiny, big = tmp_path / "tiny.jsonl", tmp_path / "big.jsonl"
    bench.make_session(tiny, 1, "pi", traces_dir)
    size = bench.make_session(big, 48 * MB, "pi", traces_dir)
    # Per-call numbers grow about 0.45 MB per MB of Pi session (bench/memory.md); the text the
    # calls carried (most of the file) would add tens of MB more.
    assert growth_mb(bench, ["replay", "--json"], tiny, big) < 2 / 3 * size / MB
