"""Deadlines and size caps of one request to a model server: the defaults, in one place.

Kept apart from the provider so the CLI can show them without importing the openai SDK.
"""

from __future__ import annotations

import math

from ctxbudget.errors import ConfigError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_CHARS_PER_TOKEN",
    "TEXT_MARGIN_CHARS",
    "checked_bytes",
    "checked_seconds",
    "text_cap",
]

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to open the connection; a server that is up accepts in milliseconds."""
DEFAULT_READ_TIMEOUT = 600.0
"""10 minutes: a local model can take that long on a long prompt before its first byte; also the
longest silence allowed between two bytes of a reply."""
DEFAULT_REQUEST_TIMEOUT = 1800.0
"""30 minutes for one ``complete`` call, retries and their waits included: a long streamed reply
of a slow local model (8k tokens at 5 tokens/s is 27 minutes) still fits; a trickle does not."""
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
"""The largest reply body read (streamed or not); a normal reply is under 1 MB."""
MAX_CHARS_PER_TOKEN = 32
"""A reply may hold at most this many characters per ``max_tokens`` token (plus a margin):
English averages about 4, and the longest tokens of cl100k/o200k are rare runs of spaces."""
TEXT_MARGIN_CHARS = 16_384
"""Characters allowed past ``max_tokens * MAX_CHARS_PER_TOKEN`` (short replies vary most)."""


def text_cap(max_tokens: int | None) -> int | None:
    """The most reply characters ``max_tokens`` allows (None: no limit asked, no cap)."""
    return None if max_tokens is None else max_tokens * MAX_CHARS_PER_TOKEN + TEXT_MARGIN_CHARS


def checked_seconds(value: object, name: str) -> float:
    """A timeout setting: a positive, finite number of seconds, else a ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def checked_bytes(value: object, name: str) -> int:
    """A size cap: an integer of at least 1024 bytes, else a ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        raise ConfigError(f"{name} must be a number of bytes of at least 1024, got {value!r}")
    return value
