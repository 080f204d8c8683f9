"""The scripted model behind a loopback chat-completions server (streamed on request)."""

from __future__ import annotations

import json
from typing import Any

from tests.integrations.scripted import ScriptedModel
from tests.providers.fakeserver import FakeServer, Recorded, Reply


class ChatServer(FakeServer):
    """A `FakeServer` whose replies come from a `ScriptedModel` instead of a queue; it serves
    ``/chat/completions`` and ``/responses``."""

    def __init__(self, model: ScriptedModel | None = None) -> None:
        super().__init__()
        self.model = model or ScriptedModel()

    def next_reply(self, recorded: Recorded) -> Reply:
        responses = recorded.path.endswith("/responses")
        with self._lock:
            self.requests.append(recorded)
            body = recorded.json()
            chat = _chat_body(body) if responses else body
            status, answer = self.model.respond(chat)
        if status == 200 and responses:
            answer = _response(answer)
        if status != 200 or not body.get("stream"):
            return Reply(status=status, body=answer)
        return Reply(chunks=_events(answer) if responses else _chunks(answer))


def _chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat-completions body the scripted model reads."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for item in body["input"]:
        kind = item.get("type")
        if kind == "function_call":
            call = {"name": item["name"], "arguments": item["arguments"]}
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": item["call_id"], "type": "function", "function": call}],
                }
            )
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
            )
        else:
            content = item["content"]
            if not isinstance(content, str):
                content = "".join(part.get("text", "") for part in content)
            messages.append({"role": item["role"], "content": content})
    tools = [{"type": "function", "function": t} for t in body.get("tools") or ()]
    return {"messages": messages, **({"tools": tools} if tools else {})}


def _response(answer: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as the Responses API's response object."""
    message = answer["choices"][0]["message"]
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{c['id']}",
            "call_id": c["id"],
            "name": c["function"]["name"],
            "arguments": c["function"]["arguments"],
            "status": "completed",
        }
        for c in message.get("tool_calls") or ()
    ]
    if message["content"]:
        text = {"type": "output_text", "text": message["content"], "annotations": []}
        output.append(
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [text]}
        )  # fmt: skip
    usage = answer["usage"]
    return {
        "id": answer["id"],
        "object": "response",
        "created_at": 0,
        "model": "scripted",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _events(response: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The response as a Responses event stream: created, then completed with the usage."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    return (
        {"type": "response.created", "sequence_number": 0, "response": started},
        {"type": "response.completed", "sequence_number": 1, "response": response},
    )


def _chunks(answer: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The completion as stream chunks: the message delta, the finish, then the usage."""
    message = answer["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    base = {"id": answer["id"], "object": "chat.completion.chunk", "created": 0, "model": "x"}
    finish = answer["choices"][0]["finish_reason"]
    return (
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": answer["usage"]},
    )


def tool_result(call: Any) -> dict[str, Any]:
    """The tool message answering an SDK tool call object."""
    from tests.integrations.scripted import tool_output

    args = json.loads(call.function.arguments)
    return {
        "role": "tool",
        "tool_call_id": call.id,
        "content": tool_output(call.function.name, args),
    }
