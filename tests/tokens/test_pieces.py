"""A long text is tokenised in bounded pieces whose counts (and ids) add up to the whole's."""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbudget.errors import InputError
from ctxbudget.tokens import registry
from ctxbudget.tokens.pieces import bounded_pieces, cuts_between_pieces
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer

# The real folders (their own Split patterns: Qwen's, Llama 3's; NFC or no normalizer) and the
# shipped tokenizers.
HF_NAMES = ("qwen2.5", "llama3-cl100k", "smollm3-template")
SHIPPED = ("qwen3", "cl100k_base", "o200k_base", "qwen3.6")
LIMIT, SEARCH = 48, 40

# Characters where the rules differ: letters of each kind, digits (grouped by three or one by
# one), apostrophes (contractions), combining marks and Hangul jamo (NFC composes them),
# whitespace runs and punctuation.
ALPHABET = "aZé中ｱ05٣'’_-.,;:!?<>|/ \n\t\r\u0301\u0308\u1100\u1161\u11a8가😀"
TOKENS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<think>")
# Each segment ends in a letter-digit pair, so a rule cut is always within SEARCH characters
# (an added token is never cut, nor at its edges: a segment is shorter than SEARCH - 12).
segments = st.builds(
    lambda body, token, tail: body + token + tail,
    st.text(alphabet=ALPHABET, max_size=14),
    st.sampled_from(("", "", *TOKENS)),
    st.sampled_from(("a1", "9b", "é,", "x.", "中7")),
)
texts = st.lists(segments, min_size=1, max_size=40).map("".join)


@pytest.fixture(scope="module")
def hf_tokenizers(hf_folder: Callable[[str], Path]) -> list[ExactTokenizer]:
    return [get_tokenizer(f"hf:{hf_folder(name)}") for name in HF_NAMES]


def test_real_folders_are_cut_by_the_proven_rule(hf_tokenizers: list[ExactTokenizer]) -> None:
    for tokenizer in hf_tokenizers:
        assert tokenizer.cut_rule is cuts_between_pieces, tokenizer.name


@pytest.mark.fuzz  # make fuzz: 10,000 examples, as the README's limits table says
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=texts)
def test_cut_sum_is_the_whole_count(
    hf_tokenizers: list[ExactTokenizer], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """Each tokenizer's ids of ``text`` whole, then with pieces of at most 48 characters."""
    tokenizers = [*hf_tokenizers, *map(get_tokenizer, SHIPPED)]
    whole = [(t.encode(text, special=True), t.count(text)) for t in tokenizers]
    with monkeypatch.context() as patch:
        patch.setattr(registry, "PIECE_CHARS", LIMIT)
        patch.setattr(registry, "SEARCH_CHARS", SEARCH)
        for tokenizer, (ids, count) in zip(tokenizers, whole, strict=True):
            pieces = list(tokenizer.bounded(text))
            assert "".join(pieces) == text and max(map(len, pieces)) <= LIMIT
            for left, right in itertools.pairwise(pieces):  # all rule cuts
                assert cuts_between_pieces(left[-1], right[0]), (left, right)
            assert tokenizer.encode(text, special=True) == ids, tokenizer.name
            assert tokenizer.count(text) == count, tokenizer.name
            assert tokenizer.count_special(text) == len(ids), tokenizer.name
            many = tokenizer.count_special_many([text, "a", text[:10]])
            assert many == [len(ids), *map(tokenizer.count_special, ["a", text[:10]])]


def test_no_cut_inside_or_beside_an_added_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """``<|im_end|>`` holds a letter-then-``_`` cut: the pieces keep every added token whole."""
    tokenizer = get_tokenizer("qwen3")
    text = "x1" + "<|im_end|>" * 30 + "y2"
    monkeypatch.setattr(registry, "PIECE_CHARS", 25)
    monkeypatch.setattr(registry, "SEARCH_CHARS", 20)
    pieces = list(tokenizer.bounded(text))
    assert "".join(pieces) == text and len(pieces) > 5
    for piece in pieces:
        assert piece.strip("xy12").replace("<|im_end|>", "") == "", pieces
    # bounded_pieces alone, told nothing to keep, would cut inside one
    assert any(p.replace("<|im_end|>", "") for p in bounded_pieces(text[2:-2], 25, 20))


def test_nfc_never_joins_two_characters_the_rule_cuts_between() -> None:
    """The rule's claim for NFC normalizers (Qwen's), over all of Unicode: a character it cuts
    before has no combining class and is never the second of a canonical composition, except
    Hangul vowel/trailing jamo, which it cuts before only after a digit."""
    seconds = set()
    for code in range(0x110000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(chr(int(parts[1], 16)))
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char)[0] in "LNPS":
            assert unicodedata.combining(char) == 0, hex(code)
            assert char not in seconds, hex(code)
    jamo = [chr(c) for c in (*range(0x1161, 0x1176), *range(0x11A8, 0x11C3))]
    assert not any(cuts_between_pieces(first, v) for first in "\u1100가" for v in jamo)


def test_ordinary_texts_are_not_cut() -> None:
    tokenizer = get_tokenizer("cl100k_base")
    text = "word1 " * (registry.PIECE_CHARS // 6)
    assert len(text) <= registry.PIECE_CHARS
    assert list(tokenizer.bounded(text)) == [text]


def test_a_tokenizer_with_no_known_cut_refuses_an_uncut_text_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def encode(text: str) -> list[int]:
        calls.append(len(text))
        return [0] * len(text)

    tokenizer = ExactTokenizer(
        "hf:unknown", encode, encode, vocab_size=1, special_in_text=True, cut_rule=None
    )
    monkeypatch.setattr(registry, "PIECE_CHARS", 10)
    monkeypatch.setattr(registry, "UNCUT_CHARS", 40)
    assert tokenizer.count("a1" * 20) == 40 and calls == [40]  # taken whole
    with pytest.raises(InputError, match="over the 40 this tokenizer takes at once"):
        tokenizer.count("a1" * 21)
