"""Hover text for the HTML page: the start of each call's newest message, packed as UTF-8."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import overload

from ctxbudget.replay.trace import Call

PREVIEW_CHARS = 160
MAX_PREVIEW_BYTES = 8 * 2**20
"""Past this many bytes of previews, later calls get none: 8 MB is about 50,000 calls' worth,
already more hover text than a browser page handles well (the shared traces have 17-253 calls)."""


def preview(call: Call) -> str:
    """The role and start of the newest added message that has text ("" when none has)."""
    for message in reversed(call.added):
        if message.text.strip():
            return f"{message.role}: {message.text.strip()[:PREVIEW_CHARS]}"
    return ""


class Previews(Sequence[str]):
    """Previews in one byte buffer plus an end offset per call (about 170 bytes a call)."""

    def __init__(self, texts: Sequence[str] = (), *, limit: int = MAX_PREVIEW_BYTES) -> None:
        self.limit = limit
        self._text = bytearray()
        self._ends = array("q")
        for text in texts:
            self.append(text)

    def append(self, text: str) -> None:
        """Add the next call's preview (kept empty once the buffer is full)."""
        data = text.encode("utf-8")
        if len(self._text) + len(data) <= self.limit:
            self._text += data
        self._ends.append(len(self._text))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        end = self._ends[i]  # raises IndexError past the end, as a sequence must
        i = i % len(self._ends)
        start = self._ends[i - 1] if i > 0 else 0
        return self._text[start:end].decode("utf-8")
