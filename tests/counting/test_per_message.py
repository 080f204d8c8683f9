"""``RequestCount.per_message`` as a view: a tuple in all but type, and it stays what it was."""

from __future__ import annotations

import pickle

import pytest

from ctxbudget.counting import PerMessage, RequestCounter, count_request
from ctxbudget.messages.model import Message, Request


def test_a_view_reads_as_the_tuple_it_stands_for() -> None:
    counts = [5, 7, 9]
    view = PerMessage(counts, 3, 12)  # the last count lent 3 more
    expected = (5, 7, 12)
    assert view == expected and expected == view and view != (5, 7, 9)  # both ways round
    assert view != [5, 7, 12]  # as a tuple: not equal to a list
    assert hash(view) == hash((5, 7, 12)) and repr(view) == "(5, 7, 12)"
    assert len(view) == 3 and list(view) == [5, 7, 12] and sum(view) == 24
    assert (view[0], view[-1], view[1:], view[::-1]) == (5, 12, (7, 12), (12, 7, 5))
    with pytest.raises(IndexError):
        view[3]
    with pytest.raises(IndexError):
        view[-4]
    assert pickle.loads(pickle.dumps(view)) == (5, 7, 12)
    assert type(pickle.loads(pickle.dumps(view))) is tuple
    counts.append(1)  # what a counter may do: grow the list past the view
    assert view == (5, 7, 12) and len(view) == 3


def test_counts_handed_out_keep_their_breakdown_after_later_steps() -> None:
    counter = RequestCounter("qwen3")
    request = Request(messages=(Message(role="user", content="Fix the parser."),))
    kept = []
    for text in ("Reading it.", "Found it.", "Fixed."):
        request = request.append(Message(role="assistant", content=text))
        kept.append((counter.count(request), count_request(request, "qwen3")))
        request = request.append(Message(role="user", content=f"And {text}"))
        kept.append((counter.count(request), count_request(request, "qwen3")))
    compacted = request.with_messages(request.messages[3:])  # a cut below every view
    kept.append((counter.count(compacted), count_request(compacted, "qwen3")))
    for got, expected in kept:
        assert isinstance(got.per_message, PerMessage)
        assert got.per_message == expected.per_message and got == expected
