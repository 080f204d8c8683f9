"""The code blocks of README.md and docs/ run as written.

Python blocks are executed (a block of docs/integrations/ is run by
tests/integrations/test_examples.py, which checks that it compacts, so here it is compiled only);
shell blocks' `ctxbudget` lines run through the CLI when the command needs no server, each page
in a scratch folder that holds the repository's files, so the examples' paths work as they do
from a clone. A block is marked on the line before it: `<!-- docs-test: compile-only (why) -->`
compiles it only, `<!-- docs-test: skip (why) -->` leaves it alone. Every `ctxbudget` line must
name a real command, run or not.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from tests.child import CLI, SRC
from tests.conftest import REPO

from ctxbudget.cli.main import cli

RUNNABLE = {"count", "estimators", "tokenizers", "request", "thresholds", "demo", "replay"}
"""Commands a shell block may run here: they need no server, no key and no network."""
NEEDS_MORE = ("--server", "--scan", "hf:")
"""Options that reach a server, this machine's own sessions, or a model folder of the user's."""
MARKER = re.compile(r"<!-- docs-test: (compile-only|skip) \(.+\) -->")


@dataclass(frozen=True)
class Block:
    """One fenced block, or one `ctxbudget` line of a shell block (``command``)."""

    page: str
    line: int
    language: str
    code: str
    mark: str | None  # "compile-only", "skip" or None
    command: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}" + (f":{self.command[0]}" if self.command else "")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, with the marker on the line before each."""
    page = str(path.relative_to(REPO))
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = lines[i - 1] if i > 0 else ""
        mark = MARKER.search(before)
        if "docs-test:" in before:
            assert mark, f"{page}:{i}: a docs-test marker reads `<!-- docs-test: skip (why) -->`"
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(page, i + 1, fence.group(1), code, mark.group(1) if mark else None))
        i = end + 1
    return blocks


def _commands(code: str) -> list[list[str]]:
    """The `ctxbudget` command lines of a shell block (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "ctxbudget":
            commands.append(words[1:])
    return commands


def _units(block: Block) -> list[Block]:
    """What one test runs: a Python block whole, a shell block line by line."""
    if block.language == "python":
        return [block]
    return [replace(block, command=tuple(c)) for c in _commands(block.code)]


BLOCKS = [
    unit
    for p in _pages()
    for b in _blocks(p)
    if b.language in ("python", "sh", "bash")
    for unit in _units(b)
]


_SCRATCH: dict[str, tuple[Path, set[str]]] = {}
"""Each page's scratch folder and the blocks already run in it (a page's blocks build on each
other: a later one reads what an earlier one wrote)."""


def _scratch(page: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if page not in _SCRATCH:
        root = tmp_path_factory.mktemp("docs")
        for entry in REPO.iterdir():
            if entry.name in (".git", ".venv", "site", "docs"):
                continue
            (root / entry.name).symlink_to(entry)
        shutil.copytree(REPO / "docs", root / "docs")  # a copy: a block may write beside it
        (root / "home").mkdir()
        _SCRATCH[page] = (root, set())
    return _SCRATCH[page][0]


def _run_shell(block: Block, where: Path) -> None:
    commands = [list(block.command)] if block.command else _commands(block.code)
    for args in commands:
        assert args and args[0] in cli.commands, f"{block.name}: no command `ctxbudget {args}`"
        if args[0] not in RUNNABLE or any(o in a for a in args for o in NEEDS_MORE):
            continue
        env = {
            **os.environ,
            "PYTHONPATH": SRC,
            "HOME": str(where / "home"),
            "XDG_CACHE_HOME": str(where / "home" / ".cache"),
            "COLUMNS": "120",
        }
        run = subprocess.run(
            [sys.executable, "-c", CLI, *args],
            cwd=where,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, f"{block.name}: ctxbudget {shlex.join(args)}\n{run.stderr}"
        assert run.stdout.strip() or run.stderr.strip(), f"{block.name}: no output"


def _run_python(block: Block, where: Path) -> None:
    code = compile(block.code, block.name, "exec")
    if block.mark or block.page.startswith("docs/integrations/"):
        return
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    cwd = os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)
    finally:
        os.chdir(cwd)


def _run(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    where = _scratch(block.page, tmp_path_factory)
    done = _SCRATCH[block.page][1]
    for earlier in BLOCKS:  # the page's blocks before this one, when run alone (-k)
        if earlier == block:
            break
        if earlier.page == block.page and earlier.name not in done:
            done.add(earlier.name)
            with contextlib.suppress(AssertionError):  # its own test reports its failure
                _run_one(earlier, where)
    done.add(block.name)
    _run_one(block, where)


def _run_one(block: Block, where: Path) -> None:
    if block.mark == "skip":
        return
    if block.language == "python":
        _run_python(block, where)
    else:
        _run_shell(block, where)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_the_block_runs_as_written(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    _run(block, tmp_path_factory)


def test_the_blocks_are_found() -> None:
    # The mechanism itself: README's library example and the rule tables' check are collected.
    names = {(b.page, b.language) for b in BLOCKS}
    assert ("README.md", "python") in names and ("docs/budget.md", "python") in names
    assert sum(b.command is not None for b in BLOCKS) >= 10


def test_a_failing_block_fails(tmp_path_factory: pytest.TempPathFactory) -> None:
    bad = Block("docs/x.md", 1, "sh", "ctxbudget count no-such-file.md\n", None)
    with pytest.raises(AssertionError, match="no-such-file"):
        _run_shell(bad, _scratch("docs/x.md", tmp_path_factory))
    with pytest.raises(AssertionError, match="no command"):
        _run_shell(Block("docs/x.md", 2, "sh", "ctxbudget cuont x\n", None), REPO)
