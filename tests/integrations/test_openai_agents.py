"""context_budget_filter in the OpenAI Agents SDK: a 45-step tool loop against a loopback
chat-completions server that rejects any request over its window with OpenAI's real error."""

from __future__ import annotations

import asyncio

import openai
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
    read_file,
    run,
)

from ctxbudget.integrations.openai_agents import context_budget_filter


def test_a_runner_loop_stays_inside_the_window() -> None:
    budget = context_budget_filter(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    with ChatServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        agent = Agent(
            name="coder",
            instructions="You are a careful coding agent.",
            tools=[function_tool(read_file), function_tool(run)],
            model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
        )
        result = asyncio.run(
            Runner.run(
                agent,
                TASK,
                run_config=budget.run_config(tracing_disabled=True),
                hooks=budget.hooks,
                max_turns=100,
            )
        )
    script = server.model
    assert result.final_output == FINAL_ANSWER
    last = server.requests[-1].json()["messages"]
    assert last[0]["role"] == "system" and {"role": "user", "content": TASK} in last
    check_long_loop(script, budget.guard)


def test_a_usage_of_the_uncached_part_alone_is_passed_over() -> None:
    """A server whose usage leaves out the cached prefix: with an exact counter the runner's
    reports are passed over, and no request is rejected."""
    script = ScriptedModel(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER, uncached_only=True)
    budget = context_budget_filter(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
    with ChatServer(script) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        agent = Agent(
            name="coder",
            instructions="You are a careful coding agent.",
            tools=[function_tool(read_file), function_tool(run)],
            model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
        )
        result = asyncio.run(
            Runner.run(
                agent,
                TASK,
                run_config=budget.run_config(tracing_disabled=True),
                hooks=budget.hooks,
                max_turns=100,
            )
        )
    assert result.final_output == FINAL_ANSWER
    check_under_reported_loop(script, budget.guard)
