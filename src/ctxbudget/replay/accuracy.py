"""How far each estimator is from the context the server reported, call by call.

Usage-first: previous context + output - reasoning not sent back + the estimator's count of the
messages added since. Naive: the estimator over every message so far, no usage, no floor for the
system prompt and tools. Calls right after a compaction (flagged, or the context fell below half)
are left out of usage-first; naive stops at the first compaction (the rewritten history is not
in the trace).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ctxbudget.replay.replay import unresent_reasoning
from ctxbudget.replay.trace import Call, Trace

EstimatorTable = Mapping[str, Callable[[str], int]]


@dataclass(frozen=True, slots=True)
class CallCounts:
    """An estimator's count of one call's added messages and of its reply."""

    added: int
    reply: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimatorAccuracy:
    """Absolute error in percent of the reported context, over the calls it could predict."""

    name: str
    median_abs_error_pct: float | None
    p95_abs_error_pct: float | None
    naive_median_abs_error_pct: float | None
    naive_p95_abs_error_pct: float | None
    calls: int
    naive_calls: int


def default_estimators() -> EstimatorTable:
    """The combined estimator registry (harness heuristics and calibrated ones)."""
    try:
        module = importlib.import_module("ctxbudget.tokens.calibrated")
    except ImportError:  # before the calibrated estimators exist: the harness heuristics
        module = importlib.import_module("ctxbudget.tokens.estimators")
        table: EstimatorTable = module.HARNESS_ESTIMATORS
        return table
    table = module.ESTIMATORS
    return table


def count_call(call: Call, estimators: EstimatorTable) -> dict[str, CallCounts]:
    """Each estimator's counts for one call (message by message, as harnesses count)."""
    out = {}
    for name, estimate in estimators.items():
        added = sum(estimate(m.text) for m in call.added)
        reply = estimate(call.reply.text) if call.reply is not None else 0
        out[name] = CallCounts(added, reply)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _rewritten(calls: Sequence[Call], i: int) -> bool:
    return calls[i].after_compaction or calls[i].context_tokens * 2 < calls[i - 1].context_tokens


def _error(predicted: int, actual: int) -> float:
    return abs(predicted - actual) / actual * 100


def usage_first_errors(trace: Trace, counts: Sequence[CallCounts]) -> list[float]:
    """Per predictable call: |prediction - reported| / reported, in percent."""
    calls = trace.calls
    errors = []
    for i in range(1, len(calls)):
        if calls[i].context_tokens == 0 or _rewritten(calls, i):
            continue
        predicted = calls[i - 1].total_tokens - unresent_reasoning(trace, i) + counts[i].added
        errors.append(_error(predicted, calls[i].context_tokens))
    return errors


def naive_errors(trace: Trace, counts: Sequence[CallCounts]) -> list[float]:
    """Per call up to the first compaction: the whole conversation estimated, no usage."""
    errors = []
    running = 0
    for i, call in enumerate(trace.calls):
        if i > 0 and _rewritten(trace.calls, i):
            break
        running += counts[i].added
        if call.context_tokens:
            errors.append(_error(running, call.context_tokens))
        running += counts[i].reply
    return errors


def estimator_accuracy(
    trace: Trace,
    per_call: Sequence[Mapping[str, CallCounts]],
    names: Sequence[str],
) -> tuple[EstimatorAccuracy, ...]:
    """Median and p95 absolute error of each estimator, usage-first and naive."""
    results = []
    for name in names:
        counts = [c[name] for c in per_call]
        first = usage_first_errors(trace, counts)
        naive = naive_errors(trace, counts)
        results.append(
            EstimatorAccuracy(
                name=name,
                median_abs_error_pct=_round(percentile(first, 50)),
                p95_abs_error_pct=_round(percentile(first, 95)),
                naive_median_abs_error_pct=_round(percentile(naive, 50)),
                naive_p95_abs_error_pct=_round(percentile(naive, 95)),
                calls=len(first),
                naive_calls=len(naive),
            )
        )
    return tuple(results)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
