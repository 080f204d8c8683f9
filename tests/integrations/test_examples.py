"""The integration pages' examples (docs/integrations/) run as written, offline, and compact."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import pytest
from tests.conftest import REPO

from ctxbudget.compaction import SUMMARY_HEADER

PAGES = ("openai-sdk", "langchain", "pydantic-ai", "openai-agents")
"""One page per framework, in the order of the integrations index."""


def _example(page: str) -> str:
    text = (REPO / "docs" / "integrations" / f"{page}.md").read_text(encoding="utf-8")
    examples = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(examples) == 1, f"docs/integrations/{page}.md: one example expected"
    return str(examples[0])


def test_each_page_shows_its_own_framework() -> None:
    modules = [re.search(r"ctxbudget\.integrations\.(\w+)", _example(p)) for p in PAGES]
    names = [m.group(1) for m in modules if m]
    assert names == ["openai_sdk", "langchain", "pydantic_ai", "openai_agents"]


@pytest.mark.parametrize("page", PAGES)
def test_each_example_runs_and_compacts(page: str) -> None:
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(_example(page), f"docs/integrations/{page}.md", "exec"), namespace)
    assert len(out.getvalue().splitlines()) >= 2
    guard = (namespace.get("budget") or namespace["guarded"]).guard
    # Each example's history is over its window: one compaction, a summary from the model.
    assert [c.trigger for c in guard.compactions] == ["context_pressure"]
    assert guard.summaries and guard.summaries[0].startswith(SUMMARY_HEADER)
