"""Fixtures for the counting tests: the shared templates and the Qwen tokenizer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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


HF_FOLDERS = ("qwen2.5", "smollm3-template", "hermes-2-pro-template", "llama3-cl100k")


@pytest.fixture(scope="session")
def hf_oracle(hf_folder: Callable[[str], Path]) -> Callable[[str], tuple[Path, Any]]:
    """``hf_oracle(name)``: the unpacked folder and transformers' tokenizer for it (each loaded
    once per session: importing transformers takes seconds)."""
    loaded: dict[str, tuple[Path, Any]] = {}

    def load(name: str) -> tuple[Path, Any]:
        if name not in loaded:
            from transformers import AutoTokenizer

            folder = hf_folder(name)
            loaded[name] = (folder, AutoTokenizer.from_pretrained(str(folder)))
        return loaded[name]

    return load
