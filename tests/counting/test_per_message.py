"""``RequestCount.per_message`` as a view: a tuple in all but type, and it stays what it was."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.counting import PerMessage, RequestCounter, count_request
from ctxbudget.counting.result import RequestCount, RunningCounts
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


def test_the_running_counts_request_count_is_the_dataclass_made_by_keywords() -> None:
    counts = RunningCounts()
    empty = counts.request_count("qwen3", "exact", (5, 6), 3)  # the head takes the primer
    assert vars(empty) == vars(RequestCount(**_fields("qwen3", "exact", 14, 8, 6, 0, (), 14)))
    counts.replace(0, [9, 10])
    made = counts.request_count("qwen3", "estimate", (5, 6), 3)
    expected = RequestCount(**_fields("qwen3", "estimate", 33, 5, 6, 22, (9, 13), 11))
    assert made == expected and hash(made) == hash(expected)
    assert vars(made) == vars(expected)  # every field, and no other
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.total = 1  # type: ignore[misc]


def _fields(*values: object) -> dict[str, Any]:
    return dict(zip([f.name for f in dataclasses.fields(RequestCount)], values, strict=True))


_EDITS = st.tuples(st.integers(-1, 12), st.lists(st.integers(0, 99), max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.lists(_EDITS, max_size=12))
def test_running_counts_change_under_no_view_handed_out(
    edits: list[tuple[int, list[int]]],
) -> None:
    """Random replaces, and (start -1, with a count) a step's usual one: the last count
    changed and one more after it."""
    counts, model = RunningCounts(), []
    handed: list[tuple[PerMessage, tuple[int, ...]]] = []
    for start, new in edits:
        if start < 0 and model:
            start, new = len(model) - 1, [*new, 7, 9][:2]
        start = min(max(start, 0), len(model))
        counts.replace(start, new)
        model[start:] = new
        assert counts.items == model and counts.total == sum(model)
        if model:  # a count handed out after each step, as RequestCounter does
            handed.append((counts.view(3), (*model[:-1], model[-1] + 3)))
    for view, seen in handed:  # first read at the end: a view reads its list when read
        assert view == seen
