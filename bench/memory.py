"""Peak memory of `ctxbudget replay`, `count` and `estimators` on huge inputs.

Run: .venv/bin/python bench/memory.py [--session-mb 1024] [--text-mb 500] [--line-mb 300]
     [--format pi]
Files are generated in a temporary folder (deleted afterwards) from the real
traces in tests/data/traces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data" / "traces"
SESSIONS = {
    "pi": "pi-agent_pinion05-agent-complex-task_03-raddit-dashboard-pr.jsonl",
    "claude-code": "claude-code_guideai-session-processing_claude-code-sample-1.jsonl",
}
HEADER_LINES = {"pi": 6, "claude-code": 0}  # Pi's session/model lines come once, at the top
SAMPLE_TEXT = REPO / "src" / "ctxbudget" / "data" / "sample.txt"
MB = 2**20


@dataclass(frozen=True, slots=True)
class Run:
    """One measured command."""

    label: str
    args: tuple[str, ...]
    input_bytes: int
    peak_rss_kb: int
    wall_s: float
    exit_code: int


def make_session(path: Path, size: int, fmt: str = "pi", traces: Path = TRACES) -> int:
    """Write a session of about ``size`` bytes: the real trace's lines repeated, ids renamed."""
    lines = (traces / SESSIONS[fmt]).read_bytes().splitlines(keepends=True)
    head, body = lines[: HEADER_LINES[fmt]], lines[HEADER_LINES[fmt] :]
    written = 0
    with path.open("wb") as f:
        for line in head:
            written += f.write(line)
        rep = 0
        while rep == 0 or written < size:  # at least one whole copy of the real trace
            # Renamed ids and message ids keep each repetition a distinct conversation span.
            prefix = b'"id":"r%d-' % rep
            for line in body:
                written += f.write(line.replace(b'"id":"', prefix))
            rep += 1
    return written


def make_long_line_session(path: Path, size: int, traces: Path = TRACES) -> int:
    """Write the real Pi trace with its first user message replaced by about ``size`` bytes of
    the packaged sample's text: one line that long (a pasted log or file)."""
    lines = (traces / SESSIONS["pi"]).read_bytes().splitlines(keepends=True)
    sample = SAMPLE_TEXT.read_text(encoding="utf-8")
    big = sample * (size // len(sample.encode("utf-8")) + 1)
    written = 0
    with path.open("wb") as f:
        for i, line in enumerate(lines):
            if b'"role":"user"' in line:
                record = json.loads(line)
                record["message"]["content"] = [{"type": "text", "text": big}]
                line = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
                written += f.write(line)
                for rest in lines[i + 1 :]:
                    written += f.write(rest)
                break
            written += f.write(line)
    return written


def make_text(path: Path, size: int) -> int:
    """Write about ``size`` bytes of text: the packaged sample, each copy numbered."""
    sample = SAMPLE_TEXT.read_bytes()
    written = 0
    with path.open("wb") as f:
        n = 0
        while written < size:
            written += f.write(b"%d. " % n + sample)
            n += 1
    return written


def make_unspaced_text(path: Path, size: int) -> int:
    """Write about ``size`` bytes of text with no whitespace at all: the packaged sample (mixed
    Chinese, English and code) with its spaces and newlines removed, repeated."""
    sample = b"".join(SAMPLE_TEXT.read_bytes().split())
    written = 0
    with path.open("wb") as f:
        while written < size:
            written += f.write(sample)
    return written


def measure(label: str, args: list[str], input_bytes: int = 0) -> Run:
    """Run ``ctxbudget ARGS`` as a child and measure its own peak RSS."""
    return measure_command(label, ["-m", "ctxbudget.cli.main", *args], input_bytes)


# A child's ru_maxrss also counts the pages it shared with its parent before exec (subprocess
# forks or vforks), so under pytest (a 50 MB parent) every small child read as 50 MB. The child
# reports its own high-water mark after exec (VmHWM, Linux) instead; elsewhere ru_maxrss stays.
PEAK_WRAPPER = """
import atexit, runpy, sys
def report(out=sys.argv[1]):
    try:
        with open("/proc/self/status") as f:
            kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return
    with open(out, "w") as f:
        f.write(kb)
atexit.register(report)
kind, target, *rest = sys.argv[2:]
if kind == "-m":
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *rest]
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


def measure_command(label: str, args: list[str], input_bytes: int = 0) -> Run:
    """Run ``python ARGS`` (``-m MODULE ...`` or ``-c CODE ...``) as a child; its own peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = Path(tmp) / "peak_kb"
        cmd = [sys.executable, "-c", PEAK_WRAPPER, str(peak_file), *args]
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        reported = peak_file.read_text() if peak_file.exists() else ""
    peak_kb = int(reported) if reported.isdigit() else usage.ru_maxrss
    code = os.waitstatus_to_exitcode(status)
    return Run(label, tuple(args), input_bytes, peak_kb, wall, code)


def print_table(runs: list[Run]) -> None:
    print(f"{'command':<52} {'input MB':>9} {'peak RSS MB':>12} {'wall s':>8} {'exit':>5}")
    for r in runs:
        print(
            f"{r.label:<52} {r.input_bytes / MB:>9.1f} {r.peak_rss_kb / 1024:>12.1f} "
            f"{r.wall_s:>8.1f} {r.exit_code:>5}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--session-mb", type=float, default=1024)
    parser.add_argument("--text-mb", type=float, default=500)
    parser.add_argument("--line-mb", type=float, default=300, help="the one huge session line")
    parser.add_argument("--format", choices=sorted(SESSIONS), default="pi")
    parser.add_argument("--dir", help="Where to write the temporary files (default: $TMPDIR).")
    opts = parser.parse_args()
    need = int((opts.session_mb + 2 * opts.text_mb + opts.line_mb) * MB)
    root = Path(opts.dir or tempfile.gettempdir())
    free = shutil.disk_usage(root).free
    if free < need * 1.2:
        sys.exit(f"memory.py: {root} has {free // MB} MB free; {need // MB} MB needed")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        folder = Path(tmp)
        tiny_session, big_session = folder / "tiny.jsonl", folder / "big.jsonl"
        tiny_text, big_text = folder / "tiny.txt", folder / "big.txt"
        tiny = make_session(tiny_session, 1, opts.format)  # one repetition of the real trace
        session = make_session(big_session, int(opts.session_mb * MB), opts.format)
        make_text(tiny_text, 1)
        text = make_text(big_text, int(opts.text_mb * MB))
        tiny_unspaced, big_unspaced = folder / "tiny-unspaced.txt", folder / "unspaced.txt"
        make_unspaced_text(tiny_unspaced, 1)
        unspaced = make_unspaced_text(big_unspaced, int(opts.text_mb * MB))
        long_line = folder / "long-line.jsonl"
        line = make_long_line_session(long_line, int(opts.line_mb * MB))
        runs = [
            measure("replay tiny --json (baseline)", ["replay", str(tiny_session), "--json"], tiny),
            measure("replay BIG --json", ["replay", str(big_session), "--json"], session),
            measure("replay BIG (table)", ["replay", str(big_session)], session),
            measure("count tiny --json (baseline)", ["count", str(tiny_text), "--json"]),
            measure("count BIG --json", ["count", str(big_text), "--json"], text),
            measure(
                "count tiny --json --estimator ctxbudget (baseline)",
                ["count", str(tiny_text), "--json", "--estimator", "ctxbudget"],
            ),
            measure(
                "count BIG --json --estimator ctxbudget",
                ["count", str(big_text), "--json", "--estimator", "ctxbudget"],
                text,
            ),
            measure(
                "count tiny-unspaced --json (baseline)", ["count", str(tiny_unspaced), "--json"]
            ),
            measure("count UNSPACED --json", ["count", str(big_unspaced), "--json"], unspaced),
            measure("estimators tiny --json (baseline)", ["estimators", str(tiny_text), "--json"]),
            measure("estimators BIG --json", ["estimators", str(big_text), "--json"], text),
            measure("replay LONG-LINE --json", ["replay", str(long_line), "--json"], line),
        ]
    print_table(runs)


if __name__ == "__main__":
    main()
