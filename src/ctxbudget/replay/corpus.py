"""Many sessions at once: find session files, replay each in a worker, sum the rules' record.

A worker returns a small `SessionSummary` and writes its full JSON document to a file, so the
parent's memory does not grow with the sessions' sizes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from itertools import islice
from multiprocessing import connection
from pathlib import Path
from typing import Any

from ctxbudget.budget.floor import one_line
from ctxbudget.errors import CtxbudgetError
from ctxbudget.replay.analyze import replay_file, write_json
from ctxbudget.replay.replay import call_windows, fill, recorded_compactions
from ctxbudget.replay.trace import as_table

SESSION_SUFFIXES = (".jsonl", ".traj.json")


def scan_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """The default session folders of Claude Code, Codex and Pi that exist."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME", str(Path.home())))
    claude = env.get("CLAUDE_CONFIG_DIR")
    roots = [Path(p) / "projects" for p in claude.split(",")] if claude else []
    roots.append(home / ".claude" / "projects")
    roots.append(Path(env.get("CODEX_HOME", str(home / ".codex"))) / "sessions")
    # Pi: PI_CODING_AGENT_SESSION_DIR, else PI_CODING_AGENT_DIR/sessions, else
    # ~/.pi/agent/sessions (Pi's documented environment variables).
    pi_sessions = env.get("PI_CODING_AGENT_SESSION_DIR")
    pi_dir = env.get("PI_CODING_AGENT_DIR")
    agent_dir = Path(pi_dir) if pi_dir else home / ".pi" / "agent"
    roots.append(Path(pi_sessions) if pi_sessions else agent_dir / "sessions")
    seen: list[Path] = []
    for root in roots:
        if root.is_dir() and root not in seen:
            seen.append(root)
    return seen


def find_sessions(paths: Iterable[str]) -> tuple[list[Path], list[str]]:
    """Files named directly, the session files under folders (recursively), glob matches; and
    a warning for each path that matched nothing.

    A file reached twice (named twice, relative and absolute, through a link or a hard link) is
    listed once, where first met. Links to folders are not followed inside a folder or a
    ``**``, so a link to a parent folder cannot repeat the sessions or make the walk endless.
    """
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    missing: list[str] = []
    for text in paths:
        hit = False
        for path in _matches(text):
            for file in _files(path):
                hit = True
                identity = _identity(file)
                if identity not in seen:
                    seen.add(identity)
                    found.append(file)
        if not hit:
            missing.append(f"{text}: no such file or folder, or no session file (*.jsonl, "
                           "*.traj.json) in it")  # fmt: skip
    return found, missing


def _matches(text: str) -> list[Path]:
    """The paths a glob matches, sorted (pathlib's glob: a ``**`` does not descend into links to
    folders, where `glob.glob` follows a link to ``.`` until the path is too long, and two such
    links double the walk at each level); a path without wildcards as it is."""
    parts = Path(text).parts
    first = next((i for i, part in enumerate(parts) if has_wildcard(part)), None)
    if first is None:
        return [Path(text)]
    root = Path(*parts[:first]) if first else Path()
    return sorted(root.glob("/".join(parts[first:])))


def has_wildcard(text: str) -> bool:
    """True when ``text`` holds a glob wildcard (``*``, ``?``, ``[``)."""
    return any(c in text for c in "*?[")


def _files(path: Path) -> list[Path]:
    """``path`` if it is a file, the session files under it if it is a folder (links to folders
    inside it not followed: pathlib's rglob), else nothing."""
    if path.is_dir():
        return [
            sub
            for sub in sorted(path.rglob("*"))
            if sub.name.endswith(SESSION_SUFFIXES) and sub.is_file()
        ]
    return [path] if path.exists() else []


def _identity(path: Path) -> tuple[int, int]:
    """The file itself (device, inode), whatever path reaches it."""
    try:
        info = path.stat()
    except OSError:  # gone or unreadable since it was listed: its replay will say so
        return -1, hash(str(path.absolute()))
    return info.st_dev, info.st_ino


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleRecord:
    """One rule on one window of one session."""

    name: str
    segments: int
    late_segments: int
    fills: tuple[float, ...]
    """Share of the window at each fire."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """What the corpus table and aggregate need of one replayed session."""

    source: str
    format: str
    models: tuple[str, ...]
    calls: int
    peak: int
    recorded_compactions: int
    windows: dict[int, tuple[RuleRecord, ...]] = field(default_factory=dict)
    curve: tuple[int, ...] = ()
    """The context curve, thinned to at most `CURVE_POINTS` (for the corpus page)."""
    document: str | None = None
    """A file holding the session's full ``--json`` document, when asked for."""


CURVE_POINTS = 200


@dataclass(frozen=True, slots=True)
class Job:
    """What a worker needs: picklable options for `replay_file`."""

    path: str
    fmt: str | None
    windows: tuple[int, ...]
    rules: tuple[str, ...]
    params: dict[str, Any]
    document_dir: str | None


def replay_one(job: Job) -> SessionSummary:
    """Replay one session (in a worker process); raise `CtxbudgetError` for a bad file."""
    result = replay_file(
        job.path,
        job.fmt,
        windows=job.windows or None,
        policies=job.rules or None,
        params=job.params,
        previews=False,
    )
    t = as_table(result.trace.calls)
    document = None
    if job.document_dir is not None:
        document = str(Path(job.document_dir) / f"{abs(hash(job.path)):x}-{os.getpid()}.json")
        with open(document, "w", encoding="utf-8") as out:
            write_json(result, out)
    step = max(1, len(t) // CURVE_POINTS)
    return SessionSummary(
        source=job.path,
        format=result.trace.format,
        models=t.models,
        calls=len(t),
        peak=max(t.context, default=0),
        recorded_compactions=len(recorded_compactions(t)),
        windows={
            w.window: tuple(
                RuleRecord(
                    name=p.name,
                    segments=p.segments,
                    late_segments=p.late_segments,
                    fills=fills_at(t, w.window, w.by_model, p.fires),
                )
                for p in w.policies
            )
            for w in result.windows
        },
        curve=tuple(max(t.context[i : i + step]) for i in range(0, len(t), step)),
        document=document,
    )


def fills_at(
    t: Any, window: int, by_model: Mapping[str, int] | None, fires: Sequence[int | None]
) -> tuple[float, ...]:
    """The share of its window each fire call's context used."""
    sizes = call_windows(t, window, by_model)
    return tuple(fill(t.context[f], sizes[f]) for f in fires if f is not None)


Progress = Callable[[SessionSummary | None, str | None], None]
"""Called once per session: its summary, or None and a one-line warning."""


def replay_many(
    jobs: Sequence[Job], *, workers: int | None = None, on_done: Progress | None = None
) -> Iterator[SessionSummary]:
    """Summaries of the sessions that replayed, in the order given; a bad file is reported to
    ``on_done`` with its warning and left out."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    results: dict[int, SessionSummary] = {}
    if workers == 1:
        for n, job in enumerate(jobs):
            _record(n, _attempt(job), results, on_done)
    else:
        for n, outcome in _in_pool(jobs, workers):
            _record(n, outcome, results, on_done)
    for n in range(len(jobs)):
        if n in results:
            yield results[n]


QUEUED_PER_WORKER = 2
"""Jobs handed to the pool per worker at a time: enough to keep each busy, few enough that an
interrupted run has almost nothing queued to cancel."""


def _in_pool(jobs: Sequence[Job], workers: int) -> Iterator[tuple[int, SessionSummary | str]]:
    """(index, outcome) of each job as the workers finish them.

    The workers live as long as the pool: a pool whose workers retire after N tasks
    (``max_tasks_per_child``) stops starting new ones once they have all retired while jobs
    are still queued, and the run hangs (CPython gh-115634, Python 3.11 to 3.13). A run that
    ends early (an interrupt, a signal, an error) cancels what is queued and stops the workers.
    """
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_signals)
    finished = False
    try:
        waiting = iter(enumerate(jobs))
        running: dict[Future[SessionSummary | str], int] = {}
        for n, job in islice(waiting, QUEUED_PER_WORKER * workers):
            running[pool.submit(_attempt, job)] = n
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                n = running.pop(future)
                for m, job in islice(waiting, 1):
                    running[pool.submit(_attempt, job)] = m
                yield n, future.result()
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop(pool)


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the parent, which stops it, and ends on SIGTERM, whatever
    handler it inherited from the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued jobs and end the workers now, mid-session included: the run is over."""
    # Python 3.14 has terminate_workers(); before it, the pool's processes are only reachable
    # through its private table, which shutdown() drops: read it first. (Read after, it was
    # always empty: the workers went on writing into the run's folder while it was removed.)
    table: dict[int, Any] = getattr(pool, "_processes", None) or {}
    processes = list(table.values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    # A worker forked a moment before has not yet reset SIGTERM to its default (the parent's
    # handler may be the CLI's, which a worker survives), and a loaded machine may take longer
    # than the wait: SIGKILL cannot be caught, so none outlives the run's folder.
    for process in _still_running(processes, seconds=5):
        process.kill()
    _still_running(processes, seconds=5)


def _still_running(processes: Sequence[Any], seconds: float) -> list[Any]:
    """The processes that have not ended within ``seconds``.

    Watched through their sentinels, not ``is_alive()``: the pool's own thread reaps its workers
    as they end, and a ``waitpid`` that loses that race reads as "still running" (a dead worker
    looked alive in about one stop in six)."""
    deadline = time.monotonic() + seconds
    running = {process.sentinel: process for process in processes}
    while running and (left := deadline - time.monotonic()) > 0:
        for ended in connection.wait(list(running), left):
            del running[ended]
    return list(running.values())


def _attempt(job: Job) -> SessionSummary | str:
    try:
        return replay_one(job)
    except CtxbudgetError as e:
        return one_line(str(e))
    except Exception as e:  # one session's failure must not end the run
        return f"{job.path}: internal error {type(e).__name__}: {one_line(str(e))}"


def _record(
    n: int,
    outcome: SessionSummary | str,
    results: dict[int, SessionSummary],
    on_done: Progress | None,
) -> None:
    if isinstance(outcome, str):
        if on_done is not None:
            on_done(None, outcome)
        return
    results[n] = outcome
    if on_done is not None:
        on_done(outcome, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleAggregate:
    """One rule on one window over the corpus."""

    name: str
    window: int
    sessions: int
    segments: int
    late_segments: int
    mean_fill_at_fire: float | None


def aggregate(summaries: Iterable[SessionSummary]) -> list[RuleAggregate]:
    """Per window and rule: sessions, segments, late segments, mean fill over all fires."""
    totals: dict[tuple[int, str], list[Any]] = {}
    for s in summaries:
        for window, rules in s.windows.items():
            for r in rules:
                row = totals.setdefault((window, r.name), [0, 0, 0, 0.0, 0])
                row[0] += 1
                row[1] += r.segments
                row[2] += r.late_segments
                row[3] += sum(r.fills)
                row[4] += len(r.fills)
    return [
        RuleAggregate(
            name=name,
            window=window,
            sessions=row[0],
            segments=row[1],
            late_segments=row[2],
            mean_fill_at_fire=row[3] / row[4] if row[4] else None,
        )
        for (window, name), row in totals.items()
    ]


def aggregate_json(rows: Iterable[RuleAggregate]) -> dict[str, Any]:
    """``{"rules": [...]}`` as ``--json`` prints it."""
    return {
        "rules": [
            {
                "window": r.window,
                "name": r.name,
                "sessions": r.sessions,
                "segments": r.segments,
                "late_segments": r.late_segments,
                "mean_fill_at_fire": r.mean_fill_at_fire,
            }
            for r in rows
        ]
    }


def write_corpus_json(summaries: Sequence[SessionSummary], out: Any) -> None:
    """``{"sessions": [each session's document], "aggregate": {...}}``, a document at a time."""
    out.write('{\n  "sessions": [')
    for n, s in enumerate(summaries):
        if s.document is None:
            continue
        out.write(("," if n else "") + "\n    ")
        with open(s.document, encoding="utf-8") as doc:
            for k, line in enumerate(doc):
                out.write(("\n    " if k else "") + line.rstrip("\n"))
    out.write('\n  ],\n  "aggregate": ')
    out.write(json.dumps(aggregate_json(aggregate(summaries)), indent=2).replace("\n", "\n  "))
    out.write("\n}\n")
