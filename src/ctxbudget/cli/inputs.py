"""Reading the CLI's text inputs: files or stdin, streamed in chunks, with one-line errors."""

from __future__ import annotations

import codecs
import errno
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ctxbudget.errors import InputError

CHUNK_BYTES = 1 << 20
"""Files are read this many bytes at a time, so a 500 MB file never sits in memory whole."""


MAX_PENDING_CHARS = 8 * CHUNK_BYTES
"""Past this many characters without a newline, a single line is cut at a space."""


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of a text input; ``text`` ends where no token of any tokenizer can cross."""

    text: str
    bytes: int


def _safe_cut(text: str) -> int:
    """The last index after a newline that is followed by a non-space character, or -1.

    No pre-tokenizer we ship (cl100k, o200k, Qwen) lets a token run from a newline into a
    following non-space character, so counting the two sides apart gives the same total.
    """
    i = len(text) - 1
    while True:
        i = text.rfind("\n", 0, i)
        if i < 0:
            return -1
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if nxt and not nxt.isspace():
            return i + 1


def _open(source: str) -> tuple[BinaryIO, bool]:
    if source == "-":
        return sys.stdin.buffer, False
    path = Path(source)
    try:
        path.stat()
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{source}: a symlink loop; fix the link") from None
        raise InputError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if path.is_dir():
        raise InputError(f"{source}: is a directory; pass a file (or - for stdin)")
    try:
        return path.open("rb"), True
    except PermissionError:
        raise InputError(f"{source}: permission denied") from None


def _utf16(head: bytes) -> str | None:
    """The iconv name of a UTF-16 text's encoding: "UTF-16" with a byte order mark, else
    "UTF-16LE"/"UTF-16BE" for ASCII text with a NUL as every other byte (and no other NUL)."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16"
    pairs = head[: len(head) - len(head) % 2]
    half = len(pairs) // 2
    if half < 2:
        return None
    zeros = (pairs[0::2].count(0), pairs[1::2].count(0))
    return {(0, half): "UTF-16LE", (half, 0): "UTF-16BE"}.get(zeros)


def iter_text(source: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[TextChunk]:
    """Yield ``source`` (a path or ``-``) as UTF-8 text in chunks cut at safe boundaries.

    Raises ``InputError`` for a missing path, a directory, a binary file or invalid UTF-8,
    naming the byte offset of the problem.
    """
    stream, owned = _open(source)
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""
    pending_bytes = 0
    offset = 0
    try:
        while True:
            raw = stream.read(chunk_bytes)
            final = not raw
            encoding = _utf16(raw[:4096]) if offset == 0 else None
            if encoding is not None:
                raise InputError(
                    f"{source}: {encoding} text, not UTF-8; convert it first, e.g. "
                    f"iconv -f {encoding} -t UTF-8 {source} > converted.txt"
                )
            if b"\x00" in raw:
                at = offset + raw.index(b"\x00")
                raise InputError(
                    f"{source}: binary data (NUL byte at offset {at}); not a text file"
                )
            try:
                text = decoder.decode(raw, final=final)
            except UnicodeDecodeError as exc:
                at = offset + exc.start
                raise InputError(
                    f"{source}: not UTF-8 text (invalid byte at offset {at}); convert it to UTF-8"
                ) from None
            offset += len(raw)
            pending += text
            pending_bytes += len(raw)
            if final:
                if pending or offset == 0:
                    yield TextChunk(pending, pending_bytes)
                return
            if len(pending) < chunk_bytes:
                continue  # a file that fits one chunk is counted in one piece
            cut = _safe_cut(pending)
            if cut <= 0 and len(pending) > MAX_PENDING_CHARS:
                # One enormous line: cut before a space that starts a word ("x| y"), which
                # every shipped pre-tokenizer also treats as a boundary; failing that, anywhere.
                cut = pending.rfind(" ", 0, len(pending) - 1)
                cut = cut if cut > 0 and not pending[cut - 1].isspace() else len(pending)
            if cut > 0:
                head = pending[:cut]
                head_bytes = len(head.encode("utf-8"))
                yield TextChunk(head, head_bytes)
                pending = pending[cut:]
                pending_bytes -= head_bytes
    finally:
        if owned:
            stream.close()


def read_text(source: str) -> str:
    """The whole text of ``source`` (for inputs that must be parsed at once, like JSON)."""
    return "".join(chunk.text for chunk in iter_text(source))
