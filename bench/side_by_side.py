"""Rows of bench/hf.py and bench/counting.py for two source trees, run alternately.

The machine is shared and noisy: each round runs the rows once for the tree before and once for
the tree after, each in a fresh process, and the table gives each row's median over the rounds.

Run (the tree before as a worktree of an older commit; remove it after):

    git worktree add /tmp/count-base fdfffe7^1
    PYTHONPATH=$PWD/src .venv/bin/python bench/side_by_side.py /tmp/count-base . --rounds 3
    git worktree remove /tmp/count-base

``--only TEXT`` (repeatable) runs just the rows whose name contains TEXT, e.g.
``--only counting.py --only 'step | qwen3 |'``; the 1,000,000-token step row (the first step
after a full count, so with cold CPU caches) varies by ±10 µs from process to process: give it
more rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any


def rows(tree: Path, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Seconds per row, with ``tree``'s code and benchmark helpers; with ``only``, just the rows
    whose name contains one of those strings."""

    def wanted(key: str) -> bool:
        return not only or any(part in key for part in only)

    sys.path[:0] = [str(tree / "src"), str(tree / "bench"), str(tree)]
    import counting as c  # the tree's bench/counting.py
    import hf as h  # the tree's bench/hf.py
    from ctxbudget.counting import count_request

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "hf:qwen2.5 folder": "qwen2.5",
            "hf:Llama-3 folder": "llama3-cl100k",
            "hf:SmolLM3 folder + tools": "smollm3-template",
            "hf:Hermes-2-Pro folder + tools": "hermes-2-pro-template",
        }
        counters = {"qwen3": "qwen3"}
        counters |= {k: f"hf:{h.hf_folder_at(v, Path(tmp))}" for k, v in folders.items()}
        for label, counter in counters.items():
            if not wanted(f"hf.py step | {label} |"):
                continue
            for size in (1_000, 100_000):
                even = h.conversation(size)
                if "tools" in label:
                    even = replace(even, tools=(h.READ_FILE,))
                odd = even.with_messages(even.messages[:-1])
                cases: list[tuple[str, Any, str]] = [
                    ("user turn (~110 tokens)", even, h.NEW),
                    ("reply (~110 tokens)", odd, h.NEW),
                    ("reply (~500 tokens)", odd, h.LONG),
                    ("tool result (~2K tokens)", even, h.TOOL_RESULT),
                ]
                for kind, base, text in cases:
                    took, _ = h.step(counter, base, h.REPEATS[text] // 2, text)
                    out[f"hf.py step | {label} | {kind} | {size:,}"] = took
        for label in ("hf:qwen2.5 folder", "hf:Llama-3 folder"):
            for size in (8_000, 80_000):
                if not wanted(f"hf.py full count | {label} | {size:,}"):
                    continue
                request = h.conversation(size)
                out[f"hf.py full count | {label} | {size:,}"] = c.median_time(
                    lambda r=request, n=counters[label]: count_request(r, n), repeat=5
                )
    for size in (1_000, 100_000, 1_000_000):
        if not wanted(f"counting.py step | qwen3 | {size:,}"):
            continue
        base = c.conversation(size)
        repeat = 5 if size == 1_000_000 else 15
        out[f"counting.py step | qwen3 | {size:,}"] = c.step_time("qwen3", base, repeat=repeat)
    if wanted("counting.py step | o200k_base | 200,000"):
        out["counting.py step | o200k_base | 200,000"] = c.step_time(
            "o200k_base", c.conversation(200_000), repeat=15
        )
    for size in (10_000, 200_000):
        if not wanted(f"counting.py full count_request | qwen3 | {size:,}"):
            continue
        request = c.conversation(size)
        out[f"counting.py full count_request | qwen3 | {size:,}"] = c.median_time(
            lambda r=request: count_request(r, "qwen3")
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only the rows whose name contains TEXT (repeatable), e.g. 'counting.py'",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    only = tuple(args.only)
    if args.one:  # a child: one tree's rows as JSON
        print(json.dumps(rows(args.before.resolve(), only)))
        return
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side in ("before", "after"):
            tree = getattr(args, side).resolve()
            command = [sys.executable, __file__, str(tree), str(tree), "--one"]
            command += [f"--only={part}" for part in only]
            done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.splitlines()[-1]))
    print("| row | before | after | after / before |")
    print("|---|---|---|---|")
    for key in runs["before"][0]:
        b = statistics.median(r[key] for r in runs["before"])
        a = statistics.median(r[key] for r in runs["after"])
        print(f"| {key} | {b * 1e3:.3f} ms | {a * 1e3:.3f} ms | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
