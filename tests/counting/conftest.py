"""Fixtures for the counting tests: the shared templates and the Qwen tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer


@pytest.fixture(scope="session")
def qwen3_source(templates_dir: Path) -> str:
    return (templates_dir / "qwen3.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def qwen25_source(templates_dir: Path) -> str:
    return (templates_dir / "qwen2.5.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> ExactTokenizer:
    return get_tokenizer("qwen3")
