"""`BudgetSession.run` / `arun` with ``retry_truncated`` (the gateway's): a prompt the server
silently truncated is compacted in the window it serves and sent once more, its reply dropped;
without it (every other caller) the reply stays and the next request compacts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.agent.conversations import long_conversation

from ctxbudget.agent.budget_session import BudgetSession, Reply
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Request
from ctxbudget.messages.usage import Usage

SERVED = 2048
"""The context the (Ollama-like) server serves; the session believes 16K."""


class _Truncating:
    """A server that keeps at most ``SERVED`` tokens of a prompt and reports what it kept."""

    def __init__(self, counter: RequestCounter) -> None:
        self.counter = counter
        self.sent: list[int] = []

    def reply(self, request: Request) -> Reply:
        tokens = self.counter.count(request).total
        self.sent.append(tokens)
        return Reply(Usage(input_tokens=min(tokens, SERVED - 100), output_tokens=5), "stop")


def _session(counter: RequestCounter) -> BudgetSession:
    return BudgetSession(
        window=16_384,
        counter=counter,
        strategy="truncate",
        max_output_tokens=64,
        served_window=lambda: SERVED,
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("retry", [True, False])
def test_a_truncated_prompt_is_retried_compacted_only_when_asked(mode: str, retry: bool) -> None:
    counter = RequestCounter("qwen3")
    server = _Truncating(counter)
    session = _session(counter)
    small = long_conversation(words=20, turns=2)
    large = long_conversation(words=100, turns=24)
    assert counter.count(small).total < SERVED - 100 < SERVED < counter.count(large).total

    def run(request: Request) -> Reply:
        options: dict[str, Any] = {"reply": lambda r: r, "retry_truncated": retry}
        if mode == "sync":
            return session.run(request, server.reply, **options)

        async def send(sent: Request) -> Reply:
            return server.reply(sent)

        return asyncio.run(session.arun(request, send, **options))

    run(small)  # a whole prompt reported whole: the server is known to report whole prompts
    result = run(large)
    assert session.window == SERVED  # the served window, adopted either way
    if retry:
        assert len(server.sent) == 3  # the truncated request, then its compacted retry
        assert server.sent[2] <= SERVED - 100  # the retry was kept whole
        assert result.usage.input_tokens == server.sent[2]  # its reply is the one returned
        assert [c.trigger for c in session.compactions] == ["context_overflow"]
    else:
        assert len(server.sent) == 2  # the truncated one's reply stays (the Agent's way)
        assert session.compactions == []  # the next request compacts


def test_a_first_request_already_truncated_is_read_from_the_served_window() -> None:
    # No earlier report matched (the first request is over the server's context already), so
    # the usage trust alone passes the short report over; the served window shows the cut.
    counter = RequestCounter("qwen3")
    large = long_conversation(words=100, turns=24)
    short = Usage(input_tokens=SERVED - 100, output_tokens=5)
    asked: list[int] = []

    def served(answer: int | None) -> Any:
        def ask() -> int | None:
            asked.append(1)
            return answer

        return ask

    stated = BudgetSession(window=16_384, counter=counter, served_window=served(SERVED))
    found = stated.check_truncation(large, short)
    assert found is not None and found.limit == SERVED == stated.window
    # A server that states nothing is asked once, and its short reports stay passed over.
    asked.clear()
    silent = BudgetSession(window=16_384, counter=counter, served_window=served(None))
    assert silent.check_truncation(large, short) is None
    assert silent.check_truncation(large, short) is None
    assert len(asked) == 1 and silent.window == 16_384
    # Without a served window nothing changes (the adapters, `Agent` on other providers).
    plain = BudgetSession(window=16_384, counter=counter)
    assert plain.check_truncation(large, short) is None and plain.window == 16_384
