"""Collect what happens between two model calls, then emit the call with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ctxbudget.budget.rules import MAX_WINDOW, validate_window
from ctxbudget.errors import InvalidWindowError, MessageFormatError, TraceFormatError
from ctxbudget.messages.usage import Usage
from ctxbudget.replay.importers._lines import LineReader
from ctxbudget.replay.trace import Call, ReasoningResend, TraceMessage

_MAX_WHY = 200  # a rejected value is quoted in the warning; a huge one is cut
MAX_TOKENS = MAX_WINDOW
"""The largest count a call's usage may report: its prompt and its reply each fit its window.
A larger one is no real usage report; below it, no sum replay makes of a session's counts
(reasoning over a task, for one) can leave the 8-byte integers of a `CallTable`."""


def read_usage(
    read: Callable[[object], Usage], value: object, reader: LineReader, where: str
) -> Usage | None:
    """``read(value)`` (a `ctxbudget.budget.usage` reader, or a harness's own mapping); when it
    rejects the usage, the record is skipped with a warning naming ``where`` (e.g. "line 12")
    and None comes back."""
    try:
        usage = read(value)
    except MessageFormatError as e:
        why = str(e)
        reader.skip_at(where, why if len(why) <= _MAX_WHY else why[:_MAX_WHY] + "...")
        return None
    counts = (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens)
    if max(*counts, usage.cache_read_tokens, usage.cache_write_tokens) > MAX_TOKENS:
        reader.skip_at(where, f"usage: a token count above {MAX_TOKENS:,}")
        return None
    return usage


def read_window(value: object, reader: LineReader, where: str) -> int | None:
    """The window a session recorded (``value``; None: not recorded) as `validate_window`
    accepts it; a window no model has (0, 2^63, 1e300, text) is a corrupt file, refused in one
    line naming ``where`` (e.g. "line 12: model_context_window")."""
    if value is None:
        return None
    try:
        return validate_window(value, f"{reader.path}: {where}", fix="the file is damaged")
    except InvalidWindowError as e:
        raise TraceFormatError(str(e)) from None


def block_text(block: Any) -> str:
    """Text of one content block or value, whatever the harness put there."""
    if isinstance(block, str):
        return block
    if isinstance(block, list):
        return "".join(block_text(b) for b in block)
    if not isinstance(block, dict):
        return "" if block is None else json.dumps(block, ensure_ascii=False)
    for key in ("text", "thinking", "content", "output"):
        if key in block and block[key] is not None:
            return block_text(block[key])
    if "input" in block or "arguments" in block:  # a tool call: name + JSON arguments
        args = block.get("input", block.get("arguments"))
        name = str(block.get("name", ""))
        return name + (args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    return ""


class CallBuilder:
    """Holds the messages, task boundary and compaction seen since the last call."""

    def __init__(self) -> None:
        self.count = 0
        self.added: list[TraceMessage] = []
        self.task_start = False
        self.compacted = False
        self.model: str | None = None
        self.models: dict[str, int] = {}
        self.window: int | None = None
        """The context window, when the session recorded it."""
        self.reasoning: ReasoningResend = "unknown"

    def add(self, role: str, text: str, *, task: bool = False) -> None:
        """A message that joined the conversation; ``task`` marks a real user prompt."""
        self.added.append(TraceMessage(role, text))
        self.task_start = self.task_start or task

    def call(
        self,
        *,
        usage: Usage,
        reply: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Call:
        """Emit the next call, with the usage the server reported for it and everything
        collected since the previous one."""
        model = model or self.model
        if model:
            self.models[model] = self.models.get(model, 0) + 1
        call = Call(
            index=self.count,
            context_tokens=usage.context_tokens,
            output_tokens=usage.output_tokens,
            # Harness-mapped usage (Pi, Codex) is not checked; reasoning is part of output.
            reasoning_tokens=min(usage.reasoning_tokens, usage.output_tokens),
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            task_start=self.task_start,
            after_compaction=self.compacted,
            added=tuple(self.added),
            reply=None if reply is None else TraceMessage("assistant", reply),
            model=model,
            max_tokens=max_tokens if max_tokens and 0 < max_tokens <= MAX_TOKENS else None,
        )
        self.count += 1
        self.added = []
        self.task_start = False
        self.compacted = False
        return call

    @property
    def main_model(self) -> str | None:
        """The model most calls used."""
        if not self.models:
            return self.model
        return max(self.models, key=lambda m: self.models[m])
