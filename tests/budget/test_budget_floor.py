"""The prompt floor: refuse before sending when system + tools + reply reserve exceed the window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.budget.floor import (
    check_prompt_floor,
    floor_parts,
    is_ollama,
    ollama_context_length,
    request_floor_parts,
)
from ctxbudget.counting.result import RequestCount
from ctxbudget.errors import ConfigError, InvalidWindowError, PromptFloorExceeded
from ctxbudget.messages.model import Request, ToolSpec


def counted(system: int, tools: int) -> RequestCount:
    return RequestCount(
        counter="test",
        kind="estimate",
        total=system + tools,
        system=system,
        tools=tools,
        messages=0,
        per_message=(),
        floor=system + tools,
    )


def big_schema(n: int) -> dict[str, object]:
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}


REQUEST = Request(
    system="You are an agent. " * 50,
    tools=(
        ToolSpec(name="read_file", description="Read a file.", parameters=big_schema(40)),
        ToolSpec(name="bash", description="Run a command.", parameters=big_schema(5)),
        ToolSpec(name="grep", description="Search.", parameters=big_schema(20)),
        ToolSpec(name="noop", description=""),
    ),
)


def test_fits_when_floor_plus_reserve_equals_the_window() -> None:
    check_prompt_floor(counted(3_000, 1_096), 8_192, 4_096)  # 4,096 + 4,096 == 8,192


def test_exceeded_names_floor_window_largest_parts_and_a_fix() -> None:
    count = counted(2_000, 9_000)
    with pytest.raises(PromptFloorExceeded) as info:
        check_prompt_floor(count, 8_192, 4_096, request=REQUEST)
    err = info.value
    text = str(err)
    assert "\n" not in text
    assert "11,000" in text and "8,192" in text and "4,096" in text
    assert (err.floor, err.reserve, err.window) == (11_000, 4_096, 8_192)
    labels = [label for label, _ in err.largest]
    assert labels == ["tool: read_file", "tool: grep", "system prompt"]
    assert all(label in text for label in labels)
    assert "drop unused tools" in text
    assert "OLLAMA_CONTEXT_LENGTH" not in text


def test_explicit_parts_win_and_only_three_are_named() -> None:
    parts = [("system prompt", 10), ("tool: a", 500), ("tool: b", 300), ("tool: c", 400)]
    with pytest.raises(PromptFloorExceeded) as info:
        check_prompt_floor(counted(10, 1_200), 1_000, 100, parts=parts)
    assert info.value.largest == [("tool: a", 500), ("tool: c", 400), ("tool: b", 300)]
    assert "system prompt" not in str(info.value).split("largest parts:")[1].split(";")[0]


@pytest.mark.parametrize(
    ("provider", "url", "expected"),
    [
        ("ollama", None, True),
        ("Ollama", None, True),
        (None, "http://localhost:11434/v1", True),
        (None, "127.0.0.1:11434", True),
        ("openai", "http://gpu-box:11434", True),
        ("vllm", "http://localhost:8000/v1", False),
        (None, "http://localhost:99999999", False),
        (None, None, False),
    ],
)
def test_is_ollama(provider: str | None, url: str | None, expected: bool) -> None:
    assert is_ollama(provider, url) is expected


@pytest.mark.parametrize(
    ("floor", "reserve", "length"),
    [(100, 100, 8_192), (5_000, 4_096, 16_384), (12_288, 4_096, 16_384), (30_000, 4_096, 65_536)],
)
def test_ollama_context_length_is_next_power_of_two(floor: int, reserve: int, length: int) -> None:
    assert ollama_context_length(floor, reserve) == length


def test_ollama_gets_the_serve_command() -> None:
    with pytest.raises(PromptFloorExceeded) as info:
        check_prompt_floor(
            counted(6_000, 9_000), 2_048, 4_096, base_url="http://localhost:11434/v1"
        )
    text = str(info.value)
    assert text.endswith("OLLAMA_CONTEXT_LENGTH=32768 ollama serve")
    assert "\n" not in text


def test_floor_parts_label_system_and_each_tool() -> None:
    parts = floor_parts(REQUEST, len)
    assert [label for label, _ in parts] == [
        "system prompt",
        "tool: read_file",
        "tool: bash",
        "tool: grep",
        "tool: noop",
    ]
    assert parts[0][1] == len(REQUEST.system)
    assert parts[1][1] > parts[3][1] > parts[2][1]


def test_request_floor_parts_share_out_the_counted_tools() -> None:
    parts = request_floor_parts(REQUEST, counted(300, 1_000))
    assert parts[0] == ("system prompt", 300)
    assert abs(sum(n for _, n in parts[1:]) - 1_000) <= len(REQUEST.tools)


@pytest.mark.parametrize("system", [None, ""])
def test_request_floor_parts_name_a_system_turn_that_costs_tokens(system: str | None) -> None:
    """An empty system turn's framing, or Qwen2.5's default prompt for none, is counted in the
    floor's system part: the labelled parts name it."""
    tools = Request(system=system, tools=REQUEST.tools[:1])
    assert request_floor_parts(tools, counted(9, 100))[0] == ("system prompt", 9)
    assert [label for label, _ in request_floor_parts(tools, counted(0, 100))] == [
        "tool: read_file"
    ]


@pytest.mark.parametrize("window", [0, -5, float("nan"), "big"])
def test_bad_window(window: object) -> None:
    with pytest.raises(InvalidWindowError):
        check_prompt_floor(counted(1, 1), window, 10)  # type: ignore[arg-type]


def test_bad_reserve() -> None:
    with pytest.raises(ConfigError):
        check_prompt_floor(counted(1, 1), 100, -1)


@settings(max_examples=80)
@given(
    system=st.integers(0, 50_000),
    tools=st.integers(0, 50_000),
    reserve=st.integers(0, 20_000),
    window=st.integers(1, 120_000),
)
def test_raises_exactly_when_floor_plus_reserve_exceeds_window(
    system: int, tools: int, reserve: int, window: int
) -> None:
    count = counted(system, tools)
    if system + tools + reserve > window:
        with pytest.raises(PromptFloorExceeded):
            check_prompt_floor(count, window, reserve, provider_name="ollama")
    else:
        check_prompt_floor(count, window, reserve, provider_name="ollama")
