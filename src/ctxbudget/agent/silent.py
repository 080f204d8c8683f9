"""Overflows a server does not report as errors: a reply cut at its real window, a prompt it
truncated. Pure functions of one reply's usage and our own count of what was sent."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ctxbudget.budget.usage import prompt_gap
from ctxbudget.messages import Usage

__all__ = [
    "OLLAMA_MAX_KEEP",
    "SilentOverflow",
    "cut_reply",
    "half_window",
    "served_overflow",
    "truncated_prompt",
]


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
    """The server reported a prompt well under our exact count of what was sent (`prompt_gap`):
    it dropped part of it (Ollama does so when ``num_ctx`` is smaller than the prompt, and
    reports the truncated size), so the reported size is the most its window holds."""
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


OLLAMA_MAX_KEEP = 5
"""The most leading tokens Ollama's half-window cut keeps: ``num_keep`` 4 (its default,
ollama/ollama api/types.go ``DefaultOptions``) and the BOS token a tokenizer adds."""
KEPT_SIZE_SLACK = 2
"""A reported prompt this close to the size of the request without its oldest messages is
that request (exact counts match the server's to the token; 2 spares a BOS either way)."""


def served_overflow(reported: int, counted: int, served: int | None) -> SilentOverflow | None:
    """The truncation's window as the server states it (``served``, Ollama's ``/api/ps``), when
    it fits what the reply showed: no less than the ``reported`` prompt the server kept and no
    more than our ``counted`` prompt it could not keep."""
    if served is None or not reported <= served <= counted:
        return None
    return SilentOverflow(
        limit=served,
        reason=(
            f"the server truncated the prompt to {reported:,} tokens where ctxbudget counted "
            f"{counted:,}; it serves a {served:,}-token context (its /api/ps)"
        ),
    )


def half_window(
    reported: int, counted: int, kept_sizes: Iterable[int] = ()
) -> SilentOverflow | None:
    """The real window behind a prompt cut to about half of it, or None when the cut is not that.

    Current Ollama first drops the oldest messages until the prompt fits ``num_ctx`` (system
    messages and the newest one stay: server/prompt.go ``chatPrompt``); a prompt still at
    ``num_ctx`` tokens or more (its newest message alone too long, or any ``/api/generate``
    prompt) is cut to its first ``keep`` tokens and its tail, ``num_ctx - max((num_ctx - keep)
    // 2, 1)`` tokens in all (llm/llama_server.go ``contextShiftPromptLimit``, ollama/ollama at
    fb3076099): about half the window, reported as the prompt's size (ollama/ollama#17427:
    32,770 of 65,536; itayinbarr/little-coder#128: 16,386 of 32,768). Adopting that size would
    halve the session's window for good.

    The reported size p is then ceil((n + keep) / 2) of a window n, so n >= 2p - keep - 1, and
    with keep <= ``OLLAMA_MAX_KEEP``, 2(p - 3) is never more than n (and n - 2 at the least).
    It is the signature only when 2(p - 3) is within our ``counted`` prompt (the server cuts only
    a prompt at least as long as its window) and p is not the size of the request without its
    oldest messages (``kept_sizes``: those sizes with 1, 2, ... messages dropped, a lazy
    iterable, read only down to p): that is a message drop, whose window is only known to be
    at least p. An older runner that cut to exactly ``num_ctx``, or a ``num_keep`` over 4, can
    make 2(p - 3) too large; the next truncation then shows it, and the caller adopts p.
    """
    guess = 2 * reported - OLLAMA_MAX_KEEP - 1
    if reported <= 0 or guess <= reported or guess > counted:
        return None
    for size in kept_sizes:
        if size < reported - KEPT_SIZE_SLACK:
            break  # sizes only fall from here
        if size <= reported + KEPT_SIZE_SLACK:
            return None
    return SilentOverflow(
        limit=guess,
        reason=(
            f"the server truncated the prompt to {reported:,} tokens where ctxbudget counted "
            f"{counted:,}: Ollama keeps about half its context, so it is about {guess:,} tokens"
        ),
    )
