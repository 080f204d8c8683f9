"""The OpenAI Responses API as a `WireApi`: ``POST /v1/responses`` (what Codex speaks).

The conversation is ``instructions`` (the system prompt) and the ``input`` items: messages,
``function_call`` / ``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output``,
``reasoning`` (its ``encrypted_content`` opaque) and hosted-tool items. The items are read by
the library's own reader (`integrations._responses`), a turn at a time: the assistant's items
in a row (its message, its calls, the reasoning among them) are one assistant message, as the
server reads them (llama.cpp merges them so), every other item is one unit. A unit is forwarded
verbatim while compaction leaves its messages alone; a changed assistant turn keeps its own
items (reasoning verbatim, each call still made verbatim, the text rewritten), so a call never
leaves the turn that made it nor its output. An item that holds nothing we count and is no part
of an assistant turn travels with the unit after it.

A request with ``previous_response_id`` or ``conversation`` keeps its history on the server
(as does one with an ``item_reference``): the gateway sees only part of it and cannot budget
the whole, so it passes it through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxbudget.budget.usage import usage_from_openai_responses
from ctxbudget.errors import CtxbudgetError, InputError
from ctxbudget.gateway.api import ErrorKind, ItemMemo, JsonBody, Parsed, json_object
from ctxbudget.gateway.chat import CHAT
from ctxbudget.gateway.depth import ItemKeys
from ctxbudget.integrations._responses import (
    Turn,
    read_turn,
    rebuild_turn,
    tool_specs,
    turns,
)
from ctxbudget.integrations._view import SOURCE_KEY, Translated, translate
from ctxbudget.messages._checks import (
    as_list,
    as_object,
    fail,
    join,
    optional_positive_int,
    optional_str,
    required_str,
    type_name,
)
from ctxbudget.messages.model import Message, Request, join_system
from ctxbudget.messages.usage import Usage

__all__ = ["RESPONSES", "ResponsesApi"]

Item = dict[str, Any]

# What each item type must carry for `read_item` to read it (it indexes these keys).
_REQUIRED_KEYS: Mapping[str, tuple[str, ...]] = {
    "function_call": ("call_id", "name"),
    "custom_tool_call": ("call_id", "name"),
    "function_call_output": ("call_id",),
    "custom_tool_call_output": ("call_id",),
}
# Events that end a streamed response; each carries the whole response, usage included.
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
_CALL_ITEMS = ("function_call", "custom_tool_call")


class ResponsesApi:
    """The Responses API (OpenAI's, as llama.cpp, vLLM and Ollama serve ``/v1/responses``)."""

    name = "responses"
    path = "/v1/responses"

    def __init__(self) -> None:
        self.memo = ItemMemo()
        """The messages read from items seen before (a conversation's prefix)."""

    def parse(self, body: JsonBody, keys: ItemKeys | None = None) -> Parsed:
        """Read a Responses body: ``instructions`` and leading system/developer items are the
        system prompt, ``input`` the conversation (a string is one user message), ``tools``
        the function and custom tools. ``previous_response_id`` / ``conversation`` are passed
        through (the server holds the history)."""
        obj = as_object(body, "request")
        model = optional_str(obj, "model", "")
        stream = obj.get("stream") is True
        passthrough = _server_side_history(obj)
        if passthrough is not None:
            empty: Translated[Turn] = translate([], read_turn)
            request = Request(model=model)
            return Parsed(
                request=request,
                translated=empty,
                stream=stream,
                model=model,
                passthrough=passthrough,
            )
        instructions = obj.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            fail("instructions", f"expected a string, got {type_name(instructions)}")
        items = _input_items(obj.get("input"))
        try:
            # Turns seen on an earlier request (the conversation so far) are not read again
            # (a turn is a tuple of items: its key is their JSON array).
            translated = translate(turns(items), lambda turn: self.memo.read(turn, read_turn))
            tools = tool_specs(_tools(obj))
        except CtxbudgetError as exc:
            raise InputError(str(exc)) from None
        request = Request(
            # Empty instructions are an empty system turn (""), not none: llama.cpp's server
            # sends ``instructions`` as a system message whatever its text
            # (`convert_responses_to_chatcmpl`, tools/server/server-common.cpp; named
            # `server_chat_convert_responses_to_chatcmpl` in server-chat.cpp of the pinned one).
            system=join_system((instructions, translated.system)),
            tools=tools,
            messages=translated.messages,
            max_output_tokens=optional_positive_int(obj, "max_output_tokens", ""),
            model=model,
        )
        return Parsed(
            request=request,
            translated=translated,
            head=instructions,
            stream=stream,
            model=model,
            passthrough=None if items else "no input items",
        )

    def forward_body(
        self, body: JsonBody, parsed: Parsed, sent: Request, max_tokens: int | None
    ) -> JsonBody:
        """``body`` with ``input`` for ``sent``: the client's items where unchanged (reasoning
        with its ``encrypted_content`` included), compaction's rebuilt; ``max_output_tokens``
        replaced when ``max_tokens`` is given."""
        out = dict(body)
        if sent.messages is not parsed.request.messages:
            out["input"] = forward_items(parsed.translated, sent.messages)
        if max_tokens is not None:
            out["max_output_tokens"] = max_tokens
        return out

    def usage(self, reply: JsonBody) -> Usage | None:
        """The response's ``usage`` (``input_tokens`` includes the cached part), or None."""
        return _usage(reply.get("usage"))

    def stop_reason(self, reply: JsonBody) -> str | None:
        """``"length"`` for a response cut by ``max_output_tokens``, ``"tool_calls"`` for one
        ending in a call, ``"stop"`` for another completed one; else the status."""
        return _stop_reason(reply)

    def stream_usage(self, event: str | None, data: str) -> Usage | None:
        """The usage of ``response.completed`` (or ``.incomplete`` / ``.failed``)."""
        response = _final_response(event, data)
        return None if response is None else _usage(response.get("usage"))

    def stream_stop_reason(self, event: str | None, data: str) -> str | None:
        """Why the streamed response stopped, from its final event."""
        response = _final_response(event, data)
        return None if response is None else _stop_reason(response)

    def prepare_stream(self, body: JsonBody) -> tuple[JsonBody, bool]:
        """Unchanged: the final event always carries the usage."""
        return body, False

    def is_extra_usage_event(self, event: str | None, data: str) -> bool:
        """Never: the gateway adds no event to a Responses stream."""
        return False

    def error(self, status: int, kind: ErrorKind, message: str) -> tuple[int, JsonBody]:
        """OpenAI's error shape, as Chat Completions answers it (``context_length_exceeded``
        for a request that cannot fit)."""
        return CHAT.error(status, kind, message)

    def summary_body(self, model: str, request: Request, max_tokens: int) -> JsonBody:
        """The summarizer's request as a Responses body: its system prompt as ``instructions``,
        its message as the one input item; not stored, not streamed."""
        body: JsonBody = {
            "model": model,
            "input": [{"role": "user", "content": m.text} for m in request.messages],
            "max_output_tokens": max_tokens,
            "stream": False,
            "store": False,
        }
        if request.system is not None:
            body["instructions"] = request.system
        return body

    def summary_text(self, reply: JsonBody) -> str:
        """The reply's ``output_text`` parts, joined."""
        return output_text(reply)


def forward_items(translated: Translated[Turn], messages: Sequence[Message]) -> list[Item]:
    """``messages`` (the session's decision) as ``input`` items: the client's own turns where
    unchanged, changed ones rebuilt from their own items; items with nothing to count outside
    an assistant turn go with the turn after them, and those at the very end stay at the end."""
    units = translated.back_whole(messages, rebuild_turn)
    last = _last_source(messages)
    if last is not None:
        # `back` places a silent unit before the unit it precedes; none follows the last ones.
        tail = list(translated.items[last + 1 :])
        if tail and not any(translated.per_item[last + 1 :]):
            units.extend(tail)
    return [item for unit in units for item in unit]


def output_text(reply: Mapping[str, Any]) -> str:
    """The text of a response: its ``output_text`` parts in order ("" when it has none)."""
    texts: list[str] = []
    for item in reply.get("output") or ():
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, Mapping) and part.get("type") == "output_text":
                text = part.get("text")
                texts.append(text if isinstance(text, str) else "")
    return "".join(texts)


def _server_side_history(obj: Mapping[str, Any]) -> str | None:
    """Why a request's history is on the server (the gateway cannot see it), or None."""
    if obj.get("previous_response_id") is not None:
        return "previous_response_id: the server holds the history"
    if obj.get("conversation") is not None:
        return "conversation: the server holds the history"
    items = obj.get("input")
    if isinstance(items, list) and any(
        isinstance(i, Mapping) and i.get("type") == "item_reference" for i in items
    ):
        return "item_reference: the server holds the referenced items"
    return None


def _input_items(value: object) -> list[Item]:
    """``input`` as a list of item dicts, each checked for what `read_item` reads."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    items: list[Item] = []
    for i, raw in enumerate(as_list(value, "input")):
        path = join("input", i)
        item = dict(as_object(raw, path))
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            fail(join(path, "type"), f"expected a string, got {type_name(kind)}")
        for key in _REQUIRED_KEYS.get(kind or "", ()):
            required_str(item, key, path)
        if kind in (None, "message"):
            role = item.get("role")
            if not isinstance(role, str):
                fail(join(path, "role"), "missing; a message item needs a role")
            content = item.get("content")
            if content is not None and not isinstance(content, str | list):
                fail(
                    join(path, "content"), f"expected a string or a list, got {type_name(content)}"
                )
            for j, part in enumerate(content if isinstance(content, list) else ()):
                as_object(part, join(join(path, "content"), j))
        items.append(item)
    return items


def _tools(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = obj.get("tools")
    if value is None:
        return []
    return [as_object(t, join("tools", i)) for i, t in enumerate(as_list(value, "tools"))]


def _last_source(messages: Sequence[Message]) -> int | None:
    for m in reversed(messages):
        index = m.meta.get(SOURCE_KEY)
        if isinstance(index, int):
            return index
    return None


def _usage(value: object) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    try:
        return usage_from_openai_responses(value)
    except CtxbudgetError:
        return None  # an unreadable report: the next request is counted instead


def _stop_reason(response: Mapping[str, Any]) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    if status == "completed":
        output = response.get("output") or ()
        calls = any(isinstance(i, Mapping) and i.get("type") in _CALL_ITEMS for i in output)
        return "tool_calls" if calls else "stop"
    return status if isinstance(status, str) else None


def _final_response(event: str | None, data: str) -> Mapping[str, Any] | None:
    """The ``response`` of a final streamed event, else None (most events: no JSON parse)."""
    if event is not None and event not in _FINAL_EVENTS:
        return None
    if event is None and not any(name in data for name in _FINAL_EVENTS):
        return None
    value = json_object(data)
    if value is None or value.get("type") not in _FINAL_EVENTS:
        return None
    response = value.get("response")
    return response if isinstance(response, Mapping) else None


RESPONSES = ResponsesApi()
"""The one instance the gateway uses."""
