"""Replay keeps calls as columns and streams its JSON: same answers as the object form."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.replay.conftest import TRACES, char_estimator, shared_trace

from ctxbudget.replay import Call, Trace, TraceMessage, load_trace, replay_file, replay_trace
from ctxbudget.replay.analyze import result_json, write_json
from ctxbudget.replay.previews import Previews
from ctxbudget.replay.replay import unresent_reasoning
from ctxbudget.replay.trace import CallTable

EST = {"chars4": char_estimator}
WINDOWS = [30_000, 100_000, 400_000]
counts = st.integers(min_value=0, max_value=2**40)

calls_strategy = st.lists(
    st.builds(
        Call,
        index=st.integers(min_value=0, max_value=10**6),
        context_tokens=counts,
        output_tokens=counts,
        reasoning_tokens=counts,
        cache_read_tokens=counts,
        cache_write_tokens=counts,
        task_start=st.booleans(),
        after_compaction=st.booleans(),
        added=st.just((TraceMessage("user", "text that the table drops"),)),
        model=st.sampled_from([None, "a", "b"]),
    ),
    max_size=30,
)


@settings(max_examples=50)
@given(calls=calls_strategy)
def test_call_table_keeps_every_number_and_drops_text(calls: list[Call]) -> None:
    table = CallTable(calls)
    stripped = [dataclasses.replace(c, added=(), reply=None) for c in calls]
    assert list(table) == stripped
    assert len(table) == len(calls)
    assert list(table[1:4]) == stripped[1:4]
    if calls:
        assert table[-1] == stripped[-1]
    with pytest.raises(IndexError):
        table[len(calls)]


def reference_unresent(trace: Trace, i: int) -> int:
    """The definition, call by call: what the total before call i counted and i did not resend."""
    calls = trace.calls
    if i == 0:
        return 0
    if trace.reasoning == "dropped":
        return calls[i - 1].reasoning_tokens
    if trace.reasoning == "dropped_between_tasks" and calls[i].task_start:
        total = 0
        for j in range(i - 1, -1, -1):
            total += calls[j].reasoning_tokens
            if calls[j].task_start:
                break
        return total
    return 0


@settings(max_examples=100)
@given(
    steps=st.lists(st.tuples(st.integers(0, 500), st.booleans()), max_size=25),
    mode=st.sampled_from(["dropped", "dropped_between_tasks", "resent", "unknown"]),
)
def test_unresent_reasoning_in_one_pass_matches_the_definition(
    steps: list[tuple[int, bool]], mode: str
) -> None:
    calls = tuple(
        Call(index=i, context_tokens=100, output_tokens=r, reasoning_tokens=r, task_start=t)
        for i, (r, t) in enumerate(steps)
    )
    trace = Trace(format="codex", calls=calls, reasoning=mode)  # type: ignore[arg-type]
    expected = [reference_unresent(trace, i) for i in range(len(calls))]
    assert list(unresent_reasoning(trace)) == expected


@settings(max_examples=50)
@given(texts=st.lists(st.text(max_size=40), max_size=20), limit=st.integers(0, 200))
def test_previews_round_trip_until_the_cap(texts: list[str], limit: int) -> None:
    previews = Previews(texts, limit=limit)
    assert len(previews) == len(texts)
    used = 0
    for text, kept in zip(texts, previews, strict=True):
        size = len(text.encode("utf-8"))
        fits = used + size <= limit
        assert kept == (text if fits else "")
        used += size if fits else 0


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_streamed_json_is_the_same_document(fmt: str) -> None:
    result = replay_file(shared_trace(fmt), windows=WINDOWS, estimators=EST)
    out = io.StringIO()
    write_json(result, out)
    assert out.getvalue() == json.dumps(result_json(result), indent=2) + "\n"
    doc = json.loads(out.getvalue())
    assert list(doc)[:4] == ["trace", "calls", "windows", "estimators"]
    assert doc == result_json(result)
    assert len(doc["calls"]) == doc["trace"]["calls"] == len(load_trace(shared_trace(fmt)).calls)


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_columns_give_the_answers_of_the_calls_with_text(fmt: str) -> None:
    """replay_file keeps columns; replay_trace keeps the loaded Call objects."""
    streamed = replay_file(shared_trace(fmt), windows=WINDOWS, estimators=EST)
    loaded = replay_trace(load_trace(shared_trace(fmt)), windows=WINDOWS, estimators=EST)
    assert isinstance(streamed.trace.calls, CallTable)
    assert result_json(streamed) == result_json(loaded)
    assert list(streamed.previews) == list(loaded.previews)


def test_previews_can_be_left_out() -> None:
    result = replay_file(shared_trace("claude-code"), estimators=EST, previews=False)
    assert list(result.previews) == []
    assert len(result.trace.calls) == 17
