"""The public API: an explicit, sorted ``__all__`` whose every name resolves."""

from __future__ import annotations

import importlib

import pytest

import ctxbudget

PACKAGES = [
    "ctxbudget",
    "ctxbudget.messages",
    "ctxbudget.tokens",
    "ctxbudget.counting",
    "ctxbudget.budget",
    "ctxbudget.compaction",
    "ctxbudget.providers",
    "ctxbudget.agent",
    "ctxbudget.replay",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_explicit_unique_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for attribute in exported:
        assert getattr(module, attribute) is not None, attribute


def test_top_level_all_is_sorted() -> None:
    names = list(ctxbudget.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), n[0].islower(), n))


def test_the_openai_sdk_loads_only_when_its_provider_is_asked_for() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ctxbudget; assert 'openai' not in sys.modules;"
        "ctxbudget.OpenAICompatibleProvider; assert 'openai' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
