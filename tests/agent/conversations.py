"""Shared test conversations (and a summarizer) for the agent tests."""

from __future__ import annotations

import threading
import time

from ctxbudget.messages.model import Message, Request


def long_conversation(words: int = 60, turns: int = 30) -> Request:
    """``turns`` user/assistant exchanges of ``words`` words each, then a new question."""
    messages: list[Message] = []
    for i in range(turns):
        messages.append(Message(role="user", content=f"topic {i}: " + "word " * words))
        messages.append(Message(role="assistant", content=f"noted {i}"))
    messages.append(Message(role="user", content="and now?"))
    return Request(system="Be brief.", messages=tuple(messages), max_output_tokens=256)


class SlowSummarizer:
    """Counts its calls, sets ``started`` at each, and takes ``delay`` seconds (so concurrent
    callers overlap it). Its window holds any fold, so one compaction is one call."""

    window = 131_072

    def __init__(self, delay: float = 0.3) -> None:
        self.delay, self.calls = delay, 0
        self.started = threading.Event()

    def summarize(self, request: Request) -> str:
        self.calls += 1
        self.started.set()
        time.sleep(self.delay)
        return "Summary: the user discussed many topics."
