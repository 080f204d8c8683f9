"""The per-step path does O(new items) of Python work on a resent conversation (issue 27):
the body's depth check walks only items it has not measured before, and an unchanged item is
read as the very same `Message` objects request after request. Pinned here: what is skipped,
and that skipping never lets a too-deep body through."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.gateway.helpers import gateway, scripted, user

import ctxbudget.gateway.app as app_module
import ctxbudget.gateway.depth as depth_module
import ctxbudget.messages.jsondepth as jsondepth
from ctxbudget.compaction.handoff import SUMMARY_HEADER
from ctxbudget.gateway.api import ItemMemo
from ctxbudget.gateway.app import Gateway, _Refused
from ctxbudget.gateway.chat import ChatCompletions
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.conversations import ChainMemo, item_chain
from ctxbudget.gateway.depth import DepthMemo
from ctxbudget.integrations._view import SOURCE_KEY, translate
from ctxbudget.messages.jsondepth import MAX_JSON_DEPTH, json_depth
from ctxbudget.messages.model import Message, what_changed
from ctxbudget.messages.openai import message_from_openai
from ctxbudget.providers.mock import MockProvider


def _nested(depth: int) -> bytes:
    """JSON text of ``depth`` nested lists (as text: orjson writes at most 255 levels)."""
    return b"[" * depth + b'"leaf"' + b"]" * depth


def _deep_body(messages: list[Any], **extra: bytes) -> bytes:
    """A chat body; an item given as bytes is put in as that JSON text."""
    items = [m if isinstance(m, bytes) else orjson.dumps(m) for m in messages]
    fields = b"".join(b',"' + k.encode() + b'":' + v for k, v in extra.items())
    return b'{"model":"m","messages":[' + b",".join(items) + b"]" + fields + b"}"


def _deep_message(depth: int, like: dict[str, Any] | None = None) -> bytes:
    """A message whose content is ``depth`` nested lists (its other fields those of ``like``)."""
    fields = {k: v for k, v in (like or {"role": "user"}).items() if k != "content"}
    return orjson.dumps(fields)[:-1] + b',"content":' + _nested(depth) + b"}"


def _conversation(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "ls", "arguments": '{"path": "."}'},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"file{i}.py"})
    return out


def _body(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, **extra})


def _gateway(tmp_path: Path) -> Gateway:
    config = GatewayConfig(upstream="http://upstream.test", window=100_000, state=tmp_path / "s")
    return Gateway(config)


def _nodes(value: object) -> int:
    """Lists and objects in ``value`` (what a walk visits)."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            continue
        count += 1
    return count


def test_a_resent_conversation_walks_only_its_new_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[int] = []

    def counting(value: object, limit: int = MAX_JSON_DEPTH) -> int:
        walked.append(_nodes(value))
        return json_depth(value, limit)

    # Wherever the walker is looked up from (the gateway imported it by name before).
    monkeypatch.setattr(jsondepth, "json_depth", counting)
    monkeypatch.setattr(depth_module, "json_depth", counting)
    monkeypatch.setattr(app_module, "json_depth", counting, raising=False)
    gw = _gateway(tmp_path)
    history = _conversation(40)
    first = gw.parse_json(_body(history))
    assert sum(walked) >= sum(_nodes(m) for m in first["messages"])  # every item measured
    walked.clear()
    step = [
        {"role": "assistant", "content": "next", "tool_calls": [{"id": "n", "type": "function"}]},
        {"role": "tool", "tool_call_id": "n", "content": "ok"},
    ]
    before = gw.depths.walked
    gw.parse_json(_body([*history, *step]))  # the same history, freshly parsed, and one step
    assert 0 < sum(walked) <= sum(_nodes(m) for m in step)
    assert gw.depths.walked - before == len(step)


def test_a_deep_item_new_or_changed_is_refused(tmp_path: Path) -> None:
    gw = _gateway(tmp_path)
    history = _conversation(10)
    gw.parse_json(_body(history))  # its items remembered shallow
    # An item holding ``MAX_JSON_DEPTH`` lists is past the cap in the body (body, messages
    # list, item object, then the lists).
    cap = MAX_JSON_DEPTH
    new = [*history, _deep_message(cap)]
    # An item at a position seen before, changed (its role and other fields the same).
    changed = [*history[:3], _deep_message(cap, history[3]), *history[4:]]
    # The same, in a list that continues the one remembered (two more items after it).
    more = [user("a"), user("b")]
    changed_then_more = [*changed, *more]
    # Deeper than orjson writes (255): walked, not keyed.
    beyond_writer = [*history, _deep_message(1000)]
    gw.parse_json(_body([*history, *more]))  # remembered too
    for messages in (new, changed, changed_then_more, beyond_writer):
        for _ in range(2):  # and again: a too-deep value is never remembered
            with pytest.raises(_Refused, match="deeper than 128"):
                gw.parse_json(_deep_body(messages))
    # Deeper than orjson reads: refused by the parser, in bounded time, with no recursion.
    with pytest.raises(_Refused, match="deeper than 128"):
        gw.parse_json(_deep_body([*history, _nested(10_000)]))
    # Deep outside the lists, and in another top-level list: the same cap.
    with pytest.raises(_Refused, match="deeper than 128"):
        gw.parse_json(_deep_body(history, extra=_nested(cap)))
    with pytest.raises(_Refused, match="deeper than 128"):
        gw.parse_json(_deep_body(history, tools=b"[" + _nested(cap - 1) + b"]"))
    # Exactly at the cap is accepted, known or not.
    for _ in range(2):
        assert gw.parse_json(_deep_body([*history, _deep_message(cap - 3)]))
        assert gw.parse_json(_deep_body(history, tools=b"[" + _nested(cap - 2) + b"]"))


def test_remembered_depths_are_exact() -> None:
    memo = DepthMemo()
    values: list[Any] = [
        {"a": [1, {"b": [[]]}], "c": {}},
        {"items": [{"x": 1}, [1, [2, [3]]], "s", 4, None], "k": []},
        {"items": []},
        {},
        [1, [2]],
        {"deep": [orjson.loads(_nested(120))], "n": 1},
    ]
    for _ in range(2):  # measured, then remembered
        for value in values:
            for limit in (3, 5, MAX_JSON_DEPTH):
                got, _ = memo.body_depth(orjson.loads(orjson.dumps(value)), limit)
                want = json_depth(value, limit)
                assert (got > limit) == (want > limit)
                if want <= limit:
                    assert got == want


def test_an_unchanged_item_is_the_same_message_object_every_request() -> None:
    chat = ChatCompletions()
    messages = [*_conversation(20), user("And now?")]
    raw = _body(messages)
    first = chat.parse(orjson.loads(raw))
    second = chat.parse(orjson.loads(_body([*messages, user("more")])))
    n = len(first.request.messages)
    assert all(
        a is b for a, b in zip(first.request.messages, second.request.messages[:n], strict=True)
    )
    # So the counter's comparison of the two is its identity fast path, and exact.
    change = what_changed(first.request, second.request)
    assert change.kept == n
    # Each message still says which item it came from.
    for i, group in enumerate(second.translated.per_item):
        assert all(m.meta[SOURCE_KEY] == i for m in group)


def test_an_item_resent_at_another_index_says_its_new_index() -> None:
    chat = ChatCompletions()
    a, b = user("first"), user("second")
    chat.parse({"messages": [{"role": "system", "content": "s"}, a, b]})
    moved = chat.parse({"messages": [{"role": "system", "content": "s"}, b, a]})
    assert [m.text for m in moved.request.messages] == ["second", "first"]
    assert [m.meta[SOURCE_KEY] for m in moved.request.messages] == [1, 2]
    # The way back forwards the client's items in their new places.
    assert moved.translated.back(moved.request.messages, lambda o, g: {"rebuilt": True}) == [b, a]


def test_conversation_ids_do_not_change_with_the_keys_reused(tmp_path: Path) -> None:
    gw = _gateway(tmp_path)
    messages = _conversation(5)
    body, keys = gw.read_json(_body(messages))
    assert keys
    assert item_chain("chat", None, body["messages"], keys) == item_chain(
        "chat", None, body["messages"]
    )


def test_a_conversation_through_the_gateway_reuses_its_messages(tmp_path: Path) -> None:
    # End to end: the second step's messages are the first step's objects (the session's
    # `observe` and the counter compare them by identity) and the replies are unchanged.
    upstream, record = scripted(MockProvider("chat", window=100_000))

    async def go() -> list[Any]:
        async with gateway(tmp_path, upstream, window=100_000) as (client, gw):
            history = _conversation(5)
            first = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": history}
            )
            assert first.status_code == 200
            (conversation,) = gw._conversations._live.values()
            sent = conversation.memory.sent
            more = [*history, {"role": "assistant", "content": "ok"}, user("next")]
            second = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": more}
            )
            assert second.status_code == 200
            assert (
                second.headers["x-ctxbudget-conversation"]
                == first.headers["x-ctxbudget-conversation"]
            )
            return [sent, conversation.memory.sent]

    before, after = asyncio.run(go())
    assert len(after) > len(before)
    assert all(x is y for x, y in zip(before, after[: len(before)], strict=True))
    assert record.chat_bodies()[1]["messages"][: len(_conversation(5))] == _conversation(5)


def test_a_continued_list_hashes_only_its_new_items(tmp_path: Path) -> None:
    gw = _gateway(tmp_path)
    chains = ChainMemo()

    def both(messages: list[dict[str, Any]], head: Any = None) -> tuple[list[bytes], int]:
        body, keys = gw.read_json(_body(messages))
        before = chains.hashed
        got = chains.chain("chat", head, body["messages"], keys)
        # The very digests `item_chain` makes: stored conversations keep their ids.
        assert got == item_chain("chat", head, body["messages"])
        return got, chains.hashed - before

    history = _conversation(30)
    step = [user("one"), user("two")]
    assert both(history)[1] == len(history)
    assert both([*history, *step])[1] == 2  # continued: only the step hashed
    # An earlier item changed: nothing taken over (the whole list hashed), though its end is
    # the end of the list remembered.
    edited = [*history[:5], user("edited"), *history[6:], *step]
    assert both(edited)[1] == len(edited)
    # Another head (a Responses ``instructions``, say): not the same conversation's digests.
    assert both([*history, *step, user("three")], head="be terse")[1] == len(history) + 3


def test_a_continued_list_reads_only_its_new_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw, chat = _gateway(tmp_path), ChatCompletions()
    looked_up: list[int] = []
    read_all = ItemMemo.read_all

    def counting(self: ItemMemo, items: Any, *args: Any, **kwargs: Any) -> Any:
        if self is chat.memo:  # not the fresh reader's
            looked_up.append(len(items))
        return read_all(self, items, *args, **kwargs)

    monkeypatch.setattr(ItemMemo, "read_all", counting)

    def parse(messages: list[dict[str, Any]]) -> Any:
        body, keys = gw.read_json(_body(messages))
        parsed = chat.parse(body, keys)
        # What a fresh reader makes of the same body, whatever was taken over.
        fresh = ChatCompletions().parse(orjson.loads(_body(messages)))
        assert parsed.request == fresh.request
        assert parsed.translated.per_item == fresh.translated.per_item
        assert (parsed.translated.system, parsed.translated.lead) == (
            fresh.translated.system,
            fresh.translated.lead,
        )
        assert parsed.translated.items == tuple(body["messages"])  # the client's own items
        return parsed

    history = [{"role": "system", "content": "Be brief."}, *_conversation(20)[1:]]
    first = parse(history)
    step = [{"role": "assistant", "content": "done"}, user("thanks")]
    looked_up.clear()
    second = parse([*history, *step])
    assert looked_up == [2]  # only the step's items looked up or read
    n = len(first.request.messages)
    assert all(
        a is b for a, b in zip(first.request.messages, second.request.messages[:n], strict=True)
    )
    # An earlier item edited: nothing taken over, every item looked up again.
    edited = [*history[:4], user("edited"), *history[5:], *step]
    looked_up.clear()
    parse(edited)
    assert looked_up == [len(edited)]


def test_translate_goes_on_from_a_resume_only_once_the_conversation_began() -> None:
    summary = f"{SUMMARY_HEADER}\nwhat happened"
    lists: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, user("task")],
        [{"role": "system", "content": "a"}, user(summary), {"role": "system", "content": "c"}],
        [user(summary), user("task"), {"role": "system", "content": "mid"}, user("more")],
        [{"role": "system", "content": "only"}],
    ]

    def read(item: dict[str, Any]) -> tuple[Message, ...]:
        return (message_from_openai(item),)

    for items in lists:
        whole = translate([*items, user("next")], read)
        for cut in range(1, len(items) + 1):
            part = translate(items[:cut], read)
            resumed = translate([*items, user("next")], read, resume=part.resume())
            assert resumed.per_item == whole.per_item
            assert (resumed.system, resumed.lead) == (whole.system, whole.lead)
            assert resumed.messages == whole.messages
