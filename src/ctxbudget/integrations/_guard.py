"""The budget state every adapter shares: the rule, the counter, compaction and overflow handling.

It only composes the core (``context_tokens``, ``Policy``, ``compact_under_line``,
``Archive``), as ``Agent`` does; the adapters translate their framework's messages to ours.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from ctxbudget.agent.compacting import (
    adopt_window,
    compact_under_line,
    still_over_window,
    undercount_scale,
)
from ctxbudget.agent.events import CompactionRecord, Trigger
from ctxbudget.agent.settings import (
    effective_max_output,
    policy_for,
    reply_reserve,
)
from ctxbudget.budget.context import (
    ContextEstimate,
    RequestCounterLike,
    UsageTrust,
    context_tokens,
)
from ctxbudget.budget.floor import check_prompt_floor, one_line
from ctxbudget.budget.rules import Policy, validate_window
from ctxbudget.compaction.archive import Archive, text_digest
from ctxbudget.compaction.records import message_to_record
from ctxbudget.compaction.summarizer import Summarizer
from ctxbudget.errors import CompactionError, ContextOverflowError, RequestOverRateLimitError
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage
from ctxbudget.providers.overflow import classify_error
from ctxbudget.tokens.base import TokenCounter

__all__ = ["ADAPTER_META_PREFIX", "ContextGuard", "GuardOptions", "one_line", "overflow_of"]

ADAPTER_META_PREFIX = "ctxbudget_"
"""``Message.meta`` keys the adapters use to map messages back to their items; not archived."""


class GuardOptions(TypedDict, total=False):
    """The `ContextGuard` settings every adapter passes through as it is (defaults: the guard's)."""

    tokenizer: str | TokenCounter
    policy: str | Policy
    strategy: str
    archive: Archive | str | Path | None
    max_output_tokens: int | None


def overflow_of(error: BaseException, *, known: bool = False) -> ContextOverflowError | None:
    """``error`` read as a context overflow, by ctxbudget's table of real server messages.

    ``known``: the framework already classified it as an overflow (its own error class), so it
    is one even when the text is not in the table.
    """
    if isinstance(error, ContextOverflowError):
        return error
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    body = getattr(error, "body", None)
    text = str(error) if body is None else f"{error} {json.dumps(body, default=str)}"
    found = only_overflow(classify_error(status, text), error)
    if found is None and known:
        return ContextOverflowError(one_line(str(error)), status=status)
    return found


def only_overflow(
    found: ContextOverflowError | RequestOverRateLimitError | None, error: BaseException
) -> ContextOverflowError | None:
    """An overflow to recover from; a request over a per-minute limit is raised as it is, since
    neither a compaction of this size nor a retry helps (its message says what does)."""
    if isinstance(found, RequestOverRateLimitError):
        raise found from error
    return found


class ContextGuard:
    """Keeps one conversation inside ``window``: decides, compacts, recovers, records.

    ``tokenizer`` is a counter name (``o200k_base``, ``qwen3``, ``hf:PATH``, an estimator) or a
    `TokenCounter` (``counter``, a whole-request counter, replaces it); ``policy`` a rule name or
    `Policy`; ``strategy`` a compaction strategy name; ``archive`` an `Archive` or a path.
    """

    def __init__(
        self,
        *,
        window: int,
        tokenizer: str | TokenCounter = "ctxbudget",
        policy: str | Policy = "ctxbudget",
        strategy: str = "layered",
        summarizer: Summarizer | None = None,
        archive: Archive | str | Path | None = None,
        max_output_tokens: int | None = None,
        counter: RequestCounterLike | None = None,
    ) -> None:
        self.window = validate_window(window)
        self.configured_window = self.window
        self._policy_spec = policy
        self._max_output_setting = max_output_tokens
        self.policy = policy_for(policy, self.window, self.max_output_tokens)
        self.strategy = strategy
        self.counter = counter if counter is not None else _counter(tokenizer)
        self.summarizer = summarizer
        self.archive = archive if isinstance(archive, Archive | None) else Archive(archive)
        self.compaction_id: str | None = None
        self.compacted_at: float | None = None
        """When the latest compaction ran: usage reported before it describes another context."""
        self.compactions: list[CompactionRecord] = []
        self.summaries: list[str] = []
        """Every handoff summary written so far, oldest first."""
        self.overflows = 0
        self.sources: Counter[str] = Counter()
        """How the checks reached their sizes: ``usage`` (usage-first) or ``count``."""
        self.usage_trust = UsageTrust()
        """Says once when a usage report far below our exact count was passed over."""
        self._archived: set[str] = set()
        self._floor_checked = False

    @property
    def max_output_tokens(self) -> int:
        """The reply limit a request should ask for: as configured, else a share of the window."""
        return effective_max_output(self.window, self._max_output_setting)

    # -- the decision --------------------------------------------------------------------

    def estimate(self, request: Request) -> ContextEstimate:
        """The request's size, usage-first (usage recorded under the current compaction only;
        a report far below our exact count is passed over, and that is said once)."""
        estimate = context_tokens(
            request,
            self.counter,
            compaction_id=self.compaction_id,
            compacted_at=self.compacted_at,
        )
        self.usage_trust.note(estimate.passed_over)
        return estimate

    def should_compact(self, request: Request) -> bool:
        """True when the rule fires for ``request`` at a request or step checkpoint."""
        checked = self.policy.checked
        if "before_request" not in checked and "after_step" not in checked:
            return False
        estimate = self.estimate(request)
        self.sources[estimate.source] += 1
        return self.policy.fires(estimate.tokens, self.window)

    # -- compaction and recovery -------------------------------------------------------------

    def compact(self, request: Request, trigger: Trigger, *, scale: float = 1.0) -> Request:
        """``request`` compacted under the rule's line (lowered by ``scale`` < 1)."""
        self.compacted_at = time.time()
        result, record = compact_under_line(
            request,
            self.counter,
            policy=self.policy,
            window=self.window,
            max_output=self.max_output_tokens,
            strategy=self.strategy,
            summarizer=self.summarizer,
            number=len(self.compactions) + 1,
            trigger=trigger,
            scale=scale,
        )
        self.compaction_id = result.compaction_id
        if result.summary:
            self.summaries.append(result.summary)
        self.compactions.append(record)
        if self.archive is not None:
            view = tuple(_clean(m) for m in result.messages)
            # The view's new messages (summary, placeholders) live in the compaction record.
            self._archived.update(_digest(m) for m in view)
            self.archive.append_compaction(
                dataclasses.replace(result, messages=view), trigger=trigger
            )
        return request.with_messages(result.messages)

    def check_floor(self, request: Request) -> None:
        """Raise `PromptFloorExceeded` when system + tools + reply reserve exceed the window."""
        reserve = reply_reserve(self.policy, self.window, self.max_output_tokens)
        check_prompt_floor(self.counter.count(request), self.window, reserve, request=request)
        self._floor_checked = True

    def prepare(self, request: Request) -> Request | None:
        """The compacted request when the rule fires, else None (send ``request`` as it is).

        The first call checks the prompt floor (`PromptFloorExceeded`: nothing could fit).
        """
        if not self._floor_checked:
            self.check_floor(request)
        self.observe(request.messages)
        if not self.should_compact(request):
            return None
        return self.compact(request, "context_pressure")

    def recover(self, request: Request, error: ContextOverflowError) -> Request:
        """After the server rejected ``request`` as too long: adopt its window, compact harder.

        Raises `CompactionError` when this is the second overflow of the same request.
        """
        self.overflows += 1
        if self.archive is not None:
            self.archive.append_meta({"overflows": self.overflows})
        adopted = adopt_window(
            error.limit, self.window, self._policy_spec, self._max_output_setting, self.archive
        )
        if adopted is not None:
            self.window, self.policy = adopted
            self.check_floor(request)
        scale = undercount_scale(self.counter.count(request).total, error.prompt_tokens)
        self.observe(request.messages)  # prepare() observed the pressure path's already
        return self.compact(request, "context_overflow", scale=scale)

    def retry_failed(self, error: Exception) -> CompactionError:
        """The error to raise when the request still overflows after compacting."""
        return CompactionError(still_over_window(error))

    # -- records ------------------------------------------------------------------------------

    def stamp(self, usage: Usage) -> Usage:
        """``usage`` tagged with the compaction in force and the time; archived when archiving."""
        stamped = dataclasses.replace(
            usage, compaction_id=self.compaction_id, timestamp=usage.timestamp or time.time()
        )
        if self.archive is not None:
            self.archive.append_usage(stamped, len(self._archived))
        return stamped

    def observe(self, messages: Sequence[Message]) -> None:
        """Archive the messages not archived yet (the adapters hand over whole lists)."""
        if self.archive is None:
            return
        for message in messages:
            clean = _clean(message)
            key = _digest(clean)
            if key not in self._archived and not clean.is_summary:
                self._archived.add(key)
                self.archive.append_message(clean)

    def report(self) -> dict[str, Any]:
        """The guard's numbers: window, overflows, and each compaction (``ctxbudget demo`` keys)."""
        return {
            "window": self.window,
            "configured_window": self.configured_window,
            "overflows": self.overflows,
            "compactions": [c.to_json() for c in self.compactions],
        }


def _counter(tokenizer: str | TokenCounter) -> RequestCounterLike:
    from ctxbudget.counting import RequestCounter  # imported late: loads a vocabulary

    counter: RequestCounterLike = RequestCounter(tokenizer)
    return counter


def _clean(message: Message) -> Message:
    meta = {k: v for k, v in message.meta.items() if not k.startswith(ADAPTER_META_PREFIX)}
    return dataclasses.replace(message, meta=meta)


def _digest(message: Message) -> str:
    """The message's identity in the archive: what the model reads. Usage and meta are left out:
    a message handed back to a framework and read again has lost them."""
    record = message_to_record(dataclasses.replace(message, usage=None, meta={}))
    return text_digest(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str))
