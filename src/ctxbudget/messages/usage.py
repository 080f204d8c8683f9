"""The usage a provider reports for one request, in one normalised shape."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage of one request, normalised across providers.

    ``input_tokens`` is the whole prompt the server saw, cached part included (Anthropic's
    ``input_tokens`` excludes cache, so its readers add cache writes and reads back in).
    ``output_tokens`` includes ``reasoning_tokens``.
    """

    input_tokens: int = 0
    """The whole prompt, cached tokens included."""
    cache_read_tokens: int = 0
    """Part of ``input_tokens`` served from the prompt cache."""
    cache_write_tokens: int = 0
    """Part of ``input_tokens`` written to the prompt cache."""
    output_tokens: int = 0
    """Generated tokens, reasoning included."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent on reasoning."""
    compaction_id: str | None = None
    """The id of the latest compaction in force when the request was sent (None: none yet).
    Usage recorded under another compaction id describes a context that no longer exists."""
    timestamp: float | None = None
    """When the reply arrived (Unix seconds), if known."""

    @property
    def context_tokens(self) -> int:
        """The prompt size the server saw."""
        return self.input_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus output, as providers report ``total_tokens``."""
        return self.input_tokens + self.output_tokens

    @property
    def is_zero(self) -> bool:
        """True for an all-zero report (llama.cpp sends one); such usage carries no information."""
        return self.input_tokens == 0 and self.output_tokens == 0
