"""Shared test conversations for the agent tests."""

from __future__ import annotations

from ctxbudget.messages.model import Message, Request


def long_conversation(words: int = 60, turns: int = 30) -> Request:
    """``turns`` user/assistant exchanges of ``words`` words each, then a new question."""
    messages: list[Message] = []
    for i in range(turns):
        messages.append(Message(role="user", content=f"topic {i}: " + "word " * words))
        messages.append(Message(role="assistant", content=f"noted {i}"))
    messages.append(Message(role="user", content="and now?"))
    return Request(system="Be brief.", messages=tuple(messages), max_output_tokens=256)
