"""Telling the two request formats apart, and reading JSON text with one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from message_strategies import ANTHROPIC_WEATHER, OPENAI_WEATHER

from ctxbudget.errors import InputError, MessageFormatError
from ctxbudget.messages.anthropic import request_from_anthropic
from ctxbudget.messages.detect import detect_request_format, parse_request_json, request_from_json
from ctxbudget.messages.openai import request_from_openai

TOOL_USE = {"type": "tool_use", "id": "t", "name": "n", "input": {}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (OPENAI_WEATHER, "openai"),
        (ANTHROPIC_WEATHER, "anthropic"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "openai"),
        ({"system": "s", "messages": []}, "anthropic"),
        ({"messages": [], "tools": [{"name": "n", "input_schema": {}}]}, "anthropic"),
        ({"messages": [{"role": "assistant", "content": [TOOL_USE]}]}, "anthropic"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "openai"),
        ({"messages": "junk", "tools": "junk"}, "openai"),
        ({"messages": [{"role": "user", "content": [{"type": []}]}]}, "openai"),
    ],
)
def test_detect_request_format(body: dict[str, Any], expected: str) -> None:
    assert detect_request_format(body) == expected


def test_request_from_json_uses_the_matching_reader() -> None:
    assert request_from_json(OPENAI_WEATHER) == request_from_openai(OPENAI_WEATHER)
    assert request_from_json(ANTHROPIC_WEATHER) == request_from_anthropic(ANTHROPIC_WEATHER)


def test_request_from_json_rejects_non_objects() -> None:
    with pytest.raises(MessageFormatError, match=r"^request: expected a JSON object, got list$"):
        request_from_json([])


def test_parse_request_json_reads_text() -> None:
    text = json.dumps(ANTHROPIC_WEATHER)
    assert parse_request_json(text, "req.json") == request_from_anthropic(ANTHROPIC_WEATHER)
    assert parse_request_json(text.encode(), "req.json") == request_from_anthropic(
        ANTHROPIC_WEATHER
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"messages": [', r"^req\.json: not JSON \(line 1 col 15\): Expecting value$"),
        ("", r"^req\.json: not JSON \(line 1 col 1\)"),
        (
            "[" * 100_000 + "]" * 100_000,
            r"^req\.json: JSON nested deeper than 128 levels; flatten it$",
        ),
        (b"\xff\xfe\x00garbage", r"^req\.json: not JSON"),
    ],
)
def test_parse_request_json_errors(text: str | bytes, expected: str) -> None:
    with pytest.raises(InputError, match=expected) as caught:
        parse_request_json(text, "req.json")
    assert "\n" not in str(caught.value)


def test_parse_request_json_puts_the_source_before_the_path() -> None:
    with pytest.raises(MessageFormatError) as caught:
        parse_request_json('{"messages": [{"role": "bot"}]}', "req.json")
    assert str(caught.value).startswith("req.json: messages[0].role: unknown role 'bot'")
    assert caught.value.path == "messages[0].role"
