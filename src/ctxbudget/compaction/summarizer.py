"""The summarizer call: the Summarizer protocol, its request, and shrinking that request to fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from ctxbudget.compaction.cut import shorten_text, steps
from ctxbudget.compaction.handoff import HANDOFF_TEMPLATE, FileActivity
from ctxbudget.errors import CompactionError
from ctxbudget.messages.model import Message, Request

__all__ = [
    "CLIP_STEPS",
    "MAX_SUMMARY_CHUNKS",
    "SUMMARIZER_SYSTEM",
    "ProviderSummarizer",
    "Summarizer",
    "fit_summarizer_request",
    "summarize_in_chunks",
    "summarizer_request",
    "transcript",
]

# Tool outputs in the summarizer's input are clipped to this many characters (head + tail);
# each later step clips harder before the oldest messages are dropped.
CLIP_STEPS: tuple[int, ...] = (2_000, 800, 300)
MAX_SUMMARY_CHUNKS = 16
"""The most summarizer calls one compaction makes when what it folds is larger than the
summarizer's window (a rolling summary, one call per part)."""

SUMMARIZER_SYSTEM = (
    "You write handoff summaries for an agent whose earlier conversation no longer fits its "
    "context window. Another model continues the work from your summary, the user's first "
    "task and the most recent messages, nothing else. Fill in this template in Markdown, keeping "
    "every ## heading; write 'none' under a heading with nothing to say. Be concrete: names, "
    "numbers, paths, commands. Quote every error exactly, character for character. Never "
    "invent facts. When a previous summary is given, update it: keep what is still true, change "
    "what changed, add what is new; do not summarize the summary.\n\n" + HANDOFF_TEMPLATE
)


@runtime_checkable
class Summarizer(Protocol):
    """A model call that turns a summarizer request into summary text.

    An optional ``window`` attribute (int) tells compaction how big a request it accepts.
    """

    def summarize(self, request: Request) -> str: ...


class _Completes(Protocol):
    def complete(self, request: Request) -> object: ...


class ProviderSummarizer:
    """Adapts any provider (anything with ``complete(request)`` and a ``window``) to Summarizer."""

    def __init__(self, provider: _Completes) -> None:
        self.provider = provider
        self.window: int | None = getattr(provider, "window", None)

    def summarize(self, request: Request) -> str:
        """The text of the provider's reply to the summarizer request."""
        completion = self.provider.complete(request)
        message = getattr(completion, "message", None)
        return message.text if isinstance(message, Message) else ""


def _render(m: Message, clip_chars: int) -> str:
    if m.role == "tool":
        text = shorten_text(m.text, clip_chars, max(0, (len(m.text) - clip_chars) // 4))
        return f"[tool result {m.name or ''} {m.tool_call_id or ''}]\n{text}"
    lines = [f"[{m.role}]"]
    if m.text:
        lines.append(shorten_text(m.text, 4 * clip_chars, max(0, len(m.text) // 4 - clip_chars)))
    if m.images:
        lines.append(f"[{len(m.images)} image(s)]")
    lines.extend(
        f"-> call {c.name} {shorten_text(c.arguments, clip_chars, 0)}" for c in m.tool_calls
    )
    return "\n".join(lines)


def transcript(messages: Sequence[Message], clip_chars: int) -> str:
    """The messages as plain text for the summarizer; tool outputs clipped head + tail."""
    return "\n\n".join(_render(m, clip_chars) for m in messages)


def summarizer_request(
    previous: str | None,
    folded: Sequence[Message],
    *,
    errors: Sequence[str],
    files: FileActivity,
    max_output_tokens: int,
    clip_chars: int = CLIP_STEPS[0],
) -> Request:
    """The request asking the model for an (updated) handoff summary of ``folded``."""
    parts = []
    if previous:
        parts.append(
            "Previous summary. Update it with the conversation below; do not summarize it "
            f"again:\n<previous-summary>\n{previous}\n</previous-summary>"
        )
    parts.append(
        f"Conversation to fold in:\n<conversation>\n{transcript(folded, clip_chars)}\n"
        "</conversation>"
    )
    if errors:
        parts.append("Exact error lines (quote them verbatim under Errors):\n" + "\n".join(errors))
    listed = [("Files read", files.read), ("Files modified", files.modified)]
    parts.append("\n".join(f"{name}: {', '.join(items) or 'none'}" for name, items in listed))
    parts.append(f"Write the summary now, in at most about {max_output_tokens} tokens.")
    return Request(
        system=SUMMARIZER_SYSTEM,
        messages=(Message(role="user", content="\n\n".join(parts)),),
        max_output_tokens=max_output_tokens,
    )


def fit_summarizer_request(
    previous: str | None,
    folded: Sequence[Message],
    *,
    errors: Sequence[str],
    files: FileActivity,
    max_output_tokens: int,
    limit: int,
    count: Callable[[Request], int],
) -> Request:
    """The summarizer request, shrunk in steps until it and its reply fit ``limit`` tokens.

    First tool outputs are clipped harder (``CLIP_STEPS``), then the oldest steps are dropped
    (their errors and files are still passed: those lists come from all of ``folded``).
    """
    budget = limit - max_output_tokens
    pieces = steps(folded)
    first = 0  # pieces[:first] are dropped
    clips = CLIP_STEPS
    while True:
        kept = folded[pieces[first].start :] if first < len(pieces) else ()
        for clip in clips:
            request = summarizer_request(
                previous,
                kept,
                errors=errors,
                files=files,
                max_output_tokens=max_output_tokens,
                clip_chars=clip,
            )
            if count(request) <= budget:
                return request
        if first >= len(pieces):
            raise CompactionError(
                f"the summarizer's request does not fit its window of {limit} tokens even "
                "with no conversation left; shorten the previous summary or raise the window"
            )
        # Drop a quarter of what is left each round: few recounts even for long sessions.
        first += max(1, (len(pieces) - first) // 4)
        clips = CLIP_STEPS[-1:]


def summarize_in_chunks(
    summarizer: Summarizer,
    previous: str | None,
    folded: Sequence[Message],
    *,
    errors: Sequence[str],
    files: FileActivity,
    max_output_tokens: int,
    limit: int,
    count: Callable[[Request], int],
) -> str:
    """The summary of ``folded``, by as few calls to ``summarizer`` as its ``limit`` allows.

    When all of ``folded`` fits one request (tool outputs clipped as `fit_summarizer_request`
    clips them), that is the one call. Otherwise the oldest steps that fit one request (tool
    outputs clipped hardest) are summarised first, and each part's summary is the previous
    summary of the next call: a rolling summary in which no step is dropped unseen, where one
    request used to drop the oldest steps (opencode#11450). After ``MAX_SUMMARY_CHUNKS`` calls,
    or for a step too large for a request of its own, the last call shrinks as
    `fit_summarizer_request` does. ``errors`` and ``files`` go with the last call.
    """
    pieces = steps(folded)
    start = 0  # pieces[:start] are summarised into ``previous``
    for _ in range(MAX_SUMMARY_CHUNKS - 1):
        rest = folded[pieces[start].start :] if start < len(pieces) else ()
        if _fits(previous, rest, errors, files, max_output_tokens, limit, count):
            break
        taken = _oldest_that_fit(previous, folded, pieces, start, max_output_tokens, limit, count)
        if taken == 0:
            break  # one step alone is too large: the last call clips or drops it
        part = folded[pieces[start].start : pieces[start + taken - 1].stop]
        text = summarizer.summarize(
            _part_request(previous, part, (), FileActivity(), max_output_tokens)
        )
        if not text.strip():
            raise CompactionError("the summarizer returned an empty summary")
        previous, start = text, start + taken
    rest = folded[pieces[start].start :] if start < len(pieces) else ()
    request = fit_summarizer_request(
        previous,
        rest,
        errors=errors,
        files=files,
        max_output_tokens=max_output_tokens,
        limit=limit,
        count=count,
    )
    return summarizer.summarize(request)


def _part_request(
    previous: str | None,
    part: Sequence[Message],
    errors: Sequence[str],
    files: FileActivity,
    max_output_tokens: int,
) -> Request:
    """The summarizer request for ``part`` with tool outputs clipped hardest."""
    return summarizer_request(
        previous,
        part,
        errors=errors,
        files=files,
        max_output_tokens=max_output_tokens,
        clip_chars=CLIP_STEPS[-1],
    )


def _fits(
    previous: str | None,
    folded: Sequence[Message],
    errors: Sequence[str],
    files: FileActivity,
    max_output_tokens: int,
    limit: int,
    count: Callable[[Request], int],
) -> bool:
    """Whether one request holds all of ``folded`` (tool outputs clipped hardest)."""
    request = _part_request(previous, folded, errors, files, max_output_tokens)
    return count(request) <= limit - max_output_tokens


def _oldest_that_fit(
    previous: str | None,
    folded: Sequence[Message],
    pieces: Sequence[slice],
    start: int,
    max_output_tokens: int,
    limit: int,
    count: Callable[[Request], int],
) -> int:
    """How many of ``pieces[start:]`` (oldest first) one request holds, found by bisection
    (a request grows with each step it holds); 0 when not even one."""
    low, high = 0, len(pieces) - start
    while low < high:
        middle = (low + high + 1) // 2
        part = folded[pieces[start].start : pieces[start + middle - 1].stop]
        if _fits(previous, part, (), FileActivity(), max_output_tokens, limit, count):
            low = middle
        else:
            high = middle - 1
    return low
