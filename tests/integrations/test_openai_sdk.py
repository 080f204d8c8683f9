"""The OpenAI SDK guard on a long tool loop against a loopback server with a real window."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.integrations.chatserver import ChatServer, tool_result
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
    openai_tools,
    tool_output,
)
from tests.providers.fakeserver import FakeServer, Reply

from ctxbudget.compaction import load_archive
from ctxbudget.errors import CtxbudgetError, PromptFloorExceeded, RequestOverRateLimitError
from ctxbudget.integrations.openai_sdk import guard_openai


def _check(model: ScriptedModel, guard: Any, answer: str) -> None:
    assert answer == FINAL_ANSWER
    check_long_loop(model, guard)
    assert model.summaries >= 1


def _loop(client: Any, history: list[Any], stream: bool) -> str:
    while True:
        reply = client.chat.completions.create(
            model="scripted", messages=history, tools=openai_tools(), stream=stream
        )
        message = _assemble(reply) if stream else reply.choices[0].message
        history.append(message)
        if not message.tool_calls:
            return str(message.content)
        history.extend(tool_result(c) for c in message.tool_calls)


def _assemble(stream: Any) -> Any:
    content, calls = "", []
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            calls.extend(choice.delta.tool_calls or ())
    tool_calls = [
        {"id": c.id, "type": "function", "function": c.function.model_dump()} for c in calls
    ]
    return openai.types.chat.ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": content or None, "tool_calls": tool_calls or None}
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_tool_loop_stays_inside_the_window(stream: bool, tmp_path: Path) -> None:
    archive = tmp_path / "session.jsonl"
    with ChatServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(
            client, window=CONFIGURED_WINDOW, tokenizer=TOKENIZER, archive=archive
        )
        history: list[Any] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": TASK},
        ]
        answer = _loop(guarded, history, stream)
    _check(server.model, guarded.guard, answer)
    assert history[1]["content"] == TASK and len(history) > 80  # the caller's list is whole
    assert guarded.messages[0]["role"] == "system"
    assert {"role": "user", "content": TASK} in guarded.messages  # the task, verbatim
    assert any("ctxbudget handoff" in str(m.get("content")) for m in guarded.messages)
    guarded.guard.archive.close()
    state = load_archive(archive)
    # Everything said is on disk once, the summaries and placeholders only in compaction records.
    said = history[1:]
    assert len(state.history) == len(said) - 1  # the final answer was never sent back
    assert state.compactions == len(guarded.guard.compactions)
    assert [m.tool_call_id for m in state.history if m.role == "tool"] == [
        m["tool_call_id"] for m in said if isinstance(m, dict) and m.get("role") == "tool"
    ]


def test_the_async_client_is_guarded_too() -> None:
    async def run(base_url: str) -> tuple[str, Any]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
        history: list[Any] = [{"role": "user", "content": TASK}]
        while True:
            reply = await guarded.chat.completions.create(
                model="scripted", messages=history, tools=openai_tools()
            )
            message = reply.choices[0].message
            history.append(message)
            if not message.tool_calls:
                return str(message.content), guarded.guard
            history.extend(tool_result(c) for c in message.tool_calls)

    with ChatServer() as server:
        answer, guard = asyncio.run(run(server.base_url))
    _check(server.model, guard, answer)


def test_a_window_too_small_for_the_task_is_one_clear_error() -> None:
    with ChatServer(ScriptedModel(window=40)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
        history = [{"role": "user", "content": TASK}, {"role": "assistant", "content": "ok"}]
        history += [
            {"role": "user", "content": f"step {i}: " + "more detail " * 40} for i in (1, 2)
        ]
        with pytest.raises(CtxbudgetError) as caught:
            guarded.chat.completions.create(model="scripted", messages=history)
    assert "\n" not in str(caught.value)
    assert len(server.model.prompts) <= 2  # the first request and at most one retry
    assert guarded.guard.overflows >= 1


def test_a_system_prompt_over_the_window_is_refused_before_sending() -> None:
    with ChatServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=1_000, tokenizer=TOKENIZER)
        history = [
            {"role": "system", "content": "rule " * 2_000},
            {"role": "user", "content": TASK},
        ]
        with pytest.raises(PromptFloorExceeded) as caught:
            guarded.chat.completions.create(model="scripted", messages=history)
    assert "\n" not in str(caught.value) and "> window 1,000" in str(caught.value)
    assert server.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_api_is_guarded_too(stream: bool) -> None:
    tools = [{"type": "function", **t["function"]} for t in openai_tools()]
    with ChatServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
        items: list[Any] = [{"role": "user", "content": TASK}]
        while True:
            kwargs = {"model": "scripted", "instructions": "You are careful.", "tools": tools}
            reply = guarded.responses.create(input=items, stream=stream, **kwargs)
            if stream:
                with reply as events:  # read to the end: the usage comes last
                    done = [e.response for e in events if e.type == "response.completed"]
                reply = done[0]
            items.extend(reply.output)
            calls = [o for o in reply.output if o.type == "function_call"]
            if not calls:
                break
            for call in calls:
                output = tool_output(call.name, json.loads(call.arguments))
                items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": output}
                )
    _check(server.model, guarded.guard, reply.output_text)
    assert all(r.path.endswith("/responses") for r in server.requests)


def test_a_request_over_a_per_minute_limit_is_raised_not_compacted() -> None:
    # Groq's wording for a request larger than the whole per-minute budget (tests/data/overflow).
    message = (
        "Request too large for model `llama-3.3-70b-versatile` in organization `org_x` on tokens "
        "per minute (TPM): Limit 12000, Requested 342389, please reduce your message size."
    )
    body = {"error": {"message": message, "type": "tokens", "code": "rate_limit_exceeded"}}
    with FakeServer(Reply(status=413, body=body), Reply(status=413, body=body)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=CONFIGURED_WINDOW, tokenizer=TOKENIZER)
        with pytest.raises(RequestOverRateLimitError) as caught:
            guarded.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": TASK}]
            )
    assert len(server.requests) == 1  # neither compacted and resent nor retried
    assert guarded.guard.overflows == 0
    assert "\n" not in str(caught.value)


def test_a_usage_of_the_uncached_part_alone_is_passed_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server whose ``prompt_tokens`` leave out the cached prefix: with an exact counter the
    reports are passed over (said once), and no request is rejected."""
    script = ScriptedModel(window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER, uncached_only=True)
    with ChatServer(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        guarded = guard_openai(client, window=SERVER_WINDOW, tokenizer=EXACT_TOKENIZER)
        history: list[Any] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": TASK},
        ]
        with caplog.at_level(logging.WARNING, logger="ctxbudget"):
            answer = _loop(guarded, history, stream=False)
    assert answer == FINAL_ANSWER
    check_under_reported_loop(script, guarded.guard)
    said = [r.getMessage() for r in caplog.records if "usage report" in r.getMessage()]
    assert len(said) == 1
