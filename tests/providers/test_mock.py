"""The mock model: server-like usage, vLLM's overflow text, scripted replies, its summarizer."""

from __future__ import annotations

import re

import pytest

from ctxbudget.counting import RequestCounter
from ctxbudget.errors import ContextOverflowError, ProviderError
from ctxbudget.messages.model import Message, Request
from ctxbudget.providers.mock import MockProvider, vllm_overflow_message
from ctxbudget.providers.scenarios import ChatScenario, CodingScenario

VLLM = re.compile(
    r"^This model's maximum context length is (\d+) tokens\. However, you requested (\d+) "
    r"tokens \((\d+) in the messages, (\d+) in the completion\)\. Please reduce the length of "
    r"the messages or completion\.$"
)


@pytest.fixture(scope="module")
def qwen3() -> RequestCounter:
    return RequestCounter("qwen3")


def _request(scenario: CodingScenario | ChatScenario, *messages: Message) -> Request:
    return Request(system=scenario.system, tools=scenario.tools, messages=messages)


def test_usage_is_the_exact_count_of_the_request(qwen3: RequestCounter) -> None:
    provider = MockProvider("coding", counter=qwen3)
    scene = CodingScenario()
    request = _request(scene, Message(role="user", content=scene.user_message(1)))
    completion = provider.complete(request)
    assert completion.usage.input_tokens == qwen3.count(request).total
    grown = request.with_messages((*request.messages, completion.message))
    assert completion.usage.total_tokens == qwen3.count(grown).total
    assert completion.message.usage == completion.usage
    assert completion.stop_reason == "tool_calls"


@pytest.mark.parametrize(("limit", "prompt", "completion"), [(1200, 1300, 32), (4096, 4000, 256)])
def test_overflow_text_is_vllms(limit: int, prompt: int, completion: int) -> None:
    match = VLLM.match(vllm_overflow_message(limit, prompt, completion))
    assert match is not None
    assert [int(g) for g in match.groups()] == [limit, prompt + completion, prompt, completion]


def test_request_over_the_window_is_rejected_with_the_limit(qwen3: RequestCounter) -> None:
    scene = ChatScenario()
    request = _request(scene, Message(role="user", content=scene.user_message(1)))
    size = qwen3.count(request).total
    provider = MockProvider("chat", window=size + 10, counter=qwen3)
    with pytest.raises(ContextOverflowError) as info:
        provider.complete(
            Request(
                system=request.system,
                tools=request.tools,
                messages=request.messages,
                max_output_tokens=11,
            )
        )
    assert info.value.limit == size + 10 and info.value.prompt_tokens == size
    assert VLLM.match(str(info.value))
    ok = provider.complete(
        Request(
            system=request.system,
            tools=request.tools,
            messages=request.messages,
            max_output_tokens=10,
        )
    )
    assert ok.usage.input_tokens == size


def test_enqueue_scripts_replies_and_errors(qwen3: RequestCounter) -> None:
    provider = MockProvider(None, counter=qwen3)
    provider.enqueue("first", Message(role="assistant", content="second"), ProviderError("boom"))
    request = Request(messages=(Message(role="user", content="hi"),))
    assert provider.complete(request).message.text == "first"
    assert provider.complete(request).message.text == "second"
    with pytest.raises(ProviderError, match="boom"):
        provider.complete(request)
    with pytest.raises(ProviderError, match="enqueue"):
        provider.complete(request)


def test_coding_scenario_is_deterministic_and_varied() -> None:
    a, b = CodingScenario(seed=1), CodingScenario(seed=1)
    outputs: list[str] = []
    for turn in range(1, 9):
        assert a.user_message(turn) == b.user_message(turn)
        messages = [Message(role="user", content=a.user_message(turn))]
        while True:
            reply = a.reply(Request(messages=tuple(messages)))
            assert reply == b.reply(Request(messages=tuple(messages)))
            messages.append(reply)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                out = a.run_tool(call)
                assert out == b.run_tool(call)
                outputs.append(out)
                messages.append(Message(role="tool", content=out, tool_call_id=call.id))
    text = "\n".join(outputs)
    assert re.search(r"^E       AssertionError: assert (\d+) == (\d+)$", text, re.M)
    assert re.search(r"\d+ passed in", text)  # the tests pass after the edit
    assert re.search(r"[\u4e00-\u9fff]", text)  # some outputs are Chinese
    sizes = sorted(len(o) for o in outputs)
    assert sizes[0] < 100 and sizes[-1] > 2000  # from one-line edits to whole files


def test_summarize_is_extractive_and_fits_its_budget(qwen3: RequestCounter) -> None:
    provider = MockProvider("coding", counter=qwen3)
    error = "E       AssertionError: assert 229 == 230"
    conversation = (
        "[user]\nTask 1: fix the failing test.\n\n[tool result run_tests call_1_0_0]\n"
        f"{error}\n\n[assistant]\nFixed it."
    )
    request = Request(
        messages=(
            Message(role="user", content=f"<conversation>\n{conversation}\n</conversation>"),
        ),
        max_output_tokens=200,
    )
    summary = provider.summarize(request)
    assert "## Goal" in summary and "Task 1: fix the failing test." in summary
    assert "AssertionError: assert 229 == 230" in summary
    short = provider.summarize(Request(messages=request.messages, max_output_tokens=12))
    assert (
        RequestCounter("qwen3")
        .count(Request(messages=(Message(role="assistant", content=short),)))
        .messages
        <= 12 + 12
    )  # the reply itself plus its template framing
    assert provider.summaries == 2
