"""The self-contained HTML page of a replay: curve, a panel per rule, live window and parameters.

Trace data goes into a ``<script type="application/json">`` block with ``<``, ``>``, ``&`` and
U+2028/2029 escaped, and the page's script inserts text only with ``textContent``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from ctxbudget.budget.rules import (
    COMPACTION_SHARE,
    DEFAULT_COMPACTION_RESERVE,
    DEFAULT_REPLY_RESERVE,
    LEARNED_GROWTH_SHARE,
    LEARNED_REPLY_FLOOR,
    LEARNED_REPLY_SHARE,
    REPLY_SHARE,
)
from ctxbudget.replay.analyze import ReplayResult
from ctxbudget.replay.corpus import SessionSummary, aggregate
from ctxbudget.replay.trace import as_table

_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def json_for_script(value: Any) -> str:
    """JSON that is inert inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in _ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def _slider(result: ReplayResult) -> dict[str, int]:
    peak = max((c.total_tokens for c in result.trace.calls), default=1)
    default = result.windows[0].window
    top = max(2 * default, 2 * peak, 4_096)
    step = max(1, top // 2_000)
    return {"min": step, "max": top, "step": step}


def _calls(result: ReplayResult) -> list[list[int | bool]]:
    """Per call: context, output, task start, after a recorded compaction, the window of its
    model when the window follows the model (else 0), the request's max_tokens (else 0)."""
    t = as_table(result.trace.calls)
    by_model = result.windows[0].by_model or {}
    return [
        [
            t.context[i],
            t.output[i],
            bool(t.task_start[i]),
            bool(t.after_compaction[i]),
            by_model.get(t.model_at(i) or "", 0),
            t.max_tokens[i],
        ]
        for i in range(len(t))
    ]


def page_data(result: ReplayResult) -> dict[str, Any]:
    """What the page's script reads: calls, rules, defaults and Python's answers to check."""
    t = result.trace
    return {
        "format": t.format,
        "model": t.model,
        "source": Path(t.source).name if t.source else "",
        "window": result.windows[0].window,
        "calls": _calls(result),
        "previews": list(result.previews),
        "policies": [
            {"name": p.name, "checked": list(p.checked), "parameters": p.parameters()}
            for p in result.policies
        ],
        "constants": {
            "default_reply_reserve": DEFAULT_REPLY_RESERVE,
            "default_compaction_reserve": DEFAULT_COMPACTION_RESERVE,
            "reply_share": REPLY_SHARE,
            "compaction_share": COMPACTION_SHARE,
            "learned_reply_share": LEARNED_REPLY_SHARE,
            "learned_reply_floor": LEARNED_REPLY_FLOOR,
            "learned_growth_share": LEARNED_GROWTH_SHARE,
        },
        "expected": [
            {
                "window": w.window,
                "wall": w.wall,
                "walls": list(w.walls),
                "per_model": w.by_model is not None,
                "policies": [
                    {
                        "name": p.name,
                        "threshold": p.threshold,
                        "first_trigger": p.first_trigger,
                        "late": p.late,
                        "fires": list(p.fires),
                        "late_segments": p.late_segments,
                        "mean_fill_at_fire": p.mean_fill_at_fire,
                    }
                    for p in w.policies
                ],
            }
            for w in result.windows
        ],
        "slider": _slider(result),
    }


def _asset(name: str) -> str:
    return resources.files("ctxbudget.replay").joinpath(name).read_text(encoding="utf-8")


def render_html(result: ReplayResult) -> str:
    """The whole page as one string; it needs no network and runs from file://."""
    script = _asset("page.js")
    if "</script" in script.lower():  # our own asset; guard against a careless edit
        raise AssertionError("page.js must not contain </script")
    page = _asset("page.html")
    page = page.replace("/*__REPLAY_JS__*/", script)
    return page.replace("__REPLAY_DATA__", json_for_script(page_data(result)))


def write_html(result: ReplayResult, path: str | Path) -> Path:
    """Write `render_html` to ``path``; return the path."""
    out = Path(path)
    out.write_text(render_html(result), encoding="utf-8")
    return out


def render_corpus_html(summaries: Sequence[SessionSummary]) -> str:
    """A static page of the corpus: the aggregate per window and rule, a row per session with
    its context curve (thinned) and each rule's late segments. Text is escaped."""
    rows = sorted(aggregate(summaries), key=lambda r: r.window)
    agg = "".join(
        f"<tr><td>{r.window:,}</td><td>{escape(r.name)}</td><td>{r.sessions:,}</td>"
        f"<td>{r.segments:,}</td><td>{r.late_segments:,}</td><td>"
        + ("-" if r.mean_fill_at_fire is None else f"{100 * r.mean_fill_at_fire:.1f}%")
        + "</td></tr>"
        for r in rows
    )
    sessions = "".join(_corpus_row(s) for s in summaries)
    return _asset("corpus.html").replace("__AGGREGATE__", agg).replace("__SESSIONS__", sessions)


def _corpus_row(s: SessionSummary) -> str:
    peak = max(s.curve, default=1) or 1
    step = 300 / max(1, len(s.curve))
    points = " ".join(f"{k * step:.1f},{40 - 38 * v / peak:.1f}" for k, v in enumerate(s.curve))
    late = "<br>".join(
        f"{w:,}: " + " · ".join(f"{escape(r.name)} {r.late_segments}/{r.segments}" for r in rules)
        for w, rules in s.windows.items()
    )
    return (
        f"<tr><td>{escape(Path(s.source).name)}<br><small>{escape(', '.join(s.models))}</small>"
        f"</td><td>{escape(s.format)}</td><td>{s.calls:,}</td><td>{s.peak:,}</td>"
        f"<td>{s.recorded_compactions:,}</td>"
        f'<td><svg width="300" height="42"><polyline fill="none" stroke="#4a78b0" '
        f'points="{points}"/></svg></td><td>{late}</td></tr>'
    )


def write_corpus_html(summaries: Sequence[SessionSummary], path: str | Path) -> Path:
    """Write `render_corpus_html` to ``path``; return the path."""
    out = Path(path)
    out.write_text(render_corpus_html(summaries), encoding="utf-8")
    return out
