"""OpenAI chat-completions bodies: reading, errors that name the place, and round trips."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from message_strategies import OPENAI_WEATHER, PIXEL_PNG, openai_messages, openai_requests

from ctxbudget.errors import MessageFormatError
from ctxbudget.messages.model import ImagePart, Message, Request, TextPart, ToolCall
from ctxbudget.messages.openai import (
    message_from_openai,
    message_to_openai,
    messages_from_openai,
    request_from_openai,
    request_to_openai,
)


def test_docs_weather_example_reads_every_field() -> None:
    request = request_from_openai(OPENAI_WEATHER)
    assert request.system == "You are a helpful assistant."
    assert request.model == "gpt-4.1"
    assert request.max_output_tokens == 1024
    assert [m.role for m in request.messages] == ["user", "assistant", "tool", "assistant", "user"]
    call = request.messages[1]
    assert call.content == ""
    assert call.tool_calls == (
        ToolCall("call_12345xyz", "get_weather", '{"location":"Paris, France"}'),
    )
    assert request.messages[2].tool_call_id == "call_12345xyz"
    assert request.messages[2].content == "14"
    image = request.messages[4].images[0]
    assert image.url == "https://example.com/boardwalk.jpg"
    assert image.detail == "high"
    assert image.width is None
    (tool,) = request.tools
    assert tool.name == "get_weather"
    assert tool.parameters["required"] == ["location"]


def test_leading_system_and_developer_messages_join_into_system() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "A"},
            {"role": "developer", "content": [{"type": "text", "text": "B"}]},
            {"role": "user", "content": "hi"},
        ]
    }
    request = request_from_openai(body)
    assert request.system == "A\n\nB"
    assert [m.role for m in request.messages] == ["user"]


def test_an_empty_system_message_is_an_empty_system_prompt_not_none() -> None:
    """An empty system message is kept ("": templates render its turn); no system message is
    None; each writes back as it was read."""
    empty = {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}]}
    absent = {"messages": [{"role": "user", "content": "hi"}]}
    assert request_from_openai(empty).system == ""
    assert request_from_openai(absent).system is None
    assert request_to_openai(request_from_openai(empty))["messages"] == empty["messages"]
    assert request_to_openai(request_from_openai(absent))["messages"] == absent["messages"]
    # Empty parts make a system prompt present without adding blank lines to it.
    parts = [{"role": "system", "content": ""}, {"role": "developer", "content": "B"}]
    assert request_from_openai({"messages": [*parts, *absent["messages"]]}).system == "B"


def test_later_system_message_stays_in_place_as_tagged_user_message() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "reminder"},
            {"role": "assistant", "content": "ok"},
        ]
    }
    request = request_from_openai(body)
    assert request.system is None  # no leading system message: no system prompt
    assert all(m.role != "system" for m in request.messages)
    injected = request.messages[1]
    assert (injected.role, injected.text, injected.meta) == (
        "user",
        "reminder",
        {"openai_role": "developer"},
    )
    assert request_to_openai(request)["messages"][1]["role"] == "developer"


def test_messages_from_openai_keeps_system_role() -> None:
    read = messages_from_openai([{"role": "developer", "content": "x"}, {"role": "user"}])
    assert read[0].role == "system"
    assert read[0].meta == {"openai_role": "developer"}
    assert read[1] == Message(role="user", content="")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 200}, 200),
        ({"max_tokens": 100, "max_completion_tokens": 200}, 200),
        ({"max_tokens": None}, None),
        ({}, None),
    ],
)
def test_max_output_tokens_fields(fields: dict[str, Any], expected: int | None) -> None:
    assert request_from_openai({"messages": [], **fields}).max_output_tokens == expected


def test_legacy_functions_and_function_call() -> None:
    body = {
        "messages": [
            {"role": "assistant", "function_call": {"name": "f", "arguments": '{"a": 1}'}},
            {"role": "function", "name": "f", "content": "done"},
        ],
        "functions": [{"name": "f", "parameters": {"type": "object", "properties": {}}}],
    }
    request = request_from_openai(body)
    assert request.messages[0].tool_calls == (ToolCall("", "f", '{"a": 1}'),)
    assert request.messages[1] == Message(role="tool", content="done", name="f")
    assert request.tools[0].name == "f"
    assert request.tools[0].description == ""


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_fields(key: str) -> None:
    message = message_from_openai({"role": "assistant", "content": "4", key: "2+2"})
    assert message.reasoning == "2+2"


def test_reasoning_can_be_left_out_when_writing() -> None:
    message = Message(role="assistant", content="4", reasoning="2+2")
    assert message_to_openai(message)["reasoning_content"] == "2+2"
    assert "reasoning_content" not in message_to_openai(message, include_reasoning=False)


def test_max_tokens_field_choice_when_writing() -> None:
    request = Request(max_output_tokens=50)
    assert request_to_openai(request)["max_tokens"] == 50
    written = request_to_openai(request, max_tokens_field="max_completion_tokens")
    assert written["max_completion_tokens"] == 50
    assert "max_tokens" not in written


def test_data_url_image_gets_media_type_and_size() -> None:
    url = f"data:image/png;base64,{PIXEL_PNG}"
    part = {"type": "image_url", "image_url": {"url": url}}
    message = message_from_openai({"role": "user", "content": [part]})
    assert message.images == (ImagePart(url=url, media_type="image/png", width=1, height=1),)


def test_bare_string_image_url_is_accepted() -> None:
    part = {"type": "image_url", "image_url": "https://example.com/x.png"}
    message = message_from_openai({"role": "user", "content": [part]})
    assert message.images == (ImagePart(url="https://example.com/x.png"),)


def test_refusal_part_is_text() -> None:
    message = message_from_openai(
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    )
    assert message.content == (TextPart("No."),)


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(OPENAI_WEATHER)
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def test_the_issue_example_message_exactly() -> None:
    body = _with(["messages", 2, "tool_calls", 0, "function", "arguments"], {"location": "x"})
    with pytest.raises(MessageFormatError) as caught:
        request_from_openai(body)
    assert str(caught.value) == (
        "messages[2].tool_calls[0].function.arguments: expected a JSON string, got dict"
    )
    assert caught.value.path == "messages[2].tool_calls[0].function.arguments"


ERRORS = [
    (["messages"], "hi", "messages", "expected a JSON array, got str"),
    (["messages", 1, "role"], "bot", "messages[1].role", "system, developer, user, assistant"),
    (["messages", 1, "role"], None, "messages[1].role", "expected a JSON string, got None"),
    (["messages", 1, "content"], 5, "messages[1].content", "got int"),
    (["messages", 0, "content"], [{"type": "image_url", "image_url": "u"}], "messages[0]"
     ".content[0]", "only hold text parts"),
    (["messages", 5, "content", 0, "type"], "input_audio", "messages[5].content[0].type",
     "expected one of: text, image_url, refusal"),
    (["messages", 5, "content", 0], {"type": "text"}, "messages[5].content[0].text", "missing"),
    (["messages", 5, "content", 1, "image_url", "detail"], "ultra",
     "messages[5].content[1].image_url.detail", "auto, low, high"),
    (["messages", 5, "content", 1, "image_url"], {}, "messages[5].content[1].image_url.url",
     "missing"),
    (["messages", 2, "tool_calls"], {}, "messages[2].tool_calls", "expected a JSON array"),
    (["messages", 2, "tool_calls", 0, "function"], {"arguments": "{}"},
     "messages[2].tool_calls[0].function.name", "missing"),
    (["messages", 2, "tool_calls", 0, "type"], "custom", "messages[2].tool_calls[0].type",
     "expected one of: function"),
    (["messages", 2, "tool_calls", 0, "id"], 7, "messages[2].tool_calls[0].id", "got int"),
    (["messages", 2, "reasoning_content"], ["x"], "messages[2].reasoning_content", "got list"),
    (["messages", 3, "tool_call_id"], 1, "messages[3].tool_call_id", "got int"),
    (["messages", 3, "role"], "function", "messages[3].name", "missing"),
    (["tools"], {"type": "function"}, "tools", "expected a JSON array, got dict"),
    (["tools", 0, "type"], "web_search", "tools[0].type", "expected one of: function"),
    (["tools", 0, "function", "parameters"], [], "tools[0].function.parameters", "got list"),
    (["functions"], [{"description": "d"}], "functions[0].name", "missing"),
    (["max_completion_tokens"], -1, "max_completion_tokens", "positive integer, got -1"),
    (["max_completion_tokens"], "100", "max_completion_tokens", "got str"),
    (["max_completion_tokens"], True, "max_completion_tokens", "got bool"),
    (["max_completion_tokens"], 1.5, "max_completion_tokens", "got float"),
    (["model"], 4, "model", "got int"),
]  # fmt: skip


@pytest.mark.parametrize(("where", "value", "path", "problem"), ERRORS)
def test_malformed_body_names_the_place(
    where: list[Any], value: Any, path: str, problem: str
) -> None:
    with pytest.raises(MessageFormatError) as caught:
        request_from_openai(_with(where, value))
    assert caught.value.path == path
    assert problem in caught.value.problem
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("body", "path"),
    [([], "request"), ({}, "messages"), ({"messages": [3]}, "messages[0]")],
)
def test_wrong_top_level_shapes(body: Any, path: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        request_from_openai(body)
    assert caught.value.path == path


@given(openai_messages)
def test_message_round_trip(message: Message) -> None:
    written = json.loads(json.dumps(message_to_openai(message)))
    assert message_from_openai(written) == message


@given(openai_requests())
def test_request_round_trip(request: Request) -> None:
    written = json.loads(json.dumps(request_to_openai(request)))
    assert request_from_openai(written) == request


def test_docs_example_survives_write_and_read() -> None:
    request = request_from_openai(OPENAI_WEATHER)
    assert request_from_openai(request_to_openai(request)) == request
