"""The live Agent keeps the ctxbudget rule's learned reply reserve (issue 14): after a reply far
larger than the max output it asked for, it compacts earlier."""

from __future__ import annotations

from ctxbudget.agent.loop import Agent
from ctxbudget.counting import RequestCounter
from ctxbudget.providers.mock import MockProvider


def _agent(window: int) -> tuple[Agent, MockProvider]:
    counter = RequestCounter("qwen3")
    provider = MockProvider(None, counter=counter)  # no window: it never refuses
    agent = Agent(provider, window=window, counter=counter, max_output_tokens=200)
    return agent, provider


def test_a_reply_past_max_output_raises_the_reserve() -> None:
    agent, provider = _agent(4_000)
    # A server that ignores max_tokens: a reply of about 2,000 tokens to a 200-token limit.
    provider.enqueue("word " * 2_000, "short")
    agent.run_turn("first")
    assert agent.largest_reply > 1_500
    # Checked after the step: the context is under the fixed line, over the learned one.
    assert [c.trigger for c in agent.compactions] == ["context_pressure"]
    assert agent.compactions[0].tokens_before < agent.policy.threshold(agent.window)


def test_replies_within_max_output_change_nothing() -> None:
    agent, provider = _agent(6_000)
    provider.enqueue("word " * 100, "short")
    agent.run_turn("first")
    agent.run_turn("second")
    assert agent.largest_reply <= 200
    assert not agent.compactions
