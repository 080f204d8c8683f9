"""Strategies, the layered order, the half-the-room target and the no-sawtooth property."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.compaction.fakes import (
    FakeCounter,
    ScriptedSummarizer,
    coding_session,
    reply,
    tool_pairs_ok,
    user,
)
from tests.compaction.test_cut import conversations

from ctxbudget.compaction.handoff import SUMMARY_HEADER
from ctxbudget.compaction.strategies import (
    KEEP_RECENT_TOOL_RESULTS,
    STRATEGY_NAMES,
    CompactionResult,
    compact,
    compaction_target,
)
from ctxbudget.errors import (
    CompactionError,
    ConfigError,
    InvalidWindowError,
    ProviderError,
    UnknownNameError,
)
from ctxbudget.messages.model import Message, Request, ToolSpec

SYSTEM = "You are a coding agent. " * 40
TOOLS = tuple(ToolSpec(name=n, description="does " + n * 20) for n in ("read_file", "run"))


def request(messages: tuple[Message, ...]) -> Request:
    return Request(system=SYSTEM, tools=TOOLS, messages=messages)


def conversation_tokens(counter: FakeCounter, req: Request) -> int:
    count = counter.count(req)
    return count.total - count.floor


def run(messages: tuple[Message, ...], threshold: int, **kw: object) -> CompactionResult:
    return compact(request(messages), FakeCounter(), threshold=threshold, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("floor", "threshold", "target"),
    [(524, 960, 218), (0, 100, 50), (1000, 1000, 0), (2000, 1000, 0), (10, 11, 0)],
)
def test_compaction_target_is_half_the_room(floor: int, threshold: int, target: int) -> None:
    assert compaction_target(floor, threshold) == target


def floor_of(messages: tuple[Message, ...]) -> int:
    return FakeCounter().count(request(messages)).floor


@pytest.mark.parametrize("strategy", ["truncate", "layered"])
def test_result_fits_half_the_room_and_keeps_task(strategy: str) -> None:
    session = coding_session(30)
    threshold = floor_of(session) + 3000
    res = run(session, threshold, strategy=strategy)
    counter = FakeCounter()
    after = counter.count(request(res.messages))
    assert res.tokens_after == after.total  # whole request, floor included
    assert res.tokens_before == counter.count(request(session)).total
    assert after.total - after.floor <= compaction_target(after.floor, threshold)
    assert session[0] in res.messages  # the first task, verbatim
    assert tool_pairs_ok(res.messages)
    assert res.messages[-1] == session[-1]


def test_truncate_drops_oldest_whole_turns() -> None:
    turns = [
        m for t in range(20) for m in (user(f"topic {t}: nice weather today"), reply("ok " * 20))
    ]
    session = tuple(turns)
    threshold = floor_of(session) + 400
    res = run(session, threshold, strategy="truncate")
    assert res.messages[0] == session[0]
    kept = res.messages[1:]
    assert kept == session[len(session) - len(kept) :]  # a suffix: oldest turns went
    assert kept[0].role == "user"  # cut at a turn boundary
    assert res.dropped == len(session) - len(res.messages)


def test_clear_tool_outputs_replaces_old_outputs_only() -> None:
    session = coding_session(24)
    threshold = floor_of(session) + 4000
    res = run(session, threshold, strategy="clear_tool_outputs")
    assert res.cleared > 0 and res.strategy == "clear_tool_outputs"
    assert len(res.messages) == len(session)
    cleared = [m for m in res.messages if m.meta.get("cleared")]
    assert len(cleared) == res.cleared
    for old, new in zip(session, res.messages, strict=True):
        assert new.tool_call_id == old.tool_call_id and new.role == old.role
        if new.meta.get("cleared"):
            assert new.text.startswith(
                f"[tool output cleared: {new.meta['cleared_tokens']:,} tokens"
            )
            assert "archive" in new.text
    tools = [i for i, m in enumerate(session) if m.role == "tool"]
    for i in tools[-KEEP_RECENT_TOOL_RESULTS:]:
        assert res.messages[i] == session[i]
    # it stops once the target is met: not every old output goes
    assert res.cleared < len(tools) - KEEP_RECENT_TOOL_RESULTS


def test_cleared_placeholder_keeps_error_lines_verbatim() -> None:
    session = coding_session(24)
    res = run(session, floor_of(session) + 2500, strategy="clear_tool_outputs")
    failing = [
        (old, new)
        for old, new in zip(session, res.messages, strict=True)
        if new.meta.get("cleared") and "AssertionError" in old.text
    ]
    assert failing
    for old, new in failing:
        line = next(ln for ln in old.text.splitlines() if "AssertionError" in ln)
        assert line in new.text


def test_summarize_puts_summary_first_then_the_task() -> None:
    session = coding_session(30)
    summarizer = ScriptedSummarizer()
    res = run(
        session,
        floor_of(session) + 3000,
        strategy="summarize",
        summarizer=summarizer,
        compaction_id="abc",
    )
    first, second = res.messages[:2]
    assert first.role == "user" and first.is_summary
    assert first.meta["compaction_id"] == "abc" == res.compaction_id
    assert first.text.startswith(SUMMARY_HEADER)
    assert res.summary == first.text
    assert second == session[0]
    assert tool_pairs_ok(res.messages)
    # exact errors and files come from our code even though the summary omitted them
    errors = {
        ln for m in session if m.role == "tool" for ln in m.text.splitlines() if "FAILED" in ln
    }
    folded = session[1 : len(session) - (len(res.messages) - 2)]
    folded_errors = {ln for m in folded for ln in m.text.splitlines() if "FAILED" in ln}
    assert folded_errors and folded_errors <= errors
    for line in list(folded_errors)[-5:]:
        assert line in first.text
    assert "src/mod0.py" in first.text.split("## Files read")[1].split("##")[0]
    assert "src/mod2.py" in first.text.split("## Files modified")[1].split("##")[0]
    request_text = summarizer.requests[0].messages[0].text
    assert "<previous-summary>" not in request_text


def test_summary_update_passes_the_previous_summary() -> None:
    session = coding_session(30)
    summarizer = ScriptedSummarizer()
    threshold = floor_of(session) + 3000
    first = run(session, threshold, strategy="summarize", summarizer=summarizer)
    more = first.messages + coding_session(30)[1:]
    calls = len(summarizer.requests)
    second = run(more, threshold, strategy="summarize", summarizer=summarizer)
    # the first call of the update (more follow when the fold is larger than one request holds)
    prompt = summarizer.requests[calls].messages[0].text
    assert "<previous-summary>" in prompt and first.summary is not None
    assert first.summary.strip() in prompt
    summaries = [m for m in second.messages if m.is_summary]
    assert len(summaries) == 1  # replaced, not stacked
    # the old summary's errors are carried forward verbatim
    old_errors = [ln for ln in first.summary.splitlines() if "AssertionError" in ln]
    for line in old_errors:
        assert line in second.messages[0].text


def test_layered_clears_first_without_calling_the_summarizer() -> None:
    session = coding_session(24)
    summarizer = ScriptedSummarizer()
    res = run(session, floor_of(session) + 4000, summarizer=summarizer)
    assert res.strategy == "clear_tool_outputs" and not summarizer.requests


def test_layered_summarizes_when_clearing_is_not_enough() -> None:
    session = coding_session(40)
    summarizer = ScriptedSummarizer()
    res = run(session, floor_of(session) + 1500, summarizer=summarizer)
    assert summarizer.requests
    assert res.strategy.endswith("summarize") and res.messages[0].is_summary


class Failing:
    def summarize(self, request: Request) -> str:
        raise ProviderError("server down")


@pytest.mark.parametrize(
    "summarizer",
    [None, Failing(), ScriptedSummarizer("word " * 5000), ScriptedSummarizer("   ")],
    ids=["none", "fails", "too-long", "empty"],
)
def test_layered_truncates_as_last_resort(summarizer: object) -> None:
    session = coding_session(40)
    threshold = floor_of(session) + 1500
    res = run(session, threshold, summarizer=summarizer)
    assert res.strategy.endswith("truncate")
    assert not any(m.is_summary for m in res.messages)
    assert conversation_tokens(FakeCounter(), request(res.messages)) <= compaction_target(
        floor_of(session), threshold
    )


@given(conversations(), st.integers(50, 4000), st.sampled_from(STRATEGY_NAMES))
@settings(max_examples=60, deadline=None)
def test_no_compaction_ever_orphans_a_tool_message(
    convo: tuple[Message, ...], room: int, strategy: str
) -> None:
    threshold = floor_of(convo) + room
    try:
        res = run(convo, threshold, strategy=strategy, summarizer=ScriptedSummarizer())
    except CompactionError:
        return
    assert tool_pairs_ok(res.messages)
    assert convo[0] in res.messages
    assert res.tokens_after <= threshold


def test_chat_sequence_has_no_sawtooth() -> None:
    """The seed's run: window 1200 (threshold 960), floor ~524, one short message per turn."""
    system = "You are a helpful assistant. " * 40
    tools = tuple(ToolSpec(name=f"tool{i}", description="x" * 150) for i in range(5))
    counter = FakeCounter()
    view: tuple[Message, ...] = ()
    compacted_at: list[int] = []
    for turn in range(1, 41):
        view = (*view, user(f"topic {turn}: nice weather today"))
        req = Request(system=system, tools=tools, messages=view)
        if counter.count(req).total > 960:
            res = compact(
                req, counter, threshold=960, summarizer=ScriptedSummarizer("## Goal\nchat")
            )
            view = res.messages
            compacted_at.append(turn)
        view = (*view, reply("Yes, it is a lovely day for a walk outside."))
    assert 500 <= counter.count(Request(system=system, tools=tools)).floor <= 560
    assert compacted_at, "the run must compact at least once to test anything"
    gaps = [b - a for a, b in itertools.pairwise(compacted_at)]
    assert all(g >= 3 for g in gaps), compacted_at
    assert len([t for t in compacted_at if t <= 17]) < 5  # the seed compacted 5 times in 17


def test_bad_arguments_raise_one_line_errors() -> None:
    session = coding_session(3)
    with pytest.raises(UnknownNameError, match="unknown compaction strategy 'shrink'"):
        run(session, 1000, strategy="shrink")
    with pytest.raises(InvalidWindowError):
        run(session, 0)
    with pytest.raises(ConfigError, match="needs a summarizer"):
        run(session, 1000, strategy="summarize")
    with pytest.raises(CompactionError) as info:
        run(session, floor_of(session) + 1, strategy="truncate")
    assert "\n" not in str(info.value)


def test_layered_failure_advises_what_helps_not_layered_again() -> None:
    session = coding_session(3)
    with pytest.raises(CompactionError) as layered:
        run(session, floor_of(session) + 1, strategy="layered")
    text = str(layered.value)
    assert "use strategy 'layered'" not in text and "\n" not in text
    # the system prompt is the largest part compaction cannot touch here: the advice says so
    assert "shorten the system prompt or the tools" in text and "raise the window" in text
    with pytest.raises(CompactionError, match="use strategy 'layered'"):
        run(session, floor_of(session) + 1, strategy="clear_tool_outputs")


def test_compaction_id_defaults_to_fresh_uuid_hex() -> None:
    session = coding_session(20)
    threshold = floor_of(session) + 2000
    a, b = run(session, threshold), run(session, threshold)
    assert len(a.compaction_id) == 32 and a.compaction_id != b.compaction_id
    int(a.compaction_id, 16)


def test_a_fold_larger_than_the_summarizers_window_is_summarised_in_parts() -> None:
    # 60 steps to fold through a summarizer whose window holds a few of them: one request used
    # to drop the oldest steps unseen (opencode#11450); now each part is summarised in turn and
    # its summary is the previous summary of the next call.
    session = coding_session(60)
    summarizer = ScriptedSummarizer()
    window = 2_500
    res = run(
        session,
        floor_of(session) + 3000,
        strategy="summarize",
        summarizer=summarizer,
        summarizer_window=window,
    )
    assert res.messages[0].is_summary
    counter = FakeCounter()
    assert len(summarizer.requests) > 1
    for sent in summarizer.requests:
        assert counter.count(sent).total + (sent.max_output_tokens or 0) <= window
    for later in summarizer.requests[1:]:
        assert "<previous-summary>" in later.messages[0].text  # a rolling summary
    seen = "\n".join(r.messages[0].text for r in summarizer.requests)
    folded = session[1 : len(session) - (len(res.messages) - 2)]
    called = [c.arguments for m in folded for c in m.tool_calls]
    assert called and all(arguments[:30] in seen for arguments in called)  # no step unseen
