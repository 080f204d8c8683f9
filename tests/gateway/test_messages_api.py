"""The Anthropic Messages API as the gateway speaks it: parse, forward (verbatim where
unchanged, the turn in progress always), usage (whole and streamed), errors, count_tokens."""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from tests.gateway import scripted_upstream
from tests.gateway.loopback import Served, gateway
from tests.gateway.sse_events import merged, sse_events

from ctxbudget.budget.floor import check_prompt_floor
from ctxbudget.compaction.strategies import compact
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import InputError, PromptFloorExceeded
from ctxbudget.gateway.messages_api import (
    BLOCKS_KEY,
    MESSAGES,
    count_tokens,
    in_progress_turn,
    too_long_message,
)
from ctxbudget.messages.model import Message, Request

# A 1x1 PNG (its header gives the image's size to the counter).
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
    )
).decode()

# A Claude Code-shaped request: system blocks with cache_control, tools with input_schema,
# thinking blocks with signatures (redacted ones too), tool_use / tool_result (an error among
# them), an image, several results in one user message. Field names from Anthropic's Messages
# API reference and Claude Code's requests (its `Bash` tool, see /work/shared/HARNESSES.md);
# the values are ours.
TOOLS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": "Executes a bash command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    },
    {
        "name": "Read",
        "description": "Reads a file.",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    },
]


def _thinking(n: int) -> dict[str, Any]:
    return {
        "type": "thinking",
        "thinking": f"Step {n}: I should look at the next module.",
        "signature": f"EqMBCkgIARABGAIiQ{n:04d}" + "s1gN/" * 30,
    }


def _step(n: int, output: str, *, text: str = "Reading it.") -> list[dict[str, Any]]:
    tool_id = f"toolu_{n:04d}"
    return [
        {
            "role": "assistant",
            "content": [
                _thinking(n),
                {"type": "text", "text": text},
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": "Bash",
                    "input": {"command": f"cat src/module_{n:02d}.py", "description": "Read"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_id,
                    "content": output,
                    "is_error": n == 1,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]


def claude_body(
    steps: int = 3, output_lines: int = 3, last_text: str = "Running the tests."
) -> dict[str, Any]:
    """A Messages request of ``steps`` tool steps and a last step in progress."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>Be careful.</system-reminder>"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
                {
                    "type": "text",
                    "text": "Fix the failing price test in src/.",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        }
    ]
    for n in range(steps):
        out = "\n".join(
            f"line {i} of module {n}: value = compute({i})" for i in range(output_lines)
        )
        messages += _step(n, out)
    messages += [
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzixBwmsAbXZhAA=="},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "Read",
                    "input": {"file_path": "src/a.py"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "Read",
                    "input": {"file_path": "src/b.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a = 1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "b = 2"}],
                },
                {"type": "text", "text": "Now run the tests."},
            ],
        },
    ]
    *_, in_progress, results = _step(99, "1 failed, 29 passed\nE   AssertionError: 1250 != 12.5")
    in_progress["content"][1]["text"] = last_text
    messages += [in_progress, results]
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32_000,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {
                "type": "text",
                "text": "You are an interactive CLI tool.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": messages,
        "tools": TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 31_999},
        "metadata": {"user_id": "user_abc_account__session_0199"},
        "stream": True,
    }


def test_round_trip_forwards_the_body_unchanged() -> None:
    body = claude_body()
    before = copy.deepcopy(body)
    parsed = MESSAGES.parse(body)
    assert parsed.passthrough is None and parsed.stream
    # System blocks joined with nothing between them, as llama.cpp's server joins them.
    assert parsed.request.system == (
        "You are Claude Code, Anthropic's official CLI for Claude.You are an interactive CLI tool."
    )
    assert parsed.head == [body["system"][0], {"type": "text", "text": body["system"][1]["text"]}]
    assert parsed.request.max_output_tokens == 32_000
    # Nothing compacted: the very request parsed, and an equal copy of its messages (which
    # goes through the mapping back to Anthropic messages), both give the client's body back.
    same = MESSAGES.forward_body(body, parsed, parsed.request, None)
    mapped = parsed.request.with_messages(tuple(list(parsed.request.messages)))
    assert mapped.messages is not parsed.request.messages
    back = MESSAGES.forward_body(body, parsed, mapped, None)
    for out in (same, back):
        assert json.dumps(out, sort_keys=True) == json.dumps(before, sort_keys=True)
    assert body == before


def test_each_message_knows_its_blocks() -> None:
    body = claude_body(steps=0)
    parsed = MESSAGES.parse(body)
    split = parsed.translated.per_item[-3]  # two results and a text in one user message
    assert [(m.role, m.meta[BLOCKS_KEY]) for m in split] == [
        ("tool", (0,)),
        ("tool", (1,)),
        ("user", (2,)),
    ]
    assert split[0].name == "Read"  # the tool's name carried over from the call before


def test_a_changed_block_is_rebuilt_and_its_neighbours_kept() -> None:
    body = claude_body(steps=0)
    parsed = MESSAGES.parse(body)
    messages = list(parsed.request.messages)
    at = next(i for i, m in enumerate(messages) if m.tool_call_id == "toolu_a")
    messages[at] = Message(
        role="tool", content="[cleared]", tool_call_id="toolu_a", meta=messages[at].meta
    )
    out = MESSAGES.forward_body(body, parsed, parsed.request.with_messages(tuple(messages)), None)
    original = body["messages"][-3]["content"]
    rebuilt = out["messages"][-3]["content"]
    assert rebuilt[0] == {**original[0], "content": "[cleared]"}
    assert rebuilt[1:] == original[1:]


class _Summary:
    def summarize(self, request: Request) -> str:
        return "## Task\nFix the price test.\n## Progress\nRead the modules."


def _pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool_result answers a tool_use of the assistant message just before it, and every
    tool_use is answered in the message after it."""
    for i, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results:
            calls = [b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use"]
            assert set(results) == set(calls), (i, results, calls)
        if m["role"] == "assistant":
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            if calls:
                after = messages[i + 1]["content"]
                assert {b["tool_use_id"] for b in after if b["type"] == "tool_result"} == set(calls)


def test_compacted_forward_keeps_the_turn_in_progress_verbatim() -> None:
    # The turn in progress carries a long text, so compaction shortens it (and drops its
    # reasoning): the thinking block and its signature must still go back unmodified.
    long_text = "Let me think about the price parser. " * 400
    body = claude_body(steps=12, output_lines=60, last_text=long_text)
    parsed = MESSAGES.parse(body)
    counter = RequestCounter("o200k_base")
    total = counter.count(parsed.request).total
    result = compact(
        parsed.request, counter, threshold=total // 4, strategy="summarize", summarizer=_Summary()
    )
    sent = parsed.request.with_messages(result.messages)
    assert sent.messages[-2].meta.get("shortened")  # compaction did shorten the turn
    out = MESSAGES.forward_body(body, parsed, sent, None)
    forwarded = out["messages"]
    assert len(forwarded) < len(body["messages"])
    assert "Fix the price test." in forwarded[0]["content"]  # the summary, then the first task
    assert forwarded[1] == body["messages"][0]
    assert in_progress_turn(body["messages"]) == len(body["messages"]) - 2
    assert forwarded[-2] == body["messages"][-2]
    assert (
        forwarded[-2]["content"][0]["signature"] == body["messages"][-2]["content"][0]["signature"]
    )
    _pairs(forwarded)
    assert out["system"] == body["system"] and out["tools"] == body["tools"]


def test_an_older_rebuilt_turn_keeps_its_tool_use_and_thinking() -> None:
    body = claude_body(steps=2)
    parsed = MESSAGES.parse(body)
    messages = list(parsed.request.messages)
    at = next(i for i, m in enumerate(messages) if m.role == "assistant")
    messages[at] = Message(
        role="assistant",
        content="Reading it (shortened).",
        tool_calls=messages[at].tool_calls,
        reasoning=messages[at].reasoning,
        meta=messages[at].meta,
    )
    out = MESSAGES.forward_body(body, parsed, parsed.request.with_messages(tuple(messages)), None)
    original = body["messages"][1]["content"]
    assert out["messages"][1]["content"] == [
        original[0],
        {"type": "text", "text": "Reading it (shortened)."},
        original[2],
    ]


def test_max_tokens_clamp_lowers_the_thinking_budget_under_it() -> None:
    body = claude_body(steps=0)
    parsed = MESSAGES.parse(body)
    out = MESSAGES.forward_body(body, parsed, parsed.request, 6_000)
    assert out["max_tokens"] == 6_000
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 5_999}
    assert body["thinking"]["budget_tokens"] == 31_999


# A non-streamed message, Anthropic's shape (usage with cache creation and cache read).
MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "…", "signature": "abc"},
        {"type": "text", "text": "## Task\n"},
        {"type": "text", "text": "Fix it."},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 21,
        "cache_creation_input_tokens": 1_500,
        "cache_read_input_tokens": 12_000,
        "output_tokens": 80,
    },
}


def test_usage_and_stop_reason_of_a_whole_message() -> None:
    usage = MESSAGES.usage(MESSAGE)
    assert usage is not None
    assert usage.input_tokens == 21 + 1_500 + 12_000
    assert (usage.cache_write_tokens, usage.cache_read_tokens, usage.output_tokens) == (
        1_500,
        12_000,
        80,
    )
    assert MESSAGES.stop_reason(MESSAGE) == "stop"
    assert MESSAGES.stop_reason({**MESSAGE, "stop_reason": "max_tokens"}) == "length"
    assert MESSAGES.stop_reason({**MESSAGE, "stop_reason": "tool_use"}) == "tool_calls"
    assert MESSAGES.usage({"usage": {"input_tokens": -1}}) is None
    assert MESSAGES.summary_text(MESSAGE) == "## Task\nFix it."


@pytest.mark.parametrize(
    ("name", "input_tokens"),
    [
        ("anthropic_stream.txt", 12 + 1_200 + 8_000),  # the prompt from message_start
        ("anthropic_stream_cumulative.txt", 12 + 1_200 + 8_050),  # message_delta's, later
    ],
)
def test_streamed_usage_merges_start_and_delta(name: str, input_tokens: int) -> None:
    events = sse_events(name)
    usage = merged(MESSAGES.stream_usage(e, d) for e, d in events)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (input_tokens, 96)
    reasons = [MESSAGES.stream_stop_reason(e, d) for e, d in events]
    assert [r for r in reasons if r is not None] == ["tool_calls"]
    assert merged(MESSAGES.stream_usage(None, d) for _, d in events) == usage
    assert not any(MESSAGES.is_extra_usage_event(e, d) for e, d in events)


def test_a_request_that_cannot_fit_gets_anthropics_error_with_the_numbers() -> None:
    parsed = MESSAGES.parse(claude_body(steps=0))
    count = RequestCounter("o200k_base").count(parsed.request)
    window = count.floor + 10
    with pytest.raises(PromptFloorExceeded) as caught:
        check_prompt_floor(count, window, 64, request=parsed.request)
    status, body = MESSAGES.error(400, "context_length_exceeded", str(caught.value))
    assert status == 400
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert message.startswith(f"prompt is too long: {count.floor + 64} tokens > {window} maximum; ")
    assert message.endswith(str(caught.value))


def test_error_types_by_kind() -> None:
    assert MESSAGES.error(401, "authentication", "bad key")[1]["error"]["type"] == (
        "authentication_error"
    )
    assert MESSAGES.error(502, "upstream", "down")[1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "down"},
    }
    # An overflow message stating its numbers, and one stating none.
    assert too_long_message("the prompt has 9,000 tokens, over the window of 8,192").startswith(
        "prompt is too long: 9000 tokens > 8192 maximum"
    )
    assert too_long_message("no numbers here") == "prompt is too long: no numbers here"
    assert too_long_message("x", tokens=5, limit=4) == "prompt is too long: 5 tokens > 4 maximum; x"


def test_count_tokens_answers_the_count_of_the_forwarded_request() -> None:
    body = claude_body(steps=2)
    del body["max_tokens"], body["stream"]  # a count_tokens body has neither
    parsed = MESSAGES.parse(body)
    counter = RequestCounter("o200k_base")
    answer = count_tokens(parsed, lambda r: counter.count(r).total)
    assert answer == {"input_tokens": counter.count(parsed.request).total}
    assert answer["input_tokens"] > 300


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"max_tokens": 5}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, r"messages\[0\].role"),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, r"messages\[0\]"),
        ({"messages": [], "system": 4}, "system"),
        ({"messages": [], "max_tokens": 0}, "max_tokens"),
    ],
)
def test_a_bad_body_is_one_input_error_naming_the_field(body: dict[str, Any], where: str) -> None:
    with pytest.raises(InputError, match=r"^" + where):
        MESSAGES.parse(body)


def test_summary_body_asks_the_same_api() -> None:
    request = Request(system="Summarise.", messages=(Message(role="user", content="history"),))
    body = MESSAGES.summary_body("claude-haiku", request, 700)
    assert body == {
        "model": "claude-haiku",
        "max_tokens": 700,
        "system": "Summarise.",
        "messages": [{"role": "user", "content": "history"}],
        "stream": False,
    }
    assert MESSAGES.parse(body).request.system == "Summarise."


def test_a_moved_cache_breakpoint_keeps_the_conversations_identity() -> None:
    # Claude Code puts cache_control on the newest message of each request: the message that
    # had it in the last request has it no more. The conversation's items (its identity) are
    # the same either way; the forwarded body keeps the client's own breakpoints.
    body = claude_body(steps=2)
    later = copy.deepcopy(body)
    del later["messages"][-1]["content"][0]["cache_control"]
    del later["system"][1]["cache_control"]
    first, second = MESSAGES.parse(body), MESSAGES.parse(later)
    assert first.translated.items == second.translated.items
    assert first.head == second.head
    mapped = first.request.with_messages(tuple(list(first.request.messages)))
    assert MESSAGES.forward_body(body, first, mapped, None) == body
    assert body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


# -- the anthropic SDK through the gateway ---------------------------------------------------------

CLIENT_TOOLS = [
    {
        "name": "read_file",
        "description": "Reads a file of the workspace.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def _run_claude_loop(served: Served, *, stream: bool) -> tuple[str, int]:
    """A tool loop as an agent drives it with the anthropic SDK: (final text, model calls)."""
    http = httpx2.Client(event_hooks={"response": [lambda r: served.headers.append(r.headers)]})
    client = anthropic.Anthropic(
        base_url=served.url, api_key="sk-none", max_retries=0, http_client=http
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": scripted_upstream.TASK}]
    for calls in range(1, 60):
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 400,
            "system": [{"type": "text", "text": scripted_upstream.SYSTEM}],
            "tools": CLIENT_TOOLS,
            "messages": messages,
            "thinking": {"type": "enabled", "budget_tokens": 300},
        }
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": content})
        if reply.stop_reason != "tool_use":
            return "".join(b.text for b in reply.content if b.type == "text"), calls
        results = [
            {
                "type": "tool_result",
                "tool_use_id": block.id,
                "content": scripted_upstream.tool_output(str(block.input["path"])),  # type: ignore[index]
            }
            for block in reply.content
            if block.type == "tool_use"
        ]
        # Claude Code's breakpoint: on the newest message only.
        results[-1]["cache_control"] = {"type": "ephemeral"}
        for earlier in messages:
            for block in earlier["content"] if isinstance(earlier["content"], list) else ():
                block.pop("cache_control", None)
        messages.append({"role": "user", "content": results})
    raise AssertionError("the tool loop did not end")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_anthropic_sdk_runs_a_long_tool_loop_through_the_gateway(
    tmp_path: Path, stream: bool
) -> None:
    with gateway(tmp_path) as served:
        final, calls = _run_claude_loop(served, stream=stream)
    script = served.script
    assert final == scripted_upstream.FINAL_ANSWER
    assert calls == scripted_upstream.STEPS + 1
    # The conversation went far past the window; the gateway compacted it (summaries written
    # by the upstream through the Messages API) and no request reached the server over it.
    assert script.summaries >= 1
    assert max(script.prompts) <= scripted_upstream.WINDOW
    assert any(h.get("x-ctxbudget-compacted") == "1" for h in served.headers)
    # One conversation all along, though the client moved its cache breakpoint every call.
    assert len({h.get("x-ctxbudget-conversation") for h in served.headers}) == 1


def test_an_upstream_overflow_is_recovered_and_never_reaches_the_sdk(tmp_path: Path) -> None:
    # The gateway is told a window twice the server's: the server refuses a prompt with
    # Anthropic's own overflow error; the gateway adopts the window it states, compacts, and
    # sends again, so the client sees none of it.
    with gateway(tmp_path, window=2 * scripted_upstream.WINDOW, steps=16) as served:
        final, calls = _run_claude_loop(served, stream=True)
    assert final == scripted_upstream.FINAL_ANSWER and calls == 16 + 1
    assert served.script.overflows >= 1
    assert {h.get("x-ctxbudget-window") for h in served.headers[-3:]} == {
        str(scripted_upstream.WINDOW)
    }


def test_a_request_whose_floor_exceeds_the_window_gets_the_anthropic_error(
    tmp_path: Path,
) -> None:
    tools = [
        {**CLIENT_TOOLS[0], "name": f"tool_{i}", "description": "A tool. " * 120} for i in range(12)
    ]
    with gateway(tmp_path) as served:
        client = anthropic.Anthropic(base_url=served.url, api_key="sk-none", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=128_000,
                system="You are Claude Code.",
                tools=tools,
                messages=[{"role": "user", "content": "hi"}],
                stream=True,  # as Claude Code asks (the SDK wants a stream for 128K)
            )
    assert served.script.calls == 0  # nothing was sent that the server would truncate
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert re.match(
        rf"prompt is too long: \d+ tokens > {scripted_upstream.WINDOW} maximum; prompt floor ",
        error["message"],
    )


def test_the_beta_path_is_guarded_too(tmp_path: Path) -> None:
    # Claude Code calls POST /v1/messages?beta=true (the SDK's beta client does the same).
    with gateway(tmp_path, steps=0) as served:
        http = httpx2.Client(event_hooks={"response": [lambda r: served.headers.append(r.headers)]})
        client = anthropic.Anthropic(
            base_url=served.url, api_key="sk-none", max_retries=0, http_client=http
        )
        reply = client.beta.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": scripted_upstream.TASK}],
            betas=["interleaved-thinking-2025-05-14"],
        )
    assert reply.content[0].type == "text"
    assert reply.content[0].text == scripted_upstream.FINAL_ANSWER
    assert served.headers[-1].get("x-ctxbudget-conversation")
    assert int(served.headers[-1]["x-ctxbudget-tokens"]) == served.script.prompts[-1]
