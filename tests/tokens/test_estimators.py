"""The harness heuristics reproduce each harness's formula, rounding included."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.errors import UnknownNameError
from ctxbudget.tokens.calibrated import ESTIMATORS, estimate
from ctxbudget.tokens.estimators import (
    HARNESS_ESTIMATORS,
    _corecoder_counts,
    codex,
    corecoder_v04,
    corecoder_v07,
    miniagent,
    opencode,
    pi,
    utf16_length,
)

EMOJI = "\U0001f600"  # one code point, two UTF-16 code units, four UTF-8 bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("ab", 0), ("abc", 1), ("abcde", 1), ("abcdef", 2), ("中文字", 1), (EMOJI * 3, 1)],
)
def test_corecoder_v04_floors_code_points_over_3(text: str, expected: int) -> None:
    assert corecoder_v04(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 0),  # int(1 / 3.4)
        ("abcd", 1),  # int(4 / 3.4)
        ("中", 1),  # ceil(1 / 1.5)
        ("中文", 2),  # ceil(2 / 1.5)
        ("中文字", 2),
        ("，。", 2),  # CJK punctuation is CJK (and a symbol; rest is 0 so not dense)
        ("ab!!", 1),  # 2 of 4 symbols: dense, int(4 / 2.8)
        ("abc!", 1),  # exactly 25%: not dense, int(4 / 3.4)
        ("abcdefg!", 2),  # 12.5%: int(8 / 3.4)
        ("abcdefgh!!!", 3),  # 27%: dense, int(11 / 2.8) = 3; sparse would give 3 too
        ("aaaaaa!!", 2),  # 25% exactly: int(8 / 3.4) = 2, dense would give int(8/2.8) = 2
        ("aaaaaaaaaaa!!!!", 5),  # 26.7%: dense, int(15 / 2.8) = 5 (sparse: 4)
        ("aaaaaaaaaaaa!!!!", 4),  # 25% exactly: sparse, int(16 / 3.4) = 4 (dense: 5)
        ("中文，ab", 2 + 0),  # cjk 3 -> 2; rest 2 -> int(2/2.8)=0 (dense: 1 of 5 symbols)
    ],
)
def test_corecoder_v07_formula_and_dense_boundary(text: str, expected: int) -> None:
    assert corecoder_v07(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 8, 2), (EMOJI, 1), (EMOJI * 3, 2)],
)
def test_pi_ceils_utf16_units_over_4(text: str, expected: int) -> None:
    assert pi(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 0),  # 0.25 -> 0
        ("ab", 1),  # 0.5 rounds half up, as JavaScript Math.round does
        ("abcdef", 2),  # 1.5 -> 2 (Python's round would give 2 by banker's rule too)
        ("x" * 10, 3),  # 2.5 -> 3 (Python's round gives 2)
        ("abc", 1),  # 0.75 -> 1
        (EMOJI, 1),  # 2 UTF-16 units -> 0.5 -> 1
        ("中", 0),
    ],
)
def test_opencode_rounds_half_up_on_utf16_units(text: str, expected: int) -> None:
    assert opencode(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("中", 1), ("中文", 2), ("é", 1), (EMOJI, 1), ("中a", 1)],
)
def test_codex_ceils_utf8_bytes_over_4(text: str, expected: int) -> None:
    assert codex(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 1),  # ceil(1 / 3.5)
        ("abcdefg", 2),  # 7 / 3.5 = 2 exactly
        ("abcdefgh", 3),
        ("中", 1),
        ("中文ab", 3),  # 2 + 2 / 3.5
        ("é" + "a" * 7, 3),  # 1 + 2
        (EMOJI, 1),  # one code point, not two
    ],
)
def test_miniagent_ascii_over_3_5_plus_one_per_other(text: str, expected: int) -> None:
    assert miniagent(text) == expected


_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
_SYMBOL = re.compile(r"[^\w\s]")


def _corecoder_v07_reference(text: str) -> int:
    cjk = len(_CJK.findall(text))
    rest = len(text) - cjk
    dense = rest > 0 and len(_SYMBOL.findall(text)) / len(text) > 0.25
    return math.ceil(cjk / 1.5) + int(rest / (2.8 if dense else 3.4))


_TEXT = (
    st.text(
        alphabet=st.sampled_from("ab Z9_ \n\t!{}\"'中文，。（）ひカ한é\u3000\uff01" + EMOJI),
        max_size=80,
    )
    | st.text(max_size=40)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=200)
)


@settings(max_examples=300)
@given(_TEXT)
def test_formulas_match_their_definitions(text: str) -> None:
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    assert utf16_length(text) == units
    assert corecoder_v07(text) == _corecoder_v07_reference(text)
    assert pi(text) == math.ceil(units / 4)
    assert opencode(text) == math.floor(units / 4 + 0.5)
    assert codex(text) == math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)
    assert miniagent(text) == math.ceil(ascii_chars / 3.5 + len(text) - ascii_chars)


@pytest.mark.parametrize("plane", range(17))
def test_corecoder_v07_matches_the_regexes_on_every_code_point(plane: int) -> None:
    # Exhaustive: each code point of the plane, in pieces that mix CJK, symbols and the rest.
    start = plane * 0x10000
    for low in range(start, start + 0x10000, 0x1000):
        text = "".join(map(chr, range(low, low + 0x1000)))
        expected = (len(_CJK.findall(text)), len(_SYMBOL.findall(text)))
        assert _corecoder_counts(text) == expected, hex(low)
        assert corecoder_v07(text[::7]) == _corecoder_v07_reference(text[::7]), hex(low)


@settings(max_examples=100)
@given(_TEXT)
def test_every_estimator_is_a_non_negative_int(text: str) -> None:
    for function in ESTIMATORS.values():
        value = function(text)
        assert isinstance(value, int)
        assert value >= 0


def test_registry_lists_harnesses_then_ours() -> None:
    names = list(ESTIMATORS)
    assert names[: len(HARNESS_ESTIMATORS)] == list(HARNESS_ESTIMATORS)
    assert names[:6] == ["corecoder-0.4", "corecoder-0.7", "pi", "opencode", "codex", "miniagent"]
    assert {"ctxbudget", "ctxbudget-cl100k_base", "ctxbudget-o200k_base", "ctxbudget-qwen3"} <= set(
        names
    )
    for function in ESTIMATORS.values():
        assert function.__doc__


def test_estimate_by_name_and_unknown_name() -> None:
    assert estimate("pi", "abcde") == 2
    with pytest.raises(UnknownNameError, match=r"known: corecoder-0\.4"):
        estimate("gpt-guess", "x")


def test_cli_json_shape_and_counts() -> None:
    from click.testing import CliRunner

    from ctxbudget.cli.estimators import estimators_command
    from ctxbudget.tokens.registry import get_tokenizer

    text = "def f(x):\n    return x  # 中文注释\n"
    result = CliRunner().invoke(
        estimators_command, ["-", "--json", "--reference", "qwen3"], input=text
    )
    data = json.loads(result.output)
    assert set(data) >= {"reference", "reference_tokens", "chars", "estimators"}  # a contract
    assert data["reference_tokens"] == get_tokenizer("qwen3").count(text)
    assert data["chars"] == len(text)
    assert [row["name"] for row in data["estimators"]] == list(ESTIMATORS)
    for row in data["estimators"]:
        assert row["tokens"] == ESTIMATORS[row["name"]](text)
        assert row["ratio"] == pytest.approx(row["tokens"] / data["reference_tokens"], abs=1e-4)


@pytest.mark.parametrize("make", ["missing", "directory", "latin1"])
def test_cli_bad_input_is_an_input_error(make: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ctxbudget.cli.estimators import estimators_command
    from ctxbudget.errors import InputError

    path = tmp_path / "x.txt"
    if make == "directory":
        path = tmp_path
    elif make == "latin1":
        path.write_bytes("café".encode("latin-1"))
    result = CliRunner().invoke(estimators_command, [str(path)])
    assert isinstance(result.exception, InputError)
    assert "\n" not in str(result.exception)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_cli_rows_per_file_and_plot(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ctxbudget.cli.estimators import estimators_command
    from ctxbudget.tokens.registry import get_tokenizer

    texts = {"en.txt": "Hello there, world.\n" * 40, "zh.md": "你好，世界。中文文本。\n" * 30}
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    paths = [str(tmp_path / n) for n in texts]
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    runner = CliRunner()
    result = runner.invoke(estimators_command, [*paths, "--json", "--plot", str(two)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [row["path"] for row in data["texts"]] == paths
    for row, text in zip(data["texts"], texts.values(), strict=True):
        assert row["reference_tokens"] == get_tokenizer("cl100k_base").count(text)
        assert row["chars"] == len(text)
        assert {r["name"]: r["tokens"] for r in row["estimators"]} == {
            name: function(text) for name, function in ESTIMATORS.items()
        }
    assert data["reference_tokens"] == sum(row["reference_tokens"] for row in data["texts"])
    assert runner.invoke(estimators_command, [paths[0], "--plot", str(one)]).exit_code == 0
    (w1, h1), (w2, h2) = _png_size(one), _png_size(two)
    assert w1 == w2 and h2 > h1  # one row per text, the same width
