"""Assemble BENCHMARKS.md from the sections each benchmark writes beside itself (bench/*.md)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
ORDER = (
    "estimators.md",
    "counting.md",
    "hf.md",
    "memory.md",
    "replay_rules.md",
    "server_count.md",
    "install.md",
    "gateway.md",
)
HEADER = """# Benchmarks

Every number here comes from a script under `bench/`, run on this project's 2-core, 24 GiB
machine (shared, so noisy); each section gives its command, and ratios are measured within one
run. `make bench` runs them all (it installs the `bench` extra, litellm, for one comparison);
`python bench/collect.py` rebuilds this file from the sections in `bench/*.md`.
"""


def section(text: str) -> str:
    """The section with its first heading at level 2 and every later one at level 3."""
    lines = text.strip().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            line = ("## " if i == 0 else "### ") + title
        out.append(line)
    return "\n".join(out)


if __name__ == "__main__":
    parts = [HEADER.strip(), *(section((HERE / name).read_text("utf-8")) for name in ORDER)]
    (HERE.parent / "BENCHMARKS.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
