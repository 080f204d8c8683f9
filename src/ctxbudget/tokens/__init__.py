"""Token counting: exact offline tokenizers, harness heuristics and calibrated estimators."""

from __future__ import annotations

from ctxbudget.tokens.base import CounterKind, Estimator, TokenCounter
from ctxbudget.tokens.registry import (
    TOKENIZER_NAMES,
    ExactTokenizer,
    TokenizerInfo,
    canonical_tokenizer_name,
    get_tokenizer,
    tokenizer_for_model,
    tokenizer_infos,
)
from ctxbudget.tokens.select import counter_for_model, estimator_names, get_counter

__all__ = [
    "TOKENIZER_NAMES",
    "CounterKind",
    "Estimator",
    "ExactTokenizer",
    "TokenCounter",
    "TokenizerInfo",
    "canonical_tokenizer_name",
    "counter_for_model",
    "estimator_names",
    "get_counter",
    "get_tokenizer",
    "tokenizer_for_model",
    "tokenizer_infos",
]
