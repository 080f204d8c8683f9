"""``ctxbudget replay``: where each rule fires on a recorded session; how wrong estimators are."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table

from ctxbudget.errors import ConfigError
from ctxbudget.replay.analyze import ReplayResult, replay_file, result_json
from ctxbudget.replay.trace import FORMATS

_PROGRESS_MIN_BYTES = 20 * 2**20  # below this a file is read before a bar would show


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(
            f"--param {text!r} must look like RULE.NAME=VALUE, e.g. pi.reserve_tokens=10000"
        )
    lowered = raw.strip().lower()
    if lowered in ("none", "null", ""):
        return key, None
    if lowered in ("true", "false"):
        return key, lowered == "true"
    try:
        return key, int(raw)
    except ValueError:
        try:
            return key, float(raw)
        except ValueError:
            raise ConfigError(
                f"--param {text!r}: {raw!r} is not a number, true/false or none"
            ) from None


def _run(
    path: str,
    fmt: str | None,
    windows: tuple[int, ...],
    rules: tuple[str, ...],
    params: dict[str, Any],
) -> ReplayResult:
    console = Console(stderr=True)
    size = _size(path)
    if size < _PROGRESS_MIN_BYTES or not console.is_terminal:
        return replay_file(
            path, fmt, windows=windows or None, policies=rules or None, params=params
        )
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("reading", total=size)
        return replay_file(
            path,
            fmt,
            windows=windows or None,
            policies=rules or None,
            params=params,
            progress=lambda done, total: bar.update(task, completed=done),
        )


def _size(path: str) -> int:
    try:
        import os

        return os.stat(path).st_size
    except OSError:
        return 0


def _table(result: ReplayResult) -> None:
    console = Console()
    t = result.trace
    console.print(
        f"[bold]{t.format}[/] {t.model or 'unknown model'}: {len(t.calls)} calls, "
        f"peak context {max(c.context_tokens for c in t.calls):,}, "
        f"{t.skipped_lines} skipped lines; window {result.window_source}"
    )
    for w in result.windows:
        table = Table(
            title=f"window {w.window:,}: wall at call {w.wall}"
            if w.wall is not None
            else f"window {w.window:,}: the wall is never hit"
        )
        for col in ("rule", "checked", "threshold", "first trigger", "late", "reading total"):
            table.add_column(col)
        for p in w.policies:
            table.add_row(
                p.name,
                ", ".join(p.checked),
                f"{p.threshold:,}",
                "never" if p.first_trigger is None else str(p.first_trigger),
                "LATE" if p.late else "",
                str(p.first_trigger_reading_total),
            )
        console.print(table)
    acc = Table(title="estimators: abs error % of the reported context")
    for col in ("estimator", "usage-first median", "p95", "naive median", "naive p95"):
        acc.add_column(col, justify="right")
    for e in result.estimators:
        acc.add_row(
            e.name,
            *(
                ("-" if v is None else f"{v:.2f}")
                for v in (
                    e.median_abs_error_pct,
                    e.p95_abs_error_pct,
                    e.naive_median_abs_error_pct,
                    e.naive_p95_abs_error_pct,
                )
            ),
        )
    console.print(acc)
    if result.pitfall:
        worst = max(result.pitfall, key=lambda p: p.unresent_reasoning)
        console.print(
            f"reasoning pitfall: {len(result.pitfall)} calls where the last reported total counts "
            f"reasoning not sent back; worst at call {worst.index}: total {worst.reported_total:,} "
            f"vs next request {worst.next_context:,} ({worst.unresent_reasoning:,} reasoning)"
        )


@click.command("replay")
@click.argument("file", type=click.Path(dir_okay=True))
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), help="Force a format instead of detecting it."
)
@click.option("--window", "windows", type=int, multiple=True, help="Window to replay (repeatable).")
@click.option(
    "--policy", "rules", multiple=True, help="Rule to replay (repeatable; default: all six)."
)
@click.option(
    "--param", "param_texts", multiple=True, help="RULE.NAME=VALUE, e.g. pi.reserve_tokens=10000."
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG figure.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False), help="Write an interactive HTML page."
)
def replay_command(
    file: str,
    fmt: str | None,
    windows: tuple[int, ...],
    rules: tuple[str, ...],
    param_texts: tuple[str, ...],
    as_json: bool,
    plot_path: str | None,
    html_path: str | None,
) -> None:
    """Replay a recorded agent session: where each compaction rule fires, how wrong estimators are.

    \b
    Examples:
      ctxbudget replay session.jsonl
      ctxbudget replay rollout.jsonl --window 128000 --window 272000 --json
      ctxbudget replay session.jsonl --policy pi --param pi.reserve_tokens=10000
      ctxbudget replay run.traj.json --plot replay.png --html replay.html
    """
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s", stream=sys.stderr)
    params = dict(_param(p) for p in param_texts)
    result = _run(file, fmt, windows, rules, params)
    if plot_path:
        from ctxbudget.replay.plot import write_plot

        write_plot(result, plot_path)
    if html_path:
        from ctxbudget.replay.html import write_html

        write_html(result, html_path)
    if as_json:
        click.echo(json.dumps(result_json(result), indent=2))
    else:
        _table(result)
