"""The adapters' guard is a `BudgetSession`: it decides as `Agent` does (the learned reply
reserve, the per-call compaction cap) and takes its summarizer per call, not as an attribute."""

from __future__ import annotations

from ctxbudget.counting import RequestCounter
from ctxbudget.integrations._guard import ContextGuard
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage

WINDOW = 8192


def _at(tokens: int) -> Request:
    """A request whose usage-first size is ``tokens``: the reply's report plus a short tail."""
    reply = Message(
        role="assistant", content="ok", usage=Usage(input_tokens=tokens - 1, output_tokens=1)
    )
    return Request(messages=(Message(role="user", content="hi"), reply), max_output_tokens=512)


def test_the_guard_keeps_the_largest_reply_free_as_the_agent_does() -> None:
    counter = RequestCounter("qwen3")
    guard = ContextGuard(window=WINDOW, counter=counter, max_output_tokens=512)
    policy = guard.policy
    large = 3000
    learned = policy.threshold_in_session(WINDOW, largest_reply=large)
    plain = policy.threshold(WINDOW)
    assert learned < plain  # the case is one where the two decisions part
    between = _at((learned + plain) // 2)
    tokens = guard.estimate(between).tokens
    assert learned < tokens <= plain
    assert not guard.should_compact(between)  # no reply seen yet: the plain line
    guard.record(Usage(input_tokens=1000, output_tokens=large))
    assert guard.largest_reply == large
    assert guard.should_compact(between)  # as Agent: the largest reply is kept free


def test_the_guard_caps_pressure_compactions_per_call() -> None:
    counter = RequestCounter("qwen3")
    guard = ContextGuard(window=WINDOW, counter=counter, max_output_tokens=512)
    over = _at(WINDOW - 10)
    guard.turn_compactions = guard.max_compactions_per_turn
    assert not guard.should_compact(over)  # capped, as Agent's turn
    guard.begin_turn()
    assert guard.should_compact(over)
