"""Where a conversation may be cut: the one home of "never split a tool call from its results".

Pure functions over message tuples; sizes come in as per-message token counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from ctxbudget.messages.model import Message

__all__ = [
    "cut_point",
    "cut_points",
    "head_end",
    "shorten_step",
    "shorten_text",
    "steps",
    "turns",
    "valid_cut",
]

# A clipped text keeps at least this many characters at each end, so a shortened tool output
# still shows how it started and how it ended (the command echo and the final error/summary).
MIN_KEEP_CHARS = 80


def _call_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """(index of an assistant message with tool calls, index of its last answered result)."""
    caller: dict[str, int] = {}
    spans: dict[int, int] = {}
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            spans.setdefault(i, i)
            for call in m.tool_calls:
                caller[call.id] = i
        elif m.role == "tool" and m.tool_call_id in caller:
            start = caller[m.tool_call_id]
            spans[start] = max(spans[start], i)
    return sorted(spans.items())


def cut_points(messages: Sequence[Message]) -> tuple[int, ...]:
    """Every index ``i`` where ``messages[:i]`` and ``messages[i:]`` may be parted.

    A cut never falls between an assistant's tool call and any of its results, and never just
    before a tool message. 0 and ``len(messages)`` are always cut points.
    """
    n = len(messages)
    cover = [0] * (n + 2)
    for start, end in _call_spans(messages):
        cover[start + 1] += 1
        cover[end + 1] -= 1
    points: list[int] = []
    open_spans = 0
    for i in range(n + 1):
        open_spans += cover[i]
        if i in (0, n) or (open_spans == 0 and messages[i].role != "tool"):
            points.append(i)
    return tuple(points)


def valid_cut(messages: Sequence[Message], i: int) -> bool:
    """True when the conversation may be cut just before ``messages[i]``."""
    return i in cut_points(messages)


def _slices(starts: Sequence[int], n: int) -> list[slice]:
    bounds = [*starts, n]
    return [slice(a, b) for a, b in pairwise(bounds) if a < b]


def steps(messages: Sequence[Message]) -> list[slice]:
    """The smallest uncuttable pieces: a message, or an assistant tool call with its results."""
    return _slices(cut_points(messages)[:-1], len(messages))


def turns(messages: Sequence[Message]) -> list[slice]:
    """User turns: each starts at a user message (anything before the first is a turn too)."""
    starts = [i for i in cut_points(messages)[:-1] if i == 0 or messages[i].role == "user"]
    return _slices(starts, len(messages))


def head_end(messages: Sequence[Message]) -> int:
    """End of the pinned head: leading summaries and everything up to the first user task.

    The first user message that is not a summary is the task; it is never dropped.
    """
    task = next((i for i, m in enumerate(messages) if m.role == "user" and not m.is_summary), None)
    if task is None:
        return next((i for i, m in enumerate(messages) if not m.is_summary), len(messages))
    points = cut_points(messages)
    return next(p for p in points if p > task)


def cut_point(messages: Sequence[Message], sizes: Sequence[int], budget: int, *, start: int) -> int:
    """Where to cut so that ``messages[cut:]`` fits ``budget`` tokens; ``cut >= start``.

    Prefers the start of a user turn; inside one long turn (a coding task is one user turn)
    falls back to tool-step boundaries. The last step is always kept: when even it is over
    budget, its start is returned and the caller shortens it (``shorten_step``).
    """
    n = len(messages)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sizes[i]
    points = [p for p in cut_points(messages) if start <= p < n]
    if not points:
        return n
    last_step = points[-1]
    for t in turns(messages):
        begin = int(t.start)
        if start <= begin <= last_step and suffix[begin] <= budget:
            return begin
    return next((p for p in points if suffix[p] <= budget), last_step)


def shorten_text(text: str, keep_chars: int, dropped_tokens: int) -> str:
    """Head and tail of ``text`` around a marker saying how many tokens were dropped."""
    keep = max(keep_chars, 2 * MIN_KEEP_CHARS)
    if len(text) <= keep:
        return text
    head = text[: keep // 2]
    tail = text[len(text) - keep // 2 :]
    marker = f"\n[... {dropped_tokens:,} tokens dropped here; full text in the archive ...]\n"
    return head + marker + tail


def _clip_message(m: Message, keep_chars: int, dropped_tokens: int) -> Message:
    text = shorten_text(m.text, keep_chars, dropped_tokens)
    images = len(m.images)
    if images:
        text += f"\n[{images} image(s) dropped; they are in the archive]"
    meta = {**m.meta, "shortened": True}
    return Message(
        role=m.role,
        content=text,
        tool_calls=m.tool_calls,
        tool_call_id=m.tool_call_id,
        name=m.name,
        reasoning=None,
        usage=m.usage,
        meta=meta,
    )


def _pick_largest(
    step: Sequence[Message], size: Callable[[Message], int], done: set[int]
) -> int | None:
    """The message to clip next: the largest tool output, else the largest long text."""
    clippable = [
        i
        for i, m in enumerate(step)
        if i not in done and (len(m.text) > 2 * MIN_KEEP_CHARS + 100 or m.images)
    ]
    tools = [i for i in clippable if step[i].role == "tool"]
    pool = tools or clippable
    return max(pool, key=lambda i: size(step[i])) if pool else None


def shorten_step(
    step: Sequence[Message], budget: int, size: Callable[[Message], int]
) -> tuple[Message, ...]:
    """Shorten one uncuttable step (a tool call and its results) until it fits ``budget``.

    Tool outputs are clipped first (head and tail kept, a marker saying how many tokens went),
    then long texts; a tool result is never removed, so no call is ever orphaned. Tool call
    arguments are left whole: clipping them would break their JSON.
    """
    out = list(step)
    done: set[int] = set()
    for _ in range(4 * len(out) + 4):
        excess = sum(size(m) for m in out) - budget
        if excess <= 0:
            break
        j = _pick_largest(out, size, done)
        if j is None:
            break
        original = step[j]
        original_size = size(original)
        keep_ratio = max(0, size(out[j]) - excess) / max(1, original_size)
        keep = int(len(original.text) * keep_ratio * 0.9)
        if keep <= 2 * MIN_KEEP_CHARS:
            keep = 0
            done.add(j)
        dropped = max(0, original_size - size(_clip_message(original, keep, 0)))
        out[j] = _clip_message(original, keep, dropped)
    return tuple(out)
