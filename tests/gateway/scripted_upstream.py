"""A scripted model server speaking the Responses and the Anthropic Messages APIs (an ASGI app
the gateway reaches in-process), for the real clients' tests.

Each guarded call is the next step of a long tool loop (``STEPS`` calls of ``read_file``, then
the final answer); a summarizer request (its system prompt is ctxbudget's) gets a summary. The
server checks what the real APIs check, and answers as they do:

- a prompt over ``WINDOW`` tokens (its exact ``o200k_base`` count) is refused with the API's own
  overflow error (Anthropic's "prompt is too long: N tokens > M maximum"; OpenAI's
  ``context_length_exceeded``);
- Anthropic: the turn in progress must carry its thinking block with the signature this server
  gave it (Anthropic: "thinking blocks ... cannot be modified"); every ``tool_result`` must
  answer a ``tool_use`` of the message before it;
- Responses: the reasoning item before the call in progress must carry its
  ``encrypted_content`` as given; every ``function_call_output`` must follow its call.

Usage is reported as each API reports it: Responses' ``input_tokens``; Anthropic's prompt split
into ``input_tokens`` + ``cache_read_input_tokens`` (the library adds them back).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxbudget.compaction.summarizer import SUMMARIZER_SYSTEM
from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.messages_api import MESSAGES
from ctxbudget.gateway.responses import RESPONSES

WINDOW = 3_000
TOKENIZER = "o200k_base"
STEPS = 32
"""Tool calls before the final answer (`Script.total` may set fewer)."""
FINAL_ANSWER = "Done: all modules read; parse_price handles decimal commas."
SUMMARY = "## Task\nRead every module.\n## Progress\nRead the first modules; go on with the rest."
TASK = "Read every module under src/ (32 of them) and report what parse_price does."
SYSTEM = "You are a careful coding agent. Use the tools."
OUTPUT_LINES = 20


def tool_output(path: str) -> str:
    """What ``read_file`` prints for ``path``: about 300 tokens."""
    return "\n".join(f"{path}:{i}: def helper_{i}(value): return value * {i}" for i in range(24))


def signature(text: str) -> str:
    """The signature this server gives a thinking block (Anthropic's are opaque too)."""
    return hashlib.sha256(b"scripted:" + text.encode()).hexdigest()


@dataclass
class Script:
    """The server's state: how many steps it has answered, what it saw."""

    window: int = WINDOW
    total: int = STEPS
    """Tool calls before the final answer."""
    steps: int = 0
    calls: int = 0
    summaries: int = 0
    overflows: int = 0
    prompts: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: RequestCounter = field(default_factory=lambda: RequestCounter(TOKENIZER))

    def next_step(self) -> int | None:
        """The next step's number, or None when the final answer is due."""
        with self.lock:
            self.steps += 1
            return self.steps if self.steps <= self.total else None


def app(script: Script) -> Starlette:
    """The scripted server."""

    async def responses(http: HttpRequest) -> Response:
        body = json.loads(await http.body())
        parsed = RESPONSES.parse(body)
        script.calls += 1
        tokens = script.counter.count(parsed.request).total
        if tokens > script.window:
            script.overflows += 1
            error = {
                "message": f"This model's maximum context length is {script.window} tokens. "
                f"However, your messages resulted in {tokens} tokens.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
            return JSONResponse({"error": error}, status_code=400)
        problem = _responses_problem(body["input"] if isinstance(body["input"], list) else [])
        if problem is not None:
            return JSONResponse(
                {"error": {"message": problem, "type": "invalid_request_error"}}, 400
            )
        script.prompts.append(tokens)
        if parsed.request.system == SUMMARIZER_SYSTEM:
            script.summaries += 1
            output: list[dict[str, Any]] = [_output_message(SUMMARY)]
        else:
            output = _responses_step(script.next_step())
        response = {
            "id": f"resp_{script.calls}",
            "object": "response",
            "created_at": 1_764_864_000,
            "status": "completed",
            "model": body.get("model"),
            "output": output,
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 5},
                "total_tokens": tokens + 20,
            },
        }
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(_responses_events(response), media_type="text/event-stream")

    async def messages(http: HttpRequest) -> Response:
        body = json.loads(await http.body())
        parsed = MESSAGES.parse(body)
        script.calls += 1
        tokens = script.counter.count(parsed.request).total
        if tokens > script.window:
            script.overflows += 1
            message = f"prompt is too long: {tokens} tokens > {script.window} maximum"
            error = {"type": "invalid_request_error", "message": message}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        problem = _messages_problem(body["messages"])
        if problem is not None:
            error = {"type": "invalid_request_error", "message": problem}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        script.prompts.append(tokens)
        if parsed.request.system == SUMMARIZER_SYSTEM:
            script.summaries += 1
            content: list[dict[str, Any]] = [{"type": "text", "text": SUMMARY}]
            stop = "end_turn"
        else:
            content, stop = _messages_step(script.next_step())
        cached = tokens // 2  # reported as Anthropic does: the cached part apart
        message = {
            "id": f"msg_{script.calls}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": tokens - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": 30,
            },
        }
        if not body.get("stream"):
            return JSONResponse(message)
        return StreamingResponse(_messages_events(message), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
        ]
    )


# -- Responses -------------------------------------------------------------------------------------


def _output_message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_out",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _responses_step(step: int | None) -> list[dict[str, Any]]:
    if step is None:
        return [_output_message(FINAL_ANSWER)]
    return [
        {
            "type": "reasoning",
            "id": f"rs_{step}",
            "summary": [],
            "encrypted_content": signature(f"reasoning {step}"),
        },
        {
            "type": "function_call",
            "id": f"fc_{step}",
            "call_id": f"call_{step}",
            "name": "read_file",
            "arguments": json.dumps({"path": f"src/module_{step:02d}.py"}),
            "status": "completed",
        },
    ]


def _responses_problem(items: list[dict[str, Any]]) -> str | None:
    """What the real API would refuse in ``items``, or None."""
    called: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            called.add(item["call_id"])
        elif kind == "function_call_output" and item["call_id"] not in called:
            return f"No tool call found for function call output with call_id {item['call_id']}."
        elif kind == "reasoning":
            step = item["id"].removeprefix("rs_")
            if item.get("encrypted_content") != signature(f"reasoning {step}"):
                return f"input[{i}]: the encrypted content of {item['id']} could not be verified."
    return None


def _responses_events(response: dict[str, Any]) -> Iterator[bytes]:
    """The response as a stream: created, each output item added and done, completed."""
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    seq = 0

    def event(name: str, data: dict[str, Any]) -> bytes:
        nonlocal seq
        seq += 1
        payload = json.dumps({"type": name, "sequence_number": seq, **data})
        return f"event: {name}\ndata: {payload}\n\n".encode()

    yield event("response.created", {"response": start})
    yield event("response.in_progress", {"response": start})
    for index, item in enumerate(response["output"]):
        yield event("response.output_item.added", {"output_index": index, "item": item})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    yield event("response.completed", {"response": response})


# -- Anthropic Messages ----------------------------------------------------------------------------


def _messages_step(step: int | None) -> tuple[list[dict[str, Any]], str]:
    if step is None:
        return [{"type": "text", "text": FINAL_ANSWER}], "end_turn"
    thought = f"Module {step} is next."
    return [
        {"type": "thinking", "thinking": thought, "signature": signature(thought)},
        {"type": "text", "text": f"Reading module {step}."},
        {
            "type": "tool_use",
            "id": f"toolu_{step:02d}",
            "name": "read_file",
            "input": {"path": f"src/module_{step:02d}.py"},
        },
    ], "tool_use"


def _messages_problem(messages: list[dict[str, Any]]) -> str | None:
    """What the real API would refuse in ``messages``, or None."""
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        results = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
        if results:
            before = messages[i - 1]["content"] if i else []
            calls = {b["id"] for b in before if isinstance(b, dict) and b.get("type") == "tool_use"}
            if not results <= calls:
                return f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks"
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "assistant"), None
    )
    if last is None or last == len(messages) - 1:
        return None
    blocks = messages[last]["content"]
    if not isinstance(blocks, list) or not any(b.get("type") == "tool_use" for b in blocks):
        return None
    first = blocks[0]
    if first.get("type") != "thinking" or first.get("signature") != signature(first["thinking"]):
        return (
            f"messages.{last}.content.0: thinking blocks in the latest assistant message "
            "cannot be modified"
        )
    return None


async def _messages_events(message: dict[str, Any]) -> AsyncIterator[bytes]:
    """The message as Anthropic streams it: message_start (the prompt's usage), each block's
    start / deltas / stop, message_delta (stop reason, output tokens), message_stop."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield event("message_start", {"message": start})
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "thinking":
            empty: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "text":
            empty = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            empty = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        yield event("content_block_start", {"index": index, "content_block": empty})
        for delta in deltas:
            yield event("content_block_delta", {"index": index, "delta": delta})
        yield event("content_block_stop", {"index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield event(
        "message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    yield event("message_stop", {})
