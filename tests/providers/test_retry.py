"""The retry policy: retryable statuses, Retry-After in both forms, bounded jittered backoff."""

from __future__ import annotations

import email.utils

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.errors import ConfigError
from ctxbudget.providers.retry import (
    DEFAULT_RETRY,
    RetryPolicy,
    backoff_delay,
    is_retryable_status,
    retry_after_seconds,
)

NOW = 1_750_000_000.0


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (200, False),
        (400, False),
        (401, False),
        (404, False),
        (408, True),
        (413, False),
        (429, True),
        (500, True),
        (501, False),
        (502, True),
        (503, True),
        (504, True),
        (505, False),
        (529, True),
    ],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"Retry-After": " 7 "}, 7.0),
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": email.utils.formatdate(NOW + 10, usegmt=True)}, 10.0),
        ({"Retry-After": email.utils.formatdate(NOW - 60, usegmt=True)}, 0.0),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        ({"retry-after-ms": "bad", "Retry-After": "9"}, 9.0),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers, now=lambda: NOW) == seconds


POLICY = RetryPolicy(max_retries=5, base_delay=1.0, max_delay=8.0, max_total_sleep=100.0)


@pytest.mark.parametrize(
    ("retry", "low", "high"),
    [(0, 0.5, 1.0), (1, 1.0, 2.0), (2, 2.0, 4.0), (3, 4.0, 8.0), (4, 4.0, 8.0)],
)
def test_backoff_doubles_with_equal_jitter_up_to_the_cap(
    retry: int, low: float, high: float
) -> None:
    assert backoff_delay(POLICY, retry, random_fraction=lambda: 0.0) == low
    assert backoff_delay(POLICY, retry, random_fraction=lambda: 1.0) == high


def test_backoff_stops_after_max_retries() -> None:
    assert backoff_delay(POLICY, 5) is None
    assert backoff_delay(RetryPolicy(max_retries=0), 0) is None


def test_retry_after_is_obeyed_exactly_until_the_cap() -> None:
    assert backoff_delay(POLICY, 0, retry_after=3.0) == 3.0
    assert backoff_delay(POLICY, 4, retry_after=0.0) == 0.0
    assert backoff_delay(POLICY, 0, retry_after=8.5) is None


@settings(max_examples=200)
@given(retry=st.integers(0, 50), fraction=st.floats(0.0, 1.0))
def test_backoff_is_bounded(retry: int, fraction: float) -> None:
    delay = backoff_delay(DEFAULT_RETRY, retry, random_fraction=lambda: fraction)
    if retry >= DEFAULT_RETRY.max_retries:
        assert delay is None
    else:
        assert delay is not None and 0 <= delay <= DEFAULT_RETRY.max_delay


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"max_retries": 1.5},
        {"max_retries": True},
        {"base_delay": -0.1},
        {"max_delay": float("inf")},
        {"max_total_sleep": float("nan")},
    ],
)
def test_bad_policies_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
