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
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ctxbudget.replay.replay import unresent_reasoning
from ctxbudget.replay.trace import Call, CallTable, Trace, as_table

EstimatorTable = Mapping[str, Callable[[str], int]]


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


class CallCounts:
    """Each estimator's count of each call's added messages and of its reply, as columns.

    8 bytes per number: the median and p95 need every call's value, and a 1 GB session has
    about 172,000 calls (one ``(added, reply)`` object per call and estimator was ~1 KB a call).
    """

    def __init__(self, estimators: EstimatorTable) -> None:
        self.estimators = estimators
        self.added = {name: array("q") for name in estimators}
        self.reply = {name: array("q") for name in estimators}

    def add(self, call: Call) -> None:
        """Count one call, message by message, as harnesses count."""
        for name, estimate in self.estimators.items():
            self.added[name].append(sum(estimate(m.text) for m in call.added))
            self.reply[name].append(estimate(call.reply.text) if call.reply is not None else 0)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None for no values."""
    return _ranked(sorted(values), q)


def _ranked(ordered: Sequence[float], q: float) -> float | None:
    if not ordered:
        return None
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _rewritten(calls: CallTable, i: int) -> bool:
    return bool(calls.after_compaction[i]) or calls.context[i] * 2 < calls.context[i - 1]


def _error(predicted: int, actual: int) -> float:
    return abs(predicted - actual) / actual * 100


def usage_first_errors(
    trace: Trace, added: Sequence[int], unresent: Sequence[int] | None = None
) -> array[float]:
    """Per predictable call: |prediction - reported| / reported, in percent."""
    calls = as_table(trace.calls)
    unresent = unresent_reasoning(trace) if unresent is None else unresent
    errors = array("d")
    for i in range(1, len(calls)):
        if calls.context[i] == 0 or _rewritten(calls, i):
            continue
        total = calls.context[i - 1] + calls.output[i - 1]
        errors.append(_error(total - unresent[i] + added[i], calls.context[i]))
    return errors


def naive_errors(trace: Trace, added: Sequence[int], reply: Sequence[int]) -> array[float]:
    """Per call up to the first compaction: the whole conversation estimated, no usage."""
    calls = as_table(trace.calls)
    errors = array("d")
    running = 0
    for i, context in enumerate(calls.context):
        if i > 0 and _rewritten(calls, i):
            break
        running += added[i]
        if context:
            errors.append(_error(running, context))
        running += reply[i]
    return errors


def estimator_accuracy(trace: Trace, counts: CallCounts) -> tuple[EstimatorAccuracy, ...]:
    """Median and p95 absolute error of each estimator, usage-first and naive."""
    unresent = unresent_reasoning(trace)
    results = []
    for name in counts.estimators:
        first = sorted(usage_first_errors(trace, counts.added[name], unresent))
        naive = sorted(naive_errors(trace, counts.added[name], counts.reply[name]))
        results.append(
            EstimatorAccuracy(
                name=name,
                median_abs_error_pct=_round(_ranked(first, 50)),
                p95_abs_error_pct=_round(_ranked(first, 95)),
                naive_median_abs_error_pct=_round(_ranked(naive, 50)),
                naive_p95_abs_error_pct=_round(_ranked(naive, 95)),
                calls=len(first),
                naive_calls=len(naive),
            )
        )
    return tuple(results)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
