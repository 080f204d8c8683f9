"""Our calibrated estimators stay inside their bands on every kind of real text."""

from __future__ import annotations

import json
import math
import operator
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.tokens.calibrated import CALIBRATED_ESTIMATORS, calibrated_estimate
from ctxbudget.tokens.charclass import (
    FEATURES,
    FUSED_TEXT,
    SHORT_TEXT,
    features,
    linear_estimator,
    numpy_features,
    short_features,
)
from ctxbudget.tokens.registry import get_tokenizer

CORPUS = Path(__file__).resolve().parents[1] / "data" / "estimators"
# markdown is held out of the fit (scripts/corpus.py HELD_OUT_KINDS) and held to the same bands:
# it checks the weights on text they were not fitted to.
KINDS = ("english", "chinese", "japanese", "python", "json", "mixed", "markdown")
TOKENIZERS = ("cl100k_base", "o200k_base", "qwen3")
# Chinese and Japanese: cl100k_base needs ~1.36x the tokens of qwen3 on this corpus, so no single
# number is within -5% of one and +25% of the other; the generic model keeps the promise that
# matters (no under-count) and is allowed up to +50% over the most frugal vocabulary there.
GENERIC_UPPER = {"chinese": 1.50, "japanese": 1.50}


@cache
def _text(kind: str) -> str:
    return (CORPUS / f"{kind}.txt").read_text(encoding="utf-8")


@cache
def _exact(tokenizer: str, kind: str) -> int:
    return get_tokenizer(tokenizer).count(_text(kind))


def test_shipped_corpus_is_there_and_real_sized() -> None:
    for kind in KINDS:
        assert len(_text(kind)) > 20_000, kind


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_calibrated_within_minus_5_plus_10(tokenizer: str, kind: str) -> None:
    estimate = CALIBRATED_ESTIMATORS[f"ctxbudget-{tokenizer}"](_text(kind))
    ratio = estimate / _exact(tokenizer, kind)
    assert 0.95 <= ratio <= 1.10, f"{tokenizer} {kind}: {ratio:.3f}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_generic_never_under_counts_much(tokenizer: str, kind: str) -> None:
    ratio = CALIBRATED_ESTIMATORS["ctxbudget"](_text(kind)) / _exact(tokenizer, kind)
    assert 0.95 <= ratio <= GENERIC_UPPER.get(kind, 1.25), f"{tokenizer} {kind}: {ratio:.3f}"


@pytest.mark.parametrize("kind", KINDS)
def test_generic_is_within_25_percent_of_the_largest_count(kind: str) -> None:
    largest = max(_exact(t, kind) for t in TOKENIZERS)
    ratio = CALIBRATED_ESTIMATORS["ctxbudget"](_text(kind)) / largest
    assert 0.95 <= ratio <= 1.25, f"{kind}: {ratio:.3f}"


_CHAR_CLASSES = [f for f in FEATURES if not f.endswith("_runs")]
_RUNS = {
    "lower_runs": "lower",
    "upper_runs": "upper",
    "digit_runs": "digits",
    "space_runs": "spaces",
    "punct_runs": "punct",
    "latin_ext_runs": "latin_ext",
}


@settings(max_examples=200)
@given(st.text(max_size=60).filter(lambda s: not any(0xD800 <= ord(c) < 0xE000 for c in s)))
def test_character_classes_partition_the_text(text: str) -> None:
    counts = dict(zip(FEATURES, features(text), strict=True))
    assert sum(counts[f] for f in _CHAR_CLASSES) == len(text)
    for runs, members in _RUNS.items():
        assert counts[runs] <= counts[members]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello world", {"lower": 10, "lower_runs": 2, "spaces": 1, "space_runs": 1}),
        ("getHTTPCode", {"lower": 6, "lower_runs": 2, "upper": 5, "upper_runs": 1}),
        ("x = 12 + 345\n", {"digits": 5, "digit_runs": 2, "punct": 2, "newlines": 1}),
        ("中文，「かな」한국", {"han": 2, "fullwidth": 1, "cjk_punct": 2, "kana": 2, "hangul": 2}),
        ("привет мир — ok \U0001f600", {"latin_ext": 9, "latin_ext_runs": 2, "symbols": 1}),
    ],
)
def test_features_of_small_texts(text: str, expected: dict[str, int]) -> None:
    counts = dict(zip(FEATURES, features(text), strict=True))
    for name, value in expected.items():
        assert counts[name] == value, name


@settings(max_examples=100)
@given(st.text(max_size=40), st.text(max_size=40))
def test_estimate_grows_with_more_text(left: str, right: str) -> None:
    for name in CALIBRATED_ESTIMATORS:
        assert calibrated_estimate(name, left + right) + 1 >= calibrated_estimate(name, left)


# Every plane and the blocks the classes split on: ASCII, Latin/Cyrillic, Indic, symbols, CJK
# punctuation, kana, Han, Hangul, combining marks, fullwidth, emoji, lone surrogates.
_ANY_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)
    | st.sampled_from(
        "aZ9 \t\n\r!é\u0301д\u0915\u2014\u3000。かカ\u3105中한\uff0c\U0001f600\U00020000"
    ),
    max_size=300,
)


@settings(max_examples=300)
@given(_ANY_TEXT)
def test_short_and_numpy_paths_count_the_same(text: str) -> None:
    assert short_features(text) == numpy_features(text)


@settings(max_examples=30)
@given(_ANY_TEXT, st.integers(min_value=SHORT_TEXT - 2, max_value=SHORT_TEXT + 2))
def test_features_agree_across_the_short_text_limit(piece: str, size: int) -> None:
    text = (piece or "x") * (size // len(piece or "x") + 1)
    for cut in (text[:size], text[: SHORT_TEXT + 1]):
        assert features(cut) == numpy_features(cut) == short_features(cut)


# The fused models count only what their weights use; they must give the reference formula's
# number on every text: empty, ASCII (with and without digits), any script, and long texts.
_ASCII_TEXT = st.text(alphabet=st.characters(max_codepoint=127), max_size=300)


@settings(max_examples=300)
@given(_ANY_TEXT | _ASCII_TEXT)
def test_fused_models_equal_the_reference_formula(text: str) -> None:
    for name, function in CALIBRATED_ESTIMATORS.items():
        assert function(text) == calibrated_estimate(name, text), name


@settings(max_examples=20)
@given(_ANY_TEXT | _ASCII_TEXT, st.integers(min_value=FUSED_TEXT - 2, max_value=FUSED_TEXT + 2))
def test_fused_models_agree_across_their_length_limit(piece: str, size: int) -> None:
    text = ((piece or "x") * (size // len(piece or "x") + 1))[:size]
    for name, function in CALIBRATED_ESTIMATORS.items():
        assert function(text) == calibrated_estimate(name, text), name


@pytest.mark.parametrize("kind", KINDS)
def test_fused_models_equal_the_reference_on_real_text(kind: str) -> None:
    for size in (200, 3000, len(_text(kind))):
        for name, function in CALIBRATED_ESTIMATORS.items():
            assert function(_text(kind)[:size]) == calibrated_estimate(name, _text(kind)[:size])


# Any weight vector, not only the shipped ones: each feature zero or not, the CJK weights tied or
# not, weights with 5 decimals as scripts/fit_estimators.py writes them.
_WEIGHT = st.one_of(st.just(0.0), st.integers(1, 400_000).map(lambda n: round(n * 1e-5, 5)))


@st.composite
def _weights(draw: st.DrawFn) -> tuple[float, ...]:
    by_name = dict(zip(FEATURES, draw(st.tuples(*[_WEIGHT] * len(FEATURES))), strict=True))
    if draw(st.booleans()):
        by_name["cjk_punct"] = by_name["kana"] = by_name["han"]
    return tuple(by_name[f] for f in FEATURES)


@settings(max_examples=150)
@given(_weights(), st.lists(_ANY_TEXT | _ASCII_TEXT, min_size=1, max_size=4))
def test_any_fused_model_equals_the_reference_formula(
    weights: tuple[float, ...], texts: list[str]
) -> None:
    function = linear_estimator(weights, "test")
    for text in [*texts, "中文，「かな」한국 привет 12 \U0001f600", ""]:
        reference = math.ceil(sum(map(operator.mul, weights, features(text))) - 1e-9)
        assert function(text) == reference, text


def test_shipped_weights_follow_the_fit_config() -> None:
    path = Path(__file__).resolve().parents[2] / "src/ctxbudget/tokens/calibration.json"
    table = json.loads(path.read_text(encoding="utf-8"))
    for name, weights in table["weights"].items():
        assert all(weights[f] == 0 for f in table["dropped"]), name
        assert len({weights[f] for f in table["tied"]}) == 1, name
