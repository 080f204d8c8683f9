"""`BudgetSession.asend` with the count of what it sends (the gateway's, made in the worker
thread it decided in): a reply whose report matches that count is checked for a silent
truncation on the event loop, with no worker-thread hop; one with a gap below it is checked in
a worker thread, as `arun` does, and the truncation is found the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from tests.agent.conversations import long_conversation

from ctxbudget.agent.budget_session import BudgetSession, Reply
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Request
from ctxbudget.messages.usage import Usage

SERVED = 2048


def _session(counter: RequestCounter, served: list[int]) -> BudgetSession:
    def served_window() -> int:
        served.append(SERVED)  # asked: a blocking call to the server in the gateway
        return SERVED

    return BudgetSession(
        window=16_384,
        counter=counter,
        strategy="truncate",
        max_output_tokens=64,
        served_window=served_window,
    )


def _spy_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hops: list[str] = []
    plain = asyncio.to_thread

    async def spying(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", repr(func)))
        return await plain(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spying)
    return hops


def _step(
    session: BudgetSession, request: Request, reported: Callable[[int], int]
) -> tuple[Reply, list[int]]:
    """One `prepare` then `asend` with the count of what is sent; the server reports
    ``reported(our count)``. Returns the reply and the counts sent."""
    sent_counts: list[int] = []

    async def send(sent: Request) -> Reply:
        tokens = session.counter.count(sent).total
        sent_counts.append(tokens)
        return Reply(Usage(input_tokens=reported(tokens), output_tokens=5), "stop")

    async def go() -> Reply:
        sent = session.prepare(request, new_turn=True)
        counted = session.counter.count(sent)
        return await session.asend(
            sent, send, reply=lambda r: r, retry_truncated=True, counted=counted
        )

    return asyncio.run(go()), sent_counts


def test_a_matching_report_is_checked_without_a_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    hops = _spy_hops(monkeypatch)
    counter, served = RequestCounter("qwen3"), []
    session = _session(counter, served)
    small = long_conversation(words=20, turns=2)
    assert not session.usage_trust.whole_prompts
    _step(session, small, lambda tokens: tokens)
    assert hops == []  # before: one hop (`_truncated`) every step
    # What the check in the thread did, done here: a whole report seen.
    assert session.usage_trust.whole_prompts
    assert served == []


def test_a_gap_is_checked_in_a_thread_and_found(monkeypatch: pytest.MonkeyPatch) -> None:
    counter, served = RequestCounter("qwen3"), []
    session = _session(counter, served)
    small = long_conversation(words=20, turns=2)
    large = long_conversation(words=100, turns=24)
    _step(session, small, lambda tokens: tokens)  # the server reports whole prompts
    hops = _spy_hops(monkeypatch)
    reply, sent = _step(session, large, lambda tokens: min(tokens, SERVED - 100))
    assert hops[0] == "_truncated"  # the gap: checked off the loop (it may ask the server)
    assert session.window == SERVED  # the truncation found, the served window adopted
    assert len(sent) == 2 and sent[1] <= SERVED - 100  # compacted and sent once more
    assert reply.usage.input_tokens == sent[1]
