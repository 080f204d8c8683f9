"""The Anthropic Messages API as a `WireApi`: ``POST /v1/messages`` (also ``?beta=true``, what
Claude Code calls) and the ``POST /v1/messages/count_tokens`` answer (`count_tokens`).

The conversation is ``system`` (a string or text blocks, ``cache_control`` and all, forwarded
as sent) and the ``messages``; each Anthropic message is one item, read by the library's own
reader (`messages.anthropic`). A user message holding ``tool_result`` blocks becomes several of
our messages (each result one, the blocks between them one more); each remembers which blocks
it came from (`BLOCKS_KEY`), so a compacted request rebuilds a message from its own blocks:
unchanged ones verbatim, changed ones with their new text.

Thinking: Anthropic requires the thinking blocks of the turn in progress (the last assistant
message with ``tool_use`` whose results follow) back unmodified, signatures included. That
message is always forwarded exactly as the client sent it, whatever compaction did to it; an
older assistant message rebuilt by compaction keeps its ``thinking`` / ``redacted_thinking``
blocks verbatim unless compaction dropped its reasoning, and its ``tool_use`` blocks always.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ctxbudget.agent.budget_session import ADAPTER_META_PREFIX
from ctxbudget.budget.usage import usage_from_anthropic
from ctxbudget.errors import CtxbudgetError, InputError
from ctxbudget.gateway.api import ErrorKind, JsonBody, Parsed, json_object
from ctxbudget.gateway.depth import ItemKeys
from ctxbudget.integrations._view import SOURCE_KEY, Translated, translate
from ctxbudget.messages._checks import as_list, as_object
from ctxbudget.messages.anthropic import anthropic_message_groups, request_from_anthropic
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage

__all__ = [
    "BLOCKS_KEY",
    "COUNT_TOKENS_PATH",
    "MESSAGES",
    "MessagesApi",
    "count_tokens",
    "in_progress_turn",
    "too_long_message",
]

Item = dict[str, Any]
Block = dict[str, Any]

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
BLOCKS_KEY = f"{ADAPTER_META_PREFIX}blocks"
"""``Message.meta`` key: the indices of the content blocks of its Anthropic message it was read
from (absent for a message whose content is a string)."""

# Anthropic's error types by HTTP status (docs.anthropic.com, "Errors").
_ERROR_TYPES: Mapping[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "context_length_exceeded": "invalid_request_error",
    "upstream": "api_error",
    "timeout": "timeout_error",
}
# Anthropic's stop reasons in the gateway's words (the others are kept as they are).
_STOP_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
# The text Claude Code reads to learn how far over it is (its compaction keys on it).
TOO_LONG = "prompt is too long"
# Numbers in the gateway's own one-line messages: the prompt floor's ("prompt floor N tokens
# ... + reply reserve R > window W") and an overflow's ("N tokens ... window of W").
_FLOOR = re.compile(r"prompt floor ([\d,]+) tokens.*?reply reserve ([\d,]+) > window ([\d,]+)")
_TOKENS = re.compile(r"([\d,]+) tokens")
_LIMIT = re.compile(r"(?:window|maximum|limit|context length)(?: of| is)? ([\d,]+)")


class MessagesApi:
    """The Messages API (Anthropic's, as llama.cpp, vLLM and Ollama serve ``/v1/messages``)."""

    name = "messages"
    path = "/v1/messages"

    def parse(self, body: JsonBody, keys: ItemKeys | None = None) -> Parsed:
        """Read a Messages body (``system``, ``messages``, ``tools``, ``max_tokens``...).
        Also reads a ``count_tokens`` body (the same, without ``max_tokens``)."""
        obj = as_object(body, "request")
        try:
            # The frame (system, tools, limits) once, the messages once, by item.
            frame = request_from_anthropic({**obj, "messages": []})
            groups = anthropic_message_groups(obj.get("messages"))
            items = [dict(m) for m in as_list(obj.get("messages"), "messages")]
        except CtxbudgetError as exc:
            raise InputError(str(exc)) from None
        # The items as the conversation's identity: without their cache_control, which Claude
        # Code moves to the newest message on every request (an item that had it last time
        # has it no more); `forward_body` forwards the client's own items, by index.
        identity = [_without_cache_control(item) for item in items]
        translated = translate(identity, _reader(items, groups), lead_system=False)
        return Parsed(
            request=frame.with_messages(translated.messages),
            translated=translated,
            head=_without_cache_control(obj.get("system")),
            stream=obj.get("stream") is True,
            model=frame.model,
            passthrough=None if items else "no messages",
        )

    def forward_body(
        self, body: JsonBody, parsed: Parsed, sent: Request, max_tokens: int | None
    ) -> JsonBody:
        """``body`` with ``messages`` for ``sent``: the client's messages where unchanged (the
        turn in progress always), compaction's rebuilt; ``max_tokens`` replaced when given,
        and an extended-thinking budget lowered under it (Anthropic requires
        ``budget_tokens`` < ``max_tokens``)."""
        out = dict(body)
        if sent.messages is not parsed.request.messages:
            # The client's own items (cache_control and all) in place of the identity forms.
            client = dataclasses.replace(parsed.translated, items=tuple(body["messages"]))
            out["messages"] = forward_messages(client, sent.messages)
        if max_tokens is not None:
            out["max_tokens"] = max_tokens
            thinking = body.get("thinking")
            if isinstance(thinking, Mapping):
                budget = thinking.get("budget_tokens")
                if (
                    isinstance(budget, int)
                    and not isinstance(budget, bool)
                    and budget >= max_tokens
                ):
                    out["thinking"] = {**thinking, "budget_tokens": max(1, max_tokens - 1)}
        return out

    def usage(self, reply: JsonBody) -> Usage | None:
        """The message's ``usage``: input + cache creation + cache read is the prompt."""
        return _usage(reply.get("usage"))

    def stop_reason(self, reply: JsonBody) -> str | None:
        """``stop_reason`` in the gateway's words (``max_tokens`` is ``"length"``)."""
        return _stop_reason(reply.get("stop_reason"))

    def stream_usage(self, event: str | None, data: str) -> Usage | None:
        """``message_start``'s usage (the prompt), ``message_delta``'s (the output, and the
        prompt again where the server repeats it): parts the caller merges."""
        kind = _event_kind(event, data, ("message_start", "message_delta"))
        if kind is None:
            return None
        value = json_object(data)
        if value is None:
            return None
        if kind == "message_start":
            message = value.get("message")
            return _usage(message.get("usage")) if isinstance(message, Mapping) else None
        usage = value.get("usage")
        if not isinstance(usage, Mapping):
            return None
        if usage.get("input_tokens") is None:
            # Only the output: the prompt came with message_start (merged by the caller).
            return _usage({**usage, "input_tokens": 0})
        return _usage(usage)

    def stream_stop_reason(self, event: str | None, data: str) -> str | None:
        """``message_delta``'s ``stop_reason``."""
        if _event_kind(event, data, ("message_delta",)) is None:
            return None
        value = json_object(data)
        delta = value.get("delta") if value is not None else None
        return _stop_reason(delta.get("stop_reason")) if isinstance(delta, Mapping) else None

    def prepare_stream(self, body: JsonBody) -> tuple[JsonBody, bool]:
        """Unchanged: a Messages stream always carries its usage."""
        return body, False

    def is_extra_usage_event(self, event: str | None, data: str) -> bool:
        """Never: the gateway adds no event to a Messages stream."""
        return False

    def error(self, status: int, kind: ErrorKind, message: str) -> tuple[int, JsonBody]:
        """Anthropic's error shape, ``{"type": "error", "error": {"type", "message"}}``; a
        request that cannot fit says ``prompt is too long: N tokens > M maximum`` first (the
        text Claude Code reads), then the gateway's own message."""
        if kind == "context_length_exceeded":
            message = too_long_message(message)
        error_type = _ERROR_TYPES.get(kind, "api_error")
        return status, {"type": "error", "error": {"type": error_type, "message": message}}

    def summary_body(self, model: str, request: Request, max_tokens: int) -> JsonBody:
        """The summarizer's request as a Messages body: its system prompt as ``system``, its
        message as the one user message; not streamed."""
        body: JsonBody = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": m.text} for m in request.messages],
            "stream": False,
        }
        if request.system:
            body["system"] = request.system
        return body

    def summary_text(self, reply: JsonBody) -> str:
        """The reply's text blocks, joined."""
        return "".join(
            str(block.get("text") or "")
            for block in reply.get("content") or ()
            if isinstance(block, Mapping) and block.get("type") == "text"
        )


def count_tokens(parsed: Parsed, count: Callable[[Request], int]) -> JsonBody:
    """The answer to ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, N being
    ``count`` of the request the gateway would forward for ``parsed`` (the caller's counter
    swaps in a stored compaction first, as a real request would get)."""
    return {"input_tokens": int(count(parsed.request))}


def too_long_message(message: str, tokens: int | None = None, limit: int | None = None) -> str:
    """``prompt is too long: N tokens > M maximum``, then ``message``: Anthropic's overflow
    text, which Claude Code parses. The numbers come from ``tokens`` / ``limit`` or, when not
    given, from the gateway's own message (the prompt floor's: floor + reserve > window)."""
    if message.startswith(TOO_LONG):
        return message
    if tokens is None or limit is None:
        found = _numbers(message)
        if found is None:
            return f"{TOO_LONG}: {message}"
        tokens, limit = found
    return f"{TOO_LONG}: {tokens} tokens > {limit} maximum; {message}"


def in_progress_turn(items: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the turn in progress: the last assistant message, when it holds
    ``tool_use`` and a later message holds a ``tool_result`` (its thinking must go back
    unmodified); None when there is none."""
    for i in range(len(items) - 1, -1, -1):
        if items[i].get("role") != "assistant":
            continue
        if not _has_block(items[i], "tool_use"):
            return None
        later = items[i + 1 :]
        return i if any(_has_block(item, "tool_result") for item in later) else None
    return None


def forward_messages(translated: Translated[Item], messages: Sequence[Message]) -> list[Item]:
    """``messages`` (the session's decision) as Anthropic messages: the client's own where
    unchanged, the turn in progress always; each other one rebuilt from its own blocks."""
    protected = in_progress_turn(translated.items)

    def rebuild(original: Item | None, group: list[Message]) -> Item:
        if original is None:  # compaction's own message: the handoff summary
            return {"role": "user", "content": "\n\n".join(m.text for m in group)}
        index = group[0].meta.get(SOURCE_KEY)
        if index == protected:
            return original
        per_item = translated.per_item[index] if isinstance(index, int) else ()
        return _rebuilt(original, group, per_item)

    return translated.back(messages, rebuild)


def _reader(
    items: Sequence[Item], groups: Sequence[tuple[Message, ...]]
) -> Callable[[Item], Sequence[Message]]:
    """`translate`'s reader: each item's messages, read before in one pass (tool names carry
    from a ``tool_use`` to its result across messages), each tagged with its blocks."""
    tagged: Iterator[tuple[Message, ...]] = iter(
        _with_blocks(item, group) for item, group in zip(items, groups, strict=True)
    )
    return lambda item: next(tagged)  # translate reads the items once, in order


def _with_blocks(item: Item, group: tuple[Message, ...]) -> tuple[Message, ...]:
    """``group`` with each message's block indices (`BLOCKS_KEY`) in its meta."""
    content = item.get("content")
    if not isinstance(content, list):
        return group
    assistant = item.get("role") == "assistant"
    runs = [tuple(range(len(content)))] if assistant else _user_runs(content)
    return tuple(
        dataclasses.replace(m, meta={**m.meta, BLOCKS_KEY: run})
        for m, run in zip(group, runs, strict=True)
    )


def _user_runs(blocks: Sequence[Any]) -> list[tuple[int, ...]]:
    """The blocks each message of a user item came from, as `messages.anthropic` splits it:
    each ``tool_result`` alone, the blocks between them together (an empty item one message)."""
    runs: list[tuple[int, ...]] = []
    run: list[int] = []
    for i, block in enumerate(blocks):
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            if run:
                runs.append(tuple(run))
                run = []
            runs.append((i,))
        else:
            run.append(i)
    if run or not runs:
        runs.append(tuple(run))
    return runs


def _rebuilt(original: Item, group: Sequence[Message], per_item: Sequence[Message]) -> Item:
    """``original`` with the messages of ``group``: blocks of unchanged messages verbatim,
    those of changed ones rewritten with their new text."""
    content = original.get("content")
    if not isinstance(content, list):
        return {**original, "content": "".join(m.text for m in group)}
    before = {m.meta.get(BLOCKS_KEY): m for m in per_item}
    blocks: list[Block] = []
    for message in group:
        indices = message.meta.get(BLOCKS_KEY) or ()
        mine = [content[i] for i in indices]
        old = before.get(indices)
        if old is not None and _same(old, message):
            blocks.extend(mine)
        elif message.role == "tool" and len(mine) == 1:
            blocks.append({**mine[0], "content": message.text})
        else:
            blocks.extend(_with_text(mine, message))
    return {**original, "content": blocks}


def _with_text(blocks: Sequence[Block], message: Message) -> list[Block]:
    """``blocks`` with their text blocks replaced by one holding ``message.text`` (where the
    first was); ``tool_use`` kept, thinking kept unless compaction dropped the message's
    reasoning, images kept unless it dropped its images."""
    out: list[Block] = []
    placed = False
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            if not placed and message.text:
                out.append({**block, "text": message.text})
            placed = True
        elif kind in ("thinking", "redacted_thinking"):
            if message.reasoning is not None:
                out.append(block)
        elif kind == "image":
            if message.images:
                out.append(block)
        else:
            out.append(block)
    if not placed and message.text:
        out.insert(0, {"type": "text", "text": message.text})
    return out or [{"type": "text", "text": message.text or "(empty)"}]


def _same(a: Message, b: Message) -> bool:
    """Equal but for usage, which the gateway attaches to the messages it counts."""
    return a == b or dataclasses.replace(a, usage=None) == dataclasses.replace(b, usage=None)


def _without_cache_control(value: Any) -> Any:
    """A message (or a ``system`` value) less the ``cache_control`` of its blocks, nested
    ``tool_result`` content included; a value without any is returned as it is (no copy)."""
    if not _has_cache_control(value):
        return value
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    out = {k: v for k, v in value.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_without_cache_control(v) for v in out["content"]]
        # Claude Code sends its newest message as one text block (to carry the marker) and the
        # same message as a plain string in the next request: the API reads them alike.
        blocks = out["content"]
        one_text = (
            len(blocks) == 1
            and isinstance(blocks[0], dict)
            and blocks[0].keys() == {"type", "text"}
        )
        if one_text and blocks[0]["type"] == "text" and isinstance(blocks[0]["text"], str):
            out["content"] = blocks[0]["text"]
    return out


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    if not isinstance(value, dict):
        return False
    content = value.get("content")
    return "cache_control" in value or (isinstance(content, list) and _has_cache_control(content))


def _has_block(item: Mapping[str, Any], kind: str) -> bool:
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") == kind for block in content
    )


def _numbers(message: str) -> tuple[int, int] | None:
    """(tokens, limit) stated in one of the gateway's messages, or None."""
    floor = _FLOOR.search(message)
    if floor is not None:
        need = _int(floor.group(1)) + _int(floor.group(2))
        return need, _int(floor.group(3))
    tokens, limit = _TOKENS.search(message), _LIMIT.search(message)
    if tokens is None or limit is None:
        return None
    return _int(tokens.group(1)), _int(limit.group(1))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _usage(value: object) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    try:
        return usage_from_anthropic(value)
    except CtxbudgetError:
        return None  # an unreadable report: the next request is counted instead


def _stop_reason(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return _STOP_REASONS.get(value, value)


def _event_kind(event: str | None, data: str, kinds: Sequence[str]) -> str | None:
    """Which of ``kinds`` a streamed event is (by its SSE name, else its data), or None."""
    if event is not None:
        return event if event in kinds else None
    return next((k for k in kinds if f'"{k}"' in data), None)


MESSAGES = MessagesApi()
"""The one instance the gateway uses."""
