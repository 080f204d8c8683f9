"""The Chat Completions gateway in process: counting, compaction far past a small window,
streaming and its usage chunk, conversation identity, restart, floor, passthrough, keys."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.gateway.helpers import gateway, long_text, scripted, user

from ctxbudget.compaction.archive import load_archive
from ctxbudget.counting import RequestCounter
from ctxbudget.messages.openai import request_from_openai
from ctxbudget.providers.mock import MockProvider

SYSTEM = {"role": "system", "content": "You are a careful assistant."}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _drive(
    client: Any, turns: int, *, tag: str = "t", stream: bool = False, words: int = 30
) -> tuple[list[dict[str, Any]], list[Any]]:
    """A conversation of ``turns`` long user messages; returns the list and the responses."""
    messages: list[dict[str, Any]] = [SYSTEM]
    responses = []
    for turn in range(1, turns + 1):
        messages.append(user(long_text(f"{tag} topic {turn}", words)))
        body = {"model": "mock", "messages": messages, "stream": stream}
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        responses.append(response)
        reply = _streamed_message(response.text) if stream else response.json()["choices"][0]
        messages.append(reply["message"] if not stream else reply)
    return messages, responses


def _events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(orjson.loads(line[6:]))
    return out


def _streamed_message(text: str) -> dict[str, Any]:
    content = "".join(
        e["choices"][0]["delta"].get("content") or "" for e in _events(text) if e.get("choices")
    )
    return {"role": "assistant", "content": content}


def test_count_equals_what_the_library_counts(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=32_768))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    body = {
        "model": "mock",
        "messages": [SYSTEM, user("What is in README.md? Please check.")],
        "tools": tools,
    }

    async def go() -> Any:
        async with gateway(tmp_path, app, window=32_768) as (client, _):
            return await client.post("/v1/chat/completions", json=body)

    response = run(go())
    assert response.status_code == 200
    counted = RequestCounter("qwen3").count(request_from_openai(body)).total
    assert int(response.headers["x-ctxbudget-tokens"]) == counted
    # The upstream (the mock counts as llama.cpp renders qwen3) reports the same prompt.
    assert response.json()["usage"]["prompt_tokens"] == counted
    assert response.headers["x-ctxbudget-window"] == "32768"
    assert response.headers["x-ctxbudget-compacted"] == "0"
    # Nothing changed: the body went upstream as the client sent it.
    assert upstream.chat_bodies()[0] == body


@pytest.mark.parametrize("stream", [False, True])
def test_far_past_a_small_window_no_overflow_reaches_the_client(
    tmp_path: Path, stream: bool
) -> None:
    provider = MockProvider("chat", window=2048)
    app, upstream = scripted(provider)

    async def go() -> tuple[Any, Any]:
        async with gateway(tmp_path, app, window=2048) as (client, gw):
            _, responses = await _drive(client, 30, stream=stream)
            return responses, gw.summary_calls

    responses, summaries = run(go())
    sent = [int(r.headers["x-ctxbudget-tokens"]) for r in responses]
    # The client's list grew to ~30 x 250 tokens; what was forwarded stayed in the window.
    assert max(sent) < 2048
    assert summaries >= 2
    assert any(r.headers["x-ctxbudget-compacted"] == "1" for r in responses)
    assert not any("maximum context length" in r.text for r in responses)
    assert len(upstream.chat_bodies()) == 30 + summaries


def test_an_overflow_the_upstream_states_is_recovered(tmp_path: Path) -> None:
    # The gateway believes 16K; the server has 2K and says so in vLLM's words.
    provider = MockProvider("chat", window=2048)
    app, upstream = scripted(provider)

    async def go() -> tuple[list[Any], Any]:
        async with gateway(tmp_path, app, window=16_384) as (client, _):
            _, responses = await _drive(client, 14)
            return responses, await client.get("/ctxbudget/status")

    responses, status = run(go())
    conversation = status.json()["conversations"][0]
    assert conversation["overflows"] >= 1  # the upstream refused once...
    assert conversation["window"] == 2048  # ...and its stated window was adopted
    assert all(r.status_code == 200 for r in responses)  # ...and the client never saw it
    refused = [b for b in upstream.chat_bodies() if b and b.get("model") == "mock"]
    assert len(refused) > 14  # the refused request was compacted and sent again


def test_include_usage_is_added_and_its_chunk_stripped(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=8192))

    async def go() -> tuple[Any, Any, Any]:
        async with gateway(tmp_path, app, window=8192) as (client, gw):
            body = {"model": "mock", "messages": [user("hello")], "stream": True}
            plain = await client.post("/v1/chat/completions", json=body)
            asked = {**body, "messages": [user("hi there")]}
            asked["stream_options"] = {"include_usage": True}
            with_usage = await client.post("/v1/chat/completions", json=asked)
            conversations = await gw.conversations()
            return plain, with_usage, conversations.status()

    plain, with_usage, status = run(go())
    assert upstream.chat_bodies()[0]["stream_options"] == {"include_usage": True}
    assert not any("usage" in e for e in _events(plain.text))
    assert plain.text.rstrip().endswith("data: [DONE]")
    assert any(e.get("usage") for e in _events(with_usage.text))
    # The stripped chunk's usage was recorded: the session learned the reply.
    assert all(c["requests"] == 1 for c in status)


def test_interleaved_conversations_never_mix(tmp_path: Path) -> None:
    provider = MockProvider("chat", window=2048)
    app, upstream = scripted(provider)
    count = 50

    async def one(client: Any, k: int, lists: dict[int, list[Any]], turn: int) -> str:
        messages = lists.setdefault(k, [SYSTEM])
        messages.append(user(long_text(f"conv{k}x topic {turn}", 60)))
        response = await client.post(
            "/v1/chat/completions", json={"model": "mock", "messages": messages}
        )
        assert response.status_code == 200, response.text
        messages.append(response.json()["choices"][0]["message"])
        return str(response.headers["x-ctxbudget-conversation"])

    async def go() -> dict[int, set[str]]:
        ids: dict[int, set[str]] = {}
        lists: dict[int, list[Any]] = {}
        async with gateway(tmp_path, app, window=2048) as (client, _):
            for turn in range(1, 8):
                got = await asyncio.gather(*(one(client, k, lists, turn) for k in range(count)))
                for k, cid in enumerate(got):
                    ids.setdefault(k, set()).add(cid)
        return ids

    ids = run(go())
    assert all(len(v) == 1 for v in ids.values())  # each kept one id
    assert len({next(iter(v)) for v in ids.values()}) == count  # and no two shared one
    for body in upstream.chat_bodies():
        text = orjson.dumps(body["messages"]).decode()
        owners = {k for k in range(count) if f"conv{k}x " in text}
        assert len(owners) == 1, f"a request mixed conversations {sorted(owners)}"


def test_an_edited_earlier_message_starts_a_new_conversation(tmp_path: Path) -> None:
    app, _ = scripted(MockProvider("chat", window=8192))

    async def go() -> tuple[str, str, str]:
        async with gateway(tmp_path, app, window=8192) as (client, _):
            messages, responses = await _drive(client, 3, words=10)
            first = responses[-1].headers["x-ctxbudget-conversation"]
            more = [*messages, user("and one more")]
            again = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": more}
            )
            edited = [*messages]
            edited[1] = user("an edited first question")
            other = await client.post(
                "/v1/chat/completions", json={"model": "mock", "messages": edited}
            )
            return (
                first,
                again.headers["x-ctxbudget-conversation"],
                other.headers["x-ctxbudget-conversation"],
            )

    first, continued, edited = run(go())
    assert continued == first
    assert edited != first


def test_a_restart_reuses_the_stored_compaction(tmp_path: Path) -> None:
    provider = MockProvider("chat", window=2048)
    app, upstream = scripted(provider)

    async def before() -> tuple[list[Any], int, str]:
        async with gateway(tmp_path, app, window=2048) as (client, gw):
            # Several compactions: the latest one compacts a list that already held the view of
            # the one before; its prefix must still be the client's own list.
            messages, responses = await _drive(client, 16)
            assert gw.summary_calls >= 2
            return messages, gw.summary_calls, responses[-1].headers["x-ctxbudget-conversation"]

    messages, _, conversation = run(before())

    async def after() -> tuple[Any, int]:
        async with gateway(tmp_path, app, window=2048) as (client, gw):
            body = {"model": "mock", "messages": [*messages, user("a short question")]}
            response = await client.post("/v1/chat/completions", json=body)
            return response, gw.summary_calls

    response, summaries = run(after())
    assert response.status_code == 200
    assert summaries == 0  # no second summary for the stored prefix
    assert response.headers["x-ctxbudget-compacted"] == "1"
    assert response.headers["x-ctxbudget-conversation"] == conversation
    assert int(response.headers["x-ctxbudget-tokens"]) < 2048
    # The state and the archive are private to the user, and the archive reads back.
    state = tmp_path / "state.sqlite3"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600
    archives = list((tmp_path / "archives").glob("*.jsonl"))
    assert len(archives) == 1
    assert stat.S_IMODE(os.stat(archives[0]).st_mode) == 0o600
    loaded = load_archive(archives[0])
    assert loaded.compactions
    assert upstream.provider.summaries >= 1


def test_the_floor_answers_in_the_api_shape_with_the_numbers(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=1024))
    system = {"role": "system", "content": long_text("rules", 900)}

    async def go() -> Any:
        async with gateway(tmp_path, app, window=1024) as (client, _):
            body = {"model": "mock", "messages": [system, user("hi")]}
            return await client.post("/v1/chat/completions", json=body)

    response = run(go())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "1,024" in error["message"] or "1024" in error["message"]
    assert upstream.chat_bodies() == []  # nothing the server would truncate was sent


def test_other_paths_pass_through_unchanged(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=4096))

    async def go() -> Any:
        async with gateway(tmp_path, app, window=4096) as (client, _):
            return await client.get("/v1/models?x=1", headers={"x-custom": "kept"})

    response = run(go())
    assert response.status_code == 200
    assert response.json()["data"][0]["max_model_len"] == 4096
    path, headers, _ = upstream.requests[0]
    assert path == "/v1/models"
    assert headers["x-custom"] == "kept"


def test_client_key_required_and_upstream_key_never_leaks(tmp_path: Path) -> None:
    app, upstream = scripted(MockProvider("chat", window=4096))
    secret = "sk-upstream-secret-123456"

    async def go() -> tuple[Any, Any, Any, Any]:
        async with gateway(
            tmp_path, app, window=4096, client_key="client-key", upstream_key=secret
        ) as (client, gw):
            body = {"model": "mock", "messages": [user("hello")]}
            missing = await client.post("/v1/chat/completions", json=body)
            wrong = await client.post(
                "/v1/chat/completions", json=body, headers={"authorization": "Bearer nope"}
            )
            good = await client.post(
                "/v1/chat/completions", json=body, headers={"authorization": "Bearer client-key"}
            )
            status = await client.get("/ctxbudget/status", headers={"x-api-key": "client-key"})
            assert secret not in repr(gw.config)
            return missing, wrong, good, status

    missing, wrong, good, status = run(go())
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    assert wrong.status_code == 401
    assert good.status_code == 200
    assert status.status_code == 200
    sent_auth = [h.get("authorization") for _, h, _ in upstream.requests]
    assert sent_auth == [f"Bearer {secret}"]  # the client's key never went upstream
    assert secret not in good.text and secret not in status.text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_the_request_after_a_compaction_reuses_it(tmp_path: Path) -> None:
    # A compaction of a list that already held an earlier compaction's view replaces the
    # client's own prefix, so the next request (the same list, one reply and message longer)
    # is sent with the view: it is not summarised a second time.
    app, _ = scripted(MockProvider("chat", window=2048))

    async def go() -> list[int]:
        async with gateway(tmp_path, app, window=2048) as (client, gw):
            messages: list[Any] = [SYSTEM]
            calls = []
            for turn in range(1, 25):
                messages.append(user(long_text(f"t topic {turn}", 30)))
                response = await client.post(
                    "/v1/chat/completions", json={"model": "mock", "messages": messages}
                )
                messages.append(response.json()["choices"][0]["message"])
                calls.append(gw.summary_calls)
            return calls

    calls = run(go())
    added = [b - a for a, b in zip([0, *calls], calls, strict=False)]
    assert sum(added) >= 3
    back_to_back = [i for i in range(1, len(added)) if added[i] and added[i - 1]]
    assert back_to_back == [], f"summarised again right after a compaction at turns {added}"


class _NoSummaries(MockProvider):
    def summarize(self, request: Any) -> str:
        from ctxbudget.errors import ProviderError

        raise ProviderError("the summary model is down")


def test_a_failed_summary_call_falls_back_to_truncation(tmp_path: Path) -> None:
    app, _ = scripted(_NoSummaries("chat", window=2048))

    async def go() -> tuple[list[Any], Any]:
        async with gateway(tmp_path, app, window=2048) as (client, gw):
            _, responses = await _drive(client, 16)
            conversation = next(iter((await gw.conversations())._live.values()))
            return responses, conversation.session.report()

    responses, report = run(go())
    assert all(r.status_code == 200 for r in responses)
    assert report["compactions"]
    assert {c["strategy"] for c in report["compactions"]} == {"truncate"}
