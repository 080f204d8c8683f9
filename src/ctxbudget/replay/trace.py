"""A recorded agent session as replay sees it: ordered model calls with the usage each reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TraceFormat = Literal["claude-code", "codex", "pi", "mini-swe-agent", "ctxbudget", "openai-log"]
FORMATS: tuple[TraceFormat, ...] = (
    "claude-code",
    "codex",
    "pi",
    "mini-swe-agent",
    "ctxbudget",
    "openai-log",
)

ReasoningResend = Literal["resent", "dropped", "dropped_between_tasks", "unknown"]
"""What the harness did with a reply's reasoning on the next call: sent it back, dropped it, or
(Codex with the Responses API) kept it within a task and dropped it when a new user turn began."""


@dataclass(frozen=True, slots=True)
class TraceMessage:
    """One message as text: enough for an estimator to count it."""

    role: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One API call of a recorded session and the usage the server reported for it."""

    index: int
    context_tokens: int
    """The prompt size the server saw (cached parts included)."""
    output_tokens: int
    """Generated tokens, reasoning included."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent on reasoning, when the provider reports it."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    task_start: bool = False
    """A real user message (a task boundary) came before this call."""
    after_compaction: bool = False
    """The harness compacted the history since the previous call."""
    added: tuple[TraceMessage, ...] = ()
    """Messages added to the conversation since the previous call's reply (for call 0: all)."""
    reply: TraceMessage | None = None
    """The call's own reply (text and tool calls), when recorded."""
    model: str | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus output, as providers report ``total_tokens`` (reasoning included)."""
        return self.context_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A whole recorded session."""

    format: TraceFormat
    calls: tuple[Call, ...]
    model: str | None = None
    window: int | None = None
    """The context window the session recorded, if it did (Codex does)."""
    skipped_lines: int = 0
    warnings: tuple[str, ...] = ()
    reasoning: ReasoningResend = "unknown"
    source: str = ""
    """Where the trace came from (a path), for display."""
    meta: dict[str, str] = field(default_factory=dict)
