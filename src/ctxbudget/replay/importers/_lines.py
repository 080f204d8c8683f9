"""Read a session file line by line: bounded memory, bad lines skipped with their line number."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ctxbudget.compaction.archive import MAX_RECORD_BYTES
from ctxbudget.errors import TraceFormatError

log = logging.getLogger("ctxbudget.replay")

Progress = Callable[[int, int], None]
"""Called with (bytes read so far, file size) as a file is read."""

Record = dict[str, Any]

_SNIFF_BYTES = 8192
_MAX_WARNINGS = 20  # keep the first few; the count says how many there were
MAX_DEPTH = 100
"""Records nested deeper are skipped: real session lines nest about 10 levels, and readers,
``str`` and ``json.dumps`` recurse per level (a 900-deep line would exhaust Python's stack)."""


MAX_LINE_BYTES = MAX_RECORD_BYTES
"""The longest session line read (64 MiB, the archive's record cap). Parsing a line costs about
three times its size (its bytes, its text, its objects), so a 1 GB line took 3 GB; a longer
line is skipped, read a piece at a time. Real lines are far shorter: a pasted log, a few
images."""


_SKIP_PIECE_BYTES = 1 << 20


def check_readable(path: Path) -> int:
    """Return the file's size; raise TraceFormatError for a missing, empty or binary file."""
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file")
    if not path.is_file():
        raise TraceFormatError(f"{path}: not a regular file (a directory?); pass a session file")
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    if not head.strip():
        raise TraceFormatError(f"{path}: the file is empty; pass a recorded session")
    if b"\x00" in head:
        raise TraceFormatError(f"{path}: a binary file, not a JSON session")
    return size


class LineReader:
    """Yields (line number, JSON object) for each line that parses; counts and logs the rest."""

    def __init__(
        self, path: Path, progress: Progress | None = None, *, quiet: bool = False
    ) -> None:
        self.path = path
        self.quiet = quiet
        self.size = check_readable(path)
        self.progress = progress
        self.skipped = 0
        self.warnings: list[str] = []

    def skip(self, lineno: int, why: str) -> None:
        """Count a line that cannot be used and remember why."""
        self.skip_at(f"line {lineno}", why)

    def skip_at(self, where: str, why: str) -> None:
        """Count a record (``where``: "line 12", "message 7") that cannot be used."""
        self.skipped += 1
        message = f"{self.path.name}: {where} skipped: {why}"
        if not self.quiet:
            log.warning(message)
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(message)

    def __iter__(self) -> Iterator[tuple[int, Record]]:
        done = 0
        with self.path.open("rb") as f:
            for lineno, (raw, length) in enumerate(bounded_lines(f), start=1):
                done += length
                if self.progress is not None:
                    self.progress(done, self.size)
                if raw is None:
                    cap = MAX_LINE_BYTES // 2**20
                    self.skip(lineno, f"{length:,} bytes, longer than the {cap} MiB a line may be")
                    continue
                record = self._parse(lineno, raw)
                if record is not None:
                    yield lineno, record

    def _parse(self, lineno: int, raw: bytes) -> Record | None:
        if not raw or raw.isspace():  # strip() would copy the line
            return None
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            self.skip(lineno, "not valid UTF-8")
            return None
        except ValueError as e:
            self.skip(lineno, f"not valid JSON ({str(e).split(':')[0]})")
            return None
        except RecursionError:
            self.skip(lineno, f"JSON nested deeper than {MAX_DEPTH} levels")
            return None
        if not isinstance(value, dict):
            self.skip(lineno, f"a JSON {type(value).__name__}, not an object")
            return None
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and too_deep(value):
            self.skip(lineno, f"JSON nested deeper than {MAX_DEPTH} levels")
            return None
        return value


def bounded_lines(stream: BinaryIO, limit: int | None = None) -> Iterator[tuple[bytes | None, int]]:
    """(line, its length in bytes) for each line of ``stream``; the line is None when it is
    longer than ``limit`` bytes (default `MAX_LINE_BYTES`) without its newline, and the rest
    of it is then passed over a MiB at a time, never held whole."""
    limit = MAX_LINE_BYTES if limit is None else limit
    while raw := stream.readline(limit + 1):
        if raw.endswith(b"\n") or len(raw) <= limit:
            yield raw, len(raw)
            continue
        length = len(raw)
        del raw
        while piece := stream.readline(_SKIP_PIECE_BYTES):
            length += len(piece)
            if piece.endswith(b"\n"):
                break
        yield None, length


def too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests lists and objects more than ``limit`` levels (no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def as_int(value: object) -> int:
    """A token count from a JSON value; anything else (null, text, negative) counts as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):  # json.loads reads Infinity, NaN
        return 0
    number = int(value)
    return number if number > 0 else 0


def as_dict(value: object) -> Record:
    """The value if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    """The value if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []
