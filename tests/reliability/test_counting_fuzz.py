"""Counters never fail on text: any request, any code point (lone surrogates and special-token
strings included) gets a count whose parts add up, and every tokenizer and estimator returns a
non-negative count, 0 for "". ``make fuzz`` runs these with 10,000+ examples each.

Decision: a Python str may hold lone surrogates (from ``json.loads('"\\ud800"')``); they are
counted, not rejected. tiktoken encodes them as U+FFFD; the estimators read them with
``surrogatepass``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reliability_strategies import any_text, messages, requests

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.calibrated import ESTIMATORS
from ctxbudget.tokens.registry import get_tokenizer

pytestmark = pytest.mark.fuzz
COUNTERS = ("qwen3", "cl100k_base", "o200k_base", "ctxbudget", "pi")
TOKENIZERS = ("cl100k_base", "o200k_base", "qwen3", "qwen3.6")


@pytest.mark.parametrize("counter", COUNTERS)
@given(request=requests)
def test_any_request_counts_and_adds_up(counter: str, request: Request) -> None:
    count = count_request(request, counter)
    assert count.system >= 0 and count.tools >= 0 and count.messages >= 0
    assert count.total == count.system + count.tools + count.messages
    assert count.floor == count.system + count.tools
    assert len(count.per_message) == len(request.messages)
    assert sum(count.per_message) == count.messages
    assert all(n >= 0 for n in count.per_message)
    assert RequestCounter(counter, model=request.model).count(request) == count


@pytest.mark.parametrize("counter", COUNTERS)
@given(first=requests, more=st.lists(messages(), max_size=3))
def test_incremental_counter_equals_a_full_count(
    counter: str, first: Request, more: list[Message]
) -> None:
    incremental = RequestCounter(counter, model=first.model)
    incremental.count(first)
    grown = first.with_messages((*first.messages, *more))
    assert incremental.count(grown) == count_request(grown, counter, model=first.model)


@pytest.mark.parametrize("name", TOKENIZERS)
@given(text=any_text)
def test_tokenizers_count_any_text(name: str, text: str) -> None:
    tokenizer = get_tokenizer(name)
    for special in (False, True):
        ids = tokenizer.encode(text, special=special)
        assert all(0 <= i < tokenizer.vocab_size for i in ids)
        assert (len(ids) == 0) == (text == "")
    assert tokenizer.count(text) == len(tokenizer.encode(text))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@given(text=any_text)
def test_estimators_count_any_text(name: str, text: str) -> None:
    estimate = ESTIMATORS[name](text)
    assert isinstance(estimate, int) and estimate >= 0
    if text == "":
        assert estimate == 0
