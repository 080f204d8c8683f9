"""Replay recorded agent sessions: import, find where each rule fires, measure estimators, draw."""

from __future__ import annotations

from ctxbudget.replay.accuracy import EstimatorAccuracy
from ctxbudget.replay.analyze import (
    DEFAULT_POLICIES,
    ReplayResult,
    replay_file,
    replay_trace,
    result_json,
    write_json,
)
from ctxbudget.replay.html import render_html, write_html
from ctxbudget.replay.importers import detect_format, iter_calls, load_trace
from ctxbudget.replay.plot import write_plot
from ctxbudget.replay.replay import PitfallCall, PolicyReplay, WindowReplay
from ctxbudget.replay.trace import FORMATS, Call, CallTable, Trace, TraceMessage
from ctxbudget.replay.windows import KNOWN_WINDOWS, known_window

__all__ = [
    "DEFAULT_POLICIES",
    "FORMATS",
    "KNOWN_WINDOWS",
    "Call",
    "CallTable",
    "EstimatorAccuracy",
    "PitfallCall",
    "PolicyReplay",
    "ReplayResult",
    "Trace",
    "TraceMessage",
    "WindowReplay",
    "detect_format",
    "iter_calls",
    "known_window",
    "load_trace",
    "render_html",
    "replay_file",
    "replay_trace",
    "result_json",
    "write_html",
    "write_json",
    "write_plot",
]
