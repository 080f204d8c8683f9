"""Usage-first context size: the last valid usage report plus the messages counted since."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.budget.context import UsageTrust, context_tokens, last_usage_index, usage_tokens
from ctxbudget.budget.rules import get_policy
from ctxbudget.budget.usage import usage_from_anthropic, usage_from_openai
from ctxbudget.counting.result import RequestCount
from ctxbudget.messages.model import Message, Request, ToolSpec
from ctxbudget.messages.usage import Usage

FRAMING = 4  # tokens of role markers our fake template adds to each message


class CharCounter:
    """A stand-in for RequestCounter: ceil(chars / 4) + 4 per message; the floor is the same
    over the system prompt and tool names."""

    def count(self, request: Request) -> RequestCount:
        per = tuple(math.ceil(len(m.text) / 4) + FRAMING for m in request.messages)
        system = math.ceil(len(request.system or "") / 4) + FRAMING
        tools = sum(math.ceil(len(t.name + t.description) / 4) for t in request.tools)
        return RequestCount(
            counter="chars/4",
            kind="estimate",
            total=system + tools + sum(per),
            system=system,
            tools=tools,
            messages=sum(per),
            per_message=per,
            floor=system + tools,
        )


COUNTER = CharCounter()


def user(text: str) -> Message:
    return Message(role="user", content=text)


def reply(text: str, usage: Usage | None) -> Message:
    return Message(role="assistant", content=text, usage=usage)


def request(*messages: Message) -> Request:
    return Request(
        system="You are a careful coding agent." * 4,
        tools=(ToolSpec(name="read_file", description="Read a file from the workspace."),),
        messages=messages,
    )


def test_usage_plus_the_messages_after_it() -> None:
    usage = Usage(input_tokens=900, output_tokens=40)
    req = request(user("a" * 400), reply("b" * 160, usage), user("c" * 80), user("d" * 8))
    est = context_tokens(req, COUNTER)
    per = COUNTER.count(req).per_message
    assert est.source == "usage"
    assert est.usage_index == 1
    assert est.usage_tokens == 940
    assert est.trailing_tokens == per[2] + per[3]
    assert est.tokens == est.usage_tokens + est.trailing_tokens


def test_seed_round_8_reasoning_not_sent_back() -> None:
    """Round 8 thought 4,096 tokens and wrote no call: total 6,511, next request 2,456."""
    round8 = Usage(input_tokens=6511 - 4096, output_tokens=4096, reasoning_tokens=4096)
    nudge = user("x" * 4 * (2456 - (6511 - 4096) - FRAMING))  # the next user message
    req = request(user("task"), reply("", round8), nudge)
    est = context_tokens(req, COUNTER)
    assert round8.total_tokens == 6511
    assert est.tokens == 2456
    assert context_tokens(req, COUNTER, resend_reasoning=True).tokens == 2456 + 4096


def test_usage_from_before_the_compaction_is_ignored_by_id() -> None:
    """The summary sits first in the list but the old usage is later: ids decide, not order."""
    old = Usage(input_tokens=50_000, output_tokens=100, compaction_id=None)
    new = Usage(input_tokens=1_200, output_tokens=30, compaction_id="c1")
    summary = Message(role="user", content="summary", meta={"summary": True})
    req = request(summary, reply("after", new), user("q"), reply("kept tail", old), user("now"))
    est = context_tokens(req, COUNTER, compaction_id="c1")
    assert est.usage_index == 1
    assert est.usage_tokens == 1_230
    # Without the current id, only the old usage matches: the caller must pass it.
    assert context_tokens(req, COUNTER).usage_index == 3


def test_usage_before_the_compaction_time_is_ignored() -> None:
    before = Usage(input_tokens=50_000, output_tokens=100, timestamp=100.0)
    after = Usage(input_tokens=1_000, output_tokens=10, timestamp=200.0)
    undated = Usage(input_tokens=70_000, output_tokens=10)
    req = request(reply("new", after), user("q"), reply("old", before), reply("?", undated))
    est = context_tokens(req, COUNTER, compacted_at=150.0)
    assert est.usage_index == 0
    assert est.usage_tokens == 1_010


@pytest.mark.parametrize(
    "usage",
    [
        Usage(),  # llama.cpp's all-zero report
        Usage(input_tokens=0, output_tokens=25),  # Ollama omitted prompt_eval_count
        None,
    ],
)
def test_unusable_usage_falls_back_to_the_whole_request(usage: Usage | None) -> None:
    req = request(user("hello " * 30), reply("hi", usage), user("more"))
    est = context_tokens(req, COUNTER)
    count = COUNTER.count(req)
    assert est.source == "count"
    assert est.usage_index is None
    assert est.tokens == count.total
    assert est.tokens > count.messages  # system and tools are counted, not messages alone


def test_user_messages_with_usage_are_not_a_base() -> None:
    stray = Message(role="user", content="x", usage=Usage(input_tokens=10, output_tokens=1))
    assert last_usage_index((stray,)) is None


def test_cache_counted_twice_would_compact_at_half_fill() -> None:
    """OpenAI: 100,000-token prompt, 95,000 cached, on 200,000. Counting the cache on top of
    prompt_tokens gives 195,300 and crosses Pi's line at half fill."""
    usage = usage_from_openai(
        {
            "prompt_tokens": 100_000,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 95_000},
        }
    )
    pi = get_policy("pi")
    tokens = usage_tokens(usage)
    assert not pi.fires(tokens, 200_000)
    assert pi.fires(tokens + usage.cache_read_tokens, 200_000)  # the bug this guards against


def test_cache_writes_missed_would_compact_too_late() -> None:
    """Anthropic: 2,000 uncached + 150,000 written + 40,000 read = 192,000 on 200,000."""
    usage = usage_from_anthropic(
        {
            "input_tokens": 2_000,
            "cache_creation_input_tokens": 150_000,
            "cache_read_input_tokens": 40_000,
            "output_tokens": 500,
        }
    )
    letta = get_policy("letta")
    assert letta.fires(usage_tokens(usage), 200_000)
    assert not letta.fires(usage_tokens(usage) - usage.cache_write_tokens, 200_000)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Message, ...]:
    n = draw(st.integers(0, 12))
    out = []
    for _ in range(n):
        text = draw(st.text(max_size=40))
        if draw(st.booleans()):
            out.append(user(text))
            continue
        usage = draw(
            st.none()
            | st.builds(
                Usage,
                input_tokens=st.integers(0, 5000),
                output_tokens=st.integers(0, 500),
                compaction_id=st.sampled_from([None, "c1"]),
            )
        )
        out.append(reply(text, usage))
    return tuple(out)


@settings(max_examples=80)
@given(messages=histories(), current=st.sampled_from([None, "c1"]))
def test_estimate_adds_up_and_uses_only_current_usage(
    messages: tuple[Message, ...], current: str | None
) -> None:
    req = request(*messages)
    est = context_tokens(req, COUNTER, compaction_id=current)
    assert est.tokens == est.usage_tokens + est.trailing_tokens
    if est.usage_index is None:
        assert est.tokens == COUNTER.count(req).total
        return
    usage = messages[est.usage_index].usage
    assert usage is not None and usage.compaction_id == current and usage.input_tokens > 0
    later = messages[est.usage_index + 1 :]
    assert all(
        m.role != "assistant"
        or m.usage is None
        or m.usage.compaction_id != current
        or m.usage.input_tokens == 0
        for m in later
    )


class ExactCharCounter(CharCounter):
    """The same counts, labelled exact: a counter with the server's own template and tokenizer."""

    def count(self, request: Request) -> RequestCount:
        return dataclasses.replace(super().count(request), counter="exact", kind="exact")


EXACT = ExactCharCounter()


def test_a_report_far_below_an_exact_count_of_its_request_is_passed_over() -> None:
    task = user("a" * 4_000)
    ours = EXACT.count(request(task)).total  # the request the reply reports on
    after = user("c" * 80)

    def estimate(usage: Usage, counter: Any = EXACT) -> Any:
        return context_tokens(request(task, reply("b" * 160, usage), after), counter)

    whole = EXACT.count(request(task, reply("b" * 160, None), after)).total
    # pydantic-ai's FunctionModel: a word count, a third of the tokens
    words = estimate(Usage(input_tokens=ours // 3, output_tokens=40))
    assert (words.source, words.tokens, words.usage_index) == ("count", whole, None)
    assert words.passed_over is not None
    assert (words.passed_over.reported, words.passed_over.counted) == (ours // 3, ours)
    # an adapter that reports the uncached part alone (Anthropic's raw input_tokens)
    assert estimate(Usage(input_tokens=100, output_tokens=40)).source == "count"
    # honest differences stay the base: a BOS more or less, a cached prefix reported in full
    for usage in (
        Usage(input_tokens=ours + 1, output_tokens=40),
        Usage(input_tokens=ours - 1, output_tokens=40),
        usage_from_openai(
            {"prompt_tokens": ours, "completion_tokens": 40,
             "prompt_tokens_details": {"cached_tokens": ours - 100}}
        ),
        usage_from_anthropic(
            {"input_tokens": 100, "cache_read_input_tokens": ours - 100, "output_tokens": 40}
        ),
    ):  # fmt: skip
        kept = estimate(usage)
        assert kept.source == "usage" and kept.passed_over is None, usage
    # an estimate's own error is larger than the gap: its count is not the judge
    assert estimate(Usage(input_tokens=ours // 3, output_tokens=40), COUNTER).source == "usage"


def test_a_session_says_once_that_a_report_was_passed_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trust = UsageTrust()
    task = user("a" * 4_000)
    words = Usage(input_tokens=300, output_tokens=5)
    req = request(task, reply("ok", words), user("more"))
    with caplog.at_level(logging.WARNING, logger="ctxbudget"):
        for _ in range(3):
            trust.note(context_tokens(req, EXACT).passed_over)
        trust.note(None)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "300-token prompt" in caplog.records[0].getMessage()
    assert trust.passed_over is not None and trust.passed_over.reported == 300


def test_a_gap_on_the_sent_request_is_a_truncation_only_from_a_whole_prompt_reporter() -> None:
    small, large = EXACT.count(request(user("a" * 400))), EXACT.count(request(user("a" * 4000)))
    # short from the first report on: no count of the prompt, not a truncation
    liar = UsageTrust()
    assert liar.truncation(Usage(input_tokens=large.total // 3), large) is None
    assert liar.passed_over is not None and not liar.whole_prompts
    # agreed before, then short: the server dropped part of the prompt (Ollama's num_ctx)
    server = UsageTrust()
    assert server.truncation(Usage(input_tokens=small.total), small) is None
    assert server.whole_prompts
    gap = server.truncation(Usage(input_tokens=large.total // 3), large)
    assert gap is not None and gap.counted == large.total and server.passed_over is None
    # an estimate is no judge of either
    rough = UsageTrust()
    estimated = COUNTER.count(request(user("a" * 4000)))
    assert rough.truncation(Usage(input_tokens=estimated.total // 3), estimated) is None
    assert rough.passed_over is None and not rough.whole_prompts
