"""Collect what happens between two model calls, then emit the call with it."""

from __future__ import annotations

import json
from typing import Any

from ctxbudget.replay.trace import Call, ReasoningResend, TraceMessage


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
        context: int,
        output: int,
        reasoning: int = 0,
        cache_read: int = 0,
        cache_write: int = 0,
        reply: str | None = None,
        model: str | None = None,
    ) -> Call:
        """Emit the next call with everything collected since the previous one."""
        model = model or self.model
        if model:
            self.models[model] = self.models.get(model, 0) + 1
        call = Call(
            index=self.count,
            context_tokens=context,
            output_tokens=output,
            reasoning_tokens=min(reasoning, output),
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            task_start=self.task_start,
            after_compaction=self.compacted,
            added=tuple(self.added),
            reply=None if reply is None else TraceMessage("assistant", reply),
            model=model,
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
