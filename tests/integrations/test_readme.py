"""The README's "Inside other harnesses" examples run as written, offline."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import pytest
from tests.conftest import REPO

from ctxbudget.compaction import SUMMARY_HEADER

SECTION = "## Inside other harnesses"


def _snippets() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


SNIPPETS = _snippets()


def test_the_section_has_one_example_per_framework() -> None:
    modules = [re.search(r"ctxbudget\.integrations\.(\w+)", s) for s in SNIPPETS]
    names = [m.group(1) for m in modules if m]
    assert names == ["openai_sdk", "langchain", "pydantic_ai", "openai_agents"]


@pytest.mark.parametrize("code", SNIPPETS, ids=lambda s: re.findall(r"integrations\.(\w+)", s)[0])
def test_each_example_runs_and_compacts(code: str) -> None:
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)
    assert len(out.getvalue().splitlines()) >= 2
    guard = (namespace.get("budget") or namespace["guarded"]).guard
    # Each example's history is over its window: one compaction, a summary from the model.
    assert [c.trigger for c in guard.compactions] == ["context_pressure"]
    assert guard.summaries and guard.summaries[0].startswith(SUMMARY_HEADER)
