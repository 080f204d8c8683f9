"""What the agent loop reports: one event per request, usage, compaction, overflow, tool call
and window change, and the session summary that ``ctxbudget demo --json`` prints."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CompactionRecord",
    "EventKind",
    "EventSink",
    "LoopEvent",
    "SessionSummary",
    "Trigger",
]

EventKind = Literal[
    "turn", "request", "usage", "compaction", "overflow", "tool", "window_changed", "capped"
]
Trigger = Literal["context_pressure", "context_overflow"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopEvent:
    """One thing that happened in the loop; ``data`` holds the numbers (JSON-safe)."""

    kind: EventKind
    turn: int
    """The user turn (1-based) it happened in."""
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object: ``{"event": kind, "turn": n, ...data}``."""
        return {"event": self.kind, "turn": self.turn, **self.data}


EventSink = Callable[[LoopEvent], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionRecord:
    """One compaction as the summary reports it; tokens count the whole request."""

    turn: int
    trigger: Trigger
    strategy: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int

    def to_json(self) -> dict[str, Any]:
        """The object in the ``compactions`` list of the ``--json`` contract."""
        return {
            "turn": self.turn,
            "trigger": self.trigger,
            "strategy": self.strategy,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """A session's numbers: the shape of ``ctxbudget demo --json`` and ``chat --json``."""

    window: int
    """The window in force at the end (the adopted one after an overflow that stated it)."""
    turns: int
    floor_tokens: int
    max_request_tokens: int
    """The largest request the provider accepted, counted as it reported (input tokens)."""
    overflows: int
    archive: str | None
    compactions: tuple[CompactionRecord, ...]
    configured_window: int | None = None
    """The window the session started with, when it differs from ``window``."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the CLI contract (``configured_window`` only when it changed)."""
        out: dict[str, Any] = {
            "window": self.window,
            "turns": self.turns,
            "floor_tokens": self.floor_tokens,
            "max_request_tokens": self.max_request_tokens,
            "overflows": self.overflows,
            "archive": self.archive,
            "compactions": [c.to_json() for c in self.compactions],
        }
        if self.configured_window is not None and self.configured_window != self.window:
            out["configured_window"] = self.configured_window
        return out
