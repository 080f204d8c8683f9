"""Compaction strategies and ``compact``: bring a request back to half the room under the line.

Pure planning over a request and a counter; only the summarizer makes a model call.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ctxbudget.budget.context import RequestCounterLike
from ctxbudget.compaction.cut import cut_point, head_end, shorten_step, steps
from ctxbudget.compaction.handoff import (
    error_lines,
    file_activity,
    finish_summary,
    summary_facts,
)
from ctxbudget.compaction.summarizer import Summarizer, summarize_in_chunks
from ctxbudget.errors import (
    CompactionError,
    ConfigError,
    CtxbudgetError,
    InvalidWindowError,
    UnknownNameError,
)
from ctxbudget.messages.model import Message, Request

__all__ = [
    "KEEP_RECENT_TOOL_RESULTS",
    "STRATEGY_NAMES",
    "CompactionResult",
    "StrategyName",
    "compact",
    "compaction_target",
]

StrategyName = Literal["truncate", "clear_tool_outputs", "summarize", "layered"]
STRATEGY_NAMES: tuple[StrategyName, ...] = (
    "truncate",
    "clear_tool_outputs",
    "summarize",
    "layered",
)

# 3: Anthropic's clear_tool_uses context edit keeps the 3 most recent tool uses by default.
KEEP_RECENT_TOOL_RESULTS = 3
# Error lines copied into a cleared tool output's placeholder: clearing by position must not
# lose the one line that matters (the seed's layered run: cleared test outputs lost it).
PLACEHOLDER_ERROR_LINES = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionResult:
    """What one compaction did; token counts are whole requests, floor included."""

    messages: tuple[Message, ...]
    """The new view: the summary first if any, then the first user task, then the kept tail."""
    strategy: str
    """The steps that ran, e.g. ``clear_tool_outputs+summarize`` (the requested name if none)."""
    compaction_id: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    """The new summary text, when a summary was written."""
    cleared: int = 0
    """Tool outputs replaced by a placeholder."""
    dropped: int = 0
    """Messages that left the view (folded into the summary or truncated)."""


def compaction_target(floor: int, threshold: int) -> int:
    """Conversation tokens (whole request minus floor) a compaction aims for.

    Half the room between the floor and the threshold, so several turns fit before the next
    compaction. Counting messages only (the seed's chapter 11) ignored a 524-token floor and
    compacted every second turn.
    """
    return max(0, (threshold - floor) // 2)


@dataclass(frozen=True, slots=True)
class _Job:
    request: Request
    counter: RequestCounterLike
    target: int
    threshold: int
    compaction_id: str

    def sizes(self, messages: Sequence[Message]) -> Sequence[int]:
        return self.counter.count(self.request.with_messages(tuple(messages))).per_message

    def size(self, message: Message) -> int:
        return self.sizes((message,))[0]

    def conversation(self, messages: Sequence[Message]) -> int:
        count = self.counter.count(self.request.with_messages(tuple(messages)))
        return count.total - count.floor


@dataclass(frozen=True, slots=True, kw_only=True)
class _Outcome:
    messages: tuple[Message, ...]
    steps: tuple[str, ...] = ()
    summary: str | None = None
    cleared: int = 0
    dropped: int = 0
    fits: bool = True


def _keep_tail(
    job: _Job, messages: Sequence[Message], head: int, budget: int
) -> tuple[int, tuple[Message, ...]]:
    """(cut, kept tail) so that the tail after the head fits ``budget`` tokens.

    The last step is always kept, shortened if it must be (``shorten_step``).
    """
    sizes = job.sizes(messages)
    slack = 0
    for _ in range(3):  # per-message sizes are nearly additive; a recount corrects the rest
        room = budget - slack
        cut = cut_point(messages, sizes, room, start=head)
        tail = tuple(messages[cut:])
        if sum(sizes[cut:]) > room:
            tail = shorten_step(tail, max(0, room), job.size)
        over = job.conversation((*messages[:head], *tail)) - sum(sizes[:head]) - budget
        if over <= 0:
            break
        slack += over
    return cut, tail


def _truncate(job: _Job, messages: tuple[Message, ...]) -> _Outcome:
    """Drop the oldest whole turns (or steps, inside one long turn) after the first task."""
    head = head_end(messages)
    budget = job.target - sum(job.sizes(messages)[:head])
    cut, tail = _keep_tail(job, messages, head, budget)
    view = (*messages[:head], *tail)
    return _Outcome(
        messages=view,
        steps=("truncate",),
        dropped=cut - head,
        fits=job.conversation(view) <= job.target,
    )


def _placeholder(m: Message, tokens: int, compaction_id: str) -> Message:
    text = f"[tool output cleared: {tokens:,} tokens; full text in the archive]"
    kept = error_lines((m,))[-PLACEHOLDER_ERROR_LINES:]
    if kept:
        text += "\nError lines kept verbatim:\n" + "\n".join(kept)
    meta = {**m.meta, "cleared": True, "cleared_tokens": tokens, "compaction_id": compaction_id}
    return replace(m, content=text, meta=meta)


def _clear(job: _Job, messages: tuple[Message, ...]) -> _Outcome:
    """Replace old tool outputs, oldest first, by a short placeholder until the target is met."""
    excess = job.conversation(messages) - job.target
    tools = [i for i, m in enumerate(messages) if m.role == "tool" and not m.meta.get("cleared")]
    last = steps(messages)[-1] if messages else slice(0, 0)
    protected = {*tools[-KEEP_RECENT_TOOL_RESULTS:], *range(last.start, last.stop)}
    sizes = job.sizes(messages)
    out = list(messages)
    cleared = saved = 0
    for i in tools:
        if saved >= excess:
            break
        if i in protected:
            continue
        new = _placeholder(messages[i], sizes[i], job.compaction_id)
        gain = sizes[i] - job.size(new)
        if gain > 0:
            out[i] = new
            saved += gain
            cleared += 1
    view = tuple(out)
    return _Outcome(
        messages=view,
        steps=("clear_tool_outputs",) if cleared else (),
        cleared=cleared,
        fits=job.conversation(view) <= job.target,
    )


def _summarize(
    job: _Job,
    messages: tuple[Message, ...],
    summarizer: Summarizer,
    *,
    originals: tuple[Message, ...] | None,
    window: int | None,
) -> _Outcome:
    """Fold everything between the first task and a recent tail into one handoff summary."""
    head = head_end(messages)
    previous = next((m.text for m in reversed(messages[:head]) if m.is_summary), None)
    pinned = tuple(m for m in messages[:head] if not m.is_summary)
    room = job.target - job.conversation(pinned)
    if room <= 0:
        raise CompactionError("the first user task alone takes the whole compaction target")
    cut, tail = _keep_tail(job, messages, head, room // 2)
    folded = (originals or messages)[head:cut]
    if not folded:
        raise CompactionError("nothing old enough to summarize: the recent steps fill the target")
    old_errors, old_files = summary_facts(previous) if previous else ((), file_activity(()))
    errors = tuple(dict.fromkeys([*old_errors, *error_lines(folded)]))
    files = old_files.merged(file_activity(folded))
    budget = max(1, room - (job.conversation((*pinned, *tail)) - job.conversation(pinned)))
    text = summarize_in_chunks(
        summarizer,
        previous,
        folded,
        errors=errors,
        files=files,
        max_output_tokens=budget,
        limit=window or job.threshold,
        count=lambda r: job.counter.count(r).total,
    )
    if not text.strip():
        raise CompactionError("the summarizer returned an empty summary")
    summary = finish_summary(text, errors=errors, files=files)
    meta = {"summary": True, "compaction_id": job.compaction_id}
    lead = (Message(role="user", content=summary, meta=meta), *pinned)
    view = (*lead, *tail)
    more = 0
    if job.conversation(view) > job.target:  # the summary ran over its budget: keep less tail
        tail_budget = job.target - job.conversation(lead)
        more, tail = _keep_tail(job, view, len(lead), tail_budget)
        more -= len(lead)
        view = (*lead, *tail)
    return _Outcome(
        messages=view,
        steps=("summarize",),
        summary=summary,
        dropped=len(folded) + more,
        fits=job.conversation(view) <= job.target,
    )


def _layered(
    job: _Job, messages: tuple[Message, ...], summarizer: Summarizer | None, window: int | None
) -> _Outcome:
    """Clear tool outputs; summarize if that is not enough; truncate as the last resort."""
    cleared = _clear(job, messages)
    if cleared.fits:
        return cleared
    if summarizer is not None:
        try:
            summed = _summarize(
                job, cleared.messages, summarizer, originals=messages, window=window
            )
        except CtxbudgetError:
            summed = None  # the summarizer failed or had nothing to fold: truncate instead
        if summed is not None and summed.fits:
            return replace(summed, steps=cleared.steps + summed.steps, cleared=cleared.cleared)
    cut = _truncate(job, cleared.messages)
    return replace(cut, steps=cleared.steps + cut.steps, cleared=cleared.cleared)


def _check(strategy: str, threshold: object, summarizer: Summarizer | None) -> None:
    if strategy not in STRATEGY_NAMES:
        raise UnknownNameError("compaction strategy", strategy, list(STRATEGY_NAMES))
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0:
        raise InvalidWindowError(
            f"compaction threshold must be a positive number of tokens, got {threshold!r}"
        )
    if strategy == "summarize" and summarizer is None:
        raise ConfigError("strategy 'summarize' needs a summarizer; pass one or use 'layered'")


def compact(
    request: Request,
    counter: RequestCounterLike,
    *,
    threshold: int,
    strategy: str = "layered",
    summarizer: Summarizer | None = None,
    compaction_id: str | None = None,
    summarizer_window: int | None = None,
) -> CompactionResult:
    """Compact ``request.messages`` so the conversation takes about half the room left.

    ``threshold`` is the line the trigger rule uses (whole-request tokens). The result's view
    keeps the first user task verbatim and never parts a tool call from its results.
    ``summarizer_window`` (else the summarizer's ``window`` attribute, else ``threshold``)
    bounds the summarizer's own request. Raises ``CompactionError`` when the result is still
    over ``threshold``.
    """
    _check(strategy, threshold, summarizer)
    before = counter.count(request)
    job = _Job(
        request=request,
        counter=counter,
        target=compaction_target(before.floor, threshold),
        threshold=threshold,
        compaction_id=compaction_id or uuid.uuid4().hex,
    )
    window = summarizer_window or getattr(summarizer, "window", None)
    messages = tuple(request.messages)
    if strategy == "truncate":
        outcome = _truncate(job, messages)
    elif strategy == "clear_tool_outputs":
        outcome = _clear(job, messages)
    elif strategy == "summarize":
        assert summarizer is not None
        outcome = _summarize(job, messages, summarizer, originals=None, window=window)
    else:
        outcome = _layered(job, messages, summarizer, window if isinstance(window, int) else None)
    after = counter.count(request.with_messages(outcome.messages))
    if after.total > threshold:
        raise _over_threshold(job, strategy, outcome.messages, after.total, after.floor)
    return CompactionResult(
        messages=outcome.messages,
        strategy="+".join(outcome.steps) or strategy,
        compaction_id=job.compaction_id,
        messages_before=len(messages),
        messages_after=len(outcome.messages),
        tokens_before=before.total,
        tokens_after=after.total,
        summary=outcome.summary,
        cleared=outcome.cleared,
        dropped=outcome.dropped,
    )


def _over_threshold(
    job: _Job, strategy: str, view: tuple[Message, ...], total: int, floor: int
) -> CompactionError:
    """What is left that compaction keeps, and the advice that shrinks the largest part."""
    pinned = job.conversation(view[: head_end(view)])
    newest = total - floor - pinned
    parts = (
        (floor, "the system prompt and tools", "shorten the system prompt or the tools"),
        (pinned, "the first task (kept verbatim)", "shorten the first task"),
        (newest, "the newest step (kept, shortened)", "shorten the newest message or output"),
    )
    advice = max(parts, key=lambda part: part[0])[2]
    if strategy != "layered":  # layered clears, summarizes and truncates: it frees the most
        advice = f"use strategy 'layered', {advice}"
    left = ", ".join(f"{what} {tokens:,}" for tokens, what, _ in parts)
    return CompactionError(
        f"{strategy} compaction left {total:,} tokens, over the threshold of {job.threshold:,} "
        f"({left}); {advice}, or raise the window or lower the max output"
    )
