"""``ctxbudget thresholds``: where each harness compacts, for the windows you name."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click
from rich.console import Console
from rich.table import Table

from ctxbudget.budget.rules import validate_window
from ctxbudget.budget.thresholds import (
    ThresholdRow,
    plot_thresholds,
    threshold_policies,
    threshold_rows,
)
from ctxbudget.errors import InvalidWindowError

__all__ = ["parse_window", "thresholds_command"]


def parse_window(text: str) -> int:
    """A window from the command line: digits, with optional ``,`` or ``_`` separators."""
    cleaned = text.strip().replace(",", "").replace("_", "")
    try:
        value = int(cleaned)
    except ValueError:
        raise InvalidWindowError(
            f"--window must be a positive whole number of tokens such as 200000, got {text!r}"
        ) from None
    return validate_window(value, "--window")


def _cell(row: ThresholdRow, window: int) -> str:
    """``60.0%`` over ``24,576``; tiers as ``50/70/90%`` over their token lines."""
    if row.tiers is not None:
        shares = "/".join(f"{100 * t / window:.0f}" for t in row.tiers)
        return f"{shares}%\n{'/'.join(f'{t:,}' for t in row.tiers)}"
    every = " (every request)" if row.compacts_every_request else ""
    return f"{row.percent:.1f}%{every}\n{row.threshold:,}"


def _render(report: Sequence[tuple[int, list[ThresholdRow]]]) -> None:
    """The seed's table, one row per harness, one column per window, then the notes."""
    console = Console()
    table = Table(title="Compaction line: share of the window / tokens")
    table.add_column("harness")
    table.add_column("checked")
    for window, _ in report:
        table.add_column(f"{window:,}", justify="right")
    for i, first in enumerate(report[0][1]):
        cells = [_cell(rows[i], window) for window, rows in report]
        table.add_row(first.name, "\n".join(first.checked), *cells)
    console.print(table)
    for window, rows in report:
        every = [r.name for r in rows if r.compacts_every_request and r.name != "ctxbudget"]
        if every:
            console.print(f"{window:,}: over the line before the first request: {', '.join(every)}")
        for r in rows:
            if r.name == "ctxbudget" and r.note:
                console.print(f"{window:,}: ctxbudget: {r.note}")


@click.command("thresholds")
@click.option(
    "--window",
    "windows",
    multiple=True,
    required=True,
    help="Context window in tokens; repeat for several.",
)
@click.option(
    "--max-output",
    type=click.IntRange(min=0),
    default=None,
    help="Max output tokens for OpenCode (default 32,000) and ctxbudget (default 4,096).",
)
@click.option(
    "--reserve",
    type=click.IntRange(min=0),
    default=None,
    help="Pi's reserveTokens (default 16,384).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also draw the lines against the window (2K to 2M) into this PNG file.",
)
def thresholds_command(
    windows: tuple[str, ...],
    max_output: int | None,
    reserve: int | None,
    as_json: bool,
    plot: str | None,
) -> None:
    """Show where letta, Pi, OpenCode, Codex, CoreCoder and ctxbudget compact.

    A threshold at or below zero means that harness compacts before every request.

    \b
    Examples:
      ctxbudget thresholds --window 40960 --window 200000 --window 1000000
      ctxbudget thresholds --window 2400 --json
      ctxbudget thresholds --window 128000 --max-output 8192 --plot lines.png
    """
    sizes = [parse_window(w) for w in windows]
    policies = threshold_policies(max_output=max_output, reserve=reserve)
    report = [(w, threshold_rows(w, policies)) for w in sizes]
    if plot is not None:
        plot_thresholds(plot, policies)
    if as_json:
        data = {
            "windows": [
                {"window": w, "policies": [r.to_json() for r in rows]} for w, rows in report
            ]
        }
        click.echo(json.dumps(data, indent=2))
        return
    _render(report)
    if plot is not None:
        click.echo(f"plot written to {plot}")
