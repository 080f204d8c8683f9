"""The Responses API as the gateway speaks it: parse, forward (verbatim where unchanged),
usage (whole and streamed), errors, summaries."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from tests.gateway import scripted_upstream
from tests.gateway.loopback import Served, gateway
from tests.gateway.sse_events import merged, sse_events

from ctxbudget.compaction.strategies import compact
from ctxbudget.counting import RequestCounter
from ctxbudget.errors import InputError
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.responses import RESPONSES, output_text
from ctxbudget.integrations._responses import read_turn, rebuild_turn
from ctxbudget.messages.model import Request

# A Codex-shaped request: instructions, a developer message, the user's task with input_text
# parts, a reasoning item (encrypted_content opaque, sent back verbatim), function and custom
# tool calls with their outputs, an assistant message. Field names from OpenAI's Responses API
# reference (input item types) and Codex's requests (its `exec_command` tool, see
# /work/shared/HARNESSES.md); the values are ours.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string", "description": "The command to run."}},
            "required": ["cmd"],
            "additionalProperties": False,
        },
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Applies a patch to the workspace.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
    },
]


def _reasoning(n: int) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{n:04d}",
        "summary": [{"type": "summary_text", "text": f"Looking at step {n}."}],
        "content": None,
        "encrypted_content": f"gAAAAABo{n:04d}" + "Zx9/" * 40,
    }


def _call(n: int, output: str) -> list[dict[str, Any]]:
    args = json.dumps({"cmd": f"cat src/module_{n:02d}.py"})
    return [
        _reasoning(n),
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "exec_command",
            "arguments": args,
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": output},
    ]


def codex_body(steps: int = 3, output_lines: int = 3) -> dict[str, Any]:
    """A Responses request of ``steps`` tool steps, each output ``output_lines`` lines long."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "<permissions>none</permissions>"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix the failing price test in src/."}],
        },
    ]
    for n in range(steps):
        out = "\n".join(
            f"line {i} of module {n}: value = compute({i})" for i in range(output_lines)
        )
        items += _call(n, out)
    items += [
        {
            "type": "custom_tool_call",
            "call_id": "call_patch",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: src/price.py\n*** End Patch",
        },
        {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Done!"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_0001",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Patched.", "annotations": []}],
        },
        {"type": "message", "role": "user", "content": "Now run the tests."},
        _reasoning(99),
        *_call(99, "1 failed, 29 passed\nE   AssertionError: parse_price('12,50')"),
    ]
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": items,
        "tools": TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a-conversation",
    }


def test_round_trip_forwards_the_body_unchanged() -> None:
    body = codex_body()
    before = copy.deepcopy(body)
    parsed = RESPONSES.parse(body)
    assert parsed.passthrough is None and parsed.stream and parsed.model == "gpt-5-codex"
    assert (
        parsed.request.system == "You are Codex, a coding agent.\n\n<permissions>none</permissions>"
    )
    assert [t.name for t in parsed.request.tools] == ["exec_command", "apply_patch"]
    # Nothing compacted: the very request parsed, and an equal copy of its messages (which
    # goes through the mapping back to items), both give the client's body back.
    same = RESPONSES.forward_body(body, parsed, parsed.request, None)
    mapped = parsed.request.with_messages(tuple(list(parsed.request.messages)))
    assert mapped.messages is not parsed.request.messages
    back = RESPONSES.forward_body(body, parsed, mapped, None)
    for out in (same, back):
        assert json.dumps(out, sort_keys=True) == json.dumps(before, sort_keys=True)
    assert body == before  # the client's body is not changed


def test_trailing_reasoning_items_stay_at_the_end() -> None:
    body = codex_body(steps=1)
    body["input"].append(_reasoning(7))
    parsed = RESPONSES.parse(body)
    mapped = parsed.request.with_messages(tuple(list(parsed.request.messages)))
    assert RESPONSES.forward_body(body, parsed, mapped, None)["input"] == body["input"]


def test_custom_tool_calls_are_read_as_calls_and_results() -> None:
    parsed = RESPONSES.parse(codex_body(steps=0))
    call = next(m for m in parsed.request.messages if m.tool_calls)
    assert call.tool_calls[0].name == "apply_patch"
    assert call.tool_calls[0].arguments.startswith("*** Begin Patch")
    result = parsed.request.messages[parsed.request.messages.index(call) + 1]
    assert (result.role, result.tool_call_id, result.text) == ("tool", "call_patch", "Done!")


class _Summary:
    def summarize(self, request: Request) -> str:
        return "## Task\nFix the price test.\n## Progress\nRead the modules."


def test_compacted_forward_keeps_the_newest_step_verbatim_and_pairs_calls() -> None:
    body = codex_body(steps=12, output_lines=60)
    parsed = RESPONSES.parse(body)
    counter = RequestCounter("o200k_base")
    total = counter.count(parsed.request).total
    result = compact(
        parsed.request, counter, threshold=total // 3, strategy="summarize", summarizer=_Summary()
    )
    sent = parsed.request.with_messages(result.messages)
    out = RESPONSES.forward_body(body, parsed, sent, 512)
    items = out["input"]
    assert out["max_output_tokens"] == 512
    assert len(items) < len(body["input"])
    # The summary leads the conversation, after the developer message.
    assert items[0] == body["input"][0]
    assert any("Fix the price test." in json.dumps(i) for i in items)
    # The step in progress (its reasoning, call and output) is forwarded exactly as sent.
    assert items[-3:] == body["input"][-3:]
    assert items[-3]["encrypted_content"] == body["input"][-3]["encrypted_content"]
    # Every output has its call before it, every call its output after it.
    calls = [i["call_id"] for i in items if i.get("type") in ("function_call", "custom_tool_call")]
    outputs = [i["call_id"] for i in items if i.get("type", "").endswith("_call_output")]
    assert calls == outputs
    # Every item the session kept unchanged is the client's own, verbatim.
    originals = [json.dumps(i, sort_keys=True) for i in body["input"]]
    kept = [i for i in items if json.dumps(i, sort_keys=True) in originals]
    assert len(kept) >= 4
    # What the gateway forwards counts as what the session decided.
    again = RESPONSES.parse({**out, "stream": False})
    assert counter.count(again.request).total == counter.count(sent).total


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("previous_response_id", "resp_123"),
        ("conversation", {"id": "conv_1"}),
        ("item_reference", None),
    ],
)
def test_server_side_history_is_passed_through_with_the_reason(field: str, value: object) -> None:
    body: dict[str, Any] = {"model": "m", "input": [{"role": "user", "content": "next"}]}
    if field == "item_reference":
        body["input"].insert(0, {"type": "item_reference", "id": "msg_stored"})
    else:
        body[field] = value
    parsed = RESPONSES.parse(body)
    assert parsed.passthrough is not None and field in parsed.passthrough
    assert RESPONSES.forward_body(body, parsed, parsed.request, None) == body


def test_a_string_input_is_one_user_message() -> None:
    parsed = RESPONSES.parse({"model": "m", "input": "hello", "max_output_tokens": 64})
    assert [(m.role, m.text) for m in parsed.request.messages] == [("user", "hello")]
    assert parsed.request.max_output_tokens == 64


def test_empty_instructions_are_an_empty_system_turn(hf_folder: Callable[[str], Path]) -> None:
    """``instructions: ""`` is an empty system turn, not none: llama.cpp's server sends it as
    an empty system message, which a template with a default system prompt (Qwen2.5) renders
    instead of its default. It counts as the Chat Completions request llama.cpp makes of it."""
    parsed = RESPONSES.parse({"model": "m", "instructions": "", "input": "hi"})
    assert parsed.request.system == ""
    chat = CHAT.parse(
        {
            "model": "m",
            "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}],
        }
    )
    counter = RequestCounter(f"hf:{hf_folder('qwen2.5')}")
    assert counter.count(parsed.request).total == counter.count(chat.request).total
    # No instructions at all stay no system prompt, and an empty one adds no blank line.
    assert RESPONSES.parse({"model": "m", "input": "hi"}).request.system is None
    developer = [{"role": "developer", "content": "D"}, {"role": "user", "content": "hi"}]
    assert RESPONSES.parse({"instructions": "", "input": developer}).request.system == "D"


def _turn_of_several_items(n: int, output: str) -> list[dict[str, Any]]:
    """Codex's way of writing a turn: reasoning, a message, then two calls, then their outputs."""
    return [
        _reasoning(n),
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "content": [
                {"type": "output_text", "text": f"Reading two files ({n}).", "annotations": []}
            ],
        },
        *(
            {
                "type": "function_call",
                "call_id": f"call_{n}{x}",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": f"cat {x}{n}.py"}),
            }
            for x in "ab"
        ),
        *(
            {"type": "function_call_output", "call_id": f"call_{n}{x}", "output": output}
            for x in "ab"
        ),
    ]


def test_a_turn_of_several_items_is_one_assistant_message(
    hf_folder: Callable[[str], Path],
) -> None:
    """An assistant message and the calls after it are one assistant message with two calls,
    as llama.cpp merges them (``merge_prev``): the count is the Chat Completions request the
    server makes of the body, not one turn frame more per item."""
    items = [{"type": "message", "role": "user", "content": "Read both files."}]
    items += _turn_of_several_items(1, "x = 1")
    parsed = RESPONSES.parse({"model": "m", "input": items, "tools": TOOLS[:1]})
    assistant = [m for m in parsed.request.messages if m.role == "assistant"]
    assert len(assistant) == 1
    assert assistant[0].text == "Reading two files (1)."
    assert [c.id for c in assistant[0].tool_calls] == ["call_1a", "call_1b"]
    calls = [
        {
            "id": i["call_id"],
            "type": "function",
            "function": {"name": i["name"], "arguments": i["arguments"]},
        }
        for i in items
        if i.get("type") == "function_call"
    ]
    chat_tools = [
        {"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}
    ]
    chat = CHAT.parse(
        {
            "model": "m",
            "tools": chat_tools,
            "messages": [
                {"role": "user", "content": "Read both files."},
                {"role": "assistant", "content": "Reading two files (1).", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "call_1a", "content": "x = 1"},
                {"role": "tool", "tool_call_id": "call_1b", "content": "x = 1"},
            ],
        }
    )
    counter = RequestCounter(f"hf:{hf_folder('qwen2.5')}")
    assert counter.count(parsed.request).total == counter.count(chat.request).total
    # Two assistant messages in a row are one too, their texts in order (as llama.cpp keeps them).
    second = {"type": "message", "role": "assistant", "content": "Then the tests."}
    merged = RESPONSES.parse({"model": "m", "input": [*items[:3], second, *items[3:]]})
    assistant = [m for m in merged.request.messages if m.role == "assistant"]
    assert [len(assistant), assistant[0].text] == [1, "Reading two files (1).Then the tests."]


def test_a_tool_with_an_empty_schema_keeps_it_empty(hf_folder: Callable[[str], Path]) -> None:
    """``"parameters": {}`` is rendered as sent (llama.cpp passes it on to the template), not
    as ``{"type": "object"}``, which counted 4 tokens more (Qwen2.5); a tool without
    parameters gets ``{"type": "object"}``, as the Chat Completions reader gives it."""
    tool = {"type": "function", "name": "read_file", "parameters": {}}
    parsed = RESPONSES.parse({"model": "m", "input": "hi", "tools": [tool]})
    assert parsed.request.tools[0].parameters == {}
    chat_tool = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    chat = CHAT.parse(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [chat_tool]}
    )
    counter = RequestCounter(f"hf:{hf_folder('qwen2.5')}")
    assert counter.count(parsed.request).total == counter.count(chat.request).total
    bare = {"type": "function", "name": "read_file"}
    assert RESPONSES.parse({"input": "hi", "tools": [bare]}).request.tools[0].parameters == {
        "type": "object"
    }


def test_a_compacted_turn_of_several_items_keeps_its_own_items() -> None:
    """Compaction over turns of several items: unchanged turns verbatim, every call with its
    output, and what is forwarded counts as what the session decided."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Read them all."}]
    for n in range(12):
        items += _turn_of_several_items(n, "\n".join(f"line {i} of file {n}" for i in range(60)))
    body = {"model": "m", "input": items, "tools": TOOLS}
    parsed = RESPONSES.parse(body)
    counter = RequestCounter("o200k_base")
    total = counter.count(parsed.request).total
    result = compact(
        parsed.request, counter, threshold=total // 3, strategy="summarize", summarizer=_Summary()
    )
    sent = parsed.request.with_messages(result.messages)
    out = RESPONSES.forward_body(body, parsed, sent, None)["input"]
    assert len(out) < len(items)
    # The newest turn (reasoning, message, both calls) exactly as sent, then its outputs (the
    # first one cut by the strategy to fit the threshold, the second one verbatim).
    assert out[-6:-2] == items[-6:-2]
    assert out[-1] == items[-1] and out[-2]["call_id"] == items[-2]["call_id"]
    calls = [i["call_id"] for i in out if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in out if i.get("type") == "function_call_output"]
    assert calls == outputs
    again = RESPONSES.parse({**body, "input": out})
    assert counter.count(again.request).total == counter.count(sent).total


def test_a_changed_turn_is_rebuilt_from_its_own_items() -> None:
    """A turn whose text compaction changed: its reasoning and calls verbatim, the new text in
    its first message item, its second message item folded into it."""
    turn = tuple(_turn_of_several_items(3, "out")[:4])
    second = {"type": "message", "role": "assistant", "content": "More."}
    turn = (*turn[:2], second, *turn[2:])
    (message,) = read_turn(turn)
    assert message.text == "Reading two files (3).More."
    changed = dataclasses.replace(message, content="(cut)")
    rebuilt = rebuild_turn(turn, [changed])
    assert [rebuilt[0], *rebuilt[2:]] == [turn[0], turn[3], turn[4]]
    assert rebuilt[1]["id"] == "msg_3"
    assert rebuilt[1]["content"] == [{"type": "output_text", "text": "(cut)", "annotations": []}]
    assert [(m.text, m.tool_calls) for m in read_turn(rebuilt)] == [("(cut)", message.tool_calls)]
    assert rebuild_turn(turn, [message]) == turn


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"input": [{"type": "function_call", "name": "x", "arguments": "{}"}]}, "input[0]"),
        ({"input": [{"type": "message", "content": "no role"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": "hi", "instructions": ["not", "text"]}, "instructions"),
        ({"input": "hi", "tools": [3]}, "tools[0]"),
        ({"input": 7}, "input"),
    ],
)
def test_a_bad_body_is_one_input_error_naming_the_field(body: dict[str, Any], where: str) -> None:
    with pytest.raises(InputError, match=r"^" + where.replace("[", r"\[").replace("]", r"\]")):
        RESPONSES.parse(body)


# A non-streamed response, as OpenAI's Responses API reference shows its shape (usage with
# input_tokens_details.cached_tokens and output_tokens_details.reasoning_tokens); values ours.
RESPONSE = {
    "id": "resp_abc",
    "object": "response",
    "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "## Task\n", "annotations": []},
                {"type": "output_text", "text": "Fix it.", "annotations": []},
            ],
        },
    ],
    "usage": {
        "input_tokens": 9_412,
        "input_tokens_details": {"cached_tokens": 8_960},
        "output_tokens": 210,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 9_622,
    },
}


def test_usage_and_stop_reason_of_a_whole_response() -> None:
    usage = RESPONSES.usage(RESPONSE)
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens) == (9_412, 8_960)
    assert (usage.output_tokens, usage.reasoning_tokens) == (210, 64)
    assert RESPONSES.stop_reason(RESPONSE) == "stop"
    cut = {
        **RESPONSE,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert RESPONSES.stop_reason(cut) == "length"
    call = {**RESPONSE, "output": [{"type": "function_call", "call_id": "c", "name": "x"}]}
    assert RESPONSES.stop_reason(call) == "tool_calls"
    assert RESPONSES.usage({"usage": {"input_tokens": "many"}}) is None
    assert RESPONSES.summary_text(RESPONSE) == output_text(RESPONSE) == "## Task\nFix it."


def test_streamed_usage_comes_from_the_final_event() -> None:
    events = sse_events("responses_stream.txt")
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    usage = merged(RESPONSES.stream_usage(e, d) for e, d in events)
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1_375, 1_024, 38)
    reasons = [RESPONSES.stream_stop_reason(e, d) for e, d in events]
    assert [r for r in reasons if r is not None] == ["tool_calls"]
    # Events read by their data alone (a server that names no event) give the same.
    assert merged(RESPONSES.stream_usage(None, d) for _, d in events) == usage
    assert not any(RESPONSES.is_extra_usage_event(e, d) for e, d in events)
    assert RESPONSES.prepare_stream({"stream": True}) == ({"stream": True}, False)


def test_errors_have_openai_shape() -> None:
    status, body = RESPONSES.error(400, "context_length_exceeded", "prompt floor too large")
    assert status == 400
    assert body["error"]["code"] == "context_length_exceeded"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == "prompt floor too large"


def test_summary_body_asks_the_same_api() -> None:
    from ctxbudget.messages.model import Message

    request = Request(system="Summarise.", messages=(Message(role="user", content="history"),))
    body = RESPONSES.summary_body("qwen3", request, 700)
    assert body == {
        "model": "qwen3",
        "instructions": "Summarise.",
        "input": [{"role": "user", "content": "history"}],
        "max_output_tokens": 700,
        "stream": False,
        "store": False,
    }
    assert RESPONSES.parse(body).request.system == "Summarise."


# -- the openai SDK's Responses through the gateway ------------------------------------------------

CLIENT_TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Reads a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "strict": False,
    }
]


def _run_codex_loop(served: Served, *, stream: bool) -> tuple[str, int]:
    """A tool loop as an agent drives it with the openai SDK's Responses: (final text, calls)."""
    http = httpx2.Client(event_hooks={"response": [lambda r: served.headers.append(r.headers)]})
    client = openai.OpenAI(
        base_url=f"{served.url}/v1", api_key="none", max_retries=0, http_client=http
    )
    items: list[dict[str, Any]] = [{"role": "user", "content": scripted_upstream.TASK}]
    for calls in range(1, 60):
        kwargs: dict[str, Any] = {
            "model": "qwen3-coder",
            "instructions": scripted_upstream.SYSTEM,
            "input": items,
            "tools": CLIENT_TOOLS,
            "max_output_tokens": 400,
            "store": False,
        }
        if stream:
            reply = None
            for event in client.responses.create(stream=True, **kwargs):
                if event.type == "response.completed":
                    reply = event.response
            assert reply is not None
        else:
            reply = client.responses.create(**kwargs)
        output = [item.model_dump(exclude_none=True) for item in reply.output]
        items.extend(output)
        calls_made = [item for item in reply.output if item.type == "function_call"]
        if not calls_made:
            return reply.output_text, calls
        for call in calls_made:
            path = json.loads(call.arguments)["path"]
            output_item = {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": scripted_upstream.tool_output(path),
            }
            items.append(output_item)
    raise AssertionError("the tool loop did not end")


# 14 steps: past the window twice over; the SDK's own input conversion grows with the list
# (most of a 32-step run's time), and the Messages test runs the 32-step loop.
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_openai_sdk_runs_a_long_responses_loop_through_the_gateway(
    tmp_path: Path, stream: bool
) -> None:
    with gateway(tmp_path, steps=14) as served:
        final, calls = _run_codex_loop(served, stream=stream)
    script = served.script
    assert final == scripted_upstream.FINAL_ANSWER
    assert calls == 14 + 1
    # Far past the window, compacted by the gateway (summaries through the Responses API),
    # and never a request over the server's window; the reasoning of the call in progress
    # went back with its encrypted content (the server checks it).
    assert script.summaries >= 1
    assert max(script.prompts) <= scripted_upstream.WINDOW
    assert any(h.get("x-ctxbudget-compacted") == "1" for h in served.headers)
    assert len({h.get("x-ctxbudget-conversation") for h in served.headers}) == 1


def test_a_server_side_history_request_is_passed_through_with_the_header(tmp_path: Path) -> None:
    with gateway(tmp_path) as served:
        reply = httpx2.post(
            f"{served.url}/v1/responses",
            json={"model": "m", "input": "next", "previous_response_id": "resp_1"},
        )
    assert reply.status_code == 200
    assert reply.headers["x-ctxbudget-passthrough"].startswith("previous_response_id")
    assert "x-ctxbudget-tokens" not in reply.headers


def test_an_upstream_overflow_is_recovered_and_never_reaches_the_sdk(tmp_path: Path) -> None:
    # Told twice the server's window, the gateway learns the real one from the server's
    # context_length_exceeded error, compacts and sends again; the client sees none of it.
    with gateway(tmp_path, window=2 * scripted_upstream.WINDOW, steps=12) as served:
        final, calls = _run_codex_loop(served, stream=True)
    assert final == scripted_upstream.FINAL_ANSWER and calls == 12 + 1
    assert served.script.overflows >= 1
    assert served.headers[-1].get("x-ctxbudget-window") == str(scripted_upstream.WINDOW)


def test_a_request_whose_floor_exceeds_the_window_gets_context_length_exceeded(
    tmp_path: Path,
) -> None:
    tools = [
        {**CLIENT_TOOLS[0], "name": f"tool_{i}", "description": "A tool. " * 120} for i in range(12)
    ]
    with gateway(tmp_path) as served:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="hi", tools=tools, max_output_tokens=64)
    assert served.script.calls == 0
    assert caught.value.code == "context_length_exceeded"
    assert "prompt floor" in caught.value.message


def test_the_gateways_count_is_the_count_of_what_it_forwards(tmp_path: Path) -> None:
    with gateway(tmp_path, steps=1) as served:
        final, calls = _run_codex_loop(served, stream=False)
    assert (final, calls) == (scripted_upstream.FINAL_ANSWER, 2)
    # The server counts the body it received with the same tokenizer: the same numbers.
    assert [int(h["x-ctxbudget-tokens"]) for h in served.headers] == served.script.prompts
    assert all(h["x-ctxbudget-compacted"] == "0" for h in served.headers)
