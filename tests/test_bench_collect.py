"""BENCHMARKS.md is built from bench/*.md by bench/collect.py, and the benchmarks write only
their own blocks of those files (bench/blocks.py). No benchmark runs here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tests.conftest import load_bench

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def collect() -> ModuleType:
    return load_bench("collect")


def test_benchmarks_md_is_what_collect_builds_from_bench_md(collect: ModuleType) -> None:
    """A direct edit of BENCHMARKS.md fails here until `python bench/collect.py --split`
    takes it back into bench/*.md."""
    built = collect.assemble(collect.read_sources()).splitlines()
    committed = (ROOT / "BENCHMARKS.md").read_text("utf-8").splitlines()
    first = next(
        (i for i, (a, b) in enumerate(zip(built, committed, strict=False)) if a != b),
        min(len(built), len(committed)),
    )
    assert built == committed, (
        f"BENCHMARKS.md line {first + 1} is not what bench/collect.py builds from bench/*.md "
        f"(collect: {built[first : first + 1]}, file: {committed[first : first + 1]}): edit "
        "bench/*.md and run python bench/collect.py, or run python bench/collect.py --split"
    )


def test_split_takes_a_direct_edit_back(collect: ModuleType, tmp_path: Path) -> None:
    sources = collect.read_sources()
    edited = collect.assemble(sources).replace(
        "## The light core install (issue 32)\n",
        "## The light core install (issue 32)\n\nA paragraph written into BENCHMARKS.md.\n",
    )
    for name, text in sources.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    document = tmp_path / "BENCHMARKS.md"
    document.write_text(edited, encoding="utf-8")
    assert collect.split_to_files(tmp_path, document) == ["install.md"]
    assert "A paragraph written into BENCHMARKS.md." in (tmp_path / "install.md").read_text()
    assert collect.assemble(collect.read_sources(tmp_path)) == edited


def test_split_refuses_a_section_without_a_file(collect: ModuleType) -> None:
    document = collect.assemble(collect.read_sources()) + "\n## A new section\n\nText.\n"
    current = {name: collect._title(text) for name, text in collect.read_sources().items()}
    with pytest.raises(collect.SplitRefused, match="'## A new section' has no file in ORDER"):
        collect.split(document, current)


def test_section_leaves_code_and_deep_headings_alone(collect: ModuleType) -> None:
    text = "# Title\n\n## Sub\n\n```sh\n# a shell comment\n```\n\n#### Deeper\n"
    assert collect.section(text) == (
        "## Title\n\n### Sub\n\n```sh\n# a shell comment\n```\n\n#### Deeper"
    )


def test_write_block_keeps_the_prose_around_it(blocks: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "x.md"
    path.write_text(
        "## Title\n\nProse before.\n\n<!-- x.py -->\n| old |\n<!-- /x.py -->\n\nProse after.\n",
        encoding="utf-8",
    )
    blocks.write_block(path, "x.py", "\n    indented first line\n| new |\n\n")
    assert path.read_text("utf-8") == (
        "## Title\n\nProse before.\n\n<!-- x.py -->\n    indented first line\n| new |\n"
        "<!-- /x.py -->\n\nProse after.\n"
    )


def test_write_block_adds_the_block_when_its_markers_are_missing(
    blocks: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "x.md"
    path.write_text("## Title\n\nProse.\n\n<!-- other.py -->\nkept\n<!-- /other.py -->\n")
    blocks.write_block(path, "x.py", "| new |")
    assert path.read_text("utf-8") == (
        "## Title\n\nProse.\n\n<!-- other.py -->\nkept\n<!-- /other.py -->\n\n"
        "<!-- x.py -->\n| new |\n<!-- /x.py -->\n"
    )
    blocks.write_block(tmp_path / "new.md", "x.py", "| first |")
    assert (tmp_path / "new.md").read_text("utf-8") == "<!-- x.py -->\n| first |\n<!-- /x.py -->\n"
