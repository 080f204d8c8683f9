"""Policy replay on hand-made traces whose answers are known, and estimator accuracy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.replay.conftest import char_estimator

from ctxbudget.budget.rules import get_policy
from ctxbudget.replay import Call, Trace, TraceMessage, replay_trace
from ctxbudget.replay.accuracy import percentile
from ctxbudget.replay.replay import find_wall, is_late, reasoning_pitfall, replay_window

EST = {"chars4": char_estimator}


def make_trace(
    contexts: list[int],
    *,
    output: int = 10,
    tasks: tuple[int, ...] = (0,),
    reasoning: dict[int, int] | None = None,
    mode: str = "dropped",
) -> Trace:
    reasoning = reasoning or {}
    calls = tuple(
        Call(
            index=i,
            context_tokens=c,
            output_tokens=output + reasoning.get(i, 0),
            reasoning_tokens=reasoning.get(i, 0),
            task_start=i in tasks,
        )
        for i, c in enumerate(contexts)
    )
    return Trace(format="openai-log", calls=calls, model="m", window=None, reasoning=mode)  # type: ignore[arg-type]


CURVE = [10_000, 40_000, 70_000, 85_000, 95_000, 99_000]


# Window 100,000, output 10 per call: the wall is the first context + 10 > 100,000 -> none;
# with output 2,000 the wall is call 5 (99,000 + 2,000). Thresholds from rules.py's formulas:
# letta 83,616 (>), pi 83,616 (>, task_end), opencode 68,000 (>=), codex 90,000 (>=),
# corecoder 50,000 (>); ctxbudget learns from the 2,000-token replies (no max output recorded)
# and from the curve's 30,000-token steps (kept free up to W/4): 100,000 - max(1,024 + 2,048,
# 2,000, 25,000) = 75,000 (>), so it compacts at 85,000, before a step already seen could carry
# the context past the window.
@pytest.mark.parametrize(
    ("rule", "tasks", "trigger"),
    [
        ("letta", (0,), 3),
        ("pi", (0,), None),  # only checked between tasks: none after call 0
        ("pi", (0, 4), 4),
        ("opencode", (0,), 2),
        ("codex", (0,), 4),
        ("corecoder", (0,), 2),
        ("ctxbudget", (0,), 3),
    ],
)
def test_first_trigger(rule: str, tasks: tuple[int, ...], trigger: int | None) -> None:
    trace = make_trace(CURVE, output=2_000, tasks=tasks)
    result = replay_window(trace, 100_000, [get_policy(rule)])
    assert result.wall == 5
    assert result.policies[0].first_trigger == trigger
    assert result.policies[0].late is (trigger is None)


def test_threshold_equality_honours_ge_and_gt() -> None:
    trace = make_trace([90_000])
    window = replay_window(
        trace, 100_000, [get_policy("codex"), get_policy("letta", reserve_tokens=10_000)]
    )
    codex, letta = window.policies
    assert codex.first_trigger == 0  # 90,000 >= 90,000
    assert letta.first_trigger is None  # 90,000 > 90,000 is false


def test_late_when_firing_after_wall() -> None:
    trace = make_trace([50_000, 99_500, 99_600], output=1_000, tasks=(0, 2))
    result = replay_window(trace, 100_000, [get_policy("pi")])
    assert result.wall == 1
    assert result.policies[0].first_trigger == 2
    assert result.policies[0].late


@pytest.mark.parametrize(
    ("trigger", "wall", "late"),
    [(None, None, False), (None, 3, True), (3, 3, False), (4, 3, True), (1, None, False)],
)
def test_is_late(trigger: int | None, wall: int | None, late: bool) -> None:
    assert is_late(trigger, wall) is late


def test_reasoning_pitfall_dropped() -> None:
    # The seed's round 8: total 6,511 with 4,096 reasoning, next request only 2,456.
    trace = make_trace([2_000, 2_405, 2_456], output=10, reasoning={1: 4_096})
    pitfall = reasoning_pitfall(trace)
    assert [(p.index, p.reported_total, p.next_context, p.unresent_reasoning) for p in pitfall] == [
        (2, 2_405 + 4_106, 2_456, 4_096)
    ]


def test_reasoning_dropped_between_tasks_sums_the_task() -> None:
    trace = make_trace(
        [100, 200, 300, 150],
        reasoning={0: 5, 1: 7, 2: 11},
        tasks=(0, 3),
        mode="dropped_between_tasks",
    )
    assert [p.unresent_reasoning for p in reasoning_pitfall(trace)] == [5 + 7 + 11]


def test_reading_total_fires_earlier_with_unresent_reasoning() -> None:
    trace = make_trace([80_000, 80_100], output=100, reasoning={0: 10_000})
    result = replay_window(trace, 100_000, [get_policy("codex")])
    assert result.policies[0].first_trigger is None
    assert result.policies[0].first_trigger_reading_total == 1


def test_estimator_accuracy_exact_when_estimates_match() -> None:
    # Each call adds 40 characters = 10 tokens by chars4; reported contexts agree exactly.
    text = "x" * 40
    calls = []
    context = 100
    for i in range(5):
        calls.append(
            Call(
                index=i,
                context_tokens=context,
                output_tokens=5,
                task_start=i == 0,
                added=(TraceMessage("tool", text),),
                reply=TraceMessage("assistant", "y" * 20),
            )
        )
        context += 5 + 10
    trace = Trace(format="openai-log", calls=tuple(calls), model="gpt-4o", reasoning="resent")
    result = replay_trace(trace, estimators=EST)
    (acc,) = result.estimators
    assert acc.median_abs_error_pct == 0.0 and acc.p95_abs_error_pct == 0.0
    assert acc.calls == 4
    assert acc.naive_median_abs_error_pct is not None and acc.naive_median_abs_error_pct > 50


@settings(max_examples=50)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=40), st.integers(1_000, 400_000))
def test_wall_is_first_overflow(contexts: list[int], window: int) -> None:
    trace = make_trace(contexts)
    wall = find_wall(trace.calls, window)
    over = [i for i, c in enumerate(contexts) if c + 10 > window]
    assert wall == (over[0] if over else None)
    for p in replay_window(trace, window, [get_policy("ctxbudget")]).policies:
        assert p.first_trigger is None or p.first_trigger <= len(contexts) - 1


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1, 2, 3], 50, 2), ([1, 2, 3, 4], 50, 2.5), ([0, 10], 95, 9.5), ([], 50, None)],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected
