"""The native Qwen renderers equal Jinja2 renderings of the shared templates, and so do counts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from tests.counting.strategies import requests

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.hf import render_template
from ctxbudget.counting.qwen import QwenScheme
from ctxbudget.counting.template_input import template_messages, template_tools, tool_dict
from ctxbudget.messages.model import Message, Request, ToolCall, ToolSpec
from ctxbudget.tokens.registry import ExactTokenizer, get_tokenizer


def _jinja(source: str, request: Request, **extra: object) -> str:
    return render_template(source, template_messages(request), template_tools(request), **extra)


def _check(scheme: QwenScheme, source: str, request: Request, tok: ExactTokenizer) -> None:
    expected = _jinja(
        source, request, **({} if scheme.enable_thinking else {"enable_thinking": False})
    )
    assert scheme.render(request) == expected
    count = count_request(request, scheme.name if scheme.template == "qwen3" else "qwen2.5")
    if scheme.enable_thinking:
        assert count.total == len(tok.encode(expected, special=True))
    assert count.system + count.tools + count.messages == count.total
    assert sum(count.per_message) == count.messages
    assert count.floor == count.system + count.tools


@settings(max_examples=300)
@given(request_=requests)
def test_qwen3_native_equals_jinja(
    request_: Request, qwen3_source: str, qwen3_tokenizer: ExactTokenizer
) -> None:
    _check(QwenScheme(tokenizer=qwen3_tokenizer), qwen3_source, request_, qwen3_tokenizer)


@settings(max_examples=200)
@given(request_=requests)
def test_qwen25_native_equals_jinja(request_: Request, qwen25_source: str) -> None:
    tokenizer = get_tokenizer("qwen2.5")  # Qwen2.5's own special tokens (no <tool_response>)
    _check(QwenScheme(tokenizer=tokenizer, template="qwen2.5"), qwen25_source, request_, tokenizer)


@settings(max_examples=50)
@given(request_=requests)
def test_qwen3_without_thinking_equals_jinja(
    request_: Request, qwen3_source: str, qwen3_tokenizer: ExactTokenizer
) -> None:
    scheme = QwenScheme(tokenizer=qwen3_tokenizer, enable_thinking=False)
    assert scheme.render(request_) == _jinja(qwen3_source, request_, enable_thinking=False)


SESSION = Request(
    system="You are a coding agent.",
    messages=(
        Message(role="user", content="Fix the bug."),
        Message(
            role="assistant",
            content="",
            reasoning="Look first.",
            tool_calls=(ToolCall("1", "read", '{"path": "a.py"}'),),
        ),
        Message(role="tool", content="print(1)"),
        Message(role="tool", content="print(2)"),
        Message(role="assistant", content="Done.", reasoning="It works."),
    ),
)


@pytest.mark.parametrize(
    ("request_", "reasoning_shown"),
    [
        (SESSION, True),
        (SESSION.with_messages((*SESSION.messages, Message(role="user", content="Thanks"))), False),
    ],
)
def test_reasoning_kept_only_after_last_query(
    request_: Request, reasoning_shown: bool, qwen3_tokenizer: ExactTokenizer
) -> None:
    text = QwenScheme(tokenizer=qwen3_tokenizer).render(request_)
    assert ("It works." in text) is reasoning_shown
    assert text.count("<|im_start|>user") == (2 if reasoning_shown else 3)  # tool results merged


WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
BUILT_IN = [("qwen3", "qwen3.jinja", "qwen3"), ("qwen2.5", "qwen2.5.jinja", "qwen2.5"),
            ("qwen3.5", "qwen3.5.jinja", "qwen3.6")]  # fmt: skip


@pytest.mark.parametrize("tools", [(), (WEATHER,)])
@pytest.mark.parametrize(("template", "file", "vocabulary"), BUILT_IN)
def test_an_empty_system_prompt_counts_the_turn_its_template_renders(
    template: str, file: str, vocabulary: str, tools: tuple[ToolSpec, ...], templates_dir: Path
) -> None:
    """``system=""`` is an empty system message, rendered as the template renders one (its
    turn's framing; Qwen2.5's default prompt only without one); ``system=None`` is none. The
    template gets the message dicts as an OpenAI request carries them, not ours."""
    source = (templates_dir / file).read_text(encoding="utf-8")
    tokenizer = get_tokenizer(vocabulary)
    user = {"role": "user", "content": "What is the weather in Paris?"}
    tool_dicts = [tool_dict(t) for t in tools] or None
    base = Request(tools=tools, messages=(Message(role="user", content=user["content"]),))
    rendered = []
    for system, dicts in ((None, [user]), ("", [{"role": "system", "content": ""}, user])):
        request = replace(base, system=system)
        text = render_template(source, dicts, tool_dicts)
        count = count_request(request, vocabulary, template=template)
        assert count.total == len(tokenizer.encode(text, special=True)), (system, template)
        assert RequestCounter(vocabulary, template=template).count(request) == count
        assert count.system + count.tools + count.messages == count.total
        rendered.append(text)
    # The empty turn is neither nothing nor Qwen2.5's default; Qwen3.5 renders a system prompt
    # beside the tools only when it has text.
    assert (rendered[0] == rendered[1]) is (template == "qwen3.5" and bool(tools))
