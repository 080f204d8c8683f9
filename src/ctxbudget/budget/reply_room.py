"""The reply limit forwarded to a server: what the client asked, held to what the window leaves.

Harnesses ask for far more reply than a local window holds (Claude Code sends ``max_tokens``
128,000 on every request; a local server has 8K-40K in all). Reserving what they ask would fit
no prompt; forwarding it unchanged gets the request refused (vLLM, the Anthropic API) or a
reply cut at the window's end. A pure function, shared by every wire API of the gateway.
"""

from __future__ import annotations

from ctxbudget.budget.rules import validate_window

__all__ = ["clamp_max_tokens"]


def clamp_max_tokens(
    asked: int | None, *, window: int, prompt_tokens: int, reserve: int
) -> int | None:
    """The reply limit to forward: ``asked``, lowered to the room the window leaves after the
    prompt (``window - prompt_tokens``), but never below ``reserve``, the reply room the
    budget rule keeps free (a prompt counted near the line must still get a useful reply; the
    rule has already made room for that much). None (the client set no limit) stays None: the
    server's own default applies. Never more than ``asked``.
    """
    if asked is None:
        return None
    w = validate_window(window)
    room = max(w - max(0, prompt_tokens), max(1, reserve))
    return max(1, min(asked, room))
