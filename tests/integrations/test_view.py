"""The adapters' shared translation: items back from a compacted view, the remembered prefix."""

from __future__ import annotations

import dataclasses
from typing import Any

from ctxbudget.compaction import SUMMARY_HEADER
from ctxbudget.integrations._view import Substitution, UsageMemory, translate
from ctxbudget.messages import Message, Usage, message_from_openai, message_to_openai


def _read(item: dict[str, Any]) -> tuple[Message, ...]:
    return (message_from_openai(item),)


def _rebuild(original: dict[str, Any] | None, group: list[Message]) -> dict[str, Any]:
    return {"rebuilt": True, **message_to_openai(group[0])}


ITEMS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "a", "content": "long output"},
    {"role": "user", "content": "next"},
]  # fmt: skip


def test_leading_system_items_become_the_system_prompt() -> None:
    view = translate(ITEMS, _read)
    assert view.system == "Be brief." and view.lead == 1
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "user"]


def test_unchanged_messages_map_back_to_the_very_items() -> None:
    view = translate(ITEMS, _read)
    task, call, result, nxt = view.messages
    cleared = Message(role="tool", content="[cleared]", tool_call_id="a", meta=result.meta)
    summary = Message(role="user", content=f"{SUMMARY_HEADER}\n\n## Goal\ntask")
    back = view.back([summary, task, call, cleared, nxt], _rebuild)
    assert back[1] is ITEMS[1] and back[2] is ITEMS[2] and back[4] is ITEMS[4]
    assert back[0]["rebuilt"] and back[3] == {"rebuilt": True, **message_to_openai(cleared)}
    # Read again, our summary is a summary (compaction updates it rather than pinning it).
    assert translate(back, _read).messages[0].is_summary


def test_a_usage_attached_for_counting_does_not_force_a_rebuild() -> None:
    view = translate(ITEMS, _read)
    call = view.messages[1]
    with_usage = dataclasses.replace(call, usage=Usage(input_tokens=9))
    assert view.back([view.messages[0], with_usage], _rebuild)[1] is ITEMS[2]


def test_the_compacted_view_stands_in_for_the_prefix_it_replaced() -> None:
    substitution: Substitution[dict[str, Any]] = Substitution()
    full = translate(ITEMS, _read)
    summary = {"role": "user", "content": f"{SUMMARY_HEADER}\n\nsummary"}
    substitution.update(full, [summary, ITEMS[4]])
    later = translate([*ITEMS, {"role": "assistant", "content": "done"}], _read)
    sent = substitution.apply(later)
    assert sent == [ITEMS[0], summary, ITEMS[4], {"role": "assistant", "content": "done"}]
    other = translate([ITEMS[0], {"role": "user", "content": "a new chat"}], _read)
    assert substitution.apply(other) == list(other.items)  # another conversation: as it is


def test_the_last_usage_goes_on_the_reply_to_the_last_list_sent() -> None:
    view = translate(ITEMS, _read)
    memory = UsageMemory(sent=view.messages[:2], usage=Usage(input_tokens=50, output_tokens=5))
    attached = memory.attach(view.messages)
    assert attached[2].usage is None  # a tool result is no reply
    memory.sent = view.messages[:1]
    assert memory.attach(view.messages)[1].usage == memory.usage
    assert memory.attach(view.messages[1:]) == view.messages[1:]  # another list: untouched


def test_items_with_no_messages_go_with_the_item_after_them() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    items = [{"role": "user", "content": "task"}, reasoning, *ITEMS[2:]]
    view = translate(items, lambda i: () if i.get("type") == "reasoning" else _read(i))
    assert len(view.messages) == 4
    back = view.back(view.messages[1:], _rebuild)
    assert back[0] is reasoning and back[1] is items[2]
    assert view.back([view.messages[0], view.messages[3]], _rebuild) == [items[0], items[4]]


def test_a_system_prompt_sharing_an_item_with_the_task_is_the_system_prompt() -> None:
    # pydantic-ai's first request holds the system prompt and the task; after a compaction the
    # summary comes first, and the system prompt is still the system prompt, not a "task".
    def both(item: dict[str, Any]) -> tuple[Message, ...]:
        return tuple(message_from_openai(m) for m in item["pair"])

    first = {"pair": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "t"}]}
    summary = {"pair": [{"role": "user", "content": f"{SUMMARY_HEADER}\n\nearlier"}]}
    for items in ([first], [summary, first]):
        view = translate(items, both)
        assert view.system == "Be brief." and view.lead == 0
        assert [m.text for m in view.messages if not m.is_summary] == ["t"]


def test_an_empty_leading_system_message_is_an_empty_system_prompt_not_none() -> None:
    """Kept as ``""`` (the template renders its empty turn); no system message is None."""
    empty = [{"role": "system", "content": ""}, *ITEMS[1:]]
    assert translate(empty, _read).system == "" and translate(empty, _read).lead == 1
    assert translate(ITEMS[1:], _read).system is None


def test_the_openai_sdk_guard_keeps_an_empty_system_message_and_drops_empty_instructions() -> None:
    import openai

    from ctxbudget.integrations.openai_sdk import CHAT, RESPONSES, _Conversation, guard_openai

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", max_retries=0)
    guarded = guard_openai(client, window=100_000, tokenizer="qwen3")
    user = {"role": "user", "content": "task"}
    cases = [
        (CHAT, {"messages": [{"role": "system", "content": ""}, user]}, ""),
        (CHAT, {"messages": [user]}, None),
        (RESPONSES, {"input": [user], "instructions": ""}, None),  # the SDKs drop it
        (RESPONSES, {"input": [{"role": "system", "content": ""}, user], "instructions": ""}, ""),
        (
            RESPONSES,
            {"input": [{"role": "system", "content": ""}, user], "instructions": "Hi"},
            "Hi",
        ),
    ]
    for api, kwargs, system in cases:
        *_, request = guarded.plan(_Conversation(api), {"model": "m", **kwargs})
        assert request.system == system, kwargs
