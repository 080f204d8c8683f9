"""What a continuing step costs the event loop in fixed work (issue 27's latency): the blocking
work before the send (the shared store's refresh, the session's decision, the count of what is
sent) runs in one worker-thread hop, not three, and a reply whose report matches that count is
checked for truncation without a hop. Pinned by spies, not by timing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.gateway.helpers import gateway, long_text, scripted, user

from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.conversations import Conversations
from ctxbudget.providers.mock import MockProvider


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}, user("task")]
    for i in range(n):
        out += [{"role": "assistant", "content": f"step {i}"}, user(f"result {i}")]
    return out


def _spy_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions handed to ``asyncio.to_thread``, by name, as they are handed over."""
    hops: list[str] = []
    plain = asyncio.to_thread

    async def spying(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__qualname__", repr(func)))
        return await plain(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spying)
    return hops


def test_a_continuing_step_makes_one_hop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hops = _spy_hops(monkeypatch)
    refreshed: list[bool] = []  # True: on a worker thread
    refresh = getattr(Conversations, "refresh", None)

    def spying_refresh(self: Conversations, conversation: Any) -> None:
        refreshed.append(threading.current_thread() is not threading.main_thread())
        assert refresh is not None
        refresh(self, conversation)

    monkeypatch.setattr(Conversations, "refresh", spying_refresh, raising=False)
    counted: list[int] = []
    count = RequestCounter.count

    def spying_count(self: RequestCounter, request: Any) -> Any:
        counted.append(id(request))
        return count(self, request)

    monkeypatch.setattr(RequestCounter, "count", spying_count)
    upstream, record = scripted(MockProvider("chat", window=100_000))

    async def go() -> list[str]:
        async with gateway(tmp_path, upstream, window=100_000) as (client, gw):
            history = _history(4)
            first = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": history}
            )
            assert first.status_code == 200
            await gw._conversations.settled()
            hops.clear()
            refreshed.clear()
            step = [*history, {"role": "assistant", "content": "ok"}, user("next")]
            second = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": step}
            )
            assert second.status_code == 200
            assert (
                second.headers["x-ctxbudget-conversation"]
                == (first.headers["x-ctxbudget-conversation"])
            )
            on_path = [h for h in hops if "after_reply" not in h]  # the save: after the reply
            await gw._conversations.settled()
            return on_path

    on_path = asyncio.run(go())
    # Before: the store's refresh, the decision, the count of what is sent and the truncation
    # check, each its own hop (4). Now the first three are one, and the check of a report
    # that matches the count needs none.
    assert len(on_path) == 1, on_path
    assert on_path[0].endswith("ready")
    assert refreshed == [True]  # still refreshed once a step, off the event loop
    assert len(record.chat_bodies()) == 2


def test_the_count_made_before_the_send_is_the_forwarded_requests(tmp_path: Path) -> None:
    # The header says the count of what was forwarded: the count made in the hop before the
    # send is of that very request (a fresh counter agrees).
    upstream, record = scripted(MockProvider("chat", window=100_000))

    async def go() -> list[int]:
        async with gateway(tmp_path, upstream, window=100_000) as (client, _):
            history = _history(3)
            tokens = []
            for i in range(3):
                history = [*history, {"role": "assistant", "content": "ok"}, user(f"more {i}")]
                reply = await client.post(
                    "/v1/chat/completions", json={"model": "mock", "messages": history}
                )
                assert reply.status_code == 200
                tokens.append(int(reply.headers["x-ctxbudget-tokens"]))
            return tokens

    tokens = asyncio.run(go())
    from ctxbudget.messages.openai import request_from_openai

    fresh = [
        RequestCounter("qwen3").count(request_from_openai(body)).total
        for body in record.chat_bodies()
    ]
    assert tokens == fresh


def test_a_step_that_forwards_a_compacted_view_makes_one_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a compaction every step forwards the view; the client's own list is counted too
    # (the ``received`` tokens), in the hop before the send, not in a hop of its own after.
    import ctxbudget.gateway.app as app_module
    from ctxbudget.messages.openai import request_from_openai

    hops = _spy_hops(monkeypatch)
    logged: list[Any] = []
    log_request = app_module.log_request

    def spying_log(entry: Any, **kwargs: Any) -> None:
        logged.append(entry)
        log_request(entry, **kwargs)

    monkeypatch.setattr(app_module, "log_request", spying_log)
    upstream, _ = scripted(MockProvider("chat", window=2048))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]

    async def go() -> tuple[Any, list[str]]:
        async with gateway(tmp_path, upstream, window=2048) as (client, gw):
            reply = None
            for turn in range(12):
                messages.append(user(long_text(f"topic {turn}", 30)))
                if gw._conversations is not None:
                    await gw._conversations.settled()  # the last step's save, not this one's
                hops.clear()
                reply = await client.post(
                    "/v1/chat/completions", json={"model": "mock", "messages": messages}
                )
                assert reply.status_code == 200, reply.text
                messages.append(reply.json()["choices"][0]["message"])
            assert gw.summary_calls >= 1
            await gw._conversations.settled()
            return reply, [h for h in hops if "after_reply" not in h]

    last, on_path = asyncio.run(go())
    assert last.headers["x-ctxbudget-compacted"] == "1"
    assert len(on_path) == 1, on_path  # before: `ready`, then the client's list counted
    client_list = request_from_openai({"model": "mock", "messages": messages[:-1]})
    assert logged[-1].tokens_received == RequestCounter("qwen3").count(client_list).total
    assert logged[-1].tokens_forwarded == int(last.headers["x-ctxbudget-tokens"])
