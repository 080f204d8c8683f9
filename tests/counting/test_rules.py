"""OpenAI and estimate rules: published constants and image formulas."""

from __future__ import annotations

import pytest

from ctxbudget.counting import count_request
from ctxbudget.counting.images import claude_image_tokens, openai_image_tokens
from ctxbudget.counting.openai_rules import tools_text
from ctxbudget.messages.model import ImagePart, Message, Request, ToolSpec
from ctxbudget.tokens.base import Estimator
from ctxbudget.tokens.registry import get_tokenizer


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [  # OpenAI vision guide worked examples
        (1024, 1024, "high", 765),
        (2048, 4096, "high", 1105),
        (4096, 8192, "low", 85),
        (None, None, "high", 1200),
    ],
)
def test_openai_tiles(width: int | None, height: int | None, detail: str, tokens: int) -> None:
    image = ImagePart(width=width, height=height, detail=detail)  # type: ignore[arg-type]
    assert openai_image_tokens(image) == tokens


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [(200, 200, 54), (1000, 1000, 1334), (1092, 1092, 1590), (None, None, 1200)],  # Anthropic docs
)
def test_claude_images(width: int | None, height: int | None, tokens: int) -> None:
    assert claude_image_tokens(ImagePart(width=width, height=height)) == tokens


def test_cookbook_constants() -> None:
    enc = get_tokenizer("cl100k_base")
    msgs = (
        Message(role="user", content="hello world", name="bob"),
        Message(role="assistant", content="hi"),
    )
    count = count_request(Request(messages=msgs), "cl100k_base")
    expected = (
        sum(3 + enc.count(m.role) + enc.count(m.text) for m in msgs) + 1 + enc.count("bob") + 3
    )
    assert count.total == expected and count.kind == "estimate"


def test_namespace_functions_text() -> None:
    tool = ToolSpec("get_weather", "Weather now.", {
        "type": "object", "required": ["city"],
        "properties": {"city": {"type": "string", "description": "City"},
                       "unit": {"type": "string", "enum": ["c", "f"]}}})  # fmt: skip
    assert tools_text([tool]) == (
        "namespace functions {\n\n// Weather now.\ntype get_weather = (_: {\n"
        "// City\ncity: string,\n"
        'unit?: "c" | "f",\n}) => any;\n\n} // namespace functions'
    )


def test_claude_tools_pay_the_tool_prompt() -> None:
    est = Estimator("chars4", lambda t: (len(t) + 3) // 4)
    request = Request(tools=(ToolSpec("x"),), messages=(Message(role="user", content="hi"),))
    claude = count_request(request, est, model="claude-sonnet-4")
    other = count_request(request, est, model="gemini-2.5-pro")
    assert claude.tools - other.tools == 346


def test_an_empty_system_message_pays_its_framing_as_any_message_does() -> None:
    """The rules count every message, an empty one too: an empty system message costs what an
    empty user message costs (OpenAI: 3 + the role; the estimate: its per-message overhead),
    and tools share its framing (OpenAI's discount) as they share a system prompt's."""
    hi = (Message(role="user", content="hi"),)
    tools = (ToolSpec("get_weather", "Weather now."),)
    est = Estimator("chars4", lambda t: (len(t) + 3) // 4)
    for counter, model in (("cl100k_base", None), (est, "claude-sonnet-4"), (est, None)):
        none = count_request(Request(messages=hi), counter, model=model)
        empty = count_request(Request(system="", messages=hi), counter, model=model)
        as_user = count_request(Request(messages=(Message(role="user"), *hi)), counter, model=model)
        assert none.system == 0 and empty.system == as_user.messages - none.messages > 0
        with_tools = count_request(Request(system="", tools=tools, messages=hi), counter)
        without = count_request(Request(tools=tools, messages=hi), counter)
        assert with_tools.system == empty.system
        discount = 4 if counter == "cl100k_base" else 0
        assert without.tools - with_tools.tools == discount
