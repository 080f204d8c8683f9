"""How full the context is: the provider's last usage report plus the messages added since.

Usage-first, counting only as a fallback (Pi ``estimateContextTokens``, letta-code
``estimateLocalContextTokens``, Codex ``get_total_token_usage``), without their known bugs.
A report far below our exact count of the request it reports on is not used (`prompt_gap`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ctxbudget.budget.usage import PromptGap, prompt_gap
from ctxbudget.counting.result import RequestCount
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage

__all__ = [
    "ContextEstimate",
    "RequestCounterLike",
    "UsageTrust",
    "context_tokens",
    "last_usage_index",
    "usage_tokens",
]

log = logging.getLogger(__name__)


class RequestCounterLike(Protocol):
    """Anything that counts a whole request, such as ``counting.RequestCounter``."""

    def count(self, request: Request) -> RequestCount: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextEstimate:
    """The context size and how it was reached; ``tokens == usage_tokens + trailing_tokens``."""

    tokens: int
    """The estimated prompt size of the next request."""
    usage_tokens: int
    """What the provider's usage report accounts for (0 when none was usable)."""
    trailing_tokens: int
    """What was counted locally: the messages after the usage, or the whole request."""
    source: Literal["usage", "count"]
    """``usage`` when a provider report was the base; ``count`` when everything was counted."""
    usage_index: int | None
    """Index in ``request.messages`` of the assistant message whose usage was the base."""
    passed_over: PromptGap | None = None
    """The last usage report, when it was not used: its prompt is far below our exact count of
    the request it reports on (then ``source`` is ``count``)."""


def _usable(usage: Usage | None, compaction_id: str | None, compacted_at: float | None) -> bool:
    if usage is None or usage.is_zero:
        return False  # llama.cpp reports all zeros: no information
    if usage.input_tokens == 0:
        return False  # no prompt is empty; Ollama omits the count when its cache served it all
    if usage.compaction_id != compaction_id:
        return False  # it describes the context of another compaction
    if compacted_at is None:
        return True
    # Decided by time, not list position (letta-code latestCompactionBoundaryTimestamp):
    # usage without a timestamp cannot be shown to postdate the compaction.
    return usage.timestamp is not None and usage.timestamp >= compacted_at


def last_usage_index(
    messages: Sequence[Message],
    *,
    compaction_id: str | None = None,
    compacted_at: float | None = None,
) -> int | None:
    """Index of the last assistant message whose usage describes the current context."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role == "assistant" and _usable(message.usage, compaction_id, compacted_at):
            return i
    return None


def usage_tokens(usage: Usage, *, resend_reasoning: bool = False) -> int:
    """The part of the next prompt a usage report accounts for: its prompt and its reply.

    Reasoning the harness does not send back is not in the next prompt (the seed's round 8:
    total 6,511 after 4,096 tokens of thinking, next request 2,456).
    """
    dropped = 0 if resend_reasoning else min(usage.reasoning_tokens, usage.output_tokens)
    return usage.input_tokens + usage.output_tokens - dropped


def context_tokens(
    request: Request,
    counter: RequestCounterLike,
    *,
    compaction_id: str | None = None,
    compacted_at: float | None = None,
    resend_reasoning: bool = False,
) -> ContextEstimate:
    """Estimate the prompt size of ``request``, usage-first.

    The base is the last assistant message with usage that is not all-zero and was recorded
    under the current ``compaction_id`` (and, when ``compacted_at`` is given, not before it);
    the messages after it are counted with ``counter``. Without such usage the whole request
    (system + tools + messages) is counted, never the messages alone.

    When the count is exact (the server's own template and tokenizer, ``kind == "exact"``) and
    the report's prompt is far below our count of the request it reports on (`prompt_gap`), the
    report is no count of the whole prompt: the whole request is counted instead, and the gap
    is in ``passed_over``. An estimate's own error is larger than such a gap: not checked.
    """
    count = counter.count(request)
    index = last_usage_index(
        request.messages, compaction_id=compaction_id, compacted_at=compacted_at
    )
    if index is None:
        return _counted(count)
    usage = request.messages[index].usage
    assert usage is not None  # last_usage_index only returns messages with usage
    trailing = sum(count.per_message[index + 1 :])
    if count.kind == "exact":
        # The request the report is on: this one's head and the messages before its reply
        # (less the reply primer it ended with, a few tokens: the safe side of the check).
        reported_on = count.total - trailing - count.per_message[index]
        gap = prompt_gap(usage.input_tokens, reported_on)
        if gap is not None:
            return _counted(count, passed_over=gap)
    base = usage_tokens(usage, resend_reasoning=resend_reasoning)
    return ContextEstimate(
        tokens=base + trailing,
        usage_tokens=base,
        trailing_tokens=trailing,
        source="usage",
        usage_index=index,
    )


def _counted(count: RequestCount, *, passed_over: PromptGap | None = None) -> ContextEstimate:
    """The estimate when the whole request is counted (no usable report, or one passed over)."""
    return ContextEstimate(
        tokens=count.total,
        usage_tokens=0,
        trailing_tokens=count.total,
        source="count",
        usage_index=None,
        passed_over=passed_over,
    )


class UsageTrust:
    """A session's reading of its usage reports against our exact counts: it says once that a
    report was passed over, and tells a truncated prompt from a report that is no count.

    A gap (`prompt_gap`) on the request actually sent is a truncation only from a server known
    to report whole prompts: one whose report on an earlier sent request agreed with our exact
    count. A truncating server (Ollama's ``num_ctx``) reports the prompt it kept, so its reports
    agree until a prompt passes its window; a report that is no count of the whole prompt (a
    word count, the uncached part alone) is short from the first request, and adopting it as the
    server's window would shrink the window to a fraction of the real one.
    """

    def __init__(self) -> None:
        self.passed_over: PromptGap | None = None
        """The first report passed over (said once, as a warning on this module's logger)."""
        self.whole_prompts = False
        """A report on a sent request agreed with our exact count of it."""

    def note(self, gap: PromptGap | None) -> None:
        """Say, the first time only, that a report was passed over (``gap``; None: nothing)."""
        if gap is None or self.passed_over is not None:
            return
        self.passed_over = gap
        log.warning("ctxbudget: %s", gap.reason)

    def truncation(self, usage: Usage, sent: RequestCount) -> PromptGap | None:
        """The gap when ``usage``, the report on the request actually sent (counted ``sent``),
        shows the server truncated it; None otherwise. A gap from a server not known to report
        whole prompts is noted as a report passed over, not read as a truncation."""
        if sent.kind != "exact" or usage.input_tokens <= 0:
            return None  # an estimate's error is larger than the gap this looks for
        gap = prompt_gap(usage.input_tokens, sent.total)
        if gap is None:
            self.whole_prompts = True
            return None
        if self.whole_prompts:
            return gap
        self.note(gap)
        return None
