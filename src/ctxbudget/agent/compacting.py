"""One compaction under the rule's line, and its record: shared by `Agent` and `ContextGuard`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ctxbudget.agent.events import CompactionRecord, Trigger
from ctxbudget.agent.settings import compaction_line, effective_max_output, policy_for
from ctxbudget.budget.context import RequestCounterLike
from ctxbudget.budget.floor import one_line
from ctxbudget.budget.rules import Policy, validate_window
from ctxbudget.messages.model import Request

if TYPE_CHECKING:
    from ctxbudget.compaction.archive import Archive
    from ctxbudget.compaction.strategies import CompactionResult
    from ctxbudget.compaction.summarizer import Summarizer

__all__ = ["adopt_window", "compact_under_line", "still_over_window", "undercount_scale"]


def compact_under_line(
    request: Request,
    counter: RequestCounterLike,
    *,
    policy: Policy,
    window: int,
    max_output: int | None,
    strategy: str,
    summarizer: Summarizer | None,
    number: int,
    trigger: Trigger,
    turn: int = 0,
    scale: float = 1.0,
) -> tuple[CompactionResult, CompactionRecord]:
    """``request`` compacted under the rule's line (lowered by ``scale`` < 1), and the record.

    ``number`` is this compaction's place in the session (1 for the first), part of its id.
    """
    from ctxbudget.compaction.strategies import compact  # imported late, as the loop always did

    floor = counter.count(request).floor
    line = compaction_line(policy, window, floor, max_output)
    result = compact(
        request,
        counter,
        threshold=max(floor + 1, int(line * scale)),
        strategy=strategy,
        summarizer=summarizer,
        # The summary request goes to a model with a window of its own (its ``window``), else
        # to this one: it may fill the window, not only the line the conversation keeps under.
        summarizer_window=getattr(summarizer, "window", None) or window,
        compaction_id=f"c{number}-{time.time_ns():x}",
    )
    record = CompactionRecord(
        turn=turn,
        trigger=trigger,
        strategy=result.strategy,
        messages_before=result.messages_before,
        messages_after=result.messages_after,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
    )
    return result, record


def undercount_scale(ours: int, real: int | None) -> float:
    """How far to lower the line after an overflow: our count of the refused prompt over the
    server's (``real``, when its error said), at most 1."""
    return min(1.0, ours / real) if real and ours > 0 else 1.0


def adopt_window(
    limit: int | None,
    window: int,
    spec: str | Policy,
    max_output: int | None,
    archive: Archive | None,
) -> tuple[int, Policy] | None:
    """The server's stated ``limit`` as the new window with its rule (recorded in ``archive``),
    or None when it is not smaller than ``window``; ``max_output`` is the configured setting."""
    # Adopt only a smaller window: a larger stated limit says our count was low, not that
    # the user's chosen window (for cost, say) should grow.
    if limit is None or not 0 < limit < window:
        return None
    adopted = validate_window(limit)
    policy = policy_for(spec, adopted, effective_max_output(adopted, max_output))
    if archive is not None:
        archive.append_meta({"window": adopted})
    return adopted, policy


def still_over_window(error: BaseException) -> str:
    """The message for a request that overflowed again after its compaction."""
    return (
        f"the request still exceeds the model's window after compacting "
        f"({one_line(str(error))}); lower the window or the reserve"
    )
