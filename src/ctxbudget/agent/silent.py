"""Overflows a server does not report as errors: a reply cut at its real window, a prompt it
truncated. Pure functions of one reply's usage and our own count of what was sent."""

from __future__ import annotations

from dataclasses import dataclass

from ctxbudget.budget.usage import FAR_BELOW_MIN_TOKENS, FAR_BELOW_SHARE, prompt_gap
from ctxbudget.messages import Usage

__all__ = [
    "TRUNCATION_MIN_TOKENS",
    "TRUNCATION_SHARE",
    "SilentOverflow",
    "cut_reply",
    "truncated_prompt",
]

TRUNCATION_SHARE = FAR_BELOW_SHARE
"""A reported prompt under 90% of our exact count was truncated by the server (the bound every
reader of such a gap shares: ``budget.usage.FAR_BELOW_SHARE``)."""
TRUNCATION_MIN_TOKENS = FAR_BELOW_MIN_TOKENS
"""...and at least this many tokens short (``budget.usage.FAR_BELOW_MIN_TOKENS``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SilentOverflow:
    """What a reply's usage says about the server's real window."""

    limit: int
    """The server's window as this reply shows it (only ever adopted when smaller)."""
    reason: str
    """One line for the user: what the server did and why that is its window."""


def cut_reply(usage: Usage, stop_reason: str, *, asked: int, window: int) -> SilentOverflow | None:
    """A reply stopped for length before ``asked`` tokens while prompt + reply stayed under
    ``window``: the server ran out of its own, smaller window (llama.cpp's ``n_ctx`` without
    context shift stops there with ``finish_reason: "length"``)."""
    used = usage.input_tokens + usage.output_tokens
    if stop_reason != "length" or usage.input_tokens <= 0 or usage.output_tokens >= asked:
        return None
    if used >= window:
        return None  # the reply filled our own window: nothing smaller to learn
    return SilentOverflow(
        limit=used,
        reason=(
            f"the server stopped a reply for length after {usage.output_tokens:,} of "
            f"{asked:,} tokens, with prompt + reply at {used:,} tokens: its real context length"
        ),
    )


def truncated_prompt(usage: Usage, counted: int) -> SilentOverflow | None:
    """The server reported a prompt well under our exact count of what was sent: it dropped
    part of it (Ollama does so when ``num_ctx`` is smaller than the prompt, and reports the
    truncated size), so the reported size is the most its window holds."""
    reported = usage.input_tokens
    if prompt_gap(reported, counted) is None:
        return None
    return SilentOverflow(
        limit=reported,
        reason=(
            f"the server reported a {reported:,}-token prompt where ctxbudget counted "
            f"{counted:,} exactly: it truncated the prompt (Ollama's num_ctx does so silently)"
        ),
    )
