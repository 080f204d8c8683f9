"""Bounded retry policy: which failures to retry, exponential backoff with jitter, Retry-After."""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ctxbudget.errors import ConfigError

__all__ = [
    "DEFAULT_RETRY",
    "RetryPolicy",
    "backoff_delay",
    "is_retryable_status",
    "retry_after_seconds",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how long to retry a failed request; every bound is finite."""

    max_retries: int = 4
    """Retries after the first attempt (4, as the openai SDK's own default of 2 is often too
    few for a busy local server, and more than ~5 only delays a clear error)."""
    base_delay: float = 0.5
    """Seconds before the first retry; doubled on each further retry."""
    max_delay: float = 30.0
    """The longest single sleep; a Retry-After longer than this ends the retries."""
    max_total_sleep: float = 90.0
    """The longest total sleep over all retries of one request."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ConfigError(f"max_retries must be an integer, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, got {self.max_retries}")
        for name in ("base_delay", "max_delay", "max_total_sleep"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


DEFAULT_RETRY = RetryPolicy()

# 408 and 429 ask the client to come back later; 5xx are server faults, except 501 and 505,
# which say the request itself can never work. 529 is Anthropic's "overloaded".
_RETRYABLE_4XX = frozenset({408, 429})
_PERMANENT_5XX = frozenset({501, 505})


def is_retryable_status(status: int) -> bool:
    """True for HTTP statuses worth another try: 408, 429 and 5xx other than 501/505."""
    return status in _RETRYABLE_4XX or (500 <= status <= 599 and status not in _PERMANENT_5XX)


def retry_after_seconds(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or as
    an HTTP date. None when absent or unreadable; never negative."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now())


def backoff_delay(
    policy: RetryPolicy,
    retry: int,
    *,
    retry_after: float | None = None,
    random_fraction: Callable[[], float] = random.random,
) -> float | None:
    """Seconds to sleep before retry number ``retry`` (0-based), or None to stop retrying.

    Without Retry-After: ``base * 2**retry`` capped at ``max_delay``, with "equal jitter" (a
    random point in its upper half) so that clients that failed together do not retry
    together. A server's Retry-After is obeyed exactly; one longer than ``max_delay`` stops.
    """
    if retry >= policy.max_retries:
        return None
    if retry_after is not None:
        return retry_after if retry_after <= policy.max_delay else None
    ceiling = min(policy.max_delay, policy.base_delay * 2.0**retry)
    return ceiling * (0.5 + 0.5 * random_fraction())


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None
