"""How full the context is: the provider's last usage report plus the messages added since.

Usage-first, counting only as a fallback (Pi ``estimateContextTokens``, letta-code
``estimateLocalContextTokens``, Codex ``get_total_token_usage``), without their known bugs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ctxbudget.counting.result import RequestCount
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage

__all__ = [
    "ContextEstimate",
    "RequestCounterLike",
    "context_tokens",
    "last_usage_index",
    "usage_tokens",
]


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
    """
    count = counter.count(request)
    index = last_usage_index(
        request.messages, compaction_id=compaction_id, compacted_at=compacted_at
    )
    if index is None:
        return ContextEstimate(
            tokens=count.total,
            usage_tokens=0,
            trailing_tokens=count.total,
            source="count",
            usage_index=None,
        )
    usage = request.messages[index].usage
    assert usage is not None  # last_usage_index only returns messages with usage
    base = usage_tokens(usage, resend_reasoning=resend_reasoning)
    trailing = sum(count.per_message[index + 1 :])
    return ContextEstimate(
        tokens=base + trailing,
        usage_tokens=base,
        trailing_tokens=trailing,
        source="usage",
        usage_index=index,
    )
