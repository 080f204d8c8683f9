"""Anthropic Messages bodies: blocks, tool results split out in order, thinking, errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from message_strategies import ANTHROPIC_WEATHER, OPENAI_WEATHER, PIXEL_PNG

from ctxbudget.errors import MessageFormatError
from ctxbudget.messages.anthropic import messages_from_anthropic, request_from_anthropic
from ctxbudget.messages.model import ImagePart, Message, TextPart
from ctxbudget.messages.openai import request_from_openai


def test_docs_weather_example_reads_every_field() -> None:
    request = request_from_anthropic(ANTHROPIC_WEATHER)
    assert request.system == "You are a helpful assistant."
    assert request.model == "claude-opus-4-1-20250805"
    assert request.max_output_tokens == 1024
    assert request.tools[0].parameters["required"] == ["location"]
    roles = [m.role for m in request.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "user"]
    call = request.messages[1]
    assert call.content == (TextPart("I'll check the weather."),)
    assert call.reasoning == "The user wants SF, which is likely San Francisco, CA."
    assert call.tool_calls[0].id == "toolu_01A09q90qw90lq917835lq9"
    assert call.tool_calls[0].parsed_arguments() == {
        "location": "San Francisco, CA",
        "unit": "celsius",
    }
    result = request.messages[2]
    assert (result.tool_call_id, result.name, result.text) == (
        "toolu_01A09q90qw90lq917835lq9",
        "get_weather",
        "15 degrees",
    )
    assert request.messages[3].content == (TextPart("And in Paris?"),)
    assert request.messages[4].reasoning == "EmwKAhgBEgy3va3pzix/LafPsn4a"


def test_images_base64_and_url() -> None:
    images = request_from_anthropic(ANTHROPIC_WEATHER).messages[5].images
    assert images == (
        ImagePart(
            url=f"data:image/png;base64,{PIXEL_PNG}", media_type="image/png", width=1, height=1
        ),
        ImagePart(url="https://example.com/a.jpg"),
    )


def test_tool_input_keeps_non_ascii_text() -> None:
    block = {"type": "tool_use", "id": "t", "name": "n", "input": {"city": "北京"}}
    (message,) = messages_from_anthropic([{"role": "assistant", "content": [block]}])
    assert message.tool_calls[0].arguments == json.dumps({"city": "北京"}, ensure_ascii=False)


def test_tool_results_and_text_keep_their_order() -> None:
    content = [
        {"type": "text", "text": "before"},
        {"type": "tool_result", "tool_use_id": "a", "content": "A", "is_error": True},
        {"type": "tool_result", "tool_use_id": "b"},
        {"type": "text", "text": "after"},
    ]
    read = messages_from_anthropic([{"role": "user", "content": content}])
    assert read == (
        Message(role="user", content=(TextPart("before"),)),
        Message(role="tool", content="A", tool_call_id="a", meta={"is_error": True}),
        Message(role="tool", content="", tool_call_id="b"),
        Message(role="user", content=(TextPart("after"),)),
    )


def test_empty_block_list_is_one_empty_user_message() -> None:
    read = messages_from_anthropic([{"role": "user", "content": []}])
    assert read == (Message(role="user", content=()),)


def test_server_tool_without_schema_is_accepted() -> None:
    body = {"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    assert request_from_anthropic(body).tools[0].name == "web_search"


RESULT_14 = {"type": "tool_result", "tool_use_id": "call_12345xyz", "content": "14"}


def test_same_conversation_in_both_formats_reads_alike() -> None:
    openai = request_from_openai(OPENAI_WEATHER)
    body = {
        "system": "You are a helpful assistant.",
        "messages": [
            {"role": "user", "content": "What's the weather like in Paris today?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_12345xyz",
                        "name": "get_weather",
                        "input": {"location": "Paris, France"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [RESULT_14],
            },
        ],
    }
    anthropic = request_from_anthropic(body)
    assert anthropic.system == openai.system
    pairs = zip(anthropic.messages, openai.messages[:3], strict=True)
    for ours, theirs in pairs:
        assert (ours.role, ours.text, ours.tool_call_id) == (
            theirs.role,
            theirs.text,
            theirs.tool_call_id,
        )
        assert [c.parsed_arguments() for c in ours.tool_calls] == [
            c.parsed_arguments() for c in theirs.tool_calls
        ]


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(ANTHROPIC_WEATHER)
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


ERRORS = [
    (["system"], 3, "system", "got int"),
    (["system", 0, "type"], "image", "system[0].type", "expected one of: text"),
    (["messages", 0, "role"], "tool", "messages[0].role", "one of: user, assistant, system"),
    (["messages", 0], {"role": "user"}, "messages[0].content", "missing"),
    (["messages", 0, "content"], 1.5, "messages[0].content", "expected a JSON array"),
    (["messages", 2, "content", 1, "type"], "image_url", "messages[2].content[1].type",
     "expected one of: text, image, tool_result"),
    (["messages", 1, "content", 0, "type"], "tool_result", "messages[1].content[0].type",
     "thinking, redacted_thinking, tool_use"),
    (["messages", 1, "content", 2, "input"], '{"a": 1}', "messages[1].content[2].input",
     "expected a JSON object, got str"),
    (["messages", 1, "content", 2, "id"], None, "messages[1].content[2].id", "got None"),
    (["messages", 1, "content", 0, "thinking"], 1, "messages[1].content[0].thinking", "int"),
    (["messages", 2, "content", 0, "tool_use_id"], [], "messages[2].content[0].tool_use_id",
     "got list"),
    (["messages", 2, "content", 0, "is_error"], "yes", "messages[2].content[0].is_error",
     "expected true or false"),
    (["messages", 2, "content", 0, "content", 0, "type"], "tool_use",
     "messages[2].content[0].content[0].type", "expected one of: text, image"),
    (["messages", 4, "content", 0, "source", "type"], "path",
     "messages[4].content[0].source.type", "base64, url, file"),
    (["messages", 4, "content", 0, "source", "media_type"], None,
     "messages[4].content[0].source.media_type", "got None"),
    (["tools", 0, "input_schema"], None, "tools[0].input_schema", "needs a JSON schema"),
    (["tools", 0, "input_schema"], [], "tools[0].input_schema", "got list"),
    (["tools", 0, "name"], 1, "tools[0].name", "got int"),
    (["max_tokens"], 0, "max_tokens", "positive integer"),
]  # fmt: skip


@pytest.mark.parametrize(("where", "value", "path", "problem"), ERRORS)
def test_malformed_body_names_the_place(
    where: list[Any], value: Any, path: str, problem: str
) -> None:
    with pytest.raises(MessageFormatError) as caught:
        request_from_anthropic(_with(where, value))
    assert caught.value.path == path
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{path}: ")
    assert "\n" not in str(caught.value)


def test_too_deep_tool_input_is_a_format_error() -> None:
    deep: Any = {}
    for _ in range(100_000):
        deep = {"a": deep}
    block = {"type": "tool_use", "id": "t", "name": "n", "input": deep}
    with pytest.raises(MessageFormatError) as caught:
        messages_from_anthropic([{"role": "assistant", "content": [block]}])
    assert caught.value.path == "messages[0].content[0].input"


@pytest.mark.parametrize("system", ["", [], [{"type": "text", "text": ""}]])
def test_an_empty_anthropic_system_is_no_system_prompt(system: object) -> None:
    """Anthropic has no system turn to leave empty: an empty ``system`` is none (None), as an
    absent one is; a system prompt with text is kept."""
    hi = [{"role": "user", "content": "hi"}]
    assert request_from_anthropic({"system": system, "messages": hi}).system is None
    assert request_from_anthropic({"messages": hi}).system is None
    blocks = [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]
    assert request_from_anthropic({"system": blocks, "messages": hi}).system == "AB"


def test_a_system_turn_among_the_messages_is_read() -> None:
    """Claude Code 2.1.332 puts its environment notes in a system turn among the messages
    (seen in its requests by tests/clients); the request is read, the turn kept in its place."""
    env = "# Environment\nPrimary working directory: /tmp/x"
    body = {
        "system": "You are an agent.",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "system", "content": env},
            {
                "role": "system",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
    }
    request = request_from_anthropic(body)
    assert request.system == "You are an agent."
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "go"),
        ("system", env),
        ("system", "ab"),
    ]


def test_anthropic_system_blocks_join_with_nothing_between() -> None:
    """System text blocks are concatenated as they are, as llama.cpp's server does
    (`convert_anthropic_to_oai`): a blank line between them made the count one token over the
    server's for each join. Whitespace the blocks carry themselves is kept."""
    blocks = [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "\nUse tools."},
    ]
    request = request_from_anthropic(
        {"system": blocks, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert request.system == "You are a coding agent.Be brief.\nUse tools."
