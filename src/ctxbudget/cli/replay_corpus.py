"""``ctxbudget replay`` on many sessions: the corpus table, aggregate, JSON, plot and page."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from rich.table import Table

from ctxbudget.errors import ConfigError
from ctxbudget.replay.corpus import (
    Job,
    SessionSummary,
    aggregate,
    replay_many,
    write_corpus_json,
)


def run_corpus(
    files: Sequence[str],
    fmt: str | None,
    windows: tuple[int, ...],
    rules: tuple[str, ...],
    params: dict[str, Any],
    *,
    as_json: bool,
    plot_path: str | None,
    html_path: str | None,
    workers: int | None,
) -> None:
    """Replay ``files`` in worker processes and print the corpus report."""
    err = Console(stderr=True)
    with _ended_by_signals(), tempfile.TemporaryDirectory(prefix="ctxbudget-replay-") as tmp:
        jobs = [Job(f, fmt, windows, rules, params, tmp if as_json else None) for f in files]
        summaries = _replay(jobs, err, workers)
        if not summaries:
            raise ConfigError("no session could be replayed (see the warnings above)")
        if plot_path:
            from ctxbudget.replay.plot import write_corpus_plot

            write_corpus_plot(summaries, plot_path)
            click.echo(f"plot: {plot_path}", err=True)
        if html_path:
            from ctxbudget.replay.html import write_corpus_html

            write_corpus_html(summaries, html_path)
            click.echo(f"page: {html_path}", err=True)
        if as_json:
            write_corpus_json(summaries, sys.stdout)
        else:
            _tables(summaries)


@contextmanager
def _ended_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run the way Ctrl-C does, unwinding it: the workers stop and the
    temporary folder of session documents is removed. (Python's default for them ends the
    process on the spot and leaves the folder behind.)"""

    def end(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # the shell's code for a process ended by that signal

    chosen = (signal.SIGTERM, signal.SIGHUP)
    try:
        previous = {s: signal.signal(s, end) for s in chosen}
    except ValueError:  # not the main thread (the CLI run from a library's thread): as before
        previous = {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _replay(jobs: list[Job], err: Console, workers: int | None) -> list[SessionSummary]:
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("sessions", total=len(jobs))

        def done(summary: SessionSummary | None, warning: str | None) -> None:
            if warning is not None:
                bar.console.print(f"warning: {escape(warning)}", highlight=False, soft_wrap=True)
            bar.advance(task)

        return list(replay_many(jobs, workers=workers, on_done=done))


def _late(s: SessionSummary) -> str:
    """Late segments per rule, "/"-joined, a line per window."""
    lines = []
    for window, rules in s.windows.items():
        counts = "/".join(str(r.late_segments) for r in rules)
        lines.append(counts if len(s.windows) == 1 else f"{window // 1000:,}K: {counts}")
    return "\n".join(lines)


def _tables(summaries: list[SessionSummary]) -> None:
    console = Console()
    names = [r.name for r in next(iter(summaries[0].windows.values()), ())]
    table = Table(title=f"{len(summaries)} sessions")
    table.add_column("session: format, model(s)", overflow="fold", min_width=24)
    for col in ("calls", "peak", "comp."):
        table.add_column(col, justify="right", no_wrap=True, min_width=5)
    table.add_column("late", overflow="fold")
    for s in summaries:
        models = ", ".join(s.models[:3]) + (f" +{len(s.models) - 3}" if len(s.models) > 3 else "")
        table.add_row(
            escape(os.path.basename(s.source)) + "\n" + escape(f"{s.format}: {models or '?'}"),
            f"{s.calls:,}",
            f"{s.peak:,}",
            f"{s.recorded_compactions:,}",
            _late(s),
        )
    console.print(table)
    agg = Table(title="aggregate per window and rule")
    for col in ("window", "rule", "sessions", "segments", "late", "mean fill at fire"):
        agg.add_column(col, justify="left" if col == "rule" else "right", no_wrap=True)
    for r in sorted(aggregate(summaries), key=lambda r: r.window):
        fill = "-" if r.mean_fill_at_fire is None else f"{100 * r.mean_fill_at_fire:.1f}%"
        late = f"[bold red]{r.late_segments:,}[/]" if r.late_segments else "0"
        agg.add_row(f"{r.window:,}", r.name, f"{r.sessions:,}", f"{r.segments:,}", late, fill)
    console.print(agg)
    for note in (
        "segments: the calls from the start or a harness's compaction to the next one",
        "late: segments whose wall (context + output > window) came before a fire",
        "mean fill at fire: the share of the window used where the rule fires",
        "comp.: compactions the harness recorded",
        "late: late segments per rule, " + "/".join(names),
    ):
        console.print(note, style="dim", highlight=False)
