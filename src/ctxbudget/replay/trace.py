"""A recorded agent session as replay sees it: ordered model calls with the usage each reported."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

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
    max_tokens: int | None = None
    """The request's max output tokens, when the trace records the request."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus output, as providers report ``total_tokens`` (reasoning included)."""
        return self.context_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A whole recorded session."""

    format: TraceFormat
    calls: Sequence[Call]
    """A tuple of calls with their text (`load_trace`), or a `CallTable` without it (replay)."""
    model: str | None = None
    window: int | None = None
    """The context window the session recorded, if it did (Codex does)."""
    skipped_lines: int = 0
    warnings: tuple[str, ...] = ()
    reasoning: ReasoningResend = "unknown"
    source: str = ""
    """Where the trace came from (a path), for display."""
    meta: dict[str, str] = field(default_factory=dict)


class CallTable(Sequence[Call]):
    """Calls without their text, stored as columns: 8 bytes per number, 1 per flag.

    A 1 GB session holds about 172,000 calls; kept as `Call` objects (about 300 bytes each with
    their int objects) they alone would be about 50 MB. Indexing builds a `Call` on the fly.
    """

    def __init__(self, calls: Iterable[Call] = ()) -> None:
        self.call_index = array("q")
        self.context = array("q")
        self.output = array("q")
        self.reasoning = array("q")
        self.cache_read = array("q")
        self.cache_write = array("q")
        self.task_start = bytearray()
        self.after_compaction = bytearray()
        self.max_tokens = array("q")  # 0: not recorded
        self._model_of = array("l")  # an index into _models; a session uses a handful of models
        self._models: list[str | None] = []
        self._model_ids: dict[str | None, int] = {}
        for call in calls:
            self.append(call)

    def append(self, call: Call) -> None:
        """Keep the call's numbers, flags and model; drop its text."""
        self.call_index.append(call.index)
        self.context.append(call.context_tokens)
        self.output.append(call.output_tokens)
        self.reasoning.append(call.reasoning_tokens)
        self.cache_read.append(call.cache_read_tokens)
        self.cache_write.append(call.cache_write_tokens)
        self.task_start.append(call.task_start)
        self.after_compaction.append(call.after_compaction)
        self.max_tokens.append(call.max_tokens or 0)
        model_id = self._model_ids.setdefault(call.model, len(self._models))
        if model_id == len(self._models):
            self._models.append(call.model)
        self._model_of.append(model_id)

    def __len__(self) -> int:
        return len(self.call_index)

    @overload
    def __getitem__(self, i: int) -> Call: ...

    @overload
    def __getitem__(self, i: slice) -> CallTable: ...

    def __getitem__(self, i: int | slice) -> Call | CallTable:
        if isinstance(i, slice):
            return CallTable(self[j] for j in range(*i.indices(len(self))))
        return Call(
            index=self.call_index[i],
            context_tokens=self.context[i],
            output_tokens=self.output[i],
            reasoning_tokens=self.reasoning[i],
            cache_read_tokens=self.cache_read[i],
            cache_write_tokens=self.cache_write[i],
            task_start=bool(self.task_start[i]),
            after_compaction=bool(self.after_compaction[i]),
            model=self._models[self._model_of[i]],
            max_tokens=self.max_tokens[i] or None,
        )

    def model_at(self, i: int) -> str | None:
        """The model of call ``i``, without building the `Call`."""
        return self._models[self._model_of[i]]

    @property
    def models(self) -> tuple[str, ...]:
        """The models the calls used, in order of first use."""
        return tuple(m for m in self._models if m)


def as_table(calls: Sequence[Call]) -> CallTable:
    """``calls`` as a `CallTable` (itself when it already is one)."""
    return calls if isinstance(calls, CallTable) else CallTable(calls)
