"""The cut ``QwenScheme.parts`` relies on: after a newline, before a non-space, counts add up.

For Qwen's own tokenizers ``T(framing + body) == T(framing) + T(body)`` when ``framing`` ends
with ``\\n`` and ``body`` starts with a character that is not whitespace; not so when the body
starts with whitespace (so the guard is needed).
"""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.counting.qwen import NO_THINKING, REPLY_OPEN
from ctxbudget.tokens.registry import (
    QWEN3_SPECIAL,
    QWEN25_SPECIAL,
    QWEN36_SPECIAL,
    ExactTokenizer,
    get_tokenizer,
)

TOKENIZERS = ("qwen3", "qwen2.5", "qwen3.6")

# Characters near every class the pre-tokenizer pattern tells apart: CJK, emoji, digits,
# punctuation, marks that NFC composes, Unicode whitespace and the controls Python calls space.
PIECES = (
    "数据", "日本語", "🙂", "👍🏽", "123", "4567", "!", "?!", "...", "'s", "'ll", "\u0301",
    "\u0338", "e\u0301", "\r\n", "\r", "\n", "\n\n", " ", "  ", "\t", "\u3000", "\xa0",
    "\x85", "\u2028", "\x1c", "\u200b", "\ufeff", "<think>", "</think>", "<|im_end|>",
    "<tool_response>", "<tool", "|>", "a", "Hello", "é",
)  # fmt: skip
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=8).map("".join)
framings = st.sampled_from([REPLY_OPEN, REPLY_OPEN + NO_THINKING, "\n", "\n\n"]) | texts.map(
    lambda t: t + "\n"
)
bodies = (
    st.tuples(st.sampled_from(PIECES) | st.characters(), texts)
    .map("".join)
    .filter(lambda b: not b[0].isspace())
)


def _tokens(tokenizer: ExactTokenizer, text: str) -> int:
    return len(tokenizer.encode(text, special=True))


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=300)
@given(framing=framings, body=bodies)
def test_newline_cut_adds_up(name: str, framing: str, body: str) -> None:
    tokenizer = get_tokenizer(name)
    whole = _tokens(tokenizer, framing + body)
    assert whole == _tokens(tokenizer, framing) + _tokens(tokenizer, body)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_cut_holds_for_every_space_mark_and_symbol(name: str) -> None:
    """Every code point that is no letter or digit (separators, controls, format characters,
    combining marks, punctuation, symbols), first in the body: only those ``str.isspace``
    rejects may break the cut."""
    tokenizer = get_tokenizer(name)
    chars = [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if not 0xD800 <= c <= 0xDFFF
        and unicodedata.category(chr(c))[0] in "ZCMPS"
        and unicodedata.category(chr(c)) not in ("Co", "Cn")  # private use, unassigned
    ]
    framing = REPLY_OPEN + NO_THINKING
    head = _tokens(tokenizer, framing)
    broken = [
        c
        for c in chars
        if _tokens(tokenizer, framing + c + "x") != head + _tokens(tokenizer, c + "x")
    ]
    assert broken and all(c.isspace() for c in broken)  # "\n" itself, at least, breaks it


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("body", ["\nDone.", " \nDone.", "\n\n数据"])
def test_body_starting_with_space_does_not_cut(name: str, body: str) -> None:
    tokenizer = get_tokenizer(name)
    whole = _tokens(tokenizer, REPLY_OPEN + body)
    assert whole != _tokens(tokenizer, REPLY_OPEN) + _tokens(tokenizer, body)


@pytest.mark.parametrize("special", [QWEN3_SPECIAL, QWEN25_SPECIAL, QWEN36_SPECIAL])
def test_no_added_token_holds_a_newline(special: dict[str, int]) -> None:
    assert special and not any("\n" in token or "\r" in token for token in special)
