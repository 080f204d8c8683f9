"""Assemble BENCHMARKS.md from the sections each benchmark writes beside itself (bench/*.md).

    python bench/collect.py          # bench/*.md -> BENCHMARKS.md
    python bench/collect.py --split  # BENCHMARKS.md -> bench/*.md (takes direct edits back)

``--split`` cuts BENCHMARKS.md at its ``## `` headings and writes each section to its file in
ORDER (matched by title, else by position); it refuses, writing nothing, when a section has no
file, when the text above the first section is not HEADER, or when collecting the files it would
write would not give BENCHMARKS.md back byte for byte (but for the blank lines between sections,
always one in what collect writes).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = HERE.parent / "BENCHMARKS.md"
ORDER = (
    "estimators.md",
    "counting.md",
    "hf.md",
    "memory.md",
    "replay_rules.md",
    "server_count.md",
    "install.md",
    "gateway.md",
    "counting_internals.md",
)
HEADER = """# Benchmarks

Every number here comes from a script under `bench/`, run on this project's 2-core, 24 GiB
machine (shared, so noisy); each section gives its command, and ratios are measured within one
run. `make bench` runs them all (it installs the `bench` extra, litellm, for one comparison).
Edit the sections in `bench/*.md`, not this file: `python bench/collect.py` rebuilds it from
them, and `python bench/collect.py --split` takes direct edits of it back into them.
"""

HEADING = re.compile(r"(#{1,6})(?:[ \t]+|$)")
FENCE = re.compile(r"(```|~~~)")


class SplitRefused(ValueError):
    """BENCHMARKS.md cannot be split back into bench/*.md as it stands (the message says why)."""


def _headings(lines: list[str]) -> list[int | None]:
    """Each line's heading level, or None for a line that is not a heading (fenced code
    included: a shell comment in a ``` block is not a heading)."""
    levels: list[int | None] = []
    fence: str | None = None
    for line in lines:
        opened = FENCE.match(line)
        if fence is not None:
            if line.startswith(fence):
                fence = None
            levels.append(None)
        elif opened:
            fence = opened.group(1)
            levels.append(None)
        else:
            heading = HEADING.match(line)
            levels.append(len(heading.group(1)) if heading else None)
    return levels


def section(text: str) -> str:
    """The section with its first heading at level 2 and every later one at level 3; deeper
    headings (####) keep their level."""
    lines = text.strip().splitlines()
    out = []
    for i, (line, level) in enumerate(zip(lines, _headings(lines), strict=True)):
        if level is not None and (i == 0 or level <= 3):
            title = line.lstrip("#").strip()
            line = ("## " if i == 0 else "### ") + title
        out.append(line)
    return "\n".join(out)


def assemble(sources: Mapping[str, str]) -> str:
    """BENCHMARKS.md from the text of each file in ORDER."""
    parts = [HEADER.strip(), *(section(sources[name]) for name in ORDER)]
    return "\n\n".join(parts) + "\n"


def read_sources(where: Path = HERE) -> dict[str, str]:
    """The text of each file in ORDER."""
    return {name: (where / name).read_text("utf-8") for name in ORDER}


def _title(text: str) -> str | None:
    """A section's title: its first line's heading text, or None if it starts otherwise."""
    first = section(text).split("\n", 1)[0]
    return first[3:] if first.startswith("## ") else None


def split(document: str, current: Mapping[str, str | None]) -> dict[str, str]:
    """The text of each file in ORDER such that ``assemble`` gives ``document`` back.

    ``current`` is each file's title today (None where the file is missing): a section goes
    to the file of the same title, else (a renamed section, a new file) to the file at its
    position in ORDER if no other section has that file's title."""
    lines = document.splitlines()
    starts = [i for i, level in enumerate(_headings(lines)) if level == 2]
    header = "\n".join(lines[: starts[0]] if starts else lines).strip()
    if header != HEADER.strip():
        raise SplitRefused(
            "the text above BENCHMARKS.md's first ## section differs from HEADER: "
            "make that edit in HEADER in bench/collect.py"
        )
    bodies = [
        "\n".join(lines[a:b]).strip("\n")
        for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)
    ]
    titles = [lines[a][3:].strip() for a in starts]
    by_title = {title: name for name, title in current.items() if title is not None}
    names: list[str] = []
    for i, title in enumerate(titles):
        name = by_title.get(title)
        if name is None and i < len(ORDER) and current.get(ORDER[i]) not in titles:
            name = ORDER[i]
        if name is None or name in names:
            raise SplitRefused(
                f"BENCHMARKS.md's section '## {title}' has no file in ORDER: create "
                "bench/<name>.md and add it to ORDER in bench/collect.py, where the section sits"
            )
        names.append(name)
    if names != list(ORDER):
        missing = [name for name in ORDER if name not in names]
        raise SplitRefused(
            f"BENCHMARKS.md's sections are {names}, ORDER is {list(ORDER)}"
            + (f" ({', '.join(missing)} has no section: remove it from ORDER)" if missing else "")
        )
    sources = {name: body + "\n" for name, body in zip(names, bodies, strict=True)}
    # Byte for byte but for the blank lines between sections, which collect always makes one
    # (a section that a direct edit glued to the one before gets its blank line back).
    if assemble(sources) != "\n\n".join([header, *bodies]) + "\n":
        raise SplitRefused(
            "collecting the split would not give BENCHMARKS.md back byte for byte "
            "(a heading inside a section that collect would change?): nothing written"
        )
    return sources


def split_to_files(where: Path = HERE, document_path: Path = BENCHMARKS) -> list[str]:
    """Write BENCHMARKS.md's sections back to bench/*.md, verified; the files that changed."""
    document = document_path.read_text("utf-8")
    current = {
        name: _title((where / name).read_text("utf-8")) if (where / name).exists() else None
        for name in ORDER
    }
    sources = split(document, current)
    changed = []
    for name, text in sources.items():
        path = where / name
        if not path.exists() or path.read_text("utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    if read_sources(where) != sources:  # read back what was written
        raise SplitRefused("the files written are not the sections split from BENCHMARKS.md")
    return changed


def main(argv: list[str] | None = None) -> int:
    """``collect.py``: write BENCHMARKS.md; ``collect.py --split``: write bench/*.md back."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--split", action="store_true", help="write BENCHMARKS.md's sections back to bench/*.md"
    )
    args = parser.parse_args(argv)
    if not args.split:
        BENCHMARKS.write_text(assemble(read_sources()), encoding="utf-8")
        return 0
    try:
        changed = split_to_files()
    except SplitRefused as e:
        print(f"collect.py --split: {e}", file=sys.stderr)
        return 2
    print(f"bench/*.md: {', '.join(changed) or 'no change'}; collect gives BENCHMARKS.md back")
    if assemble(read_sources()) != BENCHMARKS.read_text("utf-8"):
        print("(but for blank lines between sections: python bench/collect.py rewrites them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
