"""Hypothesis strategies and sample bodies shared by the message-format tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from tests.json_strategies import json_values as shared_json_values
from tests.json_strategies import mutated_json

from ctxbudget.messages.model import ImagePart, Message, Request, TextPart, ToolCall, ToolSpec

# Keys the readers look at, so that arbitrary objects often reach deep into a reader.
KNOWN_KEYS = (
    "role", "content", "messages", "type", "text", "tool_calls", "function", "name",
    "arguments", "id", "image_url", "url", "detail", "tools", "functions", "parameters",
    "max_tokens", "max_completion_tokens", "model", "system", "tool_use_id", "input",
    "input_schema", "source", "media_type", "data", "thinking", "is_error", "tool_call_id",
    "reasoning_content", "reasoning", "function_call", "refusal", "description",
)  # fmt: skip
KNOWN_STRINGS = (
    "system", "developer", "user", "assistant", "tool", "function", "text", "image_url",
    "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "base64", "url",
    "auto", "low", "high", "custom", "data:image/png;base64,iVBORw0KGgo=", "{}",
)  # fmt: skip

json_values = shared_json_values(KNOWN_KEYS, KNOWN_STRINGS)
clean_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def mutated(bodies: list[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """A valid body with one to three members replaced by arbitrary JSON or removed."""
    return st.sampled_from(bodies).flatmap(lambda body: mutated_json(body, json_values))


# --- values that the OpenAI format represents exactly -------------------------------------

texts = st.text(max_size=12)
optional_texts = st.none() | texts
image_parts = st.builds(
    ImagePart,
    url=st.from_regex(r"https://example\.com/[a-z0-9]{0,8}\.png", fullmatch=True),
    detail=st.sampled_from([None, "auto", "low", "high"]),
)
text_parts = st.builds(TextPart, texts)
any_content = texts | st.lists(text_parts | image_parts, max_size=3).map(tuple)
text_content = texts | st.lists(text_parts, max_size=3).map(tuple)
tool_calls = st.builds(ToolCall, id=texts, name=texts, arguments=texts)
system_meta = st.sampled_from([{}, {"openai_role": "developer"}])

system_messages = st.builds(
    Message, role=st.just("system"), content=text_content, name=optional_texts, meta=system_meta
)
user_messages = st.builds(Message, role=st.just("user"), content=any_content, name=optional_texts)
assistant_messages = st.builds(
    Message,
    role=st.just("assistant"),
    content=any_content,
    name=optional_texts,
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    reasoning=optional_texts,
)
tool_messages = st.builds(
    Message,
    role=st.just("tool"),
    content=any_content,
    name=optional_texts,
    tool_call_id=optional_texts,
)
openai_messages = system_messages | user_messages | assistant_messages | tool_messages
injected_system = st.builds(
    Message,
    role=st.just("user"),
    content=text_content,
    name=optional_texts,
    meta=st.sampled_from([{"openai_role": "system"}, {"openai_role": "developer"}]),
)
tool_specs = st.builds(
    ToolSpec,
    name=texts,
    description=texts,
    parameters=st.dictionaries(st.text(max_size=6), clean_json, max_size=3),
)


@st.composite
def openai_requests(draw: st.DrawFn) -> Request:
    """Requests whose OpenAI form reads back to an equal value: without a system prompt, or
    with one, empty or not."""
    system = draw(st.none() | texts)
    body = user_messages | assistant_messages | tool_messages | injected_system
    messages = draw(st.lists(body, max_size=6))
    if messages and messages[0].meta:
        # Written out, it would follow the system prompt and be read back as part of it.
        messages.insert(0, Message(role="user", content="hi"))
    return Request(
        system=system,
        tools=tuple(draw(st.lists(tool_specs, max_size=3))),
        messages=tuple(messages),
        max_output_tokens=draw(st.none() | st.integers(1, 10**6)),
        model=draw(optional_texts),
    )


# A 1x1 PNG, as in many API examples.
PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

# --- sample bodies in the shape of the providers' API documentation -----------------------

OPENAI_WEATHER = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "developer", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What's the weather like in Paris today?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_12345xyz",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"location":"Paris, France"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14"},
        {"role": "assistant", "content": "It is 14°C in Paris today."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What's in this image?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/boardwalk.jpg", "detail": "high"},
                },
            ],
        },
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get current temperature for a given location.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "City and country e.g. Bogotá, Colombia",
                        }
                    },
                    "required": ["location"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        }
    ],
    "max_completion_tokens": 1024,
}

ANTHROPIC_WEATHER = {
    "model": "claude-opus-4-1-20250805",
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You are a helpful assistant."}],
    "tools": [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    }
                },
                "required": ["location"],
            },
        }
    ],
    "messages": [
        {"role": "user", "content": "What's the weather like in San Francisco?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "The user wants SF, which is likely San Francisco, CA.",
                    "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve",
                },
                {"type": "text", "text": "I'll check the weather."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA", "unit": "celsius"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": [{"type": "text", "text": "15 degrees"}],
                },
                {"type": "text", "text": "And in Paris?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "text", "text": "Let me look that up."},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": PIXEL_PNG,
                    },
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
            ],
        },
    ],
}
