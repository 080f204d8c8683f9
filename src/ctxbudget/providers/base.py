"""The provider interface: one required method, ``complete(request) -> Completion``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from ctxbudget.messages import Message, Request, Usage

StopReason = Literal["stop", "length", "tool_calls", "content_filter", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A model's reply: the assistant message (with ``usage`` set), the usage, why it stopped."""

    message: Message
    usage: Usage
    stop_reason: StopReason = "stop"


class Provider(ABC):
    """A model server. Subclasses implement ``complete``; capabilities are plain attributes.

    ``complete`` raises ``ContextOverflowError`` when the server rejects the request as too
    long, and ``ProviderError`` for other failures after its own bounded retries.
    """

    name: str = "provider"
    """Short provider name, e.g. ``mock``, ``openai``, ``ollama``."""
    window: int | None = None
    """The context window in tokens, when the provider knows it."""
    tokenizer: str | None = None
    """The tokenizer whose count matches this server's, when known (e.g. ``qwen3``)."""

    @abstractmethod
    def complete(self, request: Request) -> Completion:
        """Send one request and return the reply."""

    def served_window(self) -> int | None:
        """The context window the server says it serves this model with, when it can be asked
        (Ollama's loaded ``num_ctx``); None when it cannot. Never raises, and is bounded in time:
        callers ask only after the server silently truncated a prompt."""
        return None
