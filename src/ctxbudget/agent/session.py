"""Open a session archive for the loop: a new one records its settings, an existing one resumes.

The settings stored in an archive win over those given, so a resumed session keeps its window,
rule and scenario whatever the command line says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbudget.budget.rules import MAX_WINDOW
from ctxbudget.compaction.archive import Archive, ArchiveState
from ctxbudget.errors import ArchiveError

__all__ = ["OpenArchive", "open_archive"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenArchive:
    """An archive opened for a session, with the settings in force and what it held."""

    archive: Archive
    settings: Mapping[str, Any]
    state: ArchiveState
    resumed: bool
    """True when the archive already held messages."""


@contextmanager
def open_archive(
    path: str | Path,
    settings: Mapping[str, Any],
    *,
    warn: Callable[[str], None] | None = None,
) -> Iterator[OpenArchive]:
    """Open (creating folders) and lock ``path``; report torn lines through ``warn``."""
    where = Path(path)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"cannot create the folder of archive {where}: {exc.strerror}") from None
    archive = Archive(where)
    try:
        state = archive.resumed
        for warning in state.warnings:
            if warn is not None:
                warn(warning)
        stored = state.meta.get("session")
        if isinstance(stored, Mapping):
            _check_stored(where, stored, settings, state.meta.get("window"))
            chosen: Mapping[str, Any] = {**settings, **stored}
        else:
            chosen = dict(settings)
            archive.append_meta({"session": dict(chosen)})
        yield OpenArchive(
            archive=archive, settings=chosen, state=state, resumed=bool(state.history)
        )
    finally:
        archive.close()


def _check_stored(
    path: Path, stored: Mapping[str, Any], given: Mapping[str, Any], adopted: object
) -> None:
    """Stored settings win over given ones, so each must be what the command would accept:
    the same type as the given value, and a window a plausible number of tokens."""
    for key, value in stored.items():
        default = given.get(key)
        if key == "window":
            ok = value is None or _plausible_window(value)
        else:
            ok = default is None or type(value) is type(default)
        if not ok:
            raise ArchiveError(_bad_setting(path, key, value))
    if adopted is not None and not _plausible_window(adopted):
        raise ArchiveError(_bad_setting(path, "window", adopted))


def _plausible_window(value: object) -> bool:
    return type(value) is int and 0 < value <= MAX_WINDOW  # the largest `validate_window` accepts


def _bad_setting(path: Path, key: str, value: object) -> str:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return (
        f"archive {path}: stored setting {key}={shown} is not valid (the file was edited or "
        "damaged); fix that line or pass another --archive"
    )
