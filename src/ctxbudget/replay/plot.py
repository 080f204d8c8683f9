"""PNG of a replay: context per call as bars, one small panel per rule with its line and trigger."""

from __future__ import annotations

from pathlib import Path

from ctxbudget.replay.analyze import ReplayResult


def write_plot(result: ReplayResult, path: str | Path, *, window_index: int = 0) -> Path:
    """Draw the seed's small-multiples figure for one replayed window; return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    replayed = result.windows[window_index]
    calls = result.trace.calls
    xs = [c.index for c in calls]
    ys = [c.context_tokens for c in calls]
    rows = len(replayed.policies)
    fig, axes = plt.subplots(rows, 1, sharex=True, sharey=True, figsize=(10, 1.6 * rows + 1))
    for ax, policy in zip(fig.axes if rows > 1 else [axes], replayed.policies, strict=True):
        ax.bar(xs, ys, width=1.0, color="#9db4d0", linewidth=0)
        ax.axhline(replayed.window, color="#444444", linewidth=0.8, linestyle=":")
        ax.axhline(max(policy.threshold, 0), color="#d62728", linewidth=1.0)
        if policy.first_trigger is not None:
            ax.axvline(policy.first_trigger, color="#d62728", linewidth=1.2, linestyle="--")
        label = "never" if policy.first_trigger is None else f"call {policy.first_trigger}"
        ax.set_title(
            f"{policy.name}: fires {label}" + (" (late)" if policy.late else ""),
            fontsize=9,
            loc="left",
        )
        ax.tick_params(labelsize=8)
    if replayed.wall is not None:
        for ax in fig.axes:
            ax.axvline(replayed.wall, color="#000000", linewidth=1.2)
    fig.suptitle(
        f"{result.trace.format} · {result.trace.model or 'unknown model'} · window "
        f"{replayed.window:,} · {len(calls)} calls",
        fontsize=10,
    )
    fig.supxlabel("call", fontsize=9)
    fig.supylabel("context tokens", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
