"""Importers read provider usage through budget/usage.py; the shared traces' numbers stay pinned."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.replay.conftest import shared_trace

from ctxbudget.budget.usage import usage_from_anthropic, usage_from_any
from ctxbudget.errors import MessageFormatError, TraceFormatError
from ctxbudget.replay import load_trace, replay_file
from ctxbudget.replay.importers._builder import MAX_TOKENS

# sha256 over "context,output,reasoning,cache_read;" of every call, computed from the importers
# before they read usage through budget/usage.py: moving the arithmetic must not move a number.
PINNED = [
    ("claude-code", 17, "ab6ea000059c7e6a5101f5c4747cd70cc8a70552b881cbd2562de3e96a4de962"),
    ("codex", 169, "2c25e048c9a7abaac03712c42a56b01d50384e2d98913b50a2c2ea4ae0122629"),
    ("mini-swe-agent", 61, "ccfb43864ec76bc5b0826c81bb1e45dda174ed6ffc46ee9d1acf51929e1ddec6"),
    ("pi", 253, "30f359ef2b7d957d53491ae4ac0f182e789bbaf8ec394355b0dfc158d1da213e"),
]


@pytest.mark.parametrize(("fmt", "calls", "digest"), PINNED)
def test_shared_trace_numbers_are_pinned(fmt: str, calls: int, digest: str) -> None:
    trace = load_trace(shared_trace(fmt))
    h = hashlib.sha256()
    for c in trace.calls:
        numbers = (c.context_tokens, c.output_tokens, c.reasoning_tokens, c.cache_read_tokens)
        h.update(b"%d,%d,%d,%d;" % numbers)
    assert len(trace.calls) == calls
    assert h.hexdigest() == digest


def claude_lines(usages: list[dict[str, Any]]) -> list[str]:
    """A Claude Code session: a user prompt, then one assistant message per usage."""
    lines = [{"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}}]
    for n, usage in enumerate(usages):
        message = {"id": f"m{n}", "role": "assistant", "content": "ok", "usage": usage}
        lines.append({"type": "assistant", "sessionId": "s", "message": message})
    return [json.dumps(x) for x in lines]


def openai_lines(usages: list[dict[str, Any]]) -> list[str]:
    msgs = [{"role": "user", "content": "hi"}]
    return [json.dumps({"request": {"messages": msgs}, "response": {"usage": u}}) for u in usages]


def archive_lines(usages: list[dict[str, Any]]) -> list[str]:
    user = {"type": "message", "message": {"role": "user", "content": "task"}}
    return [json.dumps(user)] + [json.dumps({"type": "usage", "usage": u}) for u in usages]


GOOD: dict[str, dict[str, Any]] = {
    "claude-code": {"input_tokens": 7, "cache_read_input_tokens": 50, "output_tokens": 4},
    "openai-log": {"prompt_tokens": 57, "completion_tokens": 4},
    "ctxbudget": {"input_tokens": 57, "cache_read_tokens": 50, "output_tokens": 4},
}
BAD: dict[str, dict[str, Any]] = {
    "claude-code": {"input_tokens": 5, "cache_read_input_tokens": "lots", "output_tokens": 3},
    "openai-log": {"prompt_tokens": -5, "completion_tokens": 3},
    "ctxbudget": {"input_tokens": 5, "output_tokens": 2.5},
}
WRITERS: dict[str, Callable[[list[dict[str, Any]]], list[str]]] = {
    "claude-code": claude_lines,
    "openai-log": openai_lines,
    "ctxbudget": archive_lines,
}


@pytest.mark.parametrize(
    ("fmt", "bad_line"), [("claude-code", 2), ("openai-log", 1), ("ctxbudget", 2)]
)
def test_rejected_usage_skips_its_line_with_a_warning(
    write_log: Callable[[list[str]], Path], fmt: str, bad_line: int
) -> None:
    trace = load_trace(write_log(WRITERS[fmt]([BAD[fmt], GOOD[fmt]])), fmt)
    assert [(c.context_tokens, c.output_tokens) for c in trace.calls] == [(57, 4)]
    assert trace.skipped_lines == 1
    assert f"line {bad_line} skipped: usage." in trace.warnings[0]


def test_rejected_trajectory_usage_names_its_message(tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for usage in ({"prompt_tokens": "many"}, {"prompt_tokens": 30, "completion_tokens": 2}):
        messages.append({"role": "assistant", "content": "ok", "extra": {"usage": usage}})
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"info": {}, "messages": messages}, indent=1), encoding="utf-8")
    trace = load_trace(path)
    assert [c.context_tokens for c in trace.calls] == [30]
    assert trace.skipped_lines == 1
    assert "messages[1] skipped: usage.prompt_tokens" in trace.warnings[0]


token = st.one_of(
    st.integers(min_value=0, max_value=10**7),
    st.integers(max_value=-1),
    st.floats(allow_nan=True),
    st.none(),
    st.text(max_size=3),
)
READERS = {"claude-code": usage_from_anthropic, "openai-log": usage_from_any}
KEYS = {
    "claude-code": (
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    ),
    "openai-log": ("prompt_tokens", "completion_tokens", "prompt_cache_hit_tokens"),
}


@settings(max_examples=60)
@given(data=st.data(), fmt=st.sampled_from(sorted(READERS)))
def test_importers_read_usage_as_budget_usage_does(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, fmt: str
) -> None:
    usages = data.draw(
        st.lists(st.fixed_dictionaries({}, optional=dict.fromkeys(KEYS[fmt], token)), max_size=4)
    )
    path = tmp_path_factory.mktemp("usage") / "session.jsonl"
    path.write_text("\n".join(["{}", *WRITERS[fmt](usages)]) + "\n", encoding="utf-8")
    expected = []
    for u in usages:
        try:
            usage = READERS[fmt](u)
        except MessageFormatError:
            continue
        sizes = (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens)
        if max(*sizes, usage.cache_read_tokens, usage.cache_write_tokens) > MAX_TOKENS:
            continue  # skipped by the importer: replay keeps counts as 8-byte integers
        if u and not usage.is_zero:
            expected.append((usage.context_tokens, usage.output_tokens, usage.cache_read_tokens))
    try:
        trace = load_trace(path, fmt)
    except TraceFormatError:  # no call at all
        assert expected == []
        return
    got = [(c.context_tokens, c.output_tokens, c.cache_read_tokens) for c in trace.calls]
    assert got == expected


def pi_lines(usages: list[dict[str, Any]]) -> list[str]:
    lines = [{"type": "message", "parentId": None, "message": {"role": "user", "content": "hi"}}]
    for u in usages:
        message = {"role": "assistant", "content": "ok", "usage": u}
        lines.append({"type": "message", "parentId": "p", "message": message})
    return [json.dumps(x) for x in lines]


@pytest.mark.parametrize(
    ("fmt", "write", "huge", "good"),
    [
        ("openai-log", openai_lines, {"prompt_tokens": 2**64}, GOOD["openai-log"]),
        ("pi", pi_lines, {"input": 2**63, "output": 1}, {"input": 57, "output": 4}),
    ],
)
def test_counts_past_eight_bytes_skip_their_line(
    write_log: Callable[[list[str]], Path],
    fmt: str,
    write: Callable[[list[dict[str, Any]]], list[str]],
    huge: dict[str, Any],
    good: dict[str, Any],
) -> None:
    result = replay_file(write_log(write([huge, good])), fmt, windows=[1000], estimators={})
    assert [(c.context_tokens, c.output_tokens) for c in result.trace.calls] == [(57, 4)]
    assert "skipped: usage: a token count above" in result.trace.warnings[0]
