"""The forwarded reply limit: what the client asked, held to what the window leaves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxbudget.budget.reply_room import clamp_max_tokens
from ctxbudget.errors import InvalidWindowError


def test_claude_codes_128k_ask_is_clamped_to_the_room_left() -> None:
    # Claude Code asks for 128,000 on every request; a 32K local window with a 20K prompt
    # leaves 12,768.
    assert clamp_max_tokens(128_000, window=32_768, prompt_tokens=20_000, reserve=4_096) == 12_768


def test_a_small_ask_is_forwarded_as_asked() -> None:
    assert clamp_max_tokens(1_000, window=32_768, prompt_tokens=20_000, reserve=4_096) == 1_000


def test_never_below_the_rules_reserve() -> None:
    # A prompt counted near the window's end still gets the reply room the rule kept free.
    assert clamp_max_tokens(128_000, window=8_192, prompt_tokens=8_000, reserve=2_048) == 2_048
    assert clamp_max_tokens(128_000, window=8_192, prompt_tokens=9_000, reserve=0) == 1


def test_no_ask_stays_none_and_a_bad_window_is_refused() -> None:
    assert clamp_max_tokens(None, window=8_192, prompt_tokens=100, reserve=512) is None
    with pytest.raises(InvalidWindowError):
        clamp_max_tokens(100, window=0, prompt_tokens=1, reserve=1)


@given(
    asked=st.integers(1, 1_000_000),
    window=st.integers(1, 1_000_000),
    prompt=st.integers(0, 1_000_000),
    reserve=st.integers(0, 100_000),
)
def test_clamp_bounds(asked: int, window: int, prompt: int, reserve: int) -> None:
    got = clamp_max_tokens(asked, window=window, prompt_tokens=prompt, reserve=reserve)
    assert got is not None
    assert 1 <= got <= asked
    assert got >= min(asked, reserve)
    assert got <= max(window - prompt, reserve, 1)
