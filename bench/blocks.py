"""The one way a benchmark writes its results into its section (bench/*.md): only the text
between its markers, ``<!-- name -->`` and ``<!-- /name -->``, is replaced, so the prose that
engineers write around a generated table survives the next run."""

from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of the block ``name`` (by convention the script's file name)."""
    return f"<!-- {name} -->", f"<!-- /{name} -->"


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
    begin = old.find(start)
    finish = old.find(end, begin + len(start)) if begin >= 0 else -1
    if finish >= 0:
        return old[:begin] + block + old[finish + len(end) :]
    return (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"


def write_block(path: Path, name: str, text: str) -> None:
    """Replace the block ``name`` in the Markdown file ``path`` by ``text``, prose kept
    (the file is created, holding just the block, if it does not exist)."""
    old = path.read_text("utf-8") if path.exists() else ""
    path.write_text(replace_block(old, name, text), encoding="utf-8")
