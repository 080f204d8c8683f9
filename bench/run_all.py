"""Run every benchmark under bench/ in turn: the record (``make bench``), or a quick check (CI).

    python bench/run_all.py           # make bench: full sizes, each block written to bench/*.md
    python bench/run_all.py --quick   # make bench-quick (CI): small sizes, bench/*.md untouched

The quick run gives each script its small flags from BENCHES, and to each script that writes a
block ``--out`` a temporary copy of bench/*.md; it fails unless every script exits 0, every
block it declares was written into the copy, the copy still assembles (bench/collect.py), and
bench/*.md and BENCHMARKS.md are byte for byte as before. Numbers from a shared CI machine are
not the record: only ``make bench`` writes them.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from blocks import read_block, replace_block  # bench/blocks.py, beside this script
from collect import BENCHMARKS, assemble, read_sources  # bench/collect.py, beside this script

HERE = Path(__file__).parent
REPO = HERE.parent
HELPERS = frozenset({"run_all.py", "collect.py", "blocks.py"})
"""Files of bench/ that are not benchmarks."""
PENDING = "(run_all.py --quick: this block was not written)"
"""What a declared block holds in the quick run's copy until its script writes it."""
QUICK_TIMEOUT_S = 600
"""One quick script's limit: a hang fails CI's step instead of eating its 90 minutes."""


@dataclass(frozen=True, slots=True)
class Bench:
    """How to run one script of bench/."""

    quick: tuple[str, ...]
    """Its flags in the quick run: small sizes, a few seconds to a minute."""
    blocks: tuple[tuple[str, str], ...] = ()
    """The blocks it writes, (file under bench/, block name); such a script takes ``--out``."""
    full: tuple[str, ...] | None = ()
    """Its flags in ``make bench``; None: make bench does not run it (say why beside it)."""


def flags(line: str) -> tuple[str, ...]:
    """A command line's flags, split as a shell would (quotes kept together)."""
    return tuple(shlex.split(line))


# Every script of bench/ but HELPERS; tests/test_bench_quick.py fails on one missing here.
BENCHES: dict[str, Bench] = {
    "counting.py": Bench(quick=()),  # about 5 s at its full sizes
    "estimators.py": Bench(quick=flags("--repeat 1")),
    "gateway.py": Bench(
        quick=flags(
            "--sizes 1000 --conversations 1 --steps 2 --concurrent 2 --concurrent-steps 1"
            " --rounds 1 --idle 10"
        ),
        blocks=(("gateway.md", "gateway.py"),),
    ),
    "gateway_steps.py": Bench(quick=flags("--sizes 2000 --conversations 1 --steps 3")),
    "gateway_load.py": Bench(
        quick=flags("--conversations 4 --steps 3 --size 8000 --window 6000 --probe-sizes 8000"),
        blocks=(("gateway.md", "gateway_load.py"),),
    ),
    "hf.py": Bench(quick=flags("--max-size 10000 --repeats 5"), blocks=(("hf.md", "hf.py"),)),
    "memory.py": Bench(quick=flags("--session-mb 2 --text-mb 2 --line-mb 2")),
    "replay_rules.py": Bench(quick=(), blocks=(("replay_rules.md", "replay_rules.py"),)),
    "server_count.py": Bench(  # the llama-server that make test-server builds
        quick=flags("--requests 5"), blocks=(("server_count.md", "server_count.py"),)
    ),
    # Compares two source trees (its docstring says how): by hand, not in make bench. The quick
    # run compares this tree with itself on one small row, to see that it still runs.
    "side_by_side.py": Bench(
        quick=flags(". . --rounds 1 --only 'counting.py full count_request | qwen3 | 10,000'"),
        full=None,
    ),
}

Runner = Callable[[list[str]], int]
"""Runs one command from the repository root; its exit code."""


def scripts() -> list[str]:
    """The benchmark scripts of bench/, by name."""
    return sorted(p.name for p in HERE.glob("*.py") if p.name not in HELPERS)


def command(name: str, flags: Sequence[str]) -> list[str]:
    """The command that runs bench/``name`` with ``flags`` in this Python."""
    return [sys.executable, str(HERE / name), *flags]


def run_command(cmd: list[str], timeout: float | None = None) -> int:
    """Run ``cmd`` from the repository root, its output to ours; its exit code (124: timed out)."""
    try:
        return subprocess.run(cmd, cwd=REPO, check=False, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"timed out after {timeout:.0f} s: {' '.join(cmd)}", flush=True)
        return 124


def unknown(names: Sequence[str]) -> list[str]:
    """Scripts of bench/ that BENCHES does not list."""
    return [name for name in names if name not in BENCHES]


def full(runner: Runner = run_command) -> int:
    """``make bench``: every script at its full sizes, blocks into bench/*.md; exit code."""
    missing = unknown(scripts())
    if missing:
        print(f"run_all.py: add {', '.join(missing)} to BENCHES in bench/run_all.py")
        return 1
    for name in scripts():
        bench = BENCHES[name]
        if bench.full is None:
            print(f"== {name}: not part of make bench (run by hand, see its docstring)")
            continue
        print(f"== {name}", flush=True)
        code = runner(command(name, bench.full))
        if code:
            print(f"run_all.py: {name} exited {code}")
            return code
    return 0


def snapshot() -> dict[Path, bytes]:
    """The committed results: bench/*.md and BENCHMARKS.md, byte for byte."""
    return {p: p.read_bytes() for p in [*sorted(HERE.glob("*.md")), BENCHMARKS]}


def quick(runner: Runner | None = None) -> int:
    """CI's check: every script on small sizes, its blocks into a temporary copy of bench/*.md
    (checked written), nothing written under bench/; 0 when all is well, else 1."""
    run = runner or (lambda cmd: run_command(cmd, QUICK_TIMEOUT_S))
    names = scripts()
    failures = [f"add {name} to BENCHES in bench/run_all.py" for name in unknown(names)]
    before = snapshot()
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ctxbudget-bench-quick-") as tmp:
        out = Path(tmp)
        for md in HERE.glob("*.md"):
            shutil.copyfile(md, out / md.name)
        for name in names:
            for file, block in BENCHES[name].blocks if name in BENCHES else ():
                copy = out / file
                old = copy.read_text("utf-8") if copy.exists() else ""
                copy.write_text(replace_block(old, block, PENDING), encoding="utf-8")
        for name in names:
            if name not in BENCHES:
                continue
            bench = BENCHES[name]
            flags = [*bench.quick, *(("--out", str(out)) if bench.blocks else ())]
            print(f"== {name} {' '.join(flags)}".rstrip(), flush=True)
            start = time.perf_counter()
            code = run(command(name, flags))
            seconds[name] = time.perf_counter() - start
            if code:
                failures.append(f"{name} exited {code}")
                continue
            for file, block in bench.blocks:
                copy = out / file
                written = read_block(copy.read_text("utf-8"), block) if copy.exists() else None
                if written is None or written == PENDING or not written.strip():
                    failures.append(f"{name} did not write its block '{block}' of {file}")
        try:
            assemble(read_sources(out))
        except (OSError, ValueError) as e:
            failures.append(f"the quick run's bench/*.md do not assemble: {e}")
    after = snapshot()
    changed = sorted(
        str(p.relative_to(REPO)) for p in {*before, *after} if before.get(p) != after.get(p)
    )
    if changed:
        failures.append(f"the quick run wrote the committed results: {', '.join(changed)}")
    took = ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items())
    print(f"run_all.py --quick: {took}")
    for failure in failures:
        print(f"run_all.py --quick: FAILED: {failure}")
    if not failures:
        print(f"run_all.py --quick: {len(seconds)} scripts ran, their blocks written into a "
              "temporary copy; bench/*.md and BENCHMARKS.md untouched")  # fmt: skip
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``run_all.py``: the record; ``run_all.py --quick``: CI's check. The exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, nothing written under bench/ (CI)"
    )
    args = parser.parse_args(argv)
    return quick() if args.quick else full()


if __name__ == "__main__":
    sys.exit(main())
