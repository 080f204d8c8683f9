"""Claude Code: one call per (message.id, requestId), sub-agent transcripts, bounded reply text."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from tests.conftest import data_file
from tests.replay.conftest import shared_trace

from ctxbudget.replay import load_trace
from ctxbudget.replay.importers.claude_code import MAX_REPLY_CHARS


def _numbers(path: Path) -> list[tuple[int, int, int, int]]:
    return [
        (c.context_tokens, c.output_tokens, c.cache_read_tokens, c.cache_write_tokens)
        for c in load_trace(path).calls
    ]


def test_parallel_tool_calls_stay_one_call_each() -> None:
    # The real sample with each tool_result right after its tool_use line (SOURCES.md there).
    interleaved = data_file("claude_shapes", "parallel-tools.jsonl")
    assert _numbers(interleaved) == _numbers(shared_trace("claude-code"))
    trace = load_trace(interleaved)
    assert len(trace.calls) == 17
    # msg_01CDCPP...: snapshot usage (25 output) on its first line, the final 139 on its last.
    assert [c.output_tokens for c in trace.calls][:4] == [242, 99, 139, 1]


def test_tool_results_between_lines_of_one_message_go_to_the_next_call() -> None:
    interleaved = load_trace(data_file("claude_shapes", "parallel-tools.jsonl"))
    plain = load_trace(shared_trace("claude-code"))
    assert [[m.text for m in c.added] for c in interleaved.calls] == [
        [m.text for m in c.added] for c in plain.calls
    ]
    assert [c.reply for c in interleaved.calls] == [c.reply for c in plain.calls]


def test_subagent_transcript_is_a_session_of_its_own() -> None:
    sub = data_file("claude_shapes", "subagents", "agent-sample.jsonl")
    assert _numbers(sub) == _numbers(shared_trace("claude-code"))


def test_sidechain_lines_inside_a_main_session_stay_out(tmp_path: Path) -> None:
    lines = shared_trace("claude-code").read_text("utf-8").splitlines()
    side = [json.loads(x) for x in lines if '"type":"assistant"' in x][:1]
    side[0]["isSidechain"] = True
    side[0]["message"]["id"] = "msg_sidechain"
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([*lines[:3], json.dumps(side[0]), *lines[3:]]) + "\n", "utf-8")
    assert _numbers(path) == _numbers(shared_trace("claude-code"))


def test_a_repeated_message_later_in_the_file_is_not_a_new_call(tmp_path: Path) -> None:
    lines = shared_trace("claude-code").read_text("utf-8").splitlines()
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([*lines, lines[1], lines[2]]) + "\n", "utf-8")
    assert _numbers(path) == _numbers(shared_trace("claude-code"))


def test_a_million_line_message_keeps_bounded_text(tmp_path: Path) -> None:
    # Issue 17 item 6: every line of one message.id kept its text (2.4 GB for 1M lines). Here
    # 24 MB of text in 12,000 lines: the kept reply is cut at MAX_REPLY_CHARS.
    block = "x" * 2_000
    head = {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "go"}}
    usage = {"input_tokens": 10, "output_tokens": 5}
    line = json.dumps(
        {
            "type": "assistant",
            "sessionId": "s",
            "requestId": "r",
            "message": {"id": "m", "content": [{"type": "text", "text": block}], "usage": usage},
        }
    )
    path = tmp_path / "huge.jsonl"
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(head) + "\n")
        for _ in range(12_000):
            f.write(line + "\n")
    assert path.stat().st_size > 6 * MAX_REPLY_CHARS
    tracemalloc.start()
    try:
        trace = load_trace(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(trace.calls) == 1
    reply = trace.calls[0].reply
    assert reply is not None and len(reply.text) == MAX_REPLY_CHARS
    assert peak < 3 * MAX_REPLY_CHARS  # the cut text, its join, a line: not the 24 MB
    assert any("reply text over" in w for w in trace.warnings)
