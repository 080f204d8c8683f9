"""The one way a benchmark writes its results into its section (bench/*.md): only the text
between its markers, ``<!-- name -->`` and ``<!-- /name -->``, is replaced, so the prose that
engineers write around a generated table survives the next run."""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).parent


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of the block ``name`` (by convention the script's file name)."""
    return f"<!-- {name} -->", f"<!-- /{name} -->"


def _span(text: str, name: str) -> tuple[int, int]:
    """Where the block ``name`` starts (its start marker) and where its end marker starts in
    ``text``; -1 for the end when the two markers are not both there, in order."""
    start, end = markers(name)
    begin = text.find(start)
    finish = text.find(end, begin + len(start)) if begin >= 0 else -1
    return begin, finish


def read_block(text: str, name: str) -> str | None:
    """The text between the markers of the block ``name`` in ``text`` (None without them)."""
    begin, finish = _span(text, name)
    if finish < 0:
        return None
    return text[begin + len(markers(name)[0]) : finish].strip("\n")


def replace_block(old: str, name: str, text: str) -> str:
    """``old`` with the block ``name`` holding ``text``; everything outside the markers is kept.

    Without both markers (in order) the block is appended at the end, after a blank line."""
    start, end = markers(name)
    lines = text.splitlines()
    while lines and not lines[0].strip():  # blank lines only: an indented first line stays so
        del lines[0]
    while lines and not lines[-1].strip():
        del lines[-1]
    block = "\n".join([start, *lines, end])
    begin, finish = _span(old, name)
    if finish >= 0:
        return old[:begin] + block + old[finish + len(end) :]
    return (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"


def write_block(path: Path, name: str, text: str) -> None:
    """Replace the block ``name`` in the Markdown file ``path`` by ``text``, prose kept
    (the file is created, holding just the block, if it does not exist)."""
    old = path.read_text("utf-8") if path.exists() else ""
    path.write_text(replace_block(old, name, text), encoding="utf-8")


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--out DIR`` flag of every benchmark that writes a block: the folder whose
    ``<file>.md`` gets the block, bench/ unless given (``run_all.py --quick`` gives a temporary
    copy of bench/*.md, so a CI run writes nothing into the committed results)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE,
        metavar="DIR",
        help="write this script's block into DIR/<file>.md, not bench/ (default: bench/)",
    )
