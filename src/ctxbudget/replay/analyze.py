"""Run a whole replay: read (streaming), choose windows and rules, measure estimators."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbudget.budget.rules import Policy, get_policy, validate_window
from ctxbudget.errors import ConfigError
from ctxbudget.replay.accuracy import (
    CallCounts,
    EstimatorAccuracy,
    EstimatorTable,
    count_call,
    default_estimators,
    estimator_accuracy,
)
from ctxbudget.replay.importers import Progress, iter_calls
from ctxbudget.replay.replay import PitfallCall, WindowReplay, reasoning_pitfall, replay_window
from ctxbudget.replay.trace import Call, Trace
from ctxbudget.replay.windows import known_window

# The rules the issue names; opencode-input-limit is a variant shown by `ctxbudget thresholds`.
DEFAULT_POLICIES = ("letta", "pi", "opencode", "codex", "corecoder", "ctxbudget")
_PREVIEW_CHARS = 160


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """Everything `ctxbudget replay` reports about one trace."""

    trace: Trace
    """The trace; from `replay_file` its calls carry no message text (memory stays bounded)."""
    windows: tuple[WindowReplay, ...]
    estimators: tuple[EstimatorAccuracy, ...]
    pitfall: tuple[PitfallCall, ...]
    previews: tuple[str, ...]
    """The start of each call's newest added message, for hover text in the HTML page."""
    window_source: str
    policies: tuple[Policy, ...]


def resolve_policies(
    specs: Sequence[str | Policy] | None, params: Mapping[str, Any]
) -> tuple[Policy, ...]:
    """Policies by name (or given), with ``params`` like ``{"pi.reserve_tokens": 10000}``."""
    names = list(specs or DEFAULT_POLICIES)
    by_rule: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        rule, sep, param = key.partition(".")
        if not sep or not param:
            raise ConfigError(f"parameter {key!r} must look like RULE.NAME, e.g. pi.reserve_tokens")
        by_rule.setdefault(rule, {})[param] = value
    chosen = [p if isinstance(p, Policy) else get_policy(p, **by_rule.get(p, {})) for p in names]
    unused = set(by_rule) - {p.name for p in chosen}
    if unused:
        raise ConfigError(f"parameters given for rules not replayed: {', '.join(sorted(unused))}")
    return tuple(chosen)


def resolve_windows(trace: Trace, windows: Sequence[int] | None) -> tuple[tuple[int, ...], str]:
    """The windows to replay and where they came from."""
    if windows:
        return tuple(validate_window(w) for w in windows), "given"
    if trace.window:
        return (trace.window,), "recorded"
    known = known_window(trace.model)
    if known:
        return (known,), f"known window of {trace.model}"
    raise ConfigError(
        f"the trace records no window and model {trace.model!r} has no known one; pass --window N"
    )


def _preview(call: Call) -> str:
    for message in reversed(call.added):
        if message.text.strip():
            return f"{message.role}: {message.text.strip()[:_PREVIEW_CHARS]}"
    return ""


def replay_trace(
    trace: Trace,
    *,
    windows: Sequence[int] | None = None,
    policies: Sequence[str | Policy] | None = None,
    params: Mapping[str, Any] | None = None,
    estimators: EstimatorTable | None = None,
) -> ReplayResult:
    """Replay a loaded trace (its calls keep their text)."""
    table = default_estimators() if estimators is None else estimators
    counts = [count_call(c, table) for c in trace.calls]
    return _result(
        trace, counts, [_preview(c) for c in trace.calls], windows, policies, params, table
    )


def replay_file(
    path: str | Path,
    format: str | None = None,
    *,
    windows: Sequence[int] | None = None,
    policies: Sequence[str | Policy] | None = None,
    params: Mapping[str, Any] | None = None,
    estimators: EstimatorTable | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Read and replay a session file, counting each call's text as it streams past."""
    table = default_estimators() if estimators is None else estimators
    chosen = resolve_policies(policies, params or {})  # fail on a bad rule before reading
    _, stream, finish = iter_calls(path, format, progress=progress)
    kept: list[Call] = []
    counts: list[dict[str, CallCounts]] = []
    previews: list[str] = []
    for call in stream:
        counts.append(count_call(call, table))
        previews.append(_preview(call))
        kept.append(dataclasses.replace(call, added=(), reply=None))
    return _result(finish(kept), counts, previews, windows, chosen, {}, table)


def _result(
    trace: Trace,
    counts: list[dict[str, CallCounts]],
    previews: list[str],
    windows: Sequence[int] | None,
    policies: Sequence[str | Policy] | None,
    params: Mapping[str, Any] | None,
    table: EstimatorTable,
) -> ReplayResult:
    chosen = resolve_policies(policies, params or {})
    sizes, source = resolve_windows(trace, windows)
    return ReplayResult(
        trace=trace,
        windows=tuple(replay_window(trace, w, chosen) for w in sizes),
        estimators=estimator_accuracy(trace, counts, list(table)),
        pitfall=reasoning_pitfall(trace),
        previews=tuple(previews),
        window_source=source,
        policies=chosen,
    )


def result_json(result: ReplayResult) -> dict[str, Any]:
    """The `--json` document (the issue's contract, plus a few extra fields)."""
    t = result.trace
    return {
        "trace": {
            "format": t.format,
            "calls": len(t.calls),
            "model": t.model,
            "window": t.window,
            "skipped_lines": t.skipped_lines,
            "source": t.source,
            "reasoning": t.reasoning,
            "window_source": result.window_source,
        },
        "calls": [
            {
                "index": c.index,
                "context_tokens": c.context_tokens,
                "output_tokens": c.output_tokens,
                "reasoning_tokens": c.reasoning_tokens,
                "cache_read_tokens": c.cache_read_tokens,
                "cache_write_tokens": c.cache_write_tokens,
                "task_start": c.task_start,
                "after_compaction": c.after_compaction,
            }
            for c in t.calls
        ],
        "windows": [
            {
                "window": w.window,
                "wall": w.wall,
                "policies": [
                    {
                        "name": p.name,
                        "checked": list(p.checked),
                        "first_trigger": p.first_trigger,
                        "late": p.late,
                        "threshold": p.threshold,
                        "tiers": list(p.tiers) if p.tiers else None,
                        "first_trigger_reading_total": p.first_trigger_reading_total,
                        "parameters": p.parameters,
                    }
                    for p in w.policies
                ],
            }
            for w in result.windows
        ],
        "estimators": [dataclasses.asdict(e) for e in result.estimators],
        "reasoning_pitfall": [dataclasses.asdict(p) for p in result.pitfall],
    }
