"""Where a text is cut at added tokens: the trie pattern matches as the plain alternation."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.tokens.registry import (
    MAX_TRIE_NEST,
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


def test_long_added_tokens_nest_no_deeper_than_the_bound() -> None:
    """A hostile folder's 10,000-character tokens nest no 10,000 groups (recursion limits):
    past ``MAX_TRIE_NEST`` levels the rest is one alternation, matching as the whole one does."""
    nested = [("a" * n) + "b" for n in (1, 5_000, 10_000)] + ["a" * n for n in range(1, 300)]
    pattern = trie_pattern(nested)
    assert pattern.count("(?:") <= MAX_TRIE_NEST + 2
    boundary = token_boundary(nested)
    assert boundary is not None
    text = "x" + nested[2] + "a" * 700 + "ab"
    alternation = re.compile(alternation_pattern(nested))
    found = [m.span() for m in boundary.pattern.finditer(text)]
    assert found == [m.span() for m in alternation.finditer(text)]


def test_many_added_tokens_with_a_long_one_split_in_linear_time() -> None:
    """20,000 added tokens, one over 256 characters: the splitter stays a trie. It used to
    become one alternation of them all, tried token by token at each character (with 100,000,
    tests/reliability/test_hf_big_inputs.py, a 120 KB message took 76 s)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens = [f"{letters[i % 26]}{letters[i // 26 % 26]}_{i}" for i in range(20_000)]
    tokens.append("<" + "long" * 100 + ">")
    boundary = token_boundary(tokens)
    assert boundary is not None
    text = "<" + "long" * 100 + ">" + "plain words of a message, aa_0 and fp_19999 here. " * 2400
    started = time.perf_counter()
    found = [m.group() for m in boundary.pattern.finditer(text)]
    assert time.perf_counter() - started < 1  # measured: 0.1 s (the alternation: 6.5 s)
    assert found[:3] == ["<" + "long" * 100 + ">", "aa_0", "fp_19999"]
    assert len(found) == 4801
