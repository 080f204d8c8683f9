"""Where each harness draws its compaction line for given windows: the data and the plot behind
``ctxbudget thresholds``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxbudget.budget.rules import (
    POLICY_NAMES,
    Checkpoint,
    CtxbudgetPolicy,
    Policy,
    get_policy,
    validate_window,
)
from ctxbudget.extras import pyplot

__all__ = ["ThresholdRow", "plot_thresholds", "threshold_policies", "threshold_rows"]

PLOT_MIN_WINDOW = 2_048  # 2K: the smallest windows people run (Ollama's old default)
PLOT_MAX_WINDOW = 2_097_152  # 2M: the largest windows on offer


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdRow:
    """One policy's line for one window."""

    name: str
    threshold: int
    """The line as the harness defines it; <= 0 means it compacts before every request."""
    percent: float
    """``threshold`` as a share of the window, one decimal; negative when the reserve is larger."""
    checked: tuple[Checkpoint, ...]
    tiers: tuple[int, ...] | None
    compacts_every_request: bool
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as in the ``--json`` contract; ``tiers`` and ``note`` only when present."""
        out: dict[str, Any] = {
            "name": self.name,
            "threshold": self.threshold,
            "percent": self.percent,
            "checked": list(self.checked),
            "compacts_every_request": self.compacts_every_request,
        }
        if self.tiers is not None:
            out["tiers"] = list(self.tiers)
        if self.note is not None:
            out["note"] = self.note
        return out


def threshold_policies(
    *, max_output: int | None = None, reserve: int | None = None
) -> list[Policy]:
    """The seven presets; ``max_output`` goes to OpenCode and ctxbudget, ``reserve`` to Pi."""
    policies = []
    for name in POLICY_NAMES:
        overrides: dict[str, object] = {}
        if max_output is not None and name in ("opencode", "opencode-input-limit", "ctxbudget"):
            overrides["max_output"] = max_output
        if reserve is not None and name == "pi":
            overrides["reserve_tokens"] = reserve
        policies.append(get_policy(name, **overrides))
    return policies


def _note(policy: Policy, window: int, every: bool) -> str | None:
    if isinstance(policy, CtxbudgetPolicy) and policy.threshold(window) <= 0:
        return (
            f"reply reserve {policy.reply_reserve(window):,} + compaction reserve "
            f"{policy.compaction_reserve_for(window):,} leave no room in {window:,}: the prompt "
            "floor check refuses to send (PromptFloorExceeded); lower --max-output or use a "
            "larger window"
        )
    if every:
        return "over the line before the first request: compacts before every request"
    return None


def threshold_rows(window: int, policies: Sequence[Policy]) -> list[ThresholdRow]:
    """Each policy's line for ``window`` (validated)."""
    w = validate_window(window)
    rows = []
    for policy in policies:
        line = policy.threshold(w)
        every = policy.compacts_every_request(w)
        rows.append(
            ThresholdRow(
                name=policy.name,
                threshold=line,
                percent=round(100 * line / w, 1),
                checked=policy.checked,
                tiers=policy.tiers(w),
                compacts_every_request=every,
                note=_note(policy, w, every),
            )
        )
    return rows


def _windows(count: int = 200) -> list[int]:
    ratio = (PLOT_MAX_WINDOW / PLOT_MIN_WINDOW) ** (1 / (count - 1))
    return sorted({round(PLOT_MIN_WINDOW * ratio**i) for i in range(count)})


def plot_thresholds(path: str, policies: Sequence[Policy]) -> None:
    """Draw each line's share of the window against the window (log x, 2K to 2M) into ``path``.

    Percentages are flat lines; reserves are curves that approach 100% as the window grows.
    """
    plt = pyplot("thresholds --plot")

    windows = _windows()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for policy in policies:
        sample = policy.tiers(windows[0])
        if sample is None:
            shares = [100 * policy.threshold(w) / w for w in windows]
            ax.plot(windows, shares, label=policy.name, linewidth=2)
            continue
        for k in range(len(sample)):
            tier = [100 * (policy.tiers(w) or sample)[k] / w for w in windows]
            ax.plot(windows, tier, linestyle="--", label=f"{policy.name} tier {k + 1}")
    ax.set_xscale("log")
    ax.set_xlim(PLOT_MIN_WINDOW, PLOT_MAX_WINDOW)
    ax.set_ylim(0, 100)
    ax.set_xlabel("context window (tokens, log scale)")
    ax.set_ylabel("compaction line (% of window)")
    ax.set_title("Where each harness compacts: percentages are flat, reserves curve up")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
