"""Opening an archive's file: a regular file or a new path only, never blocking on a FIFO."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ctxbudget.errors import ArchiveError

__all__ = ["open_regular"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_kind(path: Path, mode: int, what: str) -> None:
    """Only a regular file is an archive: a device reads forever, a FIFO blocks."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise ArchiveError(f"{what} {path} is {kind}; pass a regular file or a new path")


def open_regular(path: Path, flags: int, *, mode: int = 0o644, what: str = "archive") -> int:
    """A descriptor of ``path`` opened without blocking (a FIFO would), checked to be a file;
    created with ``mode`` (less the umask) when ``flags`` create it. Errors name the file as
    ``what``."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise ArchiveError(f"{what} {path} does not exist; check the path") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ArchiveError(f"{what} {path} is a symlink loop; fix the link") from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
            raise ArchiveError(f"{what} {path} is a named pipe; pass a regular file") from None
        if exc.errno == errno.EISDIR:
            raise ArchiveError(f"{what} {path} is a directory; pass a file path") from None
        raise ArchiveError(f"cannot open {what} {path}: {exc.strerror or exc}") from None
    try:
        _check_kind(path, os.fstat(fd).st_mode, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
