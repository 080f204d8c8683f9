"""context_budget_filter in the OpenAI Agents SDK: a 45-step tool loop against a loopback
chat-completions server that rejects any request over its window with OpenAI's real error."""

from __future__ import annotations

import asyncio

import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from tests.integrations.chatserver import ChatServer
from tests.integrations.scripted import (
    CONFIGURED_WINDOW,
    ERROR_LINE,
    FILES,
    FINAL_ANSWER,
    TASK,
    TOKENIZER,
    tool_output,
)

from ctxbudget.integrations.openai_agents import context_budget_filter


@function_tool
def read_file(path: str) -> str:
    """Read a file."""
    return tool_output("read_file", {"path": path})


@function_tool
def run(command: str) -> str:
    """Run a shell command."""
    return tool_output("run", {"command": command})


def test_a_runner_loop_stays_inside_the_window() -> None:
    budget = context_budget_filter(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    with ChatServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        agent = Agent(
            name="coder",
            instructions="You are a careful coding agent.",
            tools=[read_file, run],
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
    assert script.accepted_steps() >= 40
    assert script.rejected, "the server's smaller window must have been hit once"
    assert script.over_window_after_first_recovery() == []
    assert script.unpaired == []
    last = server.requests[-1].json()["messages"]
    assert last[0]["role"] == "system" and {"role": "user", "content": TASK} in last
    guard = budget.guard
    assert guard.overflows == 1 and guard.window == script.window
    assert guard.sources["usage"] > guard.sources["count"]  # usage-first
    summary = guard.summaries[-1]
    assert ERROR_LINE in summary
    assert all(path in summary for path in FILES[:3])
