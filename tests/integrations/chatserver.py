"""The scripted model behind a loopback chat-completions server (streamed on request)."""

from __future__ import annotations

import json
from typing import Any

from tests.integrations.scripted import ScriptedModel
from tests.providers.fakeserver import FakeServer, Recorded, Reply


class ChatServer(FakeServer):
    """A `FakeServer` whose replies come from a `ScriptedModel` instead of a queue."""

    def __init__(self, model: ScriptedModel | None = None) -> None:
        super().__init__()
        self.model = model or ScriptedModel()

    def next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            body = recorded.json()
            status, answer = self.model.respond(body)
        if status != 200 or not body.get("stream"):
            return Reply(status=status, body=answer)
        return Reply(chunks=_chunks(answer))


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
