"""Our calibrated estimators (linear models over character classes) and the estimator registry.

calibration.json holds, written by scripts/fit_estimators.py, each vocabulary's code point classes
(derived from its tokens) and each model's weights (fitted to exact counts of real text,
scripts/corpus.py). ``ESTIMATORS`` lists the harness heuristics first, then ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from ctxbudget.errors import UnknownNameError
from ctxbudget.tokens.charclass import (
    FEATURES,
    CodepointTable,
    linear_estimator,
    reference_estimate,
    unpack_classes,
)
from ctxbudget.tokens.estimators import HARNESS_ESTIMATORS

CALIBRATED_NAMES = (
    "ctxbudget-cl100k_base",
    "ctxbudget-o200k_base",
    "ctxbudget-qwen3",
    "ctxbudget",
)
"""Per-tokenizer models, then the generic one for a tokenizer that is not public."""


@cache
def _calibration() -> dict[str, object]:
    text = resources.files("ctxbudget.tokens").joinpath("calibration.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


@cache
def _weights() -> Mapping[str, tuple[float, ...]]:
    table = _calibration()["weights"]
    assert isinstance(table, dict)
    return {name: tuple(float(table[name][f]) for f in FEATURES) for name in CALIBRATED_NAMES}


@cache
def codepoint_table(name: str) -> CodepointTable:
    """The code point classes the calibrated model ``name`` counts with."""
    data = _calibration()
    vocabulary = data["table_of"]
    tables = data["tables"]
    assert isinstance(vocabulary, dict) and isinstance(tables, dict)
    return CodepointTable(unpack_classes(tables[vocabulary[name]]))


def calibrated_estimate(name: str, text: str) -> int:
    """Tokens of ``text`` by the calibrated model ``name``, rounded up (never below 0).

    The reference formula; ``CALIBRATED_ESTIMATORS`` compute the same number faster.
    """
    return reference_estimate(_weights()[name], codepoint_table(name), text)


def _model(name: str, doc: str) -> Callable[[str], int]:
    # The fused function itself is what callers get: a wrapper would cost ~0.1 µs a call.
    fused = linear_estimator(_weights()[name], codepoint_table(name), name)
    fused.__name__ = fused.__qualname__ = name.replace("-", "_")
    fused.__doc__ = doc
    fused.__module__ = __name__
    return fused


_DOC = (
    "Calibrated to {}: between -5% and +10% of its exact count on each kind of text we measured "
    "(English prose, Simplified and Traditional Chinese, Japanese, Korean, Python, JSON: "
    "manifests, schemas, tool-call arguments, records and API replies, pretty and minified; "
    "mixed Chinese/English/code, Markdown docs); CJK characters are costed by that vocabulary "
    "itself."
)
CALIBRATED_ESTIMATORS: Mapping[str, Callable[[str], int]] = MappingProxyType(
    {
        **{n: _model(n, _DOC.format(n.removeprefix("ctxbudget-"))) for n in CALIBRATED_NAMES[:3]},
        "ctxbudget": _model(
            "ctxbudget",
            "Generic, for a tokenizer that is not public: fitted to the largest of the "
            "cl100k_base, o200k_base and qwen3 counts, so it under-counts none of them (>= 0.95 "
            "of each) and stays within +15% of the most expensive, on every kind of text.",
        ),
    }
)

ESTIMATORS: Mapping[str, Callable[[str], int]] = MappingProxyType(
    {**HARNESS_ESTIMATORS, **CALIBRATED_ESTIMATORS}
)
"""Every estimator by name: the harness heuristics in the seed's order, then ours."""


def estimate(name: str, text: str) -> int:
    """Tokens of ``text`` by the estimator ``name``; an unknown name lists the known ones."""
    try:
        function = ESTIMATORS[name]
    except KeyError:
        raise UnknownNameError("estimator", name, list(ESTIMATORS)) from None
    return function(text)
