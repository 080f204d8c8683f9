"""Every rule on the repo's recorded sessions: segments, late segments and mean fill at fire.

    PYTHONPATH=src python bench/replay_rules.py [--window 32000 ...] [--param ctxbudget.X=V]

Sessions: tests/data/traces (real, see SOURCES.md there), replayed as `ctxbudget replay` does,
segments cut at the compactions each harness recorded. "unforeseeable" counts late segments
whose wall call's reply is larger than every reply before it in the session (no causal reserve
learned from the session could have covered it) and larger than the rule's fixed reserve.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxbudget.replay.analyze import replay_file
from ctxbudget.replay.replay import largest_before
from ctxbudget.replay.trace import as_table

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
WINDOWS = (32_000, 64_000, 128_000, 200_000)
EDGE_RULES = ("letta", "pi", "opencode", "codex")  # the rules that aim at the window's edge


def run(windows: tuple[int, ...], params: dict[str, object]) -> list[str]:
    files = sorted(p for p in TRACES.iterdir() if p.name.endswith((".jsonl", ".traj.json")))
    rows: dict[tuple[int, str], list[float]] = {}
    for path in files:
        result = replay_file(path, windows=list(windows), params=params, previews=False)
        t = as_table(result.trace.calls)
        seen = largest_before(t)
        for w in result.windows:
            for p in w.policies:
                row = rows.setdefault((w.window, p.name), [0, 0, 0, 0.0, 0])
                row[0] += p.segments
                row[1] += p.late_segments
                fires = [f for f in p.fires if f is not None]
                row[3] += sum(min(1.0, t.context[f] / w.window) for f in fires)
                row[4] += len(fires)
                for fire, wall in zip(p.fires, w.walls, strict=True):
                    late = wall is not None and (fire is None or fire > wall)
                    if late and wall is not None and t.output[wall] > seen[wall]:
                        row[2] += 1
    return table(rows, windows, len(files))


def table(rows: dict[tuple[int, str], list[float]], windows: tuple[int, ...], n: int) -> list[str]:
    out = [
        f"{n} sessions. Per window: segments / late segments (unforeseeable) / mean fill at fire;",
        "`ours ok` says whether ctxbudget has no more late segments than each of "
        + ", ".join(EDGE_RULES)
        + " and the highest mean fill of the rules with no more late segments than it.",
        "",
        "| window | rule | segments | late | unforeseeable | mean fill at fire |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for window in windows:
        for (w, name), (segs, late, unforeseen, fill, fires) in rows.items():
            if w != window:
                continue
            mean = f"{100 * fill / fires:.1f}%" if fires else "-"
            out.append(f"| {w:,} | {name} | {segs:.0f} | {late:.0f} | {unforeseen:.0f} | {mean} |")
        out.append(f"| {window:,} | **ours ok** | | | | {verdict(rows, window)} |")
    return out


def verdict(rows: dict[tuple[int, str], list[float]], window: int) -> str:
    mine = rows[(window, "ctxbudget")]
    mean = {name: r[3] / r[4] if r[4] else 0.0 for (w, name), r in rows.items() if w == window}
    late = {name: r[1] for (w, name), r in rows.items() if w == window}
    fewer = all(mine[1] <= late[r] for r in EDGE_RULES if r in late)
    rivals = [r for r in late if r not in ("ctxbudget", "corecoder") and late[r] <= mine[1]]
    best = all(mean["ctxbudget"] >= mean[r] for r in rivals)
    beaten = [r for r in rivals if mean[r] > mean["ctxbudget"]]
    return (
        "yes"
        if fewer and best
        else f"no ({'more late' if not fewer else 'fill below'} {', '.join(beaten)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=int, action="append")
    parser.add_argument("--param", action="append", default=[])
    args = parser.parse_args()
    params: dict[str, object] = {}
    for text in args.param:
        key, _, value = text.partition("=")
        params[key] = int(value) if value.lstrip("-").isdigit() else value == "true"
    windows = tuple(args.window or WINDOWS)
    lines = [
        "# Rules on recorded sessions: late segments and fill",
        "",
        "Command:",
        "",
        "    PYTHONPATH=src python bench/replay_rules.py",
        "",
        *run(windows, params),
    ]
    text = "\n".join(lines) + "\n"
    if not args.window and not args.param:
        (Path(__file__).parent / "replay_rules.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
