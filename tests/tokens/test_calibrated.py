"""Our calibrated estimators stay inside their bands on every kind of real text."""

from __future__ import annotations

import importlib.util
import json
import operator
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripts.corpus import SHIPPED_KINDS
from scripts.json_samples import JSON_KINDS

from ctxbudget.tokens.calibrated import (
    CALIBRATED_ESTIMATORS,
    calibrated_estimate,
    codepoint_table,
)
from ctxbudget.tokens.charclass import (
    BLOCK,
    CJK_CLASS_LETTERS,
    CJK_FEATURES,
    CJK_START,
    FEATURES,
    UNITS,
    CodepointTable,
    features,
    linear_estimator,
    short_features,
    unpack_classes,
)
from ctxbudget.tokens.registry import get_tokenizer

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "estimators"
CALIBRATION = REPO / "src" / "ctxbudget" / "tokens" / "calibration.json"
# markdown is held out of the fit (scripts/corpus.py HELD_OUT_KINDS) and held to the same bands:
# it checks the weights on text they were not fitted to. So are the JSON API replies
# (scripts/fit_estimators.py JSON_HELD_OUT); the other JSON shapes (issue 30: package manifests,
# JSON Schema, tool-call arguments, records: arrays of small objects with short values, each
# pretty and minified) are fitted. The records samples read 0.90-0.95 before they were.
KINDS = (*SHIPPED_KINDS, *JSON_KINDS)
TOKENIZERS = ("cl100k_base", "o200k_base", "qwen3")


@cache
def _text(kind: str) -> str:
    return (CORPUS / f"{kind}.txt").read_text(encoding="utf-8")


@cache
def _exact(tokenizer: str, kind: str) -> int:
    return get_tokenizer(tokenizer).count(_text(kind))


def test_shipped_corpus_is_there_and_real_sized() -> None:
    for kind in SHIPPED_KINDS:
        assert len(_text(kind)) > 20_000, kind
    for kind in JSON_KINDS:  # the recorded tool arguments, minified, are 19 K characters in all
        assert len(_text(kind)) > 15_000, kind


@pytest.mark.parametrize("kind", JSON_KINDS)
def test_json_samples_are_json_documents_in_their_form(kind: str) -> None:
    # Each sample is whole JSON documents, each written exactly as its form says: minified one
    # per line (no space after "," or ":"), pretty-printed with an indent of 2.
    text = _text(kind)
    decoder = json.JSONDecoder()
    position, documents = 0, []
    while position < len(text):
        document, end = decoder.raw_decode(text, position)
        documents.append((document, text[position:end]))
        position = end + 1  # the newline after each
    assert len(documents) >= 10, kind
    for document, written in documents:
        if kind.endswith("_min"):
            expected = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        else:
            expected = json.dumps(document, indent=2, ensure_ascii=False)
        assert written == expected, kind


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_calibrated_within_minus_5_plus_10(tokenizer: str, kind: str) -> None:
    estimate = CALIBRATED_ESTIMATORS[f"ctxbudget-{tokenizer}"](_text(kind))
    ratio = estimate / _exact(tokenizer, kind)
    assert 0.95 <= ratio <= 1.10, f"{tokenizer} {kind}: {ratio:.3f}"


@pytest.mark.parametrize("kind", KINDS)
def test_generic_under_counts_no_tokenizer_and_stays_near_the_most_expensive(kind: str) -> None:
    # The contract: >= 0.95 of each of the three, <= 1.15 of the largest. ("0.95-1.25 of all
    # three" is impossible on CJK, where cl100k_base needs ~1.4x the tokens of qwen3.)
    estimate = CALIBRATED_ESTIMATORS["ctxbudget"](_text(kind))
    for tokenizer in TOKENIZERS:
        assert estimate / _exact(tokenizer, kind) >= 0.95, f"{tokenizer} {kind}"
    largest = max(_exact(t, kind) for t in TOKENIZERS)
    assert estimate / largest <= 1.15, f"{kind}: {estimate / largest:.3f}"


def _one_line_paragraphs(text: str) -> list[str]:
    """The prose paragraphs of ``text``, each unwrapped onto one line, longest first."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    prose = [p for p in paragraphs if p[:1].isalpha() and "```" not in p and "|" not in p]
    return sorted(prose, key=len, reverse=True)


def test_one_line_paragraphs_are_not_under_counted() -> None:
    # Model replies often put a paragraph on one line; the old fit read 0.69-0.85 on README's.
    # Held-out Markdown prose, unwrapped: text of a kind the weights were not fitted to.
    paragraphs = _one_line_paragraphs(_text("markdown"))[:25]
    assert min(len(p) for p in paragraphs) > 120
    text = "\n\n".join(paragraphs)
    for tokenizer in TOKENIZERS:
        exact = get_tokenizer(tokenizer).count(text)
        ratio = CALIBRATED_ESTIMATORS[f"ctxbudget-{tokenizer}"](text) / exact
        assert 0.95 <= ratio <= 1.10, f"{tokenizer}: {ratio:.3f}"


def _fit_script() -> ModuleType:
    path = REPO / "scripts" / "fit_estimators.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("ctxbudget_fit_estimators", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_shipped_code_point_classes_are_what_the_vocabulary_gives(tokenizer: str) -> None:
    shipped = unpack_classes(json.loads(CALIBRATION.read_text("utf-8"))["tables"][tokenizer])
    assert shipped == _fit_script().vocabulary_classes(tokenizer)


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_classes_follow_the_cost_of_each_character_alone(tokenizer: str) -> None:
    letters = codepoint_table(f"ctxbudget-{tokenizer}").packed
    count = get_tokenizer(tokenizer).count
    for cp in [*range(0x4E00, 0x9FFF, 53), *range(0xAC00, 0xD7A3, 97), *range(0x3040, 0x30FF, 7)]:
        cost = count(chr(cp))
        position = CJK_CLASS_LETTERS.index(letters[cp - CJK_START])  # solo some many 2 3
        assert (position >= 3) == (cost >= 2), hex(cp)
        assert (position == 4) == (cost >= 3), hex(cp)


def test_tables_are_small() -> None:
    assert CALIBRATION.stat().st_size < 300_000


def _naive_features(text: str, table: CodepointTable) -> tuple[int, ...]:
    """The features by a plain loop over characters: the oracle for the fast paths."""
    counts = dict.fromkeys(FEATURES, 0)
    letters = table.letters(text.encode("utf-16-le", "surrogatepass"), text) if text else b""
    names = [f for f in FEATURES if not f.endswith("_runs")]
    previous = None
    for letter in letters:
        name = names[letter - 0x41]
        counts[name] += 1
        run = {"digits": "digit_runs", "spaces": "space_runs"}.get(name, f"{name}_runs")
        if run in counts and name != previous:
            counts[run] += 1
        previous = name
    return tuple(counts[f] for f in FEATURES)


_TABLE = codepoint_table("ctxbudget-qwen3")
# Every plane and the blocks the classes split on: ASCII, Latin/Cyrillic, Indic, symbols, CJK
# punctuation, kana, Han, Hangul, combining marks, fullwidth, emoji, lone surrogates.
_ANY_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)
    | st.sampled_from(
        "aZ9 \t\n\r!é\u0301д\u0915\u2014\u3000。かカ\u3105中한\uff0c\U0001f600\U00020000"
    ),
    max_size=300,
)
_ASCII_TEXT = st.text(alphabet=st.characters(max_codepoint=127), max_size=300)


@settings(max_examples=200)
@given(_ANY_TEXT | _ASCII_TEXT)
def test_features_equal_a_plain_loop(text: str) -> None:
    assert short_features(text, _TABLE) == _naive_features(text, _TABLE)


@settings(max_examples=25, deadline=None)
@given(_ANY_TEXT | _ASCII_TEXT, st.integers(min_value=BLOCK - 2, max_value=3 * BLOCK + 2))
def test_long_texts_count_by_blocks_as_one_text(piece: str, size: int) -> None:
    text = ((piece or "x") * (size // len(piece or "x") + 1))[:size]
    assert features(text, _TABLE) == _naive_features(text, _TABLE)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello world", {"lower": 10, "lower_runs": 2, "spaces": 1, "space_runs": 1}),
        ("getHTTPCode", {"lower": 6, "lower_runs": 2, "upper": 5, "upper_runs": 1}),
        ("x = 12 + 345\n", {"digits": 5, "digit_runs": 2, "punct": 2, "newlines": 1}),
        ("привет мир — ok \U0001f600", {"latin_ext": 9, "latin_ext_runs": 2, "symbols": 1}),
    ],
)
def test_features_of_small_texts(text: str, expected: dict[str, int]) -> None:
    counts = dict(zip(FEATURES, features(text, _TABLE), strict=True))
    for name, value in expected.items():
        assert counts[name] == value, name


def test_cjk_characters_take_their_class_from_the_vocabulary() -> None:
    text = "的是中文，「かな」한국"  # 的 and 是 are single tokens in every shipped vocabulary
    for name in CALIBRATED_ESTIMATORS:
        counts = dict(zip(FEATURES, features(text, codepoint_table(name)), strict=True))
        assert sum(counts[f] for f in CJK_FEATURES) == len(text), name
        assert counts["cjk_2"] + counts["cjk_3"] < len(text), name
    qwen = dict(zip(FEATURES, features("的是", codepoint_table("ctxbudget-qwen3")), strict=True))
    assert qwen["cjk_many"] == 2  # both are in many multi-character Qwen tokens


@settings(max_examples=100)
@given(st.text(max_size=40), st.text(max_size=40))
def test_estimate_grows_with_more_text(left: str, right: str) -> None:
    for name in CALIBRATED_ESTIMATORS:
        assert calibrated_estimate(name, left + right) + 1 >= calibrated_estimate(name, left)


# The fused models count only what their weights use; they must give the reference formula's
# number on every text: empty, ASCII (with and without digits), any script, and long texts.
@settings(max_examples=300)
@given(_ANY_TEXT | _ASCII_TEXT)
def test_fused_models_equal_the_reference_formula(text: str) -> None:
    for name, function in CALIBRATED_ESTIMATORS.items():
        assert function(text) == calibrated_estimate(name, text), name


@settings(max_examples=20, deadline=None)
@given(_ANY_TEXT | _ASCII_TEXT, st.integers(min_value=BLOCK - 2, max_value=2 * BLOCK + 2))
def test_fused_models_agree_across_their_block_size(piece: str, size: int) -> None:
    text = ((piece or "x") * (size // len(piece or "x") + 1))[:size]
    for name, function in CALIBRATED_ESTIMATORS.items():
        assert function(text) == calibrated_estimate(name, text), name


@pytest.mark.parametrize("kind", KINDS)
def test_fused_models_equal_the_reference_on_real_text(kind: str) -> None:
    for size in (200, 3000, len(_text(kind))):
        for name, function in CALIBRATED_ESTIMATORS.items():
            assert function(_text(kind)[:size]) == calibrated_estimate(name, _text(kind)[:size])


# Any weight vector, not only the shipped ones: each feature zero or not, weights with 5 decimals
# as scripts/fit_estimators.py writes them.
_WEIGHT = st.one_of(st.just(0.0), st.integers(1, 400_000).map(lambda n: round(n * 1e-5, 5)))


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(*[_WEIGHT] * len(FEATURES)),
    st.lists(_ANY_TEXT | _ASCII_TEXT, min_size=1, max_size=4),
)
def test_any_fused_model_equals_the_reference_formula(
    weights: tuple[float, ...], texts: list[str]
) -> None:
    function = linear_estimator(weights, _TABLE, "test")
    units = [round(w * UNITS) for w in weights]
    for text in [*texts, "中文，「かな」한국 привет 12 \U0001f600", ""]:
        total = sum(map(operator.mul, units, features(text, _TABLE)))
        assert function(text) == -(-total // UNITS), text


def test_shipped_weights_follow_the_fit_config() -> None:
    table = json.loads(CALIBRATION.read_text(encoding="utf-8"))
    assert table["features"] == list(FEATURES)
    for name, weights in table["weights"].items():
        assert all(weights[f] == 0 for f in table["dropped"]), name
