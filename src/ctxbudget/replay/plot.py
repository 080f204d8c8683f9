"""PNG of a replay: context per call as bars, a panel per rule, a column of panels per window."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbudget.extras import pyplot
from ctxbudget.replay.analyze import ReplayResult
from ctxbudget.replay.corpus import SessionSummary, aggregate
from ctxbudget.replay.replay import (
    PolicyReplay,
    WindowReplay,
    call_windows,
    recorded_compactions,
    session_lines,
)
from ctxbudget.replay.trace import as_table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_BAR = "#9db4d0"
_THRESHOLD = "#d62728"
_WINDOW = "#444444"
_COMPACTION = "#2ca02c"


def write_plot(result: ReplayResult, path: str | Path, *, window_index: int | None = None) -> Path:
    """Draw the seed's small-multiples figure, one column per replayed window (or only
    ``window_index``); return the path."""
    plt = pyplot("replay --plot")

    replayed = result.windows if window_index is None else (result.windows[window_index],)
    rows, cols = len(result.policies), len(replayed)
    fig, grid = plt.subplots(
        rows,
        cols,
        sharex=True,
        sharey="col",
        squeeze=False,
        figsize=(10 + 5.5 * (cols - 1), 1.6 * rows + 1.6),
    )
    for col, window in enumerate(replayed):
        for row, policy in enumerate(window.policies):
            _panel(grid[row][col], result, window, policy)
        grid[0][col].annotate(
            f"window {window.window:,}: "
            + ("wall never hit" if window.wall is None else f"wall at call {window.wall:,}"),
            xy=(0.5, 1.35),
            xycoords="axes fraction",
            ha="center",
            fontsize=10,
            fontweight="bold",
        )
    t = result.trace
    fig.suptitle(f"{t.format} · {t.model or 'unknown model'} · {len(t.calls):,} calls", fontsize=11)
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.supxlabel("call", fontsize=9, y=0.045)
    fig.supylabel("context tokens", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.99))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _panel(ax: Axes, result: ReplayResult, window: WindowReplay, policy: PolicyReplay) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    calls = result.trace.calls
    ax.bar([c.index for c in calls], [c.context_tokens for c in calls], width=1.0, color=_BAR)
    ax.axhline(window.window, color=_WINDOW, linewidth=0.8, linestyle=":")
    lines = _lines(result, window, policy)
    if len(set(lines)) > 1:  # a line that moves: learned from the session, or per model
        ax.step([c.index for c in calls], [max(v, 0) for v in lines], where="mid",
                color=_THRESHOLD, linewidth=1.0)  # fmt: skip
    else:
        ax.axhline(max(policy.threshold, 0), color=_THRESHOLD, linewidth=1.0)
    for call in recorded_compactions(calls):  # the harness's own decisions, under the rest
        ax.axvline(call, color=_COMPACTION, linewidth=4, alpha=0.6, zorder=0)
        ax.plot(call, 1.0, marker="v", color=_COMPACTION, clip_on=False,
                transform=ax.get_xaxis_transform())  # fmt: skip
    for fire in policy.fires:
        if fire is not None:
            ax.axvline(fire, color=_THRESHOLD, linewidth=1.2, linestyle="--")
    for wall in window.walls:
        if wall is not None:
            ax.axvline(wall, color="#000000", linewidth=1.2)
    fires = "never" if policy.first_trigger is None else f"at call {policy.first_trigger:,}"
    moved = f" → {lines[-1]:,}" if lines and lines[-1] != policy.threshold else ""
    ax.set_title(
        f"{policy.name}: threshold {policy.threshold:,}{moved}, fires {fires}"
        + (" (late)" if policy.late else "")
        + (
            f"; {policy.late_segments} of {policy.segments} segments late"
            if policy.segments > 1
            else ""
        ),
        fontsize=9,
        loc="left",
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.yaxis.set_major_formatter(FuncFormatter(_thousands))  # no "1e6" offset text
    ax.tick_params(labelsize=8)


def _lines(result: ReplayResult, window: WindowReplay, policy: PolicyReplay) -> list[int]:
    rule = next(p for p in result.policies if p.name == policy.name)
    t = as_table(result.trace.calls)
    return session_lines(rule, t, call_windows(t, window.window, window.by_model))


def _thousands(value: float, _pos: int | None = None) -> str:
    return f"{value:,.0f}"


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [
        Patch(color=_BAR, label="context per call"),
        Line2D([], [], color=_THRESHOLD, linewidth=1.0, label="the rule's threshold"),
        Line2D([], [], color=_WINDOW, linewidth=0.8, linestyle=":", label="window"),
        Line2D(
            [],
            [],
            color=_THRESHOLD,
            linewidth=1.2,
            linestyle="--",
            label="the rule fires (first per segment)",
        ),
        Line2D([], [], color="#000000", linewidth=1.2, label="wall (context + output > window)"),
        Line2D(
            [],
            [],
            color=_COMPACTION,
            linewidth=4,
            alpha=0.6,
            marker="v",
            label="compaction the harness recorded",
        ),
    ]


def write_corpus_plot(summaries: Sequence[SessionSummary], path: str | Path) -> Path:
    """The corpus view: per window, each rule's late segments and mean fill at fire."""
    plt = pyplot("replay --plot")

    rows = aggregate(summaries)
    windows = sorted({r.window for r in rows})
    fig, grid = plt.subplots(2, 1, figsize=(10, 6), squeeze=False)
    names = list(dict.fromkeys(r.name for r in rows))
    width = 0.8 / max(1, len(windows))
    for k, window in enumerate(windows):
        at = {r.name: r for r in rows if r.window == window}
        xs = [n + k * width for n in range(len(names))]
        grid[0][0].bar(xs, [at[n].late_segments for n in names], width, label=f"{window:,}")
        fills = [100 * (at[n].mean_fill_at_fire or 0) for n in names]
        grid[1][0].bar(xs, fills, width, label=f"{window:,}")
    segments = sum(r.segments for r in rows if r.window == windows[0]) if windows else 0
    grid[0][0].set_title(
        f"{len(summaries)} sessions, {segments} segments: late segments per rule", loc="left"
    )
    grid[1][0].set_title("mean fill of the window at fire (%)", loc="left")
    for ax in (grid[0][0], grid[1][0]):
        ax.set_xticks([n + 0.4 - width / 2 for n in range(len(names))], names)
        ax.legend(title="window", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
