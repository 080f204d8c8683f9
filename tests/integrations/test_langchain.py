"""ContextBudgetMiddleware in create_agent: a 45-step tool loop on a chat model that rejects
any request over its window with LangChain's own ContextOverflowError and reports usage."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
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

from ctxbudget.integrations.langchain import ContextBudgetMiddleware


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model answering from a `ScriptedModel` (converted with LangChain's own
    ``convert_to_openai_messages``)."""

    script: Any

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        body = {"messages": convert_to_openai_messages(messages), "tools": kwargs.get("tools")}
        status, answer = self.script.respond({k: v for k, v in body.items() if v})
        if status != 200:
            raise ContextOverflowError(answer["error"]["message"])
        message = answer["choices"][0]["message"]
        usage = answer["usage"]
        calls = [
            {
                "name": c["function"]["name"],
                "args": json.loads(c["function"]["arguments"]),
                "id": c["id"],
                "type": "tool_call",
            }
            for c in message.get("tool_calls") or ()
        ]
        reply = AIMessage(
            content=message["content"] or "",
            tool_calls=calls,
            usage_metadata={
                "input_tokens": usage["prompt_tokens"],
                "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
            },
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _agent(script: ScriptedModel, middleware: ContextBudgetMiddleware) -> Any:
    return create_agent(
        ScriptedChatModel(script=script),
        tools=[tool(read_file), tool(run)],
        system_prompt="You are a careful coding agent.",
        middleware=[middleware],
    )


def _check(script: ScriptedModel, middleware: ContextBudgetMiddleware, state: Any) -> None:
    messages = state["messages"]
    assert messages[-1].text == FINAL_ANSWER
    check_long_loop(script, middleware.guard)
    # The state holds the compacted view: the summary, the task, then whole tool steps.
    assert isinstance(messages[0], HumanMessage) and "ctxbudget handoff" in messages[0].text
    assert any(m.text == TASK for m in messages)
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    assert calls == results


def test_create_agent_runs_a_long_tool_loop_inside_the_window() -> None:
    script = ScriptedModel()
    middleware = ContextBudgetMiddleware(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    state = _agent(script, middleware).invoke(
        {"messages": [HumanMessage(TASK)]}, {"recursion_limit": 200}
    )
    _check(script, middleware, state)


def test_the_async_run_is_guarded_too() -> None:
    script = ScriptedModel()
    middleware = ContextBudgetMiddleware(window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
    agent = _agent(script, middleware)
    state = asyncio.run(agent.ainvoke({"messages": [HumanMessage(TASK)]}, {"recursion_limit": 200}))
    _check(script, middleware, state)


def test_a_usage_of_the_uncached_part_alone_is_passed_over() -> None:
    """A chat model whose usage_metadata states only the uncached part of each prompt: with an
    exact counter the reports are passed over, and the server never rejects a request."""
    script = ScriptedModel(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER, uncached_only=True)
    middleware = ContextBudgetMiddleware(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
    state = _agent(script, middleware).invoke(
        {"messages": [HumanMessage(TASK)]}, {"recursion_limit": 200}
    )
    assert state["messages"][-1].text == FINAL_ANSWER
    check_under_reported_loop(script, middleware.guard)
