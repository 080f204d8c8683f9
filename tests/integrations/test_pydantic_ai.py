"""context_budget_processor in a pydantic-ai Agent: a 45-step tool loop on a FunctionModel that
rejects any request over its window with pydantic-ai's own overflow error and reports usage."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits
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

from ctxbudget.compaction import SUMMARY_HEADER
from ctxbudget.integrations.pydantic_ai import context_budget_processor


def _openai_messages(messages: list[pm.ModelMessage]) -> list[dict[str, Any]]:
    """The history as the chat-completions messages an OpenAI-compatible server would get."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, pm.ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart))
            calls = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
                }
                for p in message.parts
                if isinstance(p, pm.ToolCallPart)
            ]
            out.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    **({"tool_calls": calls} if calls else {}),
                }
            )
            continue
        for part in message.parts:
            if isinstance(part, pm.SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, pm.UserPromptPart):
                out.append({"role": "user", "content": str(part.content)})
            elif isinstance(part, pm.ToolReturnPart):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": part.tool_call_id,
                        "content": part.model_response_str(),
                    }
                )
    return out


def _model(script: ScriptedModel, *, server_usage: bool = True) -> FunctionModel:
    """The scripted server as a FunctionModel; without ``server_usage`` the reply carries no
    usage and FunctionModel fills in its own (a word count of the messages)."""

    def respond(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.parameters_json_schema,
                },
            }
            for t in info.function_tools
        ]
        body = {"messages": _openai_messages(messages), **({"tools": tools} if tools else {})}
        status, answer = script.respond(body)
        if status != 200:
            raise ModelHTTPError.for_category(
                ModelContextWindowExceededError, status_code=400, model_name="scripted", body=answer
            )
        message = answer["choices"][0]["message"]
        parts: list[Any] = [
            pm.ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"])
            for c in message.get("tool_calls") or ()
        ]
        if message["content"]:
            parts.append(pm.TextPart(message["content"]))
        usage = answer["usage"]
        if not server_usage:
            return pm.ModelResponse(parts=parts)
        return pm.ModelResponse(
            parts=parts,
            usage=RequestUsage(
                input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]
            ),
        )

    return FunctionModel(respond, model_name="scripted")


SYSTEM = "You are a careful coding agent."


def _agent(
    script: ScriptedModel, capabilities: list[Any], *, server_usage: bool = True
) -> Agent[None, str]:
    return Agent(
        _model(script, server_usage=server_usage),
        system_prompt=SYSTEM,
        capabilities=capabilities,
        tools=[read_file, run],
    )


def test_the_bare_processor_keeps_a_run_inside_an_exact_window() -> None:
    # The server's window is the configured one: the pre-request check alone must suffice.
    script = ScriptedModel(window=CONFIGURED_WINDOW)
    processor = context_budget_processor(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    agent = _agent(script, [ProcessHistory(processor)])
    result = agent.run_sync(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == FINAL_ANSWER and script.accepted_steps() >= 40
    assert script.rejected == [] and script.unpaired == []
    assert processor.guard.compactions and max(script.prompts) <= CONFIGURED_WINDOW


def test_an_agent_runs_a_long_tool_loop_inside_the_window() -> None:
    script = ScriptedModel()
    processor = context_budget_processor(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    agent = _agent(script, processor.capabilities())
    result = agent.run_sync(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == FINAL_ANSWER
    check_long_loop(script, processor.guard)
    history = result.all_messages()
    calls = {p.tool_call_id for m in history for p in m.parts if isinstance(p, pm.ToolCallPart)}
    returns = {p.tool_call_id for m in history for p in m.parts if isinstance(p, pm.ToolReturnPart)}
    assert calls == returns
    # The system prompt and the user's task survive every compaction, verbatim.
    parts = [p for m in history if isinstance(m, pm.ModelRequest) for p in m.parts]
    assert [p.content for p in parts if isinstance(p, pm.SystemPromptPart)] == [SYSTEM]
    assert TASK in [p.content for p in parts if isinstance(p, pm.UserPromptPart)]
    first = history[0]
    assert isinstance(first, pm.ModelRequest) and isinstance(first.parts[0], pm.UserPromptPart)
    assert str(first.parts[0].content).startswith(SUMMARY_HEADER)


def test_a_word_count_usage_is_passed_over_with_an_exact_counter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FunctionModel's own usage counts words (about a third of the tokens here): taken as the
    base, the run went over the model's window again and again. Against the exact count of the
    same request it is passed over, said once, and the model never rejects a request."""
    script = ScriptedModel(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
    processor = context_budget_processor(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
    agent = _agent(script, processor.capabilities(), server_usage=False)
    with caplog.at_level(logging.WARNING, logger="ctxbudget"):
        result = agent.run_sync(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == FINAL_ANSWER
    check_under_reported_loop(script, processor.guard)
    said = [r.getMessage() for r in caplog.records if "usage report" in r.getMessage()]
    assert len(said) == 1 and "counted" in said[0]
