"""Where a text is cut at added tokens: the trie pattern matches as the plain alternation."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.tokens.registry import (
    MAX_TRIE_TOKEN,
    alternation_pattern,
    token_boundary,
    trie_pattern,
)

# Few characters, so tokens nest (one a prefix of another) and texts hold them.
tokens = st.text(alphabet="<|ab>", min_size=1, max_size=6)


@given(vocabulary=st.sets(tokens, min_size=1, max_size=12), text=st.text(alphabet="<|ab>x"))
def test_trie_matches_as_the_longest_first_alternation(vocabulary: set[str], text: str) -> None:
    trie = re.compile(trie_pattern(vocabulary))
    alternation = re.compile(alternation_pattern(vocabulary))
    assert [m.span() for m in trie.finditer(text)] == [m.span() for m in alternation.finditer(text)]


def test_llama3_reserved_tokens_are_one_trie() -> None:
    reserved = [f"<|reserved_special_token_{i}|>" for i in range(250)]
    pattern = trie_pattern([*reserved, "<|eot_id|>", "<|start_header_id|>"])
    assert pattern.count("reserved_special_token_") == 1  # the shared prefix once, not 250 times
    text = "a<|reserved_special_token_12|>b<|reserved_special_token_1|><|eot_id|><|eot"
    boundary = token_boundary(reserved, ["<|eot_id|>"])
    assert boundary is not None
    found = [m.group() for m in boundary.pattern.finditer(text)]
    assert found == ["<|reserved_special_token_12|>", "<|reserved_special_token_1|>", "<|eot_id|>"]


def test_a_long_added_token_gets_the_alternation() -> None:
    """A hostile folder's 10,000-character tokens nest no 10,000 groups (recursion limits)."""
    nested = [("a" * n) + "b" for n in (1, 5_000, 10_000)]
    assert len(nested[1]) > MAX_TRIE_TOKEN
    boundary = token_boundary(nested)
    assert boundary is not None
    assert boundary.pattern.pattern == alternation_pattern(nested)
    assert [m.group() for m in boundary.pattern.finditer("x" + nested[2])] == [nested[2]]
