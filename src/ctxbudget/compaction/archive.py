"""The session archive: an append-only JSONL file of every message, usage report and compaction.

Each record is written to the file (one unbuffered write) before ``append_*`` returns, and by
default fsynced too; an ``Archive(path, sync_each_record=False)`` (the gateway's) leaves the fsync
to an explicit ``sync()`` (the gateway calls it once per request, before it saves the
conversation's state) and to ``close()``. Either way a killed process loses nothing already
appended (the kernel holds the write); what the deferred mode gives up is only the records
appended since the last ``sync()`` when the machine itself stops (power loss, kernel crash).
An open ``Archive`` holds an exclusive lock, so two processes never interleave lines.
``load_archive`` rebuilds the session.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from ctxbudget.compaction.archive_file import open_regular
from ctxbudget.compaction.records import (
    check_no_secrets,
    message_from_record,
    message_to_record,
    usage_from_record,
    usage_to_record,
)
from ctxbudget.compaction.strategies import CompactionResult
from ctxbudget.errors import ArchiveError, CtxbudgetError, TraceFormatError
from ctxbudget.messages.jsondepth import load_json
from ctxbudget.messages.model import Message
from ctxbudget.messages.usage import Usage

__all__ = [
    "ARCHIVE_FORMAT",
    "Archive",
    "ArchiveInUseError",
    "ArchiveState",
    "load_archive",
    "text_digest",
    "user_cache_dir",
]

ARCHIVE_FORMAT = "ctxbudget-archive"
ARCHIVE_VERSION = 1
_HEADER_PREFIX = b'{"type":"meta"'
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""The longest record written or read: a reply is capped at 32 MiB (providers/limits.py), so a
longer line is not one of ours and is never read whole."""


class ArchiveInUseError(ArchiveError):
    """Raised when another open ``Archive`` (in any process) holds the file's lock."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveState:
    """A session as its archive records it."""

    history: tuple[Message, ...] = ()
    """Every message ever appended, in order (summaries live in compaction records)."""
    view: tuple[Message, ...] = ()
    """What the model sees: the latest compaction's view plus the messages appended since."""
    compaction_id: str | None = None
    """The id of the latest compaction (None: none yet)."""
    warnings: tuple[str, ...] = ()
    """Problems read past: torn lines (a writer killed mid-record), unknown record types."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """All meta records merged, later keys winning; ``format`` and ``version`` from the header."""
    usage: tuple[tuple[int, Usage], ...] = ()
    """(call index, usage) for every usage record."""
    compactions: int = 0
    records: int = 0
    """Records read (the next append's ``seq``)."""


def _digest(record: Mapping[str, Any]) -> str:
    text = json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text_digest(text)


def user_cache_dir() -> Path:
    """Where ctxbudget keeps its files for the user: ``$XDG_CACHE_HOME/ctxbudget``, else
    ``~/.cache/ctxbudget`` (the demo's archives, the session state store)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxbudget"


def text_digest(text: str) -> str:
    """A short, stable digest of ``text``, lone surrogates included."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


@dataclass(slots=True)
class _Reader:
    """Builds an ArchiveState record by record."""

    path: str
    by_seq: dict[int, Message] = field(default_factory=dict)
    digests: dict[str, int] = field(default_factory=dict)
    history: list[Message] = field(default_factory=list)
    view: list[Message] = field(default_factory=list)
    usage: list[tuple[int, Usage]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    compaction_id: str | None = None
    compactions: int = 0
    next_seq: int = 0

    def add(self, record: Mapping[str, Any], where: str) -> None:
        seq = record.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TraceFormatError(f"{where}: record has no integer 'seq'")
        self.next_seq = max(self.next_seq, seq + 1)
        kind = record.get("type")
        if kind == "message":
            raw = record.get("message")
            message = message_from_record(raw, f"{where}.message")
            self.by_seq[seq] = message
            self.digests[_digest(message_to_record(message))] = seq
            self.history.append(message)
            self.view.append(message)
        elif kind == "usage":
            index = record.get("call_index", -1)
            index = index if isinstance(index, int) and not isinstance(index, bool) else -1
            self.usage.append((index, usage_from_record(record.get("usage"), f"{where}.usage")))
        elif kind == "compaction":
            self.view = [self._entry(e, f"{where}.view[{i}]") for i, e in enumerate(_list(record))]
            cid = record.get("compaction_id")
            self.compaction_id = cid if isinstance(cid, str) else None
            self.compactions += 1
        elif kind == "meta" and isinstance(record.get("meta"), Mapping):
            self.meta.update(record["meta"])
        else:
            self.warnings.append(f"{where}: unknown record type {kind!r}; skipped")

    def _entry(self, entry: object, where: str) -> Message:
        if isinstance(entry, Mapping) and "ref" in entry:
            found = self.by_seq.get(entry["ref"]) if isinstance(entry["ref"], int) else None
            if found is None:
                raise TraceFormatError(
                    f"{where}: refers to message seq {entry['ref']!r}, not found"
                )
            return found
        if isinstance(entry, Mapping) and "message" in entry:
            return message_from_record(entry["message"], f"{where}.message")
        raise TraceFormatError(f"{where}: expected {{'ref': seq}} or {{'message': ...}}")

    def state(self) -> ArchiveState:
        return ArchiveState(
            history=tuple(self.history),
            view=tuple(self.view),
            compaction_id=self.compaction_id,
            warnings=tuple(self.warnings),
            meta=dict(self.meta),
            usage=tuple(self.usage),
            compactions=self.compactions,
            records=self.next_seq,
        )


def _list(record: Mapping[str, Any]) -> list[Any]:
    view = record.get("view")
    if not isinstance(view, list):
        raise TraceFormatError("compaction record has no 'view' list")
    return view


def _lines(path: str, handle: BinaryIO) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without newline, complete) for each line; streams; a line longer
    than ``MAX_RECORD_BYTES`` is an error, found without reading it whole."""
    number = 0
    while raw := handle.readline(MAX_RECORD_BYTES + 1):
        number += 1
        complete = raw.endswith(b"\n")
        if len(raw) > MAX_RECORD_BYTES:
            raise TraceFormatError(
                f"{path} line {number} is longer than {MAX_RECORD_BYTES // 2**20} MiB: "
                "not a ctxbudget archive record"
            )
        yield number, raw.rstrip(b"\r\n") if complete else raw, complete


def _parse(raw: bytes) -> object:
    try:
        return load_json(raw.decode("utf-8"))  # depth-capped: records are walked recursively
    except ValueError:  # bad UTF-8, not JSON, nested too deep
        return None


def _read(path: str, handle: BinaryIO) -> _Reader:
    reader = _Reader(path)
    headed = False
    for number, raw, complete in _lines(path, handle):
        where = f"{path} line {number}"
        if not raw.strip():
            continue
        record = _parse(raw)
        if not headed:  # the first line with content must be the header
            headed = True
            if not (isinstance(record, Mapping) and _is_header(record)):
                if raw.startswith(_HEADER_PREFIX) or _HEADER_PREFIX.startswith(raw):
                    reader.warnings.append(f"{where}: torn header record (writer killed); skipped")
                    continue
                raise _not_an_archive(path)
        if not isinstance(record, Mapping):
            state = "torn last record" if not complete else "unreadable record (torn write?)"
            reader.warnings.append(f"{where}: {state}, {len(raw)} bytes; skipped")
            continue
        try:
            reader.add(record, where)
        except TraceFormatError:
            raise
        except CtxbudgetError as exc:
            raise TraceFormatError(f"{where}: {exc}") from exc
    if not headed and handle.tell() > 0:  # blank lines only: not written by us
        raise _not_an_archive(path)
    return reader


def _write_all(file: BinaryIO, data: bytes) -> None:
    """Write every byte: an unbuffered write may take only part (a disk filling up)."""
    view = memoryview(data)
    while view:
        written = file.write(view)
        if not written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _not_an_archive(path: str) -> TraceFormatError:
    return TraceFormatError(
        f"{path} is not a ctxbudget archive (no archive header); pass a new path to start one"
    )


def _is_header(record: Mapping[str, Any]) -> bool:
    meta = record.get("meta")
    return (
        record.get("type") == "meta"
        and isinstance(meta, Mapping)
        and (meta.get("format") == ARCHIVE_FORMAT)
    )


def load_archive(path: str | os.PathLike[str]) -> ArchiveState:
    """The session recorded in ``path``: full history, the model's view, usage, warnings.

    A torn last line (a writer killed mid-record) is reported in ``warnings`` and skipped.
    An empty file is an empty session. A file that is not an archive raises TraceFormatError.
    """
    where = Path(path)
    try:
        with os.fdopen(open_regular(where, os.O_RDONLY), "rb") as handle:
            reader = _read(str(where), handle)
    except OSError as exc:
        raise ArchiveError(f"cannot read archive {where}: {exc.strerror or exc}") from None
    return reader.state()


class Archive:
    """An open session archive: appends records, each written and (by default) fsynced; holds
    a lock.

    Use as a context manager or call ``close()``. Opening an existing archive resumes it:
    ``resumed`` is its state at open. A second open of the same file, by any process, raises
    ArchiveError while this one is open.
    """

    def __init__(self, path: str | os.PathLike[str], *, sync_each_record: bool = True) -> None:
        self.path = Path(path)
        self.sync_each_record = sync_each_record
        """False: records are fsynced by ``sync()`` and ``close()`` only (see the module doc)."""
        self._unsynced = False
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        # Unbuffered: a failed write leaves nothing for close() to fail on a second time.
        self._file: BinaryIO = os.fdopen(open_regular(self.path, flags), "ab", buffering=0)
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            raise ArchiveInUseError(
                f"archive {self.path} is in use by another process; "
                "stop it or pass another archive path"
            ) from None
        try:
            with self.path.open("rb") as handle:
                reader = _read(str(self.path), handle)
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - 1))
                self._needs_newline = size > 0 and handle.read(1) != b"\n"
        except BaseException:
            self.close()
            raise
        self.resumed: ArchiveState = reader.state()
        self._seq = reader.next_seq
        self._digests = reader.digests
        if size == 0 or reader.next_seq == 0:
            self.append_meta({"format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION})

    def _write(self, record: dict[str, Any]) -> int:
        if self._file.closed:
            raise ArchiveError(f"archive {self.path} is closed")
        seq = self._seq
        line = {"type": record.pop("type"), "seq": seq, "ts": time.time(), **record}
        try:
            data = json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ArchiveError(f"cannot archive a {line['type']} record: {exc}") from None
        try:
            encoded = data.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a JSON "\ud800" decodes to one)
            encoded = json.dumps(line, separators=(",", ":")).encode("ascii")  # kept as "\ud800"
        payload = (b"\n" if self._needs_newline else b"") + encoded + b"\n"
        if len(payload) > MAX_RECORD_BYTES:
            raise ArchiveError(
                f"cannot archive a {line['type']} record of {len(payload):,} bytes in "
                f"{self.path}: records are capped at {MAX_RECORD_BYTES // 2**20} MiB"
            )
        try:
            _write_all(self._file, payload)
            if self.sync_each_record:
                os.fsync(self._file.fileno())
            else:
                self._unsynced = True
        except OSError as exc:
            raise ArchiveError(
                f"cannot append to archive {self.path}: {exc.strerror or exc}"
            ) from None
        self._needs_newline = False
        self._seq += 1
        return seq

    def append_message(self, message: Message) -> int:
        """Archive one message; returns its ``seq``."""
        record = message_to_record(message)
        seq = self._write({"type": "message", "message": record})
        self._digests[_digest(record)] = seq
        return seq

    def append_usage(self, usage: Usage, call_index: int) -> int:
        """Archive the usage a provider reported for model call number ``call_index``."""
        record = usage_to_record(usage)
        return self._write({"type": "usage", "call_index": call_index, "usage": record})

    def append_compaction(
        self,
        result: CompactionResult,
        *,
        trigger: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        """Archive a compaction with the view it produced, so a resume rebuilds that view.

        View messages already archived are stored as ``{"ref": seq}``; new or changed ones
        (the summary, cleared or shortened tool outputs) are stored whole.
        """
        check_no_secrets(extra or {}, "extra")
        view = []
        for message in result.messages:
            record = message_to_record(message)
            seq = self._digests.get(_digest(record))
            view.append({"ref": seq} if seq is not None else {"message": record})
        fields = {
            "compaction_id": result.compaction_id,
            "strategy": result.strategy,
            "trigger": trigger,
            "messages_before": result.messages_before,
            "messages_after": result.messages_after,
            "tokens_before": result.tokens_before,
            "tokens_after": result.tokens_after,
            "cleared": result.cleared,
            "dropped": result.dropped,
            "summary": result.summary,
        }
        return self._write({**dict(extra or {}), **fields, "type": "compaction", "view": view})

    def append_meta(self, meta: Mapping[str, Any]) -> int:
        """Archive free-form session facts (model, window, policy); keys naming secrets refused."""
        check_no_secrets(meta)
        return self._write({"type": "meta", "meta": dict(meta)})

    def sync(self) -> None:
        """Fsync the records appended since the last fsync (none: nothing to do)."""
        if self._file.closed or not self._unsynced:
            return
        self._unsynced = False  # before: a record appended during the fsync marks it again
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            self._unsynced = True
            raise ArchiveError(f"cannot sync archive {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """Fsync what is not yet, release the lock and close the file (idempotent); a failure
        names the archive."""
        if self._file.closed:
            return
        try:
            try:
                if self._unsynced:
                    os.fsync(self._file.fileno())
            finally:
                self._file.close()
        except OSError as exc:
            raise ArchiveError(f"cannot close archive {self.path}: {exc.strerror or exc}") from None

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except ArchiveError:
            if exc is None:
                raise  # otherwise the first error is the one to report
