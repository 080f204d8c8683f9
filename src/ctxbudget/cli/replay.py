"""``ctxbudget replay``: where each rule fires on a recorded session; how wrong estimators are."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table

from ctxbudget.budget.rules import validate_window
from ctxbudget.errors import ConfigError
from ctxbudget.extras import pyplot
from ctxbudget.replay.analyze import ReplayResult, replay_file, write_json
from ctxbudget.replay.replay import WindowReplay, recorded_compactions
from ctxbudget.replay.trace import FORMATS
from ctxbudget.replay.windows import suggest_window

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
    previews: bool,
) -> ReplayResult:
    console = Console(stderr=True)
    size = _size(path)
    options: dict[str, Any] = {
        "windows": windows or None,
        "policies": rules or None,
        "params": params,
        "previews": previews,  # message previews are only shown by the HTML page
    }
    if size < _PROGRESS_MIN_BYTES or not console.is_terminal:
        return replay_file(path, fmt, **options)
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("reading", total=size)
        return replay_file(
            path, fmt, progress=lambda done, total: bar.update(task, completed=done), **options
        )


def _session_files(paths: tuple[str, ...], scan: bool) -> list[str]:
    from ctxbudget.replay.corpus import find_sessions, has_wildcard, scan_roots

    if not paths and not scan:
        raise ConfigError("give a session file, a folder or a glob, or --scan")
    if len(paths) == 1 and not scan and not os.path.isdir(paths[0]) and not has_wildcard(paths[0]):
        return [paths[0]]  # one file: its own errors (no such file, ...) say what is wrong
    roots = [str(r) for r in scan_roots()] if scan else []
    if scan and not roots:
        raise ConfigError(
            "--scan found no session folder: set CLAUDE_CONFIG_DIR, CODEX_HOME or "
            "PI_CODING_AGENT_DIR, or pass the folders"
        )
    found, missing = find_sessions([*paths, *roots])
    if not found:
        raise ConfigError("; ".join(missing) or "no session files found (*.jsonl, *.traj.json)")
    for warning in missing:
        click.echo(f"warning: {warning}", err=True)
    return [str(f) for f in found]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


# Short names keep the rules table inside 80 columns.
_CHECKPOINTS = {"before_request": "before", "after_step": "after", "task_end": "task end"}
_SOURCES = {"given": "given with --window", "recorded": "recorded in the trace"}


def _checks(checked: tuple[str, ...]) -> str:
    return "/".join(_CHECKPOINTS.get(c, c) for c in checked)


def _call(index: int | None) -> str:
    return "never" if index is None else f"{index:,}"


def _header(result: ReplayResult) -> str:
    t = result.trace
    sizes = ", ".join(f"{w.window:,}" for w in result.windows)
    source = _SOURCES.get(result.window_source, result.window_source)
    skipped = f", {t.skipped_lines:,} skipped lines" if t.skipped_lines else ""
    # The model name comes from the trace: escaped, "[red]" in it stays text.
    text = (
        f"[bold]{escape(t.format)}[/] {escape(t.model or 'unknown model')}: "
        f"{len(t.calls):,} calls, "
        f"peak context {_peak(result):,}{skipped}\n"
        f"window{'s' if len(result.windows) > 1 else ''} {sizes} ({escape(source)})"
    )
    by_model = result.windows[0].by_model
    if by_model and len(set(by_model.values())) > 1:
        text += "\n" + ", ".join(f"{escape(m)} {w:,}" for m, w in by_model.items())
    compactions = recorded_compactions(t.calls)
    if compactions:
        shown = ", ".join(f"{c:,}" for c in compactions[:10])
        more = f" and {len(compactions) - 10:,} more" if len(compactions) > 10 else ""
        text += f"\nthe harness compacted before call{'s' if len(compactions) > 1 else ''} "
        text += f"{shown}{more}: {len(compactions) + 1:,} segments"
    return text


def _peak(result: ReplayResult) -> int:
    return max((c.context_tokens for c in result.trace.calls), default=0)


def _reads_total(w: WindowReplay) -> bool:
    return any(p.first_trigger_reading_total != p.first_trigger for p in w.policies)


def _rules_table(w: WindowReplay) -> Table:
    reads_total = _reads_total(w)
    wall = "the wall is never hit" if w.wall is None else f"wall at call {w.wall:,}"
    table = Table(title=f"window {w.window:,}: {wall}")
    table.add_column("rule", no_wrap=True, min_width=max(len(p.name) for p in w.policies))
    table.add_column("checks", no_wrap=True)
    table.add_column("threshold", justify="right", no_wrap=True)
    table.add_column("fires", justify="right", no_wrap=True)
    table.add_column("late", no_wrap=True)
    segmented = any(p.segments > 1 for p in w.policies)
    if segmented:
        table.add_column("late seg.", justify="right", no_wrap=True)
    if reads_total:
        table.add_column("on total", justify="right", no_wrap=True)
    for p in w.policies:
        row = [
            p.name,
            _checks(p.checked),
            f"{p.threshold:,}",
            _call(p.first_trigger),
            "[bold red]✗ late[/]" if p.late else "no",
        ]
        if segmented:
            late = f"{p.late_segments}/{p.segments}"
            row.append(f"[bold red]{late}[/]" if p.late_segments else late)
        if reads_total:
            row.append(_call(p.first_trigger_reading_total))
        table.add_row(*row)
    return table


def _rules_notes(result: ReplayResult) -> list[str]:
    # One short line each: a note wrapped by an 80-column terminal reads badly.
    notes = [
        "checks: before each request / after each step / task end: when a user task ends",
        "fires: the call before which the rule would first compact",
        "threshold: ctxbudget's line at the start; it keeps free the largest reply seen",
        "late: ✗ = fires after the wall (the first call whose context + output > window)",
        "      or never fires although the wall is hit",
    ]
    if any(p.segments > 1 for w in result.windows for p in w.policies):
        notes += [
            "late seg.: segments (calls between the harness's compactions) where the wall",
            "           came before the rule fired there; --json lists the fires per segment",
        ]
    if any(_reads_total(w) for w in result.windows):
        notes += [
            "on total: where the rule would fire if it read the reported total",
            "          incl. reasoning that was not sent back",
        ]
    return notes


def _estimators_table(result: ReplayResult) -> Table:
    table = Table(title="estimators: abs error % of the reported context")
    table.add_column("estimator", no_wrap=True)
    for col in ("median", "p95", "naive median", "naive p95"):
        table.add_column(col, justify="right", no_wrap=True)
    for e in result.estimators:
        values = (
            e.median_abs_error_pct,
            e.p95_abs_error_pct,
            e.naive_median_abs_error_pct,
            e.naive_p95_abs_error_pct,
        )
        table.add_row(e.name, *("-" if v is None else f"{v:.2f}" for v in values))
    return table


def _quiet(result: ReplayResult) -> bool:
    """True when no window hits the wall and no rule fires: the replay shows nothing."""
    return all(
        w.wall is None and all(p.first_trigger is None for p in w.policies) for w in result.windows
    )


_ESTIMATOR_NOTES = (
    "median, p95: usage-first (last reported usage + estimate of the added messages)",
    "naive: the estimator over the messages only (no usage, no system/tools floor)",
)


def _hint(peak: int, windows: int) -> str:
    these = "these windows" if windows > 1 else "this window"
    size = suggest_window(peak)
    fill = f" (the peak context {peak:,} fills {100 * peak / size:.0f}% of it)" if peak else ""
    return f"no rule fires at {these}: try --window {size}{fill}"


def _table(result: ReplayResult) -> None:
    console = Console()
    console.print(_header(result))
    for w in result.windows:
        console.print(_rules_table(w))
    for note in _rules_notes(result):
        console.print(note, style="dim", highlight=False)
    if _quiet(result):
        console.print(_hint(_peak(result), len(result.windows)), style="yellow", highlight=False)
    console.print(_estimators_table(result))
    for note in _ESTIMATOR_NOTES:
        console.print(note, style="dim", highlight=False)
    if result.pitfall:
        worst = max(result.pitfall, key=lambda p: p.unresent_reasoning)
        console.print(
            f"reasoning pitfall: {len(result.pitfall)} calls where the last reported total counts "
            f"reasoning not sent back; worst at call {worst.index}: total {worst.reported_total:,} "
            f"vs next request {worst.next_context:,} ({worst.unresent_reasoning:,} reasoning)"
        )


@click.command("replay")
@click.argument("paths", nargs=-1)
@click.option(
    "--scan",
    is_flag=True,
    help="Replay every session in the default folders of Claude Code ($CLAUDE_CONFIG_DIR or "
    "~/.claude/projects), Codex ($CODEX_HOME/sessions) and Pi (~/.pi/agent/sessions).",
)
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes (default: CPUs).")
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
    paths: tuple[str, ...],
    scan: bool,
    workers: int | None,
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
      ctxbudget replay ~/sessions/ 'logs/**/*.jsonl' --window 200000 --json
      ctxbudget replay --scan --html corpus.html

    Several files, a folder (read recursively) or a glob replay as a corpus, in parallel: a
    table per session and an aggregate per rule.
    """
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s", stream=sys.stderr)
    windows = tuple(validate_window(w, "--window") for w in windows)  # before any file is read
    if plot_path:
        pyplot("replay --plot")  # a missing `plot` extra is said before a long replay, not after
    params = dict(_param(p) for p in param_texts)
    files = _session_files(paths, scan)
    if len(files) != 1 or scan or len(paths) != 1 or os.path.isdir(paths[0]):
        from ctxbudget.cli.replay_corpus import run_corpus

        run_corpus(
            files,
            fmt,
            windows,
            rules,
            params,
            as_json=as_json,
            plot_path=plot_path,
            html_path=html_path,
            workers=workers,
        )
        return
    result = _run(files[0], fmt, windows, rules, params, previews=bool(html_path))
    if plot_path:
        from ctxbudget.replay.plot import write_plot

        write_plot(result, plot_path)
        click.echo(f"plot: {plot_path}", err=True)
    if html_path:
        from ctxbudget.replay.html import write_html

        write_html(result, html_path)
        click.echo(f"page: {html_path}", err=True)
    if as_json:
        write_json(result, sys.stdout)  # streamed call by call: a huge session stays small
    else:
        _table(result)
