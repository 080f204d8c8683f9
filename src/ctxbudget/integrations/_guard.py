"""The budget session every adapter builds, and the reading of a framework's error as an overflow.

The decisions, the compaction and the retry-once loop are `BudgetSession`'s (``agent/
budget_session.py``); the adapters translate their framework's messages to ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from ctxbudget.agent.budget_session import ADAPTER_META_PREFIX, BudgetSession, default_counter
from ctxbudget.budget.context import RequestCounterLike
from ctxbudget.budget.floor import one_line
from ctxbudget.budget.rules import Policy
from ctxbudget.compaction.archive import Archive
from ctxbudget.compaction.summarizer import Summarizer
from ctxbudget.errors import ContextOverflowError, RequestOverRateLimitError
from ctxbudget.providers.overflow import classify_error
from ctxbudget.tokens.base import TokenCounter

__all__ = ["ADAPTER_META_PREFIX", "ContextGuard", "GuardOptions", "one_line", "overflow_of"]


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


class ContextGuard(BudgetSession):
    """The `BudgetSession` the adapters build: ``tokenizer`` is a counter name (``o200k_base``,
    ``qwen3``, ``hf:PATH``, an estimator) or a `TokenCounter` (``counter``, a whole-request
    counter, replaces it); ``archive`` an `Archive` or a path. The decisions and the loop are
    the session's; the adapters only translate messages and do their own I/O.
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
        super().__init__(
            window=window,
            counter=counter if counter is not None else default_counter(tokenizer),
            policy=policy,
            strategy=strategy,
            summarizer=summarizer,
            archive=archive if isinstance(archive, Archive | None) else Archive(archive),
            max_output_tokens=max_output_tokens,
        )
