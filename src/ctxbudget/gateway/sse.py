"""An incremental, bounded parser of Server-Sent Events, for streams passed through.

The gateway forwards a streamed reply event by event as it arrives and reads each event on the
way (usage, stop reason; the usage chunk it asked for is kept from the client). `SseParser` is
fed the bytes as they come and returns each event once its blank line has arrived, with the
exact bytes it came as, so what is forwarded is what the upstream sent.

Bounds: a line or an event longer than ``max_event_bytes`` raises `ReplyLimitError` (the same
cap, 4 MiB, as the provider's stream reader, `MAX_SSE_LINE_BYTES`); memory held is at most one
event. Each byte is searched once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxbudget.providers.streaming import MAX_SSE_LINE_BYTES, ReplyLimitError

__all__ = ["SseEvent", "SseParser"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One complete event: its ``event:`` name (None when it has none), its ``data:`` lines
    joined with newlines (None when it has none: a comment or keep-alive), and its raw bytes
    (the blank line that ended it included)."""

    name: str | None
    data: str | None
    raw: bytes


class SseParser:
    """Feed it bytes with `feed`; it returns the events they complete. `flush` returns what is
    left at the end of the stream (bytes of an event never ended by a blank line)."""

    def __init__(self, max_event_bytes: int = MAX_SSE_LINE_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._raw: list[bytes] = []
        """The current event's raw lines, complete ones."""
        self._raw_bytes = 0
        self._partial: list[bytes] = []
        """The start of the current line, from earlier pieces."""
        self._partial_bytes = 0
        self._name: str | None = None
        self._data: list[str] = []

    def feed(self, piece: bytes) -> list[SseEvent]:
        """The events ``piece`` completes, in order."""
        events: list[SseEvent] = []
        start = 0
        while (end := piece.find(b"\n", start)) >= 0:
            line = piece[start : end + 1]
            start = end + 1
            if self._partial:
                line = b"".join((*self._partial, line))
                self._partial, self._partial_bytes = [], 0
            event = self._line(line)
            if event is not None:
                events.append(event)
        if start < len(piece):
            self._partial.append(piece[start:])
            self._partial_bytes += len(piece) - start
            self._check(self._raw_bytes + self._partial_bytes)
        return events

    def flush(self) -> bytes:
        """The bytes of an unfinished event (dropped by the SSE standard; returned so that a
        caller passing the stream through can still forward them)."""
        rest = b"".join((*self._raw, *self._partial))
        self._raw, self._partial, self._raw_bytes, self._partial_bytes = [], [], 0, 0
        self._name, self._data = None, []
        return rest

    def _line(self, line: bytes) -> SseEvent | None:
        self._raw.append(line)
        self._raw_bytes += len(line)
        self._check(self._raw_bytes)
        text = line.rstrip(b"\n").rstrip(b"\r")
        if not text:
            event = SseEvent(
                self._name, "\n".join(self._data) if self._data else None, b"".join(self._raw)
            )
            self._raw, self._raw_bytes, self._name, self._data = [], 0, None, []
            return event
        decoded = text.decode("utf-8", errors="replace")
        field, _, value = decoded.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._name = value
        return None

    def _check(self, size: int) -> None:
        if size > self.max_event_bytes:
            raise ReplyLimitError(
                f"stream event longer than {self.max_event_bytes:,} bytes; stopped reading"
            )
