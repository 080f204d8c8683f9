"""The native Qwen renderers equal Jinja2 renderings of the shared templates, and so do counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from tests.counting.strategies import requests

from ctxbudget.counting import count_request
from ctxbudget.counting.hf import render_template
from ctxbudget.counting.qwen import QwenScheme
from ctxbudget.counting.template_input import template_messages, template_tools
from ctxbudget.messages.model import Message, Request, ToolCall
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
