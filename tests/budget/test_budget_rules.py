"""Trigger rules: every number from the seeds, the > vs >= edges and bad input."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.budget.rules import (
    DEFAULT_COMPACTION_RESERVE,
    DEFAULT_REPLY_RESERVE,
    POLICY_NAMES,
    REPLY_RESERVE_CAP,
    CoreCoderPolicy,
    CtxbudgetPolicy,
    Policy,
    SessionEvidence,
    get_policy,
    validate_window,
)
from ctxbudget.errors import ConfigError, InvalidWindowError, UnknownNameError
from ctxbudget.replay.replay import replay_window
from ctxbudget.replay.trace import Call, Trace


# Seed 000 (mini-letta tests and exercise 11.7): letta-code's threshold per window.
@pytest.mark.parametrize(
    ("window", "threshold"),
    [
        (200_000, 183_616),
        (128_000, 111_616),
        (100_000, 83_616),
        (32_000, 25_600),
        (10_000, 8_000),
        (8_192, 6_554),
        (2_000, 1_600),
        (1_000, 800),
        (1_000_000, 983_616),
    ],
)
def test_letta_thresholds(window: int, threshold: int) -> None:
    letta = get_policy("letta")
    assert letta.threshold(window) == threshold
    assert letta.fires(threshold + 1, window)
    assert not letta.fires(threshold, window)  # strictly greater


# Seed 003's table: the line as a share of the window, one decimal.
@pytest.mark.parametrize(
    ("name", "window", "percent"),
    [
        ("pi", 40_960, 60.0),
        ("pi", 200_000, 91.8),
        ("pi", 1_000_000, 98.4),
        ("opencode", 40_960, 21.9),
        ("opencode", 200_000, 84.0),
        ("opencode", 1_000_000, 96.8),
        ("opencode-input-limit", 40_960, 51.2),
        ("opencode-input-limit", 200_000, 90.0),
        ("opencode-input-limit", 1_000_000, 98.0),
        ("codex", 40_960, 90.0),
        ("codex", 200_000, 90.0),
        ("codex", 1_000_000, 90.0),
        ("corecoder", 40_960, 50.0),
        ("corecoder", 200_000, 50.0),
        ("corecoder", 1_000_000, 50.0),
    ],
)
def test_seed_percentages(name: str, window: int, percent: float) -> None:
    line = get_policy(name).threshold(window)
    assert round(100 * line / window, 1) == percent


@pytest.mark.parametrize("window", [40_960, 200_000, 1_000_000])
def test_corecoder_tiers_are_50_70_90_percent(window: int) -> None:
    tiers = get_policy("corecoder").tiers(window)
    assert tiers is not None
    assert [round(100 * t / window) for t in tiers] == [50, 70, 90]


def test_seed_pi_reserve_10000_on_100000() -> None:
    pi = get_policy("pi", reserve_tokens=10_000)
    assert pi.fires(95_000, 100_000)
    assert not pi.fires(89_000, 100_000)


@pytest.mark.parametrize("name", ["pi", "opencode", "opencode-input-limit"])
def test_seed_at_2400_pi_and_opencode_compact_before_the_first_request(name: str) -> None:
    policy = get_policy(name)
    assert policy.threshold(2_400) <= 0
    assert policy.compacts_every_request(2_400)
    assert policy.fires(0, 2_400)


@pytest.mark.parametrize("name", ["letta", "codex", "corecoder"])
def test_at_2400_the_percentage_rules_still_leave_room(name: str) -> None:
    assert not get_policy(name).compacts_every_request(2_400)


def test_pi_window_below_its_reserve_is_reported_as_is() -> None:
    assert get_policy("pi").threshold(2_400) == 2_400 - 16_384


@pytest.mark.parametrize(("name", "at"), [("opencode", 8_960), ("codex", 36_864)])
def test_greater_or_equal_rules_fire_at_the_line(name: str, at: int) -> None:
    policy = get_policy(name)
    assert policy.threshold(40_960) == at
    assert policy.fires(at, 40_960)
    assert not policy.fires(at - 1, 40_960)


def test_codex_takes_the_smaller_of_configured_and_90_percent() -> None:
    assert get_policy("codex", configured_limit=200_000).threshold(272_000) == 200_000
    assert get_policy("codex", configured_limit=300_000).threshold(272_000) == 244_800


def test_opencode_configured_reserved_applies_only_with_an_input_limit() -> None:
    with_limit = get_policy("opencode", input_limit=100_000, reserved=5_000)
    assert with_limit.threshold(128_000) == 95_000
    assert get_policy("opencode", reserved=5_000).threshold(128_000) == 128_000 - 32_000


@pytest.mark.parametrize(
    ("tokens", "messages", "stage"),
    [
        (50_000, 20, None),
        (50_001, 20, "snip"),
        (70_001, 20, "summarize"),
        (70_001, 10, "snip"),  # summarize needs more than 10 messages
        (90_001, 5, "collapse"),
        (90_001, 4, "snip"),  # collapse needs more than 4
    ],
)
def test_corecoder_stages(tokens: int, messages: int, stage: str | None) -> None:
    policy = get_policy("corecoder")
    assert isinstance(policy, CoreCoderPolicy)
    assert policy.stage(tokens, 100_000, messages) == stage


@pytest.mark.parametrize(
    ("max_output", "reply"),
    [(None, DEFAULT_REPLY_RESERVE), (1_000, 1_000), (128_000, REPLY_RESERVE_CAP)],
)
def test_ctxbudget_reply_reserve_follows_max_output_capped(
    max_output: int | None, reply: int
) -> None:
    policy = get_policy("ctxbudget", max_output=max_output)
    assert isinstance(policy, CtxbudgetPolicy)
    assert policy.reply_reserve(200_000) == reply
    line = 200_000 - reply - DEFAULT_COMPACTION_RESERVE
    assert policy.threshold(200_000) == line
    assert policy.fires(line + 1, 200_000)
    assert not policy.fires(line, 200_000)


@pytest.mark.parametrize(
    ("window", "reply", "compaction"),
    [
        (1_200, 300, 75),
        (2_400, 600, 150),
        (4_096, 1_024, 256),
        (16_384, 4_096, 1_024),
        (32_768, 4_096, 2_048),
        (200_000, 4_096, 2_048),
    ],
)
def test_ctxbudget_default_reserves_shrink_with_small_windows(
    window: int, reply: int, compaction: int
) -> None:
    """Without a max output the reserves are min(4,096, W/4) + min(2,048, W/16)."""
    policy = get_policy("ctxbudget")
    assert isinstance(policy, CtxbudgetPolicy)
    assert policy.reply_reserve(window) == reply
    assert policy.compaction_reserve_for(window) == compaction
    assert policy.threshold(window) == window - reply - compaction > 0
    fixed = get_policy("ctxbudget", max_output=100, compaction_reserve=50)
    assert fixed.threshold(window) == window - 150


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_cites_a_source_and_a_checkpoint(name: str) -> None:
    policy = get_policy(name)
    assert policy.name == name
    assert policy.source
    assert policy.checked
    assert set(policy.checked) <= {"before_request", "after_step", "task_end"}


def test_when_each_harness_checks() -> None:
    assert get_policy("pi").checked == ("task_end",)
    assert get_policy("opencode").checked == ("after_step",)
    assert "before_request" in get_policy("ctxbudget").checked


@pytest.mark.parametrize(
    "window", [0, -1, -200_000, math.nan, math.inf, -math.inf, "200000", None, True, 1.5]
)
@pytest.mark.parametrize("name", POLICY_NAMES)
def test_invalid_windows_are_a_clear_error(name: str, window: object) -> None:
    with pytest.raises(InvalidWindowError) as info:
        get_policy(name).threshold(window)  # type: ignore[arg-type]
    assert "window" in str(info.value)
    assert "\n" not in str(info.value)


def test_validate_window_accepts_whole_floats() -> None:
    assert validate_window(200_000.0) == 200_000


def test_unknown_policy_lists_the_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_policy("claude-code")
    assert all(n in str(info.value) for n in POLICY_NAMES)


@pytest.mark.parametrize(
    ("name", "overrides", "words"),
    [
        ("pi", {"reserve": 10}, "no parameter 'reserve'"),
        ("letta", {"name": "x"}, "no parameter 'name'"),
        ("pi", {"reserve_tokens": -1}, "reserve_tokens"),
        ("pi", {"reserve_tokens": "16k"}, "reserve_tokens"),
        ("corecoder", {"snip_ratio": 1.5}, "snip_ratio"),
        ("ctxbudget", {"max_output": True}, "max_output"),
    ],
)
def test_bad_overrides_are_config_errors(
    name: str, overrides: dict[str, object], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        get_policy(name, **overrides)


@settings(max_examples=100)
@given(window=st.integers(1, 10**8), name=st.sampled_from(POLICY_NAMES))
def test_fires_is_monotone_and_the_line_is_below_the_window(window: int, name: str) -> None:
    policy: Policy = get_policy(name)
    line = policy.threshold(window)
    assert line < window
    assert policy.fires(window, window)  # a full window is always over the line
    if line >= 0:
        assert policy.fires(line + 1, window)
        assert not policy.fires(line - 1, window)


@settings(max_examples=60)
@given(small=st.integers(1, 10**6), extra=st.integers(0, 10**6))
def test_reserve_rules_approach_the_window(small: int, extra: int) -> None:
    """A fixed reserve is a larger share of a larger window; a percentage stays flat."""
    fixed = {"max_output": DEFAULT_REPLY_RESERVE, "compaction_reserve": DEFAULT_COMPACTION_RESERVE}
    for p in (get_policy("pi"), get_policy("ctxbudget", **fixed)):
        big = small + extra
        assert p.threshold(big) / big >= p.threshold(small) / small


# window, rule's max_output, request's max_output, largest reply so far -> whole reserve
@pytest.mark.parametrize(
    ("window", "configured", "asked", "largest", "reserve"),
    [
        (200_000, None, None, 0, 4_096 + 2_048),  # nothing learned: the fixed reserves
        (200_000, None, None, 5_000, 5_000),  # replies seen, no max output: they are the evidence
        (200_000, None, None, 500, 1_024 + 2_048),  # ... with the learned floor under them
        (2_048, None, None, 100, 512 + 128),  # the floor shrinks with a small window
        (200_000, 4_096, None, 500, 4_096 + 2_048),  # a known max output keeps its reserve
        (200_000, None, None, 29_018, 29_018),  # the reply: learned, past the 16K cap
        (32_000, None, None, 29_018, 16_000),  # learning stops at half the window
        (200_000, None, 8_000, 0, 8_000 + 2_048),  # the request's max output, when recorded
        (200_000, 2_000, 8_000, 0, 8_000 + 2_048),  # the request's wins over the rule's
        (200_000, None, 64_000, 0, 16_384 + 2_048),  # a max output is capped as before
        (200_000, 4_000, None, 9_000, 9_000),  # a server that ignored the max output
    ],
)
def test_ctxbudget_learns_its_reserve(
    window: int, configured: int | None, asked: int | None, largest: int, reserve: int
) -> None:
    rule = CtxbudgetPolicy(max_output=configured)
    assert rule.reserve_in_session(window, largest_reply=largest, max_output=asked) == reserve
    line = rule.threshold_in_session(window, largest_reply=largest, max_output=asked)
    assert line == window - reserve
    assert rule.fires_in_session(line + 1, window, largest_reply=largest, max_output=asked)
    assert not rule.fires_in_session(line, window, largest_reply=largest, max_output=asked)


@pytest.mark.parametrize("name", ["letta", "pi", "opencode", "codex", "corecoder"])
def test_harness_rules_learn_nothing(name: str) -> None:
    rule = get_policy(name)
    for tokens in (0, 100_000, 150_000, 190_000):
        assert rule.fires_in_session(tokens, 200_000, largest_reply=50_000) == rule.fires(
            tokens, 200_000
        )


def test_without_session_evidence_the_line_is_the_fixed_one() -> None:
    rule = CtxbudgetPolicy()
    for window in (4_096, 32_000, 200_000):
        assert rule.threshold_in_session(window) == rule.threshold(window)


# Issue 30: the context's own growth per step. A step (prompt of call i+1 less prompt of call
# i) holds call i's reply and what came after it; the rule keeps the larger of the two free.
# window, largest reply, largest step -> whole reserve (no max output known, as in a replay)
@pytest.mark.parametrize(
    ("window", "largest", "growth", "reserve"),
    [
        (200_000, 500, 0, 1_024 + 2_048),  # no step seen: as before
        (200_000, 500, 2_000, 1_024 + 2_048),  # a step under the fixed reserves changes nothing
        (200_000, 500, 28_000, 28_000),  # the tool result: kept free
        (200_000, 16_000, 17_000, 17_000),  # a step holds its reply: the larger, not the sum
        (200_000, 29_018, 20_000, 29_018),  # a reply larger than any step (before a compaction)
        (200_000, 500, 150_000, 50_000),  # an absurd step stops at a quarter of the window
        (32_000, 500, 20_297, 8_000),  # ... as in a small window (the Pi session's largest step)
        (32_000, 16_121, 20_297, 16_000),  # the reply keeps its own cap, W/2
    ],
)
def test_ctxbudget_learns_the_context_growth(
    window: int, largest: int, growth: int, reserve: int
) -> None:
    rule = CtxbudgetPolicy()
    seen = {"largest_reply": largest, "largest_growth": growth}
    assert rule.reserve_in_session(window, **seen) == reserve
    line = rule.threshold_in_session(window, **seen)
    assert line == window - reserve
    assert rule.fires_in_session(line + 1, window, **seen)
    assert not rule.fires_in_session(line, window, **seen)


def _first_fire(prompts: list[int], replies: list[int], window: int) -> int | None:
    """The first call at which the ctxbudget rule fires, learning as the loop and replay do."""
    rule, seen = CtxbudgetPolicy(), SessionEvidence()
    for i, (prompt, reply) in enumerate(zip(prompts, replies, strict=True)):
        now = seen.seeing(prompt)
        if rule.fires_in_session(
            prompt, window, largest_reply=now.largest_reply, largest_growth=now.largest_growth
        ):
            return i
        seen = seen.after_call(prompt, reply)
    return None


def test_a_jump_already_seen_does_not_cross_the_window() -> None:
    """The issue's case, on the replay: a 28K tool result early on, steps of 2K, then the same
    28K again near the top of a 200K window. The old rule (replies only, 98.5% here) let the
    context reach 204K before it fired; now it fires while a 28K step still fits."""
    prompts = [20_000, 48_000, *range(50_000, 177_000, 2_000), 204_000]
    trace = Trace(
        format="openai-log",
        calls=tuple(
            Call(index=i, context_tokens=c, output_tokens=300, task_start=i == 0)
            for i, c in enumerate(prompts)
        ),
        model="m",
        window=None,
    )
    replayed = replay_window(trace, 200_000, [CtxbudgetPolicy()]).policies[0]
    fire = replayed.first_trigger
    assert fire is not None
    assert fire == _first_fire(prompts, [300] * len(prompts), 200_000)  # replay = the loop's way
    assert prompts[fire] <= 200_000  # it fired while the history still fit
    assert fire < len(prompts) - 1  # before the second 28K step, not at it
    assert all(p + 28_000 <= 200_000 for p in prompts[:fire])  # not firing was safe


@settings(max_examples=200)
@given(
    window=st.integers(4_096, 1_000_000),
    jump=st.floats(0.01, 0.25),
    creep=st.lists(st.floats(0, 0.04), min_size=1, max_size=60),
    replies=st.lists(st.integers(0, 20_000), min_size=62, max_size=62),
    start=st.floats(0, 0.6),
)
def test_a_step_no_larger_than_one_seen_never_crosses_the_window(
    window: int, jump: float, creep: list[float], replies: list[int], start: float
) -> None:
    """A session makes one jump (up to the W/4 cap), then creeps up by small steps: at every
    check where the rule does not fire, the same jump again would leave the next request
    inside the window. Shares of the window; the replies are any the session might show."""
    rule, seen = CtxbudgetPolicy(), SessionEvidence()
    step = int(jump * window)
    prompts = [int(start * window), int(start * window) + step]
    for share in creep:
        prompts.append(prompts[-1] + int(share * window))
    for i, (prompt, reply) in enumerate(zip(prompts, replies, strict=False)):
        now = seen.seeing(prompt)
        if rule.fires_in_session(
            prompt, window, largest_reply=now.largest_reply, largest_growth=now.largest_growth
        ):
            return  # the rule compacts here (the replay's first fire)
        if i >= 1:  # the jump has been seen
            assert prompt + step <= window
        seen = seen.after_call(prompt, reply)


@given(
    prompts=st.lists(st.integers(0, 10**6), min_size=1, max_size=30),
    replies=st.lists(st.integers(0, 10**5), min_size=30, max_size=30),
)
def test_session_evidence_learns_the_largest_step_and_reply(
    prompts: list[int], replies: list[int]
) -> None:
    seen = SessionEvidence()
    for prompt, reply in zip(prompts, replies, strict=False):
        seen = seen.after_call(prompt, reply)
    steps = [b - a for a, b in itertools.pairwise(prompts)]
    assert seen.largest_growth == max([0, *steps])  # drops (compactions) teach nothing
    assert seen.largest_reply == max(replies[: len(prompts)])
    assert seen.last_prompt == prompts[-1]
    # After a compaction the next prompt is not compared with the one before it.
    after = seen.after_compaction().after_call(prompts[-1] + 10**7, 0)
    assert after.largest_growth == seen.largest_growth
    assert seen.seeing(prompts[-1] + 5).largest_growth == max(seen.largest_growth, 5)


def test_the_growth_cap_keeps_room_after_a_compaction() -> None:
    """A single absurd step (90% of the window) costs at most a quarter of it (or the fixed
    reserves, in a window so small that they are larger): the line stays at 3/4 W, above where
    a compaction leaves the context (half the room under the line)."""
    rule = CtxbudgetPolicy()
    for window in (4_096, 32_000, 200_000, 1_000_000):
        line = rule.threshold_in_session(window, largest_growth=window * 9 // 10)
        assert line == window - max(window // 4, rule.reserve(window))
        assert line > rule.threshold(window) // 2
