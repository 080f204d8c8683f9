"""Every rule on the repo's recorded sessions: segments, late segments and mean fill at fire.

    PYTHONPATH=src python bench/replay_rules.py

Sessions: tests/data/traces (real, see SOURCES.md there), replayed as `ctxbudget replay` does,
cut into segments at the compactions each harness recorded. "unforeseeable" counts late
segments whose wall call's reply is larger than every reply before it in the session: no
reserve learned from the session could have covered it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxbudget.replay.analyze import replay_file
from ctxbudget.replay.replay import fill, largest_before
from ctxbudget.replay.trace import as_table

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
WINDOWS = (32_000, 64_000, 128_000, 200_000)
EDGE_RULES = ("letta", "pi", "opencode", "codex")  # the rules that aim at the window's edge
# ctxbudget as shipped (no max output recorded: the learned reserve with its 1,024 floor), then
# with a fixed reply reserve, as when every request records max_tokens, to show the trade.
VARIANTS = ({}, {"ctxbudget.max_output": 2_048}, {"ctxbudget.max_output": 4_096})

Rows = dict[tuple[int, str], list[float]]  # segments, late, unforeseeable, sum of fills, fires
WALL_REPLIES: list[int] = []  # the reply at each wall call (first run), for the closing note


def run(params: dict[str, Any]) -> tuple[Rows, int]:
    files = sorted(p for p in TRACES.iterdir() if p.name.endswith((".jsonl", ".traj.json")))
    rows: Rows = {}
    first = not WALL_REPLIES
    for path in files:
        result = replay_file(path, windows=list(WINDOWS), params=params, previews=False)
        t = as_table(result.trace.calls)
        seen = largest_before(t)
        for w in result.windows:
            if first:
                WALL_REPLIES.extend(t.output[x] for x in w.walls if x is not None)
            for p in w.policies:
                row = rows.setdefault((w.window, p.name), [0, 0, 0, 0.0, 0])
                row[0] += p.segments
                row[1] += p.late_segments
                fires = [f for f in p.fires if f is not None]
                row[3] += sum(fill(t.context[f], w.window) for f in fires)
                row[4] += len(fires)
                for fire, wall in zip(p.fires, w.walls, strict=True):
                    late = wall is not None and (fire is None or fire > wall)
                    row[2] += late and wall is not None and t.output[wall] > seen[wall]
    return rows, len(files)


def mean(row: list[float]) -> float | None:
    return row[3] / row[4] if row[4] else None


def verdict(rows: Rows, window: int) -> str:
    """Whether ctxbudget meets issue 14's ranking at ``window``."""
    at = {name: row for (w, name), row in rows.items() if w == window}
    ours = at["ctxbudget"]
    more_late = [r for r in EDGE_RULES if ours[1] > at[r][1]]
    # CoreCoder's 50% tier is a different trade (it snips early): reported, not ranked against.
    rivals = [r for r in at if r not in ("ctxbudget", "corecoder") and at[r][1] <= ours[1]]
    above = [r for r in rivals if (mean(at[r]) or 0) > (mean(ours) or 0)]
    if more_late:
        return "no: more late segments than " + ", ".join(more_late)
    return "yes" if not above else "no: lower fill than " + ", ".join(above)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main_table(rows: Rows) -> list[str]:
    out = [
        "| window | rule | segments | late | unforeseeable | mean fill at fire |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for window in WINDOWS:
        for (w, name), row in rows.items():
            if w == window:
                seg, late, unforeseen = (int(x) for x in row[:3])
                out.append(
                    f"| {w:,} | {name} | {seg} | {late} | {unforeseen} | {percent(mean(row))} |"
                )
        out.append(f"| {window:,} | *ctxbudget on top?* | | | | {verdict(rows, window)} |")
    return out


def variant_table(runs: list[tuple[dict[str, Any], Rows]]) -> list[str]:
    out = [
        "| ctxbudget reply reserve | " + " | ".join(f"{w:,}" for w in WINDOWS) + " |",
        "|---|" + "---|" * len(WINDOWS),
    ]
    for params, rows in runs:
        floor = params.get("ctxbudget.max_output", "learned, floor 1,024 (default)")
        cells = []
        for w in WINDOWS:
            ours = rows[(w, "ctxbudget")]
            cells.append(f"{int(ours[1])} late, {percent(mean(ours))}: {verdict(rows, w)}")
        out.append(f"| {floor if isinstance(floor, str) else f'{floor:,}'} | " +
                   " | ".join(cells) + " |")  # fmt: skip
    return out


def main() -> None:
    runs = [(params, run(params)) for params in VARIANTS]
    (base, sessions) = runs[0][1]
    lines = [
        "# Rules on recorded sessions: late segments and fill at fire",
        "",
        "    PYTHONPATH=src python bench/replay_rules.py",
        "",
        f"{sessions} real sessions (tests/data/traces), every rule at each window; a segment is",
        "the calls between two compactions the harness recorded (the Pi session has one). Late:",
        "the wall (context + output > window) came before the rule fired in that segment.",
        "Mean fill at fire: the share of the window the context used where the rule fired",
        "(a context already past the window counts as 100%). Issue 14's target for `ctxbudget`:",
        "no more late segments than any of letta, pi, opencode and codex, and the highest mean",
        "fill of the rules (corecoder aside) with no more late segments than it.",
        "",
        *main_table(base),
        "",
        "### The trade: a learned reply reserve against a fixed one",
        "",
        "ctxbudget keeps free the larger of reply reserve + compaction reserve and the largest",
        "reply seen so far (up to W/2). When the trace records no max output (all four here),",
        "the reply reserve is learned: 1,024 once the session has replied, the largest reply",
        "covering the rest. A fixed reply reserve (`--param ctxbudget.max_output=N`, what a",
        "recorded max_tokens gives) fires earlier:",
        "",
        *variant_table([(params, rows) for params, (rows, _) in runs]),
        "",
        "The live Agent always knows its max output (it asks for min(4,096, W/4) unless told),",
        "so it reserves that, never the learned floor. Codex's 90% line leaves 3,200 tokens at",
        "32K and 6,400 at 64K, less than the 7,783-token reply the Codex session had already",
        "produced by its 64K wall; it is not late here only because the replies at the walls",
        f"were at most {max(WALL_REPLIES):,} tokens.",
    ]
    text = "\n".join(lines) + "\n"
    (Path(__file__).parent / "replay_rules.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
