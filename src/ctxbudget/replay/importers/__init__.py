"""Session importers: detect a file's format from its content and read it as a `Trace`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from ctxbudget.errors import TraceFormatError, UnknownNameError
from ctxbudget.replay.importers import (
    claude_code,
    codex,
    ctxbudget_archive,
    mini_swe,
    openai_log,
    pi,
)
from ctxbudget.replay.importers._builder import CallBuilder
from ctxbudget.replay.importers._lines import LineReader, Progress, Record, check_readable
from ctxbudget.replay.trace import FORMATS, Call, CallTable, Trace, TraceFormat

__all__ = ["FORMATS", "Progress", "detect_format", "iter_calls", "load_trace"]

_SNIFF_LINES = 200
# Most specific first: a Pi line also has "type": "message", as ours do.
_SNIFFERS: tuple[tuple[TraceFormat, Callable[[Record], bool]], ...] = (
    ("mini-swe-agent", mini_swe.sniff),
    ("claude-code", claude_code.sniff),
    ("codex", codex.sniff),
    ("pi", pi.sniff),
    ("openai-log", openai_log.sniff),
    ("ctxbudget", ctxbudget_archive.sniff),
)
_LINE_READERS: dict[TraceFormat, Callable[[LineReader, CallBuilder], Iterator[Call]]] = {
    "claude-code": claude_code.read,
    "codex": codex.read,
    "pi": pi.read,
    "openai-log": openai_log.read,
    "ctxbudget": ctxbudget_archive.read,
}


def _is_json_document(path: Path) -> bool:
    """True for a pretty-printed JSON document (a .traj.json), whose first line is just '{'."""
    with path.open("rb") as f:
        first = f.readline(4096).strip()
    return first == b"{"


def detect_format(path: str | Path) -> TraceFormat:
    """The session format of ``path``, from its first records; TraceFormatError if none fits."""
    path = Path(path)
    check_readable(path)
    if _is_json_document(path):
        return "mini-swe-agent"
    reader = LineReader(path, quiet=True)
    records = [r for _, r in islice(iter(reader), _SNIFF_LINES)]
    if not records:
        first = f" (first {reader.warnings[0].split(': ', 1)[1]})" if reader.warnings else ""
        raise TraceFormatError(f"{path}: no line is a JSON object{first}; not a session file")
    for name, sniff in _SNIFFERS:
        if any(sniff(r) for r in records):
            return name
    # Keys are data: quoted and cut, so a key holding a newline cannot break the one-line message.
    keys = [json.dumps(k[:40]) for k in sorted({k for r in records[:5] for k in r})[:8]]
    raise TraceFormatError(
        f"{path}: not a known session format (first records have keys {', '.join(keys)}); "
        f"formats: {', '.join(FORMATS)}"
    )


def _calls(
    path: Path, fmt: TraceFormat, builder: CallBuilder, progress: Progress | None
) -> tuple[Iterator[Call], LineReader | None]:
    if fmt == "mini-swe-agent":  # one JSON document; the reader only counts skipped messages
        skips = LineReader(path)
        return mini_swe.read(mini_swe.load(path, skips.size, progress), builder, skips), skips
    reader = LineReader(path, progress)
    return _LINE_READERS[fmt](reader, builder), reader


def iter_calls(
    path: str | Path,
    format: str | None = None,
    *,
    progress: Progress | None = None,
) -> tuple[TraceFormat, Iterator[Call], Callable[[Sequence[Call]], Trace]]:
    """Stream the calls of a session: (format, calls, finish) where ``finish(kept)`` builds the
    `Trace` of the calls kept (a tuple, or a `CallTable`) once the iterator is spent, with the
    skipped lines and recorded window.

    Memory stays bounded by one line plus what the caller keeps of each call.
    """
    path = Path(path)
    fmt = _format(path, format)
    builder = CallBuilder()
    calls, reader = _calls(path, fmt, builder, progress)

    def finish(kept: Sequence[Call]) -> Trace:
        if builder.count == 0:
            raise TraceFormatError(
                f"{path}: no model call with usage found in this {fmt} file"
                + (f" ({reader.skipped} lines skipped)" if reader and reader.skipped else "")
            )
        return Trace(
            format=fmt,
            calls=kept if isinstance(kept, tuple | CallTable) else tuple(kept),
            model=builder.main_model,
            window=builder.window,
            skipped_lines=reader.skipped if reader else 0,
            warnings=tuple(reader.warnings) if reader else (),
            reasoning=builder.reasoning,
            source=str(path),
        )

    return fmt, calls, finish


def _format(path: Path, format: str | None) -> TraceFormat:
    if format is None:
        return detect_format(path)
    for name in FORMATS:
        if name == format:
            return name
    raise UnknownNameError("trace format", format, list(FORMATS))


def load_trace(
    path: str | Path, format: str | None = None, *, progress: Progress | None = None
) -> Trace:
    """Read a recorded session; ``format`` forces one of `FORMATS` instead of detecting it.

    Lines that do not parse are skipped (counted in ``skipped_lines``, each logged with its line
    number). An empty, binary or unknown file, or one with no call, raises `TraceFormatError`.
    """
    _, calls, finish = iter_calls(path, format, progress=progress)
    return finish(tuple(calls))
