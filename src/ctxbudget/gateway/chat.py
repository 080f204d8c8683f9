"""OpenAI Chat Completions as a `WireApi`: ``POST /v1/chat/completions``.

The conversation is the ``messages`` list; each message is one item (`translate`), so a message
the budget session forwards unchanged goes out as the client sent it, byte for byte in its
fields, and only compaction's new messages (the summary, placeholders) are rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxbudget.budget.usage import usage_from_openai
from ctxbudget.errors import CtxbudgetError, InputError, MessageFormatError
from ctxbudget.gateway.api import (
    ErrorKind,
    ItemMemo,
    JsonBody,
    Parsed,
    ReadLists,
    json_object,
)
from ctxbudget.gateway.depth import ItemKeys
from ctxbudget.integrations._view import stamp, translate
from ctxbudget.messages._checks import join
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.openai import message_from_openai, message_to_openai, request_from_openai
from ctxbudget.messages.usage import Usage

__all__ = ["CHAT", "ChatCompletions"]

_ERROR_TYPES: Mapping[ErrorKind, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("authentication_error", "invalid_api_key"),
    "not_found": ("invalid_request_error", "not_found"),
    "too_large": ("invalid_request_error", "request_too_large"),
    "context_length_exceeded": ("invalid_request_error", "context_length_exceeded"),
    "upstream": ("upstream_error", None),
    "timeout": ("timeout_error", None),
}
_MAX_TOKEN_FIELDS = ("max_completion_tokens", "max_tokens")


class ChatCompletions:
    """The Chat Completions API (OpenAI's, as llama.cpp, vLLM, Ollama and LM Studio serve it)."""

    name = "chat"
    path = "/v1/chat/completions"

    def __init__(self) -> None:
        self.memo = ItemMemo()
        """The messages read from items seen before (a conversation's prefix)."""
        self.lists = ReadLists()
        """What lists seen before were read as: a request that continues one reads only the
        items after it."""

    def parse(self, body: JsonBody, keys: ItemKeys | None = None) -> Parsed:
        """Read a chat-completions body; ``n`` > 1 is passed through (the budget counts one
        reply, a request for several is the client's own choice of cost)."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise MessageFormatError("messages", "expected a list of messages")
        try:
            # A list that starts with one read before (the conversation's last request) takes
            # what that one was read as (`ReadLists`); the items after it are each read once
            # (remembered across requests with their index: `ItemMemo`, so an unchanged item
            # is the same stamped messages every request), with their paths.
            key_list, before = self.lists.find(messages, keys)
            start = 0 if before is None else len(before.per_item)
            rest = messages[start:]
            done = self.memo.read_all(rest, _read_at, keys, start)
            read = {id(item): got for item, got in zip(rest, done, strict=True)}
            translated = translate(
                messages, lambda item: read[id(item)], lead_system=True, resume=before
            )
            self.lists.remember(key_list, translated.resume(), before)
            # The other fields (system prompt, tools, limits, model) from the leading system
            # items alone: the messages are read above (`translate`'s lead is the same count of
            # leading system messages `request_from_openai` takes as the system prompt).
            request = request_from_openai({**body, "messages": messages[: translated.lead]})
        except CtxbudgetError as exc:
            raise InputError(str(exc)) from None
        n = body.get("n")
        passthrough = "n > 1" if isinstance(n, int) and not isinstance(n, bool) and n > 1 else None
        if not messages:
            passthrough = "no messages"
        stream = body.get("stream") is True
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return Parsed(
            request=request.with_messages(translated.messages),
            translated=translated,
            stream=stream,
            model=model,
            passthrough=passthrough,
        )

    def forward_body(
        self, body: JsonBody, parsed: Parsed, sent: Request, max_tokens: int | None
    ) -> JsonBody:
        """``body`` with ``messages`` for ``sent``: the client's items where unchanged."""
        out = dict(body)
        if sent.messages is not parsed.request.messages:
            items = parsed.translated.back_whole(sent.messages, _rebuild)
            out["messages"] = items
        if max_tokens is not None:
            field = next((f for f in _MAX_TOKEN_FIELDS if f in body), "max_tokens")
            out[field] = max_tokens
        return out

    def usage(self, reply: JsonBody) -> Usage | None:
        """``usage`` of a chat completion, or None (absent or unreadable)."""
        return _usage(reply.get("usage"))

    def stop_reason(self, reply: JsonBody) -> str | None:
        """The first choice's ``finish_reason``."""
        return _finish_reason(reply)

    def stream_usage(self, event: str | None, data: str) -> Usage | None:
        """The ``usage`` of a chunk (the last one, with ``include_usage``)."""
        if '"usage"' not in data:  # most chunks: skip the JSON parse
            return None
        chunk = json_object(data)
        return None if chunk is None else _usage(chunk.get("usage"))

    def stream_stop_reason(self, event: str | None, data: str) -> str | None:
        """A chunk's ``finish_reason``, when it has one."""
        if '"finish_reason"' not in data:
            return None
        chunk = json_object(data)
        return None if chunk is None else _finish_reason(chunk)

    def prepare_stream(self, body: JsonBody) -> tuple[JsonBody, bool]:
        """Ask for the usage chunk when the client did not; True when it was added."""
        options = body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage") is True:
            return body, False
        extra = dict(options) if isinstance(options, Mapping) else {}
        return {**body, "stream_options": {**extra, "include_usage": True}}, True

    def is_extra_usage_event(self, event: str | None, data: str) -> bool:
        """The usage-only chunk: ``usage`` set and no choices."""
        if '"usage"' not in data:
            return False
        chunk = json_object(data)
        return chunk is not None and not chunk.get("choices") and chunk.get("usage") is not None

    def error(self, status: int, kind: ErrorKind, message: str) -> tuple[int, JsonBody]:
        """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
        kind_type, code = _ERROR_TYPES.get(kind, ("api_error", None))
        return status, {
            "error": {"message": message, "type": kind_type, "param": None, "code": code or kind}
        }

    def summary_body(self, model: str, request: Request, max_tokens: int) -> JsonBody:
        """A plain chat request: the summarizer's system prompt and its one user message."""
        messages: list[dict[str, Any]] = []
        if request.system is not None:
            messages.append({"role": "system", "content": request.system})
        messages.extend(message_to_openai(m, include_reasoning=False) for m in request.messages)
        return {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": False}

    def summary_text(self, reply: JsonBody) -> str:
        """The first choice's message content."""
        choices = reply.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                return str(message["content"])
        return ""


def _read_at(index: int, item: Any) -> tuple[Message, ...]:
    """Reads chat message ``index``, naming its path in its errors, stamped with its index as
    `translate` stamps it (so `translate` keeps it as it is)."""
    return tuple(stamp((message_from_openai(item, join("messages", index)),), index))


def _rebuild(original: Any, group: list[Message]) -> dict[str, Any]:
    """A message compaction made or changed, as a chat message."""
    return message_to_openai(group[0], include_reasoning=False)


def _usage(value: object) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    try:
        return usage_from_openai(value)
    except CtxbudgetError:
        return None  # an unreadable report: the next request is counted instead


def _finish_reason(reply: Mapping[str, Any]) -> str | None:
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


CHAT = ChatCompletions()
"""The one instance the gateway uses."""
