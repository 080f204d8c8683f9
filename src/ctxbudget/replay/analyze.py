"""Run a whole replay: read (streaming), choose windows and rules, measure estimators."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ctxbudget.budget.rules import Policy, get_policy, validate_window
from ctxbudget.errors import ConfigError
from ctxbudget.replay.accuracy import (
    CallCounts,
    EstimatorAccuracy,
    EstimatorTable,
    default_estimators,
    estimator_accuracy,
)
from ctxbudget.replay.importers import Progress, iter_calls
from ctxbudget.replay.previews import Previews, preview
from ctxbudget.replay.replay import (
    PitfallCall,
    WindowReplay,
    reasoning_pitfall,
    recorded_compactions,
    replay_window,
    unresent_reasoning,
)
from ctxbudget.replay.trace import Call, CallTable, Trace, as_table
from ctxbudget.replay.windows import known_window

# The rules the issue names; opencode-input-limit is a variant shown by `ctxbudget thresholds`.
DEFAULT_POLICIES = ("letta", "pi", "opencode", "codex", "corecoder", "ctxbudget")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """Everything `ctxbudget replay` reports about one trace."""

    trace: Trace
    """The trace; from `replay_file` its calls carry no message text (memory stays bounded)."""
    windows: tuple[WindowReplay, ...]
    estimators: tuple[EstimatorAccuracy, ...]
    pitfall: tuple[PitfallCall, ...]
    previews: Sequence[str]
    """The start of each call's newest added message, for hover text in the HTML page (empty
    when `replay_file` was told not to keep them; see `Previews` for the cap)."""
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
    known = known_window(trace.model) or max(model_windows(trace).values(), default=None)
    if known:
        if len(set(model_windows(trace).values())) > 1:
            return (known,), "known window of each call's model"
        return (known,), f"known window of {trace.model}"
    raise ConfigError(
        f"the trace records no window and model {trace.model!r} has no known one; pass --window N"
    )


def model_windows(trace: Trace) -> dict[str, int]:
    """The known window of each model the trace's calls used (models with none left out)."""
    models = as_table(trace.calls).models
    return {m: w for m in models if (w := known_window(m))}


def replay_trace(
    trace: Trace,
    *,
    windows: Sequence[int] | None = None,
    policies: Sequence[str | Policy] | None = None,
    params: Mapping[str, Any] | None = None,
    estimators: EstimatorTable | None = None,
) -> ReplayResult:
    """Replay a loaded trace (its calls keep their text)."""
    counts = CallCounts(default_estimators() if estimators is None else estimators)
    for call in trace.calls:
        counts.add(call)
    previews = Previews([preview(c) for c in trace.calls])
    return _result(trace, counts, previews, windows, policies, params)


def replay_file(
    path: str | Path,
    format: str | None = None,
    *,
    windows: Sequence[int] | None = None,
    policies: Sequence[str | Policy] | None = None,
    params: Mapping[str, Any] | None = None,
    estimators: EstimatorTable | None = None,
    progress: Progress | None = None,
    previews: bool = True,
) -> ReplayResult:
    """Read and replay a session file, counting each call's text as it streams past.

    Memory grows by about 60 bytes a call plus 16 per estimator (numbers as columns, no text):
    about 220 with the 10 default estimators. The hover texts add about 170 bytes a call up to
    their cap (`MAX_PREVIEW_BYTES`); ``previews=False`` (no HTML page to draw) keeps none.
    """
    counts = CallCounts(default_estimators() if estimators is None else estimators)
    chosen = resolve_policies(policies, params or {})  # fail on a bad rule before reading
    _, stream, finish = iter_calls(path, format, progress=progress)
    kept = CallTable()
    texts = Previews()
    for call in stream:
        counts.add(call)
        if previews:
            texts.append(preview(call))
        kept.append(call)
    return _result(finish(kept), counts, texts, windows, chosen, {})


def _result(
    trace: Trace,
    counts: CallCounts,
    previews: Sequence[str],
    windows: Sequence[int] | None,
    policies: Sequence[str | Policy] | None,
    params: Mapping[str, Any] | None,
) -> ReplayResult:
    chosen = resolve_policies(policies, params or {})
    sizes, source = resolve_windows(trace, windows)
    by_model = model_windows(trace) if source.startswith("known window") else None
    unresent = unresent_reasoning(trace)
    return ReplayResult(
        trace=trace,
        windows=tuple(replay_window(trace, w, chosen, unresent, by_model=by_model) for w in sizes),
        estimators=estimator_accuracy(trace, counts),
        pitfall=reasoning_pitfall(trace),
        previews=previews,
        window_source=source,
        policies=chosen,
    )


def _call_row(c: Call) -> dict[str, Any]:
    return {
        "index": c.index,
        "context_tokens": c.context_tokens,
        "output_tokens": c.output_tokens,
        "reasoning_tokens": c.reasoning_tokens,
        "cache_read_tokens": c.cache_read_tokens,
        "cache_write_tokens": c.cache_write_tokens,
        "task_start": c.task_start,
        "after_compaction": c.after_compaction,
        "model": c.model,
    }


def _document(result: ReplayResult, calls: list[dict[str, Any]]) -> dict[str, Any]:
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
            "models": list(as_table(t.calls).models),
            "recorded_compactions": recorded_compactions(t.calls),
        },
        "calls": calls,
        "windows": [
            {
                "window": w.window,
                "wall": w.wall,
                "walls": list(w.walls),
                "window_by_model": w.by_model,
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
                        "segments": p.segments,
                        "late_segments": p.late_segments,
                        "fires": list(p.fires),
                        "mean_fill_at_fire": p.mean_fill_at_fire,
                    }
                    for p in w.policies
                ],
            }
            for w in result.windows
        ],
        "estimators": [dataclasses.asdict(e) for e in result.estimators],
        "reasoning_pitfall": [dataclasses.asdict(p) for p in result.pitfall],
    }


def result_json(result: ReplayResult) -> dict[str, Any]:
    """The `--json` document (the issue's contract, plus a few extra fields)."""
    return _document(result, [_call_row(c) for c in result.trace.calls])


def write_json(result: ReplayResult, out: TextIO) -> None:
    """Write ``json.dumps(result_json(result), indent=2)`` and a newline, a call at a time.

    The same text, without holding the whole document: on a 172,000-call session the dict and
    the encoder's pieces were about 1.1 KB a call.
    """
    doc = _document(result, [])
    out.write("{")
    for n, (key, value) in enumerate(doc.items()):
        out.write(("," if n else "") + "\n  " + json.dumps(key) + ": ")
        if key == "calls":
            _write_calls(result.trace.calls, out)
        else:  # one level down: every line after the first gains two spaces
            out.write(json.dumps(value, indent=2).replace("\n", "\n  "))
    out.write("\n}\n")


def _write_calls(calls: Sequence[Call], out: TextIO) -> None:
    if not calls:
        out.write("[]")
        return
    out.write("[")
    for n, call in enumerate(calls):
        # What json.dumps(indent=2) writes for these int and bool fields, 5x faster than it.
        fields = ",\n      ".join(f'"{k}": {_scalar(v)}' for k, v in _call_row(call).items())
        out.write(("," if n else "") + "\n    {\n      " + fields + "\n    }")
    out.write("\n  ]")


def _scalar(value: int | bool | str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int) else json.dumps(value)
