"""Known windows and the suggested window of the terminal hint."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.replay.windows import known_window, suggest_window


@settings(max_examples=300)
@given(st.integers(min_value=100, max_value=10**10))
def test_suggested_window_is_round_and_85_to_90_percent_full(peak: int) -> None:
    window = suggest_window(peak)
    assert 0.85 <= peak / window <= 0.90
    digits = str(window).rstrip("0")
    assert len(digits) <= 3  # a number a person would type


@given(st.integers(min_value=0, max_value=99))
def test_tiny_peaks_still_get_a_window_above_them(peak: int) -> None:
    assert suggest_window(peak) > peak


def test_known_window_ignores_provider_prefix_and_case() -> None:
    assert known_window("anthropic/Claude-Sonnet-4-5") == known_window("claude-sonnet-4-5")
    assert known_window("nosuch-model") is None
