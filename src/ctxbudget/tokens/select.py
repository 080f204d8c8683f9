"""Pick a counter by name or by model: an exact tokenizer where one exists, else an estimator."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ctxbudget.errors import UnknownNameError
from ctxbudget.tokens.base import Estimator, TokenCounter
from ctxbudget.tokens.registry import (
    HF_PREFIX,
    TOKENIZER_NAMES,
    canonical_tokenizer_name,
    get_tokenizer,
    tokenizer_for_model,
)

GENERIC_ESTIMATOR = "ctxbudget"
"""The estimator for a model whose tokenizer is not public."""


def _estimators() -> Mapping[str, Callable[[str], int]]:
    from ctxbudget.tokens.calibrated import ESTIMATORS

    return ESTIMATORS


def estimator_names() -> list[str]:
    """Every estimator name: the harness heuristics, then ours."""
    return list(_estimators())


def get_estimator(name: str) -> Estimator:
    """The estimator called ``name``; an unknown name lists the known ones."""
    table = _estimators()
    if name not in table:
        raise UnknownNameError("estimator", name, list(table))
    return Estimator(name, table[name])


def get_counter(name: str) -> TokenCounter:
    """An exact tokenizer (``cl100k_base``, ``qwen3``, ``hf:PATH``, aliases) or an estimator."""
    if name.startswith(HF_PREFIX):
        return get_tokenizer(name)
    try:
        return get_tokenizer(canonical_tokenizer_name(name))
    except UnknownNameError:
        pass
    table = _estimators()
    if name in table:
        return Estimator(name, table[name])
    raise UnknownNameError("tokenizer or estimator", name, [*TOKENIZER_NAMES, "hf:PATH", *table])


def counter_for_model(model: str) -> TokenCounter:
    """The exact tokenizer of ``model`` if it is public, else the generic estimator."""
    kind, name = tokenizer_for_model(model)
    return get_tokenizer(name) if kind == "tokenizer" else get_estimator(name)
