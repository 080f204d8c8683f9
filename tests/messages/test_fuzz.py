"""Any JSON value fed to a reader gives a value or a MessageFormatError naming the place.

``make fuzz`` runs these with the "fuzz" Hypothesis profile (10,000+ examples each).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from message_strategies import ANTHROPIC_WEATHER, OPENAI_WEATHER, json_values, mutated

from ctxbudget.errors import InputError, MessageFormatError
from ctxbudget.messages.anthropic import messages_from_anthropic, request_from_anthropic
from ctxbudget.messages.detect import parse_request_json, request_from_json
from ctxbudget.messages.openai import (
    message_from_openai,
    message_to_openai,
    messages_from_openai,
    request_from_openai,
    request_to_openai,
)

READERS: dict[str, Callable[[object], object]] = {
    "request_from_openai": request_from_openai,
    "request_from_anthropic": request_from_anthropic,
    "request_from_json": request_from_json,
    "messages_from_openai": messages_from_openai,
    "message_from_openai": message_from_openai,
    "messages_from_anthropic": messages_from_anthropic,
}
REQUEST_READERS = ["request_from_anthropic", "request_from_json", "request_from_openai"]
BODIES = [OPENAI_WEATHER, ANTHROPIC_WEATHER]
pytestmark = pytest.mark.fuzz


def _read_or_format_error(reader: Callable[[object], object], value: object) -> None:
    try:
        reader(value)
    except MessageFormatError as exc:
        text = str(exc)
        assert "\n" not in text
        assert text.startswith(f"{exc.path}: " if exc.path else exc.problem)


@pytest.mark.parametrize("name", sorted(READERS))
@given(value=json_values)
def test_arbitrary_json(name: str, value: object) -> None:
    _read_or_format_error(READERS[name], value)


@pytest.mark.parametrize("name", sorted(READERS))
@given(value=json_values)
def test_arbitrary_json_in_a_messages_list(name: str, value: object) -> None:
    wrapped = [value] if name.startswith("message") else {"messages": [value]}
    _read_or_format_error(READERS[name], wrapped)


@pytest.mark.parametrize("name", REQUEST_READERS)
@given(body=mutated(BODIES))
def test_mutated_valid_bodies(name: str, body: object) -> None:
    _read_or_format_error(READERS[name], body)


@given(body=mutated(BODIES))
def test_whatever_openai_reads_it_writes_back(body: object) -> None:
    try:
        request = request_from_openai(body)
    except MessageFormatError:
        return
    written = json.loads(json.dumps(request_to_openai(request)))
    assert request_from_openai(written).messages == request.messages
    for message in request.messages:
        json.dumps(message_to_openai(message))


@given(text=st.text(max_size=200) | json_values.map(json.dumps) | mutated(BODIES).map(json.dumps))
def test_parse_request_json_raises_only_input_errors(text: str) -> None:
    try:
        parse_request_json(text, "req.json")
    except InputError as exc:
        assert str(exc).startswith("req.json: ")
        assert "\n" not in str(exc)
