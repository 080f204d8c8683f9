"""context_budget_filter in the OpenAI Agents SDK: a 45-step tool loop against a loopback
chat-completions server that rejects any request over its window with OpenAI's real error."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from tests.integrations.chatserver import ChatServer
from tests.integrations.scripted import (
    CONFIGURED_WINDOW,
    EXACT_TOKENIZER,
    FINAL_ANSWER,
    SERVER_WINDOW,
    TASK,
    TOKENIZER,
    ScriptedModel,
    check_long_loop,
    check_under_reported_loop,
    overflow_body,
    read_file,
    run,
)

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.errors import CompactionError
from ctxbudget.integrations.openai_agents import context_budget_filter
from ctxbudget.messages.openai import request_from_openai


def _coding_run(budget: Any, base_url: str) -> Any:
    """The coding agent's task run by the Agents SDK through ``budget``'s filter and hooks,
    against the scripted server at ``base_url``."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
    agent = Agent(
        name="coder",
        instructions="You are a careful coding agent.",
        tools=[function_tool(read_file), function_tool(run)],
        model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
    )
    config = budget.run_config(tracing_disabled=True)
    hooks = budget.hooks
    return asyncio.run(Runner.run(agent, TASK, run_config=config, hooks=hooks, max_turns=100))


def test_a_runner_loop_stays_inside_the_window() -> None:
    budget = context_budget_filter(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    with ChatServer() as server:
        result = _coding_run(budget, server.base_url)
    script = server.model
    assert result.final_output == FINAL_ANSWER
    last = server.requests[-1].json()["messages"]
    assert last[0]["role"] == "system" and {"role": "user", "content": TASK} in last
    check_long_loop(script, budget.guard)


class _OverAfterCompaction(ScriptedModel):
    """Writes summaries, but rejects every task request as over its window, compacted or not."""

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if (request_from_openai(body).system or "").startswith(SUMMARIZER_SYSTEM[:60]):
            return super().respond(body)
        self.prompts.append(len(body["messages"]))
        return 400, overflow_body(SERVER_WINDOW + 1)


def _history(words: int) -> list[Any]:
    history: list[Any] = []
    for turn in range(12):
        history.append({"role": "user", "content": f"step {turn}: " + "read it. " * words})
        history.append({"role": "assistant", "content": f"done {turn}: " + "it is fine. " * words})
    return [*history, {"role": "user", "content": TASK}]


@pytest.mark.parametrize(
    ("words", "triggers"),
    [
        pytest.param(20, ["context_overflow"], id="overflow-only"),
        # Over the rule's line: the filter compacts before the first send, and the recovery
        # maps the compacted request back through the compacted view.
        pytest.param(
            120, ["context_pressure", "context_overflow"], id="compacted-before-the-overflow"
        ),
    ],
)
def test_a_second_overflow_is_a_compaction_error_like_every_adapter(
    words: int, triggers: list[str]
) -> None:
    budget = context_budget_filter(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    with ChatServer(_OverAfterCompaction(window=10**6)) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        agent = Agent(
            name="coder",
            instructions="You are a careful coding agent.",
            model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
        )
        config = budget.run_config(tracing_disabled=True)
        with pytest.raises(CompactionError, match="still exceeds") as caught:
            asyncio.run(Runner.run(agent, _history(words), run_config=config))
    script = server.model
    # sent twice (the second time compacted further), never a third time
    assert len(script.prompts) == 2 and script.prompts[1] < script.prompts[0]
    assert budget.guard.overflows == 1
    assert [c.trigger for c in budget.guard.compactions] == triggers
    assert isinstance(caught.value.__cause__, openai.BadRequestError)


def test_a_usage_of_the_uncached_part_alone_is_passed_over() -> None:
    """A server whose usage leaves out the cached prefix: with an exact counter the runner's
    reports are passed over, and no request is rejected."""
    script = ScriptedModel(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER, uncached_only=True)
    budget = context_budget_filter(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
    with ChatServer(script) as server:
        result = _coding_run(budget, server.base_url)
    assert result.final_output == FINAL_ANSWER
    check_under_reported_loop(script, budget.guard)
