"""The chat-template watchdog's interrupt, in a module of its own so that both layers it crosses
can name it: the sandbox (counting/sandbox.py) raises it in a thread whose render is overdue, and
a tokenizer running in that thread (tokens/registry.py) catches it to blame itself."""

from __future__ import annotations


class RenderTimeout(BaseException):
    """Raised inside the rendering thread by the watchdog when the deadline passes (a
    BaseException, so no ``except Exception`` in Jinja's runtime can swallow it)."""
