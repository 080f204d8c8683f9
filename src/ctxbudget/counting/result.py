"""What counting a whole request returns: a total and a breakdown that adds up to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCount:
    """Tokens of one rendered request, with template tokens attributed to the part they wrap.

    ``system + tools + messages == total``; ``per_message`` adds up to ``messages``, and
    ``messages`` includes the generation prompt's tokens (the part that primes the reply).
    ``floor`` is what every request pays whatever the conversation: system + tools + their framing.
    """

    counter: str
    """The tokenizer or estimator that counted, e.g. ``qwen3`` or ``ctxbudget``."""
    kind: Literal["exact", "estimate"]
    """``exact`` when the template and tokenizer are the server's own; else ``estimate``."""
    total: int
    system: int
    tools: int
    messages: int
    per_message: tuple[int, ...]
    floor: int
