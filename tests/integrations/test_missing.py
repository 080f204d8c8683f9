"""Without its framework, importing an adapter is one line naming the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest

from ctxbudget.errors import MissingDependencyError


@pytest.mark.parametrize(
    ("adapter", "framework", "extra"),
    [
        ("langchain", "langchain.agents.middleware", "ctxbudget[langchain]"),
        ("pydantic_ai", "pydantic_ai", "ctxbudget[pydantic-ai]"),
        ("openai_agents", "agents", "ctxbudget[openai-agents]"),
    ],
)
def test_a_missing_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str
) -> None:
    module = f"ctxbudget.integrations.{adapter}"
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, framework, None)  # what an uninstalled package looks like
    with pytest.raises(MissingDependencyError) as caught:
        importlib.import_module(module)
    message = str(caught.value)
    assert "\n" not in message
    assert f"pip install {extra}" in message and module in message
    assert caught.value.package == extra
