"""The Chat Completions reader remembers the messages it read from each item (`ItemMemo`):
an agent resends its conversation every step, so a step reads only its new items. Pinned here:
what it reads is what a fresh read gives, whatever the key order, and errors keep their path."""

from __future__ import annotations

from typing import Any

import pytest

from ctxbudget.errors import InputError
from ctxbudget.gateway.api import ItemMemo
from ctxbudget.gateway.chat import ChatCompletions
from ctxbudget.gateway.responses import ResponsesApi
from ctxbudget.integrations._view import translate
from ctxbudget.messages.openai import message_from_openai, request_from_openai

BODY: dict[str, Any] = {
    "model": "m",
    "max_tokens": 64,
    "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
        {"role": "system", "content": "Mid-conversation note."},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    ],
}


def test_a_remembered_read_is_a_fresh_read() -> None:
    chat = ChatCompletions()
    first = chat.parse(BODY)
    assert len(chat.memo) == len(BODY["messages"])
    # The request is what reading the whole body gives (system prompt, tools, limits, model),
    # its messages what `translate` makes of the items read afresh.
    fresh = translate(BODY["messages"], lambda item: (message_from_openai(item),))
    whole = request_from_openai(BODY).with_messages(fresh.messages)
    assert first.request == whole
    assert first.translated.system == whole.system == "Be brief.\n\nUse tools."
    # The same items again, keys reordered: read from the memo, and equal.
    reordered = {
        **BODY,
        "messages": [dict(reversed(list(m.items()))) for m in BODY["messages"]],
    }
    again = chat.parse(reordered)
    assert again.request == whole
    assert again.request.messages == first.request.messages
    assert len(chat.memo) == len(BODY["messages"])
    # The way back still forwards the client's own items (this request's, not the first's).
    assert again.translated.items == tuple(reordered["messages"])
    # A fresh reader agrees.
    assert ChatCompletions().parse(reordered).request == whole


def test_a_bad_item_is_refused_with_its_path_every_time() -> None:
    chat = ChatCompletions()
    bad = {**BODY, "messages": [*BODY["messages"], {"role": "robot", "content": "x"}]}
    for _ in range(2):
        with pytest.raises(InputError, match=r"messages\[7\]"):
            chat.parse(bad)


def test_the_memo_is_bounded_by_its_bytes() -> None:
    memo = ItemMemo(max_bytes=100)
    for i in range(50):
        memo.read({"content": f"item {i:03d}"}, lambda item: (item["content"],))
    assert 0 < len(memo) <= 100 // len(b'{"content":"item 000"}')
    assert memo.read({"content": "item 049"}, lambda item: ("read again",)) == ("item 049",)
    assert memo.read({"content": "item 000"}, lambda item: ("read again",)) == ("read again",)


def test_responses_items_are_read_once_and_read_the_same() -> None:
    items = [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py b.py"},
        {"type": "reasoning", "id": "r1", "summary": []},
    ]
    body = {"model": "m", "instructions": "Be brief.", "input": items}
    responses = ResponsesApi()
    first = responses.parse(body)
    assert len(responses.memo) == len(items)
    again = responses.parse({**body, "input": [dict(reversed(list(i.items()))) for i in items]})
    assert again.request == first.request == ResponsesApi().parse(body).request
    assert len(responses.memo) == len(items)
