"""Request shapes the real clients send (seen by tests/clients on the pinned versions), read as
one conversation by the gateway."""

from __future__ import annotations

from typing import Any

from ctxbudget.gateway.messages_api import MESSAGES

ENVIRONMENT = "# Environment\nPrimary working directory: /tmp/work"
MARK = {"type": "ephemeral"}


def _body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 128_000,
        "system": "You are an agent.",
        "messages": list(messages),
    }


def test_claude_codes_newest_message_as_a_block_then_as_a_string_is_one_conversation() -> None:
    # Claude Code 2.1.332: request N ends with its environment notes as one text block carrying
    # the cache breakpoint; request N+1 sends the same message as a plain string.
    task = {"role": "user", "content": "go"}
    first = _body(
        task,
        {
            "role": "system",
            "content": [{"type": "text", "text": ENVIRONMENT, "cache_control": MARK}],
        },
    )
    second = _body(
        task,
        {"role": "system", "content": ENVIRONMENT},
        {"role": "assistant", "content": [{"type": "text", "text": "ok", "cache_control": MARK}]},
    )
    before = MESSAGES.parse(first).translated.items
    after = MESSAGES.parse(second).translated.items
    assert list(after[: len(before)]) == list(before)
    # The client's own items are what is forwarded, cache marker included.
    parsed = MESSAGES.parse(second)
    assert (
        MESSAGES.forward_body(second, parsed, parsed.request, None)["messages"]
        == second["messages"]
    )
