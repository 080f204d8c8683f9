"""The live Agent keeps the ctxbudget rule's learned reserve: after a reply far larger than the
max output it asked for (issue 14), or a step that grew the context far more than a reply
(issue 30), it compacts earlier."""

from __future__ import annotations

from pathlib import Path

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.budget.rules import SessionEvidence
from ctxbudget.compaction.archive import Archive
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.model import Message, ToolCall
from ctxbudget.providers.mock import MockProvider


def _agent(window: int) -> tuple[Agent, MockProvider]:
    counter = RequestCounter("qwen3")
    provider = MockProvider(None, counter=counter)  # no window: it never refuses
    agent = Agent(provider, window=window, counter=counter, max_output_tokens=200)
    return agent, provider


def test_a_reply_past_max_output_raises_the_reserve() -> None:
    agent, provider = _agent(4_000)
    # A server that ignores max_tokens: a reply of about 2,000 tokens to a 200-token limit.
    provider.enqueue("word " * 2_000, "short")
    agent.run_turn("first")
    assert agent.largest_reply > 1_500
    # Checked after the step: the context is under the fixed line, over the learned one.
    assert [c.trigger for c in agent.compactions] == ["context_pressure"]
    assert agent.compactions[0].tokens_before < agent.policy.threshold(agent.window)


def test_replies_within_max_output_change_nothing() -> None:
    agent, provider = _agent(6_000)
    provider.enqueue("word " * 100, "short")
    agent.run_turn("first")
    agent.run_turn("second")
    assert agent.largest_reply <= 200
    assert not agent.compactions


# Issue 30: the rule learns the context's own growth per step too (a tool result of ~28K
# tokens in one step once carried a real 200K session past the window between two checks).
# Window 6,000, max output 200: the fixed line is 6,000 - 200 - 375 = 5,425. One read grows the
# context by ~1,240 tokens (under the W/4 cap, 1,500); a user message of ~3,800 then brings it
# to ~5,070: under the fixed line, over the line that step teaches (6,000 - 1,240 = 4,760).
WINDOW = 6_000
NOTE = "note " * 3_800


def _reader_agent(
    window: int = WINDOW, archive: Archive | None = None
) -> tuple[Agent, MockProvider, list[LoopEvent]]:
    counter = RequestCounter("qwen3")
    provider = MockProvider(None, counter=counter)
    big = "word " * 1_200  # one tool result of about 1,200 tokens
    events: list[LoopEvent] = []
    agent = Agent(
        provider,
        window=window,
        counter=counter,
        max_output_tokens=200,
        tool_executor=lambda call: big,
        archive=archive,
        on_event=events.append,
    )
    return agent, provider, events


def _read_once(agent: Agent, provider: MockProvider) -> None:
    call = ToolCall(id="r1", name="read", arguments='{"path": "big.txt"}')
    provider.enqueue(Message(role="assistant", content="", tool_calls=(call,)), "read it")
    agent.run_turn("read big.txt")


def test_a_step_as_large_as_one_seen_is_kept_free() -> None:
    agent, provider, _ = _reader_agent()
    _read_once(agent, provider)
    assert agent.learned.largest_growth > 1_200  # the tool result and the call's reply
    assert not agent.compactions  # ~1,260 tokens: under every line
    provider.enqueue("ok")
    agent.run_turn(NOTE)
    # Compacted under the fixed line and under the line the replies alone teach: only a step
    # as large as the one seen would carry the context past the window.
    assert [c.trigger for c in agent.compactions] == ["context_pressure"]
    before = agent.compactions[0].tokens_before
    assert before < agent.policy.threshold(agent.window)
    assert before < agent.policy.threshold_in_session(
        agent.window, largest_reply=agent.largest_reply
    )
    assert before + agent.learned.largest_growth > agent.window


def test_growth_is_learned_as_the_replay_learns_it(tmp_path: Path) -> None:
    """One home: the loop's evidence is `SessionEvidence` folded over its calls (the prompt as
    it counted it, the reply the server reported), and a resumed session learns its largest
    step from the archive the same way, on the server's prompt sizes."""
    archive = Archive(tmp_path / "s.jsonl")
    agent, provider, events = _reader_agent(40_000, archive)
    _read_once(agent, provider)
    archive.close()
    sent = [e.data["estimate"] for e in events if e.kind == "request"]
    usage = [e.data for e in events if e.kind == "usage"]
    expected = SessionEvidence()
    for prompt, used in zip(sent, usage, strict=True):
        expected = expected.after_call(prompt, used["output_tokens"])
    assert agent.learned == expected
    resumed, _, _ = _reader_agent(40_000)
    resumed.restore(Archive(tmp_path / "s.jsonl").resumed)
    on_server = SessionEvidence()
    for used in usage:
        on_server = on_server.after_call(used["input_tokens"], used["output_tokens"])
    assert resumed.learned == on_server
    assert resumed.learned.largest_growth > 1_200
    assert resumed.largest_reply == agent.largest_reply


def test_a_compaction_drop_teaches_no_growth() -> None:
    agent, provider, _ = _reader_agent()
    _read_once(agent, provider)
    provider.enqueue("ok")
    agent.run_turn(NOTE)
    assert agent.compactions
    assert agent.learned.last_prompt is not None  # the call after the compaction
    learned = agent.learned.largest_growth
    provider.enqueue("fine")
    agent.run_turn("next")
    assert agent.learned.largest_growth == learned
