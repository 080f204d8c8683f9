"""Server-sent chat-completion chunks assembled into the body a non-streamed reply would have.

Pure: the provider feeds decoded events in and parses the assembled body exactly as it parses a
non-streamed one, so both paths give the same ``Completion``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DONE",
    "MAX_SSE_LINE_BYTES",
    "DeadlineExceeded",
    "ReplyLimitError",
    "StreamAssembly",
    "sse_events",
]

DONE = "[DONE]"
"""The payload OpenAI-compatible servers send as the last event of a stream."""


MAX_SSE_LINE_BYTES = 4 * 1024 * 1024
"""The longest line (and event) a stream may send: a chunk is a few hundred bytes; 4 MiB leaves
room for a whole tool call sent at once."""


class ReplyLimitError(Exception):
    """A server sent more than a cap allows; not retried (it would send the same again)."""


class DeadlineExceeded(ReplyLimitError):
    """The request's deadline passed while the reply was still arriving."""


def sse_events(pieces: Iterable[bytes], max_line_bytes: int = MAX_SSE_LINE_BYTES) -> Iterator[str]:
    """The ``data`` of each complete server-sent event in a byte stream.

    An event ends at a blank line; its ``data:`` lines are joined with newlines; comments
    (``: keep-alive``) and other fields are skipped. An event cut off by the end of the stream
    is dropped, as the SSE standard says (WHATWG HTML, "dispatch the event" only on a blank line).
    Linear in the stream's size: each byte is searched once. A line or an event longer than
    ``max_line_bytes`` raises `ReplyLimitError`.
    """
    partial: list[bytes] = []  # the start of the current line, from earlier pieces
    pending = 0
    data: list[str] = []
    data_bytes = 0
    for piece in pieces:
        start = 0
        while (end := piece.find(b"\n", start)) >= 0:
            raw = piece[start:end]
            if partial:
                raw, partial, pending = b"".join((*partial, raw)), [], 0
            start = end + 1
            if len(raw) > max_line_bytes:
                raise ReplyLimitError(_too_long(max_line_bytes))
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if not line:
                if data:
                    yield "\n".join(data)
                data, data_bytes = [], 0
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                data_bytes += len(raw)
                if data_bytes > max_line_bytes:
                    raise ReplyLimitError(_too_long(max_line_bytes))
        if start < len(piece):
            partial.append(piece[start:])
            pending += len(piece) - start
            if pending > max_line_bytes:
                raise ReplyLimitError(_too_long(max_line_bytes))


def _too_long(limit: int) -> str:
    return f"stream line or event longer than {limit:,} bytes; stopped reading"


@dataclass(slots=True)
class _ToolCallParts:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": self.type, "function": function}


@dataclass(slots=True)
class StreamAssembly:
    """The reply so far: content, reasoning, tool calls by index, finish reason, usage."""

    chunks: int = 0
    """Chunks fed (``[DONE]`` not counted)."""
    done: bool = False
    """True once ``[DONE]`` arrived."""
    finish_reason: str | None = None
    usage: Any = None
    model: str | None = None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    text_chars: int = 0
    """Characters of content, reasoning and tool arguments so far (checked against a cap)."""

    @property
    def complete(self) -> bool:
        """``[DONE]`` arrived, or both a finish reason and the usage did.

        Some servers omit ``[DONE]``; the usage chunk comes after the finish reason, so with both
        nothing is missing. A finish reason alone may be a stream cut before its usage.
        """
        return self.done or (self.finish_reason is not None and self.usage is not None)

    def feed(self, chunk: dict[str, Any]) -> str:
        """Add one ``chat.completion.chunk``; return the content text it added (may be "")."""
        self.chunks += 1
        if chunk.get("usage") is not None:  # the last chunk's wins (vLLM may send one per chunk)
            self.usage = chunk["usage"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""  # the usage-only chunk of stream_options.include_usage has no choices
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        # vLLM and DeepSeek send reasoning_content; Ollama and OpenRouter send reasoning.
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self.reasoning.append(delta[key])
                self.text_chars += len(delta[key])
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self._add_call(call)
        text = delta.get("content")
        if isinstance(text, str):
            self.content.append(text)
            self.text_chars += len(text)
            return text
        return ""

    def _add_call(self, call: dict[str, Any]) -> None:
        index = call.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            # No index (some Gemini and older gateway builds): a new id starts a new call.
            fresh = isinstance(call.get("id"), str) and call["id"] and not self._has_id(call["id"])
            index = len(self.calls) if fresh or not self.calls else max(self.calls)
        parts = self.calls.setdefault(index, _ToolCallParts())
        if isinstance(call.get("id"), str) and call["id"] and not parts.id:
            parts.id = call["id"]
        if isinstance(call.get("type"), str) and call["type"]:
            parts.type = call["type"]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and not parts.name:
                parts.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                parts.arguments.append(arguments)
                self.text_chars += len(arguments)

    def _has_id(self, call_id: str) -> bool:
        return any(parts.id == call_id for parts in self.calls.values())

    def body(self) -> dict[str, Any]:
        """The ``chat.completion`` object a non-streamed request would have returned."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) if self.content else None,
        }
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i].body() for i in sorted(self.calls)]
        body: dict[str, Any] = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }
        if self.model is not None:
            body["model"] = self.model
        return body
