"""Models without a public tokenizer (Claude, Gemini, ...): an estimator plus documented framing.

No such provider publishes its template's per-message cost, so we charge OpenAI's published
framing (3 per message, 3 to prime the reply: OpenAI cookbook) as the generic one.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ctxbudget.counting.images import claude_image_tokens
from ctxbudget.counting.scheme import MessageScheme
from ctxbudget.counting.template_input import message_text, tojson, tool_dict
from ctxbudget.messages.model import Message, Request
from ctxbudget.tokens.base import CounterKind, TokenCounter

MESSAGE_OVERHEAD = 3
"""Role markers around each message: OpenAI cookbook's published constant, used generically."""
REPLY_PRIMER = 3
"""The generation prompt: OpenAI cookbook's published constant, used generically."""
CLAUDE_TOOL_PROMPT = 346
"""346: the tool-use system prompt Anthropic adds when tools are given (Anthropic docs, "Tool use
with Claude" pricing table, tool_choice auto/none, Claude 3.5 Sonnet through Claude 4)."""


def tool_prompt_tokens(model: str | None) -> int:
    """The hidden tool-use prompt a provider adds when a request has tools; known for Claude."""
    return CLAUDE_TOOL_PROMPT if model and "claude" in model.lower() else 0


@dataclass(frozen=True, slots=True)
class EstimateScheme(MessageScheme):
    """Estimator counts of each part plus the generic framing; images by Anthropic's rule."""

    counter: TokenCounter
    tool_prompt: int = 0

    @property
    def name(self) -> str:
        return self.counter.name

    @property
    def kind(self) -> CounterKind:
        return "estimate"

    def head(self, request: Request) -> tuple[int, int]:
        # An empty system message pays the message overhead, as an empty user message does.
        text = request.system
        system = MESSAGE_OVERHEAD + self.counter.count(text) if text is not None else 0
        if not request.tools:
            return system, 0
        schemas = "\n".join(tojson(tool_dict(t)) for t in request.tools)
        return system, self.tool_prompt + self.counter.count(schemas)

    def message(self, message: Message, flags: Hashable) -> tuple[int, bool]:
        # Reasoning of earlier turns is dropped by these providers; it is not counted here.
        tokens = MESSAGE_OVERHEAD + self.counter.count(message_text(message))
        for call in message.tool_calls:
            tokens += self.counter.count(call.name) + self.counter.count(call.arguments)
        tokens += sum(claude_image_tokens(image) for image in message.images)
        return tokens, False

    def generation(self) -> int:
        return REPLY_PRIMER
