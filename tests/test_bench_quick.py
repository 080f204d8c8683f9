"""bench/run_all.py's quick run (``make bench-quick``, CI): every script of bench/ has its small
flags in BENCHES, each block-writing script gets ``--out`` a temporary copy of bench/*.md, and
the run fails when a script fails, leaves its block unwritten or writes the committed results.
No benchmark runs here: a stand-in runner plays the scripts."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from tests.conftest import load_bench

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    return load_bench("run_all")


def _out_dir(cmd: list[str]) -> Path | None:
    """The folder a command's ``--out`` names, if any."""
    return Path(cmd[cmd.index("--out") + 1]) if "--out" in cmd else None


class Scripts:
    """A stand-in runner: each script 'writes' its declared blocks where ``--out`` says."""

    def __init__(self, run_all: ModuleType, blocks: ModuleType) -> None:
        self.run_all, self.blocks = run_all, blocks
        self.commands: list[list[str]] = []

    def __call__(self, cmd: list[str]) -> int:
        self.commands.append(cmd)
        name = Path(cmd[1]).name
        out = _out_dir(cmd)
        for file, block in self.run_all.BENCHES[name].blocks:
            assert out is not None, f"{name} writes {file} but was given no --out"
            self.blocks.write_block(out / file, block, f"numbers of {name}")
        return 0


@pytest.fixture
def fake_bench(run_all: ModuleType, tmp_path: Path) -> Iterator[Path]:
    """run_all pointed at a copy of bench/ (scripts empty, the .md as committed), so a
    stand-in that writes where it should not cannot touch the real files."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for md in BENCH.glob("*.md"):
        shutil.copyfile(md, bench / md.name)
    for name in [*run_all.BENCHES, *run_all.HELPERS]:
        (bench / name).write_text("", encoding="utf-8")
    shutil.copyfile(ROOT / "BENCHMARKS.md", tmp_path / "BENCHMARKS.md")
    saved = run_all.HERE, run_all.REPO, run_all.BENCHMARKS
    run_all.HERE, run_all.REPO, run_all.BENCHMARKS = bench, tmp_path, tmp_path / "BENCHMARKS.md"
    try:
        yield bench
    finally:
        run_all.HERE, run_all.REPO, run_all.BENCHMARKS = saved


def test_every_bench_script_has_its_quick_flags(run_all: ModuleType) -> None:
    """A new bench/*.py fails here until BENCHES says how CI runs it small."""
    on_disk = sorted(p.name for p in BENCH.glob("*.py") if p.name not in run_all.HELPERS)
    assert on_disk == sorted(run_all.BENCHES), "add the new script to BENCHES in bench/run_all.py"
    assert run_all.scripts() == on_disk


def test_block_writers_declare_their_blocks_and_take_out(
    run_all: ModuleType, blocks: ModuleType
) -> None:
    """A script that writes a block declares it (so the quick run checks it was written) and
    takes ``--out`` (so the quick run can send it to the temporary copy)."""
    for name, bench in run_all.BENCHES.items():
        source = (BENCH / name).read_text("utf-8")
        assert ("write_block(" in source) == bool(bench.blocks), name
        if bench.blocks:
            assert "add_out_argument(parser)" in source or '"--out"' in source, name
        for file, block in bench.blocks:
            assert blocks.read_block((BENCH / file).read_text("utf-8"), block) is not None, (
                f"{name} declares the block '{block}' of {file}, which has no such markers"
            )


def test_quick_writes_a_temporary_copy_not_bench(
    run_all: ModuleType, blocks: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against the real bench/: every script runs with its quick flags, each block writer's
    --out is a temporary folder, and bench/*.md and BENCHMARKS.md are left as they were."""
    committed = {p: p.read_bytes() for p in [*BENCH.glob("*.md"), ROOT / "BENCHMARKS.md"]}
    scripts = Scripts(run_all, blocks)
    assert run_all.quick(scripts) == 0, capsys.readouterr().out
    ran = {Path(cmd[1]).name: cmd for cmd in scripts.commands}
    assert sorted(ran) == sorted(run_all.BENCHES)
    for name, cmd in ran.items():
        assert cmd[2 : 2 + len(run_all.BENCHES[name].quick)] == list(run_all.BENCHES[name].quick)
        out = _out_dir(cmd)
        assert (out is not None) == bool(run_all.BENCHES[name].blocks), name
        if out is not None:
            assert out.resolve() != BENCH.resolve() and not out.exists(), "not removed after"
    assert {p: p.read_bytes() for p in committed} == committed


def test_quick_fails_when_a_script_writes_the_committed_results(
    run_all: ModuleType, blocks: ModuleType, fake_bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scripts = Scripts(run_all, blocks)

    def writes_bench(cmd: list[str]) -> int:
        if Path(cmd[1]).name == "hf.py":  # as if it ignored --out
            blocks.write_block(fake_bench / "hf.md", "hf.py", "numbers from CI")
        return scripts(cmd)

    assert run_all.quick(writes_bench) == 1
    assert "wrote the committed results: bench/hf.md" in capsys.readouterr().out


def test_quick_fails_when_a_block_is_not_written_or_a_script_fails(
    run_all: ModuleType, fake_bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails_memory(cmd: list[str]) -> int:  # writes no block; memory.py exits 1
        return 1 if Path(cmd[1]).name == "memory.py" else 0

    assert run_all.quick(fails_memory) == 1
    out = capsys.readouterr().out
    assert "memory.py exited 1" in out
    assert "server_count.py did not write its block 'server_count.py' of server_count.md" in out


def test_quick_and_full_fail_on_a_script_missing_from_the_table(
    run_all: ModuleType, blocks: ModuleType, fake_bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_bench / "new_bench.py").write_text("", encoding="utf-8")
    assert run_all.quick(Scripts(run_all, blocks)) == 1
    assert run_all.full(lambda cmd: 0) == 1
    assert capsys.readouterr().out.count("add new_bench.py to BENCHES") == 2


def test_full_runs_the_record_and_leaves_out_side_by_side(
    run_all: ModuleType, fake_bench: Path
) -> None:
    """make bench: every script at full size but side_by_side.py (two trees, run by hand;
    without its two arguments it fails), with no --out: the blocks go to bench/*.md."""
    commands: list[list[str]] = []
    assert run_all.full(lambda cmd: commands.append(cmd) or 0) == 0
    ran = [Path(cmd[1]).name for cmd in commands]
    assert ran == sorted(set(run_all.BENCHES) - {"side_by_side.py"})
    assert all(_out_dir(cmd) is None for cmd in commands)
