"""RequestCounter equals a full recount over random edit sequences; breakdowns add up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.counting.strategies import messages, systems, tools

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.counter import count_with
from ctxbudget.counting.select import choose_scheme
from ctxbudget.errors import InputError
from ctxbudget.messages.model import Message, Request, ToolSpec
from ctxbudget.tokens.base import Estimator, TokenCounter

CHARS4 = Estimator("chars4", lambda text: (len(text) + 3) // 4)  # local stand-in estimator

edits = st.one_of(
    st.tuples(st.just("append"), st.lists(messages(), min_size=1, max_size=3)),
    st.tuples(st.just("extend"), st.lists(messages(), min_size=1, max_size=3)),
    st.tuples(st.just("system"), systems),  # None, "" and text: each renders apart
    st.tuples(st.just("tools"), tools),
    st.tuples(st.just("compact"), st.integers(1, 4)),
    st.tuples(st.just("drop_last"), st.just(0)),  # a retry takes the failed reply back
    st.tuples(st.just("replace_last"), messages()),
    st.tuples(st.just("edit_middle"), messages()),
)


def _apply(request: Request, edit: tuple[str, object]) -> Request:
    kind, value = edit
    msgs = request.messages
    if kind == "append":
        assert isinstance(value, list)
        return request.with_messages((*msgs, *value))
    if kind == "extend":  # the request knows what it extends: not compared message by message
        assert isinstance(value, list)
        return request.append(*value)
    if kind == "system":
        assert value is None or isinstance(value, str)
        return replace(request, system=value)
    if kind == "tools":
        assert isinstance(value, list)
        return replace(request, tools=tuple(value))
    if kind == "drop_last":
        return request.with_messages(msgs[:-1] if len(msgs) > 1 else msgs)
    if kind == "compact":
        assert isinstance(value, int)
        summary = Message(
            role="user", content=f"Summary of {value} messages", meta={"summary": True}
        )
        return request.with_messages((summary, *msgs[value:]))
    assert isinstance(value, Message)
    if kind == "edit_middle":
        middle = len(msgs) // 2
        return request.with_messages((*msgs[:middle], value, *msgs[middle + 1 :]))
    return request.with_messages((*msgs[:-1], value))


def _resolve(counter: str | TokenCounter, hf_folder: Callable[[str], Path]) -> str | TokenCounter:
    if isinstance(counter, str) and counter.startswith("hf:"):
        return f"hf:{hf_folder(counter[3:])}"
    return counter


@pytest.mark.parametrize(
    "counter",
    [
        "qwen3",
        "qwen2.5",
        "cl100k_base",
        "o200k_base",
        CHARS4,
        "hf:qwen2.5",
        "hf:smollm3-template",
        "hf:llama3-cl100k",
        "hf:hermes-2-pro-template",
    ],
)
@settings(max_examples=40)
@given(steps=st.lists(edits, min_size=1, max_size=8))
def test_incremental_equals_full_recount(
    counter: str | TokenCounter,
    steps: list[tuple[str, object]],
    hf_folder: Callable[[str], Path],
) -> None:
    counter = _resolve(counter, hf_folder)
    incremental = RequestCounter(counter)
    request = Request(messages=(Message(role="user", content="start"),))
    kept = []
    for edit in steps:
        request = _apply(request, edit)
        try:
            expected = count_request(request, counter)
        except InputError:  # the template refuses the request (Llama: one tool call per turn)
            with pytest.raises(InputError):
                incremental.count(request)
            continue
        got = incremental.count(request)
        assert replace(got, per_message=()) == replace(expected, per_message=())
        assert got.system + got.tools + got.messages == got.total
        # Read by index: a view of the counter's running list is not copied by this.
        parts = [got.per_message[i] for i in range(len(got.per_message))]
        assert parts == list(expected.per_message)
        assert sum(parts) == got.messages
        kept.append((got, expected))
    for got, expected in kept:  # later steps left each count handed out as it was
        assert got == expected and hash(got) == hash(expected)
        assert tuple(got.per_message) == tuple(expected.per_message)


def test_new_query_recounts_earlier_reasoning() -> None:
    turn = Message(role="assistant", content="ok", reasoning="long thoughts " * 20)
    request = Request(messages=(Message(role="user", content="q1"), turn))
    counter = RequestCounter("qwen3")
    before = counter.count(request).per_message[1]
    after = counter.count(
        request.with_messages((*request.messages, Message(role="user", content="q2")))
    )
    assert after.per_message[1] < before  # the reasoning is no longer rendered


def test_floor_is_system_plus_tools() -> None:
    request = Request(system="sys", messages=(Message(role="user", content="hi"),))
    count = count_request(request, "qwen3")
    assert count.floor == count.system + count.tools > 0


def test_no_messages_puts_the_reply_primer_in_the_head() -> None:
    scheme = choose_scheme(CHARS4)
    count = count_with(scheme, Request(system="You are terse."))
    assert count.per_message == () and count.messages == 0
    assert count.total == count.system


@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
def test_messages_long_gone_are_not_kept(role: str) -> None:
    """A counter fed thousands of different requests keeps what the largest one needs, not
    every message it has seen (each kind of cached count: whole messages, bodies)."""
    import tracemalloc

    counter = RequestCounter("qwen3")
    conversation = Request(messages=(Message(role="user", content="Fix the parser."),) * 10)
    counter.count(conversation)
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for i in range(2_000):
            side = Message(role=role, content=f"{i} " + "x" * 2_000)  # ~4 MB if all kept
            counter.count(conversation.with_messages((*conversation.messages, side)))
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < 1_000_000, grown


# Equal in Python, printed apart by a template's tojson: True == 1 == 1.0.
PRINTED_APART = [(True, 1), (1, 1.0), (False, 0)]


def _tool(default: object) -> ToolSpec:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "default": default}}}
    return ToolSpec(name="f", description="A tool.", parameters=schema)


@pytest.mark.parametrize(("was", "now"), PRINTED_APART)
@pytest.mark.parametrize("counter", ["qwen3", "hf:llama3-cl100k", "hf:smollm3-template"])
def test_tools_equal_in_python_but_printed_apart_are_counted_again(
    counter: str, was: object, now: object, hf_folder: Callable[[str], Path]
) -> None:
    """A schema's ``default: true`` made ``1``: the tool lists compare equal, the prompts
    differ (review)."""
    name = str(_resolve(counter, hf_folder))
    assert (_tool(was),) == (_tool(now),)
    incremental = RequestCounter(name)
    first = Request(tools=(_tool(was),), messages=(Message(role="user", content="hi"),))
    incremental.count(first)
    changed = replace(first, tools=(_tool(now),))
    for request in (changed, changed.append(Message(role="assistant", content="ok"))):
        assert incremental.count(request) == count_request(request, name)
