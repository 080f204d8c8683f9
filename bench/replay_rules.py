"""Every rule on the repo's recorded sessions: segments, late segments and mean fill at fire.

    PYTHONPATH=src python bench/replay_rules.py [--out DIR]

Sessions: tests/data/traces (real, see SOURCES.md there), replayed as `ctxbudget replay` does,
cut into segments at the compactions each harness recorded. "unforeseeable" counts late
segments whose wall call's reply is larger than every reply before it in the session: no
reserve learned from the session could have covered it. "exposed" counts segments where, at a
call before the rule fired there, the context plus the largest step (growth between two
calls) the session had shown so far was over the window: a step of a size already seen could
have carried the context past the window before the next check.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blocks import add_out_argument, write_block  # bench/blocks.py, beside this script
from ctxbudget.budget.rules import POLICY_NAMES, CtxbudgetPolicy, Policy
from ctxbudget.replay.analyze import replay_file
from ctxbudget.replay.replay import fill, learned_before
from ctxbudget.replay.trace import as_table

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
WINDOWS = (32_000, 64_000, 128_000, 200_000)
EDGE_RULES = ("letta", "pi", "opencode", "codex")  # the rules that aim at the window's edge
# ctxbudget as shipped (no max output recorded: the learned reserve with its 1,024 floor), then
# with a fixed reply reserve, as when every request records max_tokens, to show the trade.
VARIANTS = ({}, {"ctxbudget.max_output": 2_048}, {"ctxbudget.max_output": 4_096})
BEFORE = "ctxbudget, replies only"  # the rule before issue 30, replayed beside it


@dataclass(frozen=True, slots=True, kw_only=True)
class RepliesOnly(CtxbudgetPolicy):
    """The ctxbudget rule as it was before issue 30: it learns the largest reply, not the
    context's growth per step."""

    name: str = BEFORE

    def fires_in_session(
        self,
        tokens: int,
        window: int,
        *,
        largest_reply: int = 0,
        largest_growth: int = 0,
        max_output: int | None = None,
    ) -> bool:
        return CtxbudgetPolicy.fires_in_session(
            self, tokens, window, largest_reply=largest_reply, max_output=max_output
        )


def policies(params: dict[str, Any]) -> list[str | Policy]:
    """The default rules of `ctxbudget replay`, and the rule before issue 30 with the same
    parameters as ctxbudget's (``params``)."""
    ours = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("ctxbudget.")}
    rules: list[str | Policy] = [n for n in POLICY_NAMES if n != "opencode-input-limit"]
    return [*rules, RepliesOnly(**ours)]


# segments, late, unforeseeable, sum of fills, fires, exposed
Rows = dict[tuple[int, str], list[float]]
WALL_REPLIES: list[int] = []  # the reply at each wall call (first run), for the closing note


def run(params: dict[str, Any]) -> tuple[Rows, int]:
    files = sorted(p for p in TRACES.iterdir() if p.name.endswith((".jsonl", ".traj.json")))
    rows: Rows = {}
    first = not WALL_REPLIES
    for path in files:
        result = replay_file(
            path, windows=list(WINDOWS), policies=policies(params), params=params, previews=False
        )
        t = as_table(result.trace.calls)
        seen, grown = learned_before(t)
        starts = [i for i in range(len(t)) if i == 0 or t.after_compaction[i]]
        ends = [*starts[1:], len(t)]
        for w in result.windows:
            if first:
                WALL_REPLIES.extend(t.output[x] for x in w.walls if x is not None)
            for p in w.policies:
                row = rows.setdefault((w.window, p.name), [0, 0, 0, 0.0, 0, 0])
                row[0] += p.segments
                row[1] += p.late_segments
                fires = [f for f in p.fires if f is not None]
                row[3] += sum(fill(t.context[f], w.window) for f in fires)
                row[4] += len(fires)
                for fire, wall in zip(p.fires, w.walls, strict=True):
                    late = wall is not None and (fire is None or fire > wall)
                    row[2] += late and wall is not None and t.output[wall] > seen[wall]
                for lo, end, fire in zip(starts, ends, p.fires, strict=True):
                    before = range(lo, end if fire is None else fire)
                    row[5] += any(t.context[i] + grown[i] > w.window for i in before)
    return rows, len(files)


def mean(row: list[float]) -> float | None:
    return row[3] / row[4] if row[4] else None


def verdict(rows: Rows, window: int, *, exposed: bool = False, ours: str = "ctxbudget") -> str:
    """Whether ``ours`` meets issue 14's ranking at ``window``: no more late segments than the
    edge rules, the highest fill among the rules with no more. ``exposed``: late and exposed
    segments counted together (a step already seen could have crossed the window)."""
    at = {name: row for (w, name), row in rows.items() if w == window}

    def bad(row: list[float]) -> float:
        return row[1] + (row[5] if exposed else 0)

    mine = at[ours]
    worse = [r for r in EDGE_RULES if bad(mine) > bad(at[r])]
    # CoreCoder's 50% tier is a different trade (it snips early): reported, not ranked against.
    others = ("ctxbudget", BEFORE, "corecoder")
    rivals = [r for r in at if r not in others and bad(at[r]) <= bad(mine)]
    above = [r for r in rivals if (mean(at[r]) or 0) > (mean(mine) or 0)]
    what = "late + exposed" if exposed else "late"
    if worse:
        return f"no: more {what} segments than " + ", ".join(worse)
    return "yes" if not above else "no: lower fill than " + ", ".join(above)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main_table(rows: Rows) -> list[str]:
    out = [
        "| window | rule | segments | late | unforeseeable | exposed | mean fill at fire |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for window in WINDOWS:
        for (w, name), row in rows.items():
            if w == window and name != BEFORE:
                seg, late, unforeseen, exposed = (int(x) for x in (*row[:3], row[5]))
                out.append(
                    f"| {w:,} | {name} | {seg} | {late} | {unforeseen} | {exposed} | "
                    f"{percent(mean(row))} |"
                )
        out.append(f"| {window:,} | *ctxbudget on top? (late)* | | | | | {verdict(rows, window)} |")
        out.append(
            f"| {window:,} | *ctxbudget on top? (late + exposed)* | | | | | "
            f"{verdict(rows, window, exposed=True)} |"
        )
    return out


def margin_table(rows: Rows) -> list[str]:
    """What the growth margin costs: the rule before issue 30 (replies only) against now."""
    out = [
        "| window | ctxbudget | late | exposed | mean fill at fire | fill cost "
        "| on top? (late) | on top? (late + exposed) |",
        "|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for w in WINDOWS:
        before = mean(rows[(w, BEFORE)]) or 0
        for label, name in (("before: replies", BEFORE), ("now: replies + steps", "ctxbudget")):
            row = rows[(w, name)]
            cost = "" if name == BEFORE else f"{100 * (before - (mean(row) or 0)):.1f} pts"
            late_only = verdict(rows, w, ours=name)
            with_exposed = verdict(rows, w, exposed=True, ours=name)
            out.append(
                f"| {w:,} | {label} | {int(row[1])} | {int(row[5])} | {percent(mean(row))} "
                f"| {cost} | {late_only} | {with_exposed} |"
            )
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


def main(argv: Sequence[str] | None = None) -> None:
    """Replay every rule and write the block of bench/replay_rules.md (of ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_argument(parser)
    args = parser.parse_args(argv)
    runs = [(params, run(params)) for params in VARIANTS]
    (base, sessions) = runs[0][1]
    lines = [
        "# Rules on recorded sessions: late segments and fill at fire",
        "",
        "    PYTHONPATH=src python bench/replay_rules.py",
        "",
        "The late and mean-fill columns are what `ctxbudget replay tests/data/traces --window W",
        "--json` gives in `aggregate.rules` (W = 32000, 64000, 128000, 200000).",
        "",
        f"{sessions} real sessions (tests/data/traces), every rule at each window; a segment is",
        "the calls between two compactions the harness recorded (the Pi session has one). Late:",
        "the wall (context + output > window) came before the rule fired in that segment.",
        "Mean fill at fire: the share of the window the context used where the rule fired",
        "(a context already past the window counts as 100%). Exposed: at a call before the rule",
        "fired in that segment, the context plus the largest step the session had shown so far",
        "(a step: the prompt of a call less the prompt of the call before; a compaction's drop",
        "is none) was over the window, so a step of a size already seen could have carried the",
        "context past the window before the next check. Issue 14's target for `ctxbudget`: no",
        "more late segments than any of letta, pi, opencode and codex, and the highest mean",
        "fill of the rules (corecoder aside) with no more late segments than it. Issue 30's",
        "goal, that a step of a size already seen never crosses the window, is the exposed",
        "column; the second verdict row counts late and exposed segments together.",
        "",
        *main_table(base),
        "",
        "### The growth margin (issue 30): what it costs in mean fill",
        "",
        "ctxbudget now also keeps free the largest step seen so far, up to W/4 (a real 200K",
        "session outside the repo grew ~28K in one step, a tool result, past a line at",
        "97-98.5%). A step holds its call's reply, so the reserve is the largest of reply +",
        "compaction reserve, the largest reply and the largest step, not a sum. Before: the",
        "rule as it was (replies only), replayed beside it in the same run (`RepliesOnly`",
        "here). The replay counts a rule late only when the wall call is sent before it fires,",
        "and a rule checked at every call fires at the latest at the call a step carries past",
        "the window, so a margin cannot lower the late column, only fire earlier:",
        "",
        *margin_table(base),
        "",
        "On these sessions the rules that now fire later than ctxbudget do so while exposed:",
        "codex at 32K (Pi session, calls 15-17, after a 5,452-token step) and 64K (Codex",
        "session, call 105, after the 7,819-token step that held its 7,783-token reply), letta",
        "at 200K (Pi session, calls 74-80, after a 20,297-token step, a ~20K tool result). By",
        "issue 14's ranking (late, then fill) ctxbudget is on top at 128K only; counting",
        "exposed segments as late, it is on top at every window.",
        "",
        "### The trade: a learned reply reserve against a fixed one",
        "",
        "ctxbudget keeps free the largest of reply reserve + compaction reserve, the largest",
        "reply seen so far (up to W/2) and the largest step (up to W/4). When the trace records",
        "no max output (all four here), the reply reserve is learned: 1,024 once the session",
        "has replied, the largest reply and step covering the rest. A fixed reply reserve",
        "(`--param ctxbudget.max_output=N`, what a recorded max_tokens gives) fires earlier:",
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
    # Its block of bench/replay_rules.md; the title (lines[0]) is the section's heading,
    # outside it.
    write_block(args.out / "replay_rules.md", "replay_rules.py", "\n".join(lines[1:]))
    print(text)


if __name__ == "__main__":
    main()
