"""The agent loop on the mock model: the seed's experiment, every rule, overflow recovery."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable
from typing import Any

import pytest

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.budget.rules import POLICY_NAMES
from ctxbudget.counting import RequestCount, RequestCounter
from ctxbudget.errors import CompactionError, ContextOverflowError, PromptFloorExceeded
from ctxbudget.messages.model import Request, extends
from ctxbudget.messages.usage import Usage
from ctxbudget.providers.base import Completion
from ctxbudget.providers.mock import MockProvider

MakeAgent = Callable[..., Any]
SEED_COMPACTIONS = 5  # the seed's chapter 11: 17 turns in a 1,200 window, 5 compactions


def _run(agent_tuple: tuple, turns: int) -> None:  # type: ignore[type-arg]
    agent, provider, _ = agent_tuple
    scene = provider.scenario
    for t in range(1, turns + 1):
        agent.run_turn(scene.user_message(t))


def _kinds(events: list[LoopEvent], kind: str) -> list[LoopEvent]:
    return [e for e in events if e.kind == kind]


def test_seed_experiment_beats_the_sawtooth(make_agent: MakeAgent) -> None:
    made = make_agent("chat", window=1200)
    _run(made, 17)
    agent, provider, _ = made
    turns = [c.turn for c in agent.compactions]
    assert agent.overflows == 0
    assert all(c.trigger == "context_pressure" for c in agent.compactions)
    assert 0 < len(turns) < SEED_COMPACTIONS
    assert all(b - a > 1 for a, b in itertools.pairwise(turns)), turns
    sent = [provider.prompt_tokens(r) for r in provider.requests if r.tools]
    assert max(sent) <= 1200 - (provider.scenario.max_output if provider.scenario else 0)
    assert agent.max_request_tokens == max(sent)
    assert 400 <= agent.floor_tokens <= 600  # "about 500", like the seed's 524


@pytest.mark.parametrize("window", [2048, 3000, 4096, 6144, 12_000])
def test_ctxbudget_rule_never_overflows_coding(make_agent: MakeAgent, window: int) -> None:
    made = make_agent("coding", window=window)
    _run(made, 8)
    agent, provider, events = made
    assert agent.overflows == 0 and not _kinds(events, "overflow")
    for request in provider.requests:
        assert provider.prompt_tokens(request) + (request.max_output_tokens or 0) <= window
    # every compaction leaves room for several turns: the result is under half the room + floor
    for c in agent.compactions:
        assert c.tokens_after < c.tokens_before


@pytest.mark.parametrize("window", [900, 1200, 1600, 2400, 5000])
def test_ctxbudget_rule_never_overflows_chat(make_agent: MakeAgent, window: int) -> None:
    made = make_agent("chat", window=window)
    _run(made, 20)
    assert made[0].overflows == 0


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_rule_completes_the_coding_run(make_agent: MakeAgent, policy: str) -> None:
    made = make_agent("coding", window=8192, policy=policy)
    _run(made, 6)
    agent = made[0]
    assert agent.turn == 6
    # the cap holds whatever the rule: never more than 3 compactions in a user turn
    per_turn = [sum(1 for c in agent.compactions if c.turn == t) for t in range(1, 7)]
    assert max(per_turn) <= agent.max_compactions_per_turn
    if policy == "ctxbudget":
        assert agent.overflows == 0


class UnderCounter:
    """A deliberately bad estimator: every count scaled down (a chars/4 rule on Chinese)."""

    def __init__(self, inner: RequestCounter, factor: float) -> None:
        self.inner = inner
        self.factor = factor

    def count(self, request: Request) -> RequestCount:
        c = self.inner.count(request)

        def s(n: int) -> int:
            return int(n * self.factor)

        per = tuple(s(n) for n in c.per_message)
        return dataclasses.replace(
            c,
            counter="under",
            kind="estimate",
            system=s(c.system),
            tools=s(c.tools),
            messages=sum(per),
            per_message=per,
            floor=s(c.system) + s(c.tools),
            total=s(c.system) + s(c.tools) + sum(per),
        )


def test_under_counting_estimator_compacts_and_retries_once(
    make_agent: MakeAgent, qwen3: RequestCounter
) -> None:
    made = make_agent("coding", window=4096, counter=UnderCounter(qwen3, 0.5))
    _run(made, 8)
    agent, _, events = made
    assert agent.overflows >= 1
    kinds = [e.kind for e in events if e.kind in ("overflow", "compaction", "request", "usage")]
    for i, kind in enumerate(kinds):
        if kind == "overflow":
            # overflow -> exactly one compaction (context_overflow) -> one retried request -> ok
            assert kinds[i + 1 : i + 4] == ["compaction", "request", "usage"], kinds[i : i + 5]
    overflow_compactions = [c for c in agent.compactions if c.trigger == "context_overflow"]
    assert len(overflow_compactions) == agent.overflows


def test_smaller_real_window_is_adopted_after_one_overflow(make_agent: MakeAgent) -> None:
    made = make_agent("coding", window=8192, server_window=4096)
    _run(made, 8)
    agent, _, events = made
    assert agent.overflows == 1
    changed = _kinds(events, "window_changed")
    assert [(e.data["old"], e.data["window"]) for e in changed] == [(8192, 4096)]
    assert agent.window == 4096 and agent.summary().to_json()["configured_window"] == 8192
    later = events[events.index(changed[0]) :]
    assert not _kinds(later, "overflow")


def test_second_overflow_raises_compaction_error(make_agent: MakeAgent) -> None:
    agent, provider, _ = make_agent("chat", window=1200)
    provider.enqueue("fine")
    agent.run_turn(provider.scenario.user_message(1))  # type: ignore[union-attr]
    provider.enqueue(
        ContextOverflowError("too long", limit=1150), ContextOverflowError("still too long")
    )
    with pytest.raises(CompactionError, match="still exceeds") as info:
        agent.run_turn(provider.scenario.user_message(2))  # type: ignore[union-attr]
    assert "\n" not in str(info.value)
    assert agent.overflows == 2


def test_prompt_floor_is_checked_before_the_first_request(make_agent: MakeAgent) -> None:
    agent, provider, _ = make_agent("chat", window=500)
    with pytest.raises(PromptFloorExceeded):
        agent.run_turn("topic 1: hi")
    assert provider.requests == []


def test_compaction_cap_per_turn(make_agent: MakeAgent) -> None:
    # Pi's 16,384 reserve in a 8,192 window: over the line before every request.
    made = make_agent("coding", window=8192, policy="codex", max_compactions_per_turn=1)
    _run(made, 6)
    agent, _, _ = made
    assert all(
        sum(1 for c in agent.compactions if c.turn == t) <= 1 for t in range(1, agent.turn + 1)
    )


def test_usage_is_recorded_with_the_compaction_id(make_agent: MakeAgent) -> None:
    made = make_agent("chat", window=1200)
    _run(made, 9)
    agent = made[0]
    replies = [m for m in agent.messages if m.role == "assistant"]
    assert replies and all(m.usage is not None for m in replies)
    assert replies[-1].usage is not None
    assert replies[-1].usage.compaction_id == agent.compaction_id is not None


def test_adopting_a_small_window_without_a_reply_limit_still_fits(make_agent: MakeAgent) -> None:
    """Ollama's classic case: configured 32K, the server has 4,096, no max output given."""
    made = make_agent("coding", window=32_768, server_window=4096, max_output_tokens=None)
    _run(made, 6)
    agent, provider, events = made
    assert agent.window == 4096 and agent.overflows == 1
    assert agent.max_output_tokens == 1024  # a quarter of the adopted window
    later = events[events.index(_kinds(events, "window_changed")[0]) :]
    assert not _kinds(later, "overflow")
    assert all(r.max_output_tokens is not None for r in provider.requests)


def test_requests_within_a_run_are_made_by_appending(make_agent: MakeAgent) -> None:
    """Each request the loop counts extends the one before (``Request.append``) unless a
    compaction changed the history, so the counter is spared comparing it; counts stay exact."""
    seen: list[Request] = []

    class Recording(RequestCounter):
        def count(self, request: Request) -> RequestCount:
            seen.append(request)
            return super().count(request)

    made = make_agent("coding", window=4096, counter=Recording("qwen3"))
    _run(made, 6)
    agent = made[0]
    assert agent.compactions  # the run also crossed compactions
    pairs = list(itertools.pairwise(seen))
    grown = [(a, b) for a, b in pairs if a.messages == b.messages[: len(a.messages)] != b.messages]
    appended = [(a, b) for a, b in pairs if extends(b, a.messages)]
    assert all(pair in grown for pair in appended)  # only where it really is an append
    # Only a compaction's side requests (one message at a time) come between two of the loop's.
    assert len(grown) - len(appended) <= len(agent.compactions)
    assert len(appended) >= 20
    fresh = RequestCounter("qwen3")
    assert all(Recording("qwen3").count(r) == fresh.count(r) for r in seen[-5:])


class WordCountProvider(MockProvider):
    """The mock server with the usage pydantic-ai's ``FunctionModel`` reports: 50 tokens of
    overhead plus the words of the request, not its tokens (about a third of them here)."""

    def complete(self, request: Request) -> Completion:
        done = super().complete(request)
        words = 50 + len((request.system or "").split())
        words += sum(len(m.text.split()) for m in request.messages)
        usage = Usage(input_tokens=words, output_tokens=max(1, len(done.message.text.split())))
        message = dataclasses.replace(done.message, usage=usage)
        return Completion(message=message, usage=usage, stop_reason=done.stop_reason)


def test_a_word_count_usage_is_passed_over_not_read_as_a_truncation(
    qwen3: RequestCounter, caplog: pytest.LogCaptureFixture
) -> None:
    """A report far below the exact count from the first request on is no count of the prompt:
    neither the base of the next count nor a truncation (the window stays, nothing overflows),
    and the loop says so once."""
    provider = WordCountProvider("coding", window=4096, counter=qwen3)
    scene = provider.scenario
    assert scene is not None
    events: list[LoopEvent] = []
    agent = Agent(
        provider, system=scene.system, tools=scene.tools, window=4096, counter=qwen3,
        tool_executor=scene.run_tool, max_output_tokens=scene.max_output,
        on_event=events.append,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="ctxbudget"):
        for t in range(1, 9):
            agent.run_turn(scene.user_message(t))
    assert agent.overflows == 0 and agent.window == 4096
    assert not _kinds(events, "overflow") and not _kinds(events, "window_changed")
    assert agent.compactions and all(c.trigger == "context_pressure" for c in agent.compactions)
    for request in provider.requests:
        assert provider.prompt_tokens(request) + (request.max_output_tokens or 0) <= 4096
    gap = agent.usage_trust.passed_over
    assert gap is not None and gap.reported < gap.counted / 2
    said = [r.getMessage() for r in caplog.records if "usage report" in r.getMessage()]
    assert len(said) == 1


def test_an_agent_without_a_system_prompt_sends_none_and_an_empty_one_an_empty_turn() -> None:
    """``system`` defaults to None (no system message: Qwen2.5 renders its default prompt);
    ``system=""`` is an empty system message, counted as its template renders it."""
    from ctxbudget.agent.loop import Agent
    from ctxbudget.messages.openai import request_to_openai
    from ctxbudget.providers.mock import MockProvider
    from ctxbudget.tokens.registry import get_tokenizer

    counter = RequestCounter("qwen2.5")
    provider = MockProvider(None, counter=counter)
    plain = Agent(provider, window=4_000, counter=counter).request()
    empty = Agent(provider, window=4_000, counter=counter, system="").request()
    assert plain.system is None and request_to_openai(plain)["messages"] == []
    assert request_to_openai(empty)["messages"] == [{"role": "system", "content": ""}]
    # Qwen2.5's default prompt against an empty turn, each with the reply primer.
    turn = "<|im_start|>system\n<|im_end|>\n<|im_start|>assistant\n"
    assert counter.count(empty).total == len(get_tokenizer("qwen2.5").encode(turn, special=True))
    assert counter.count(plain).total > counter.count(empty).total
