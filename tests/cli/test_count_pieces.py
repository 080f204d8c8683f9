"""``count`` hands an exact tokenizer bounded pieces whose counts add up to the whole's."""

from __future__ import annotations

import pytest
from tests.conftest import data_file

from ctxbudget.tokens.pieces import bounded_pieces
from ctxbudget.tokens.registry import get_tokenizer


@pytest.mark.parametrize("kind", ["chinese", "japanese", "python", "json", "mixed"])
def test_pieces_of_text_without_whitespace_count_as_the_whole(kind: str) -> None:
    text = "".join(data_file("estimators", f"{kind}.txt").read_text(encoding="utf-8").split())
    pieces = list(bounded_pieces(text, 1500))
    assert "".join(pieces) == text
    assert len(pieces) > 5 and max(map(len, pieces)) <= 1500
    for name in ("cl100k_base", "o200k_base", "qwen3", "qwen3.6"):
        tokenizer = get_tokenizer(name)
        assert sum(tokenizer.count(p) for p in pieces) == tokenizer.count(text), name


def test_one_endless_piece_is_still_cut() -> None:
    pieces = list(bounded_pieces("a" * 10_000, 1000, search=100))
    assert "".join(pieces) == "a" * 10_000
    assert max(map(len, pieces)) == 1000
