"""Ollama's real window behind `ctxbudget serve`: a gateway told a larger ``--window`` than the
context Ollama serves finds the truncation Ollama does not report, adopts the context its
``/api/ps`` lists for the conversation's model, and retries the truncated turn compacted; a
``/api/ps`` that stalls or answers garbage leaves it serving on the library's own guess. And the
start-up line for an Ollama with no model loaded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.gateway.helpers import config, gateway, long_text, loopback, user
from tests.gateway.ollama_upstream import MODEL, OllamaRecord, Ps, ollama

from ctxbudget.cli.serve import _discovered
from ctxbudget.errors import ConfigError
from ctxbudget.gateway.upstream import Upstream

NUM_CTX = 2048
"""The context Ollama serves the model with."""
GUESSED = 16_384
"""The window the user told the gateway (wrong)."""
SYSTEM = {"role": "system", "content": "You are a careful assistant."}
CLIENT_KEY = "Bearer client-own-key-123"


async def _drive(
    client: Any, turns: int, *, stream: bool, history: int = 0
) -> tuple[list[Any], list[dict[str, Any]]]:
    """A conversation of ``turns`` long user messages through the gateway (after ``history``
    earlier ones it never saw: a harness resuming a long session): the responses and each one's
    conversation entry in ``/ctxbudget/status``."""
    messages: list[dict[str, Any]] = [SYSTEM]
    messages += [user(long_text(f"earlier {i}", 80)) for i in range(history)]
    responses, status = [], []
    for turn in range(1, turns + 1):
        messages.append(user(long_text(f"topic {turn}", 80)))
        body = {"model": MODEL, "messages": messages, "stream": stream}
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": CLIENT_KEY}
        )
        assert response.status_code == 200, response.text
        responses.append(response)
        messages.append({"role": "assistant", "content": _text(response, stream)})
        listed = (await client.get("/ctxbudget/status")).json()["conversations"]
        status.append(listed[0])
    return responses, status


def _text(response: Any, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    import orjson

    parts = []
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            event = orjson.loads(line[6:])
            for choice in event.get("choices") or ():
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def _run(
    tmp_path: Path, ps: Ps, *, stream: bool, turns: int = 12, history: int = 0, **settings: Any
) -> tuple[list[Any], list[dict[str, Any]], OllamaRecord]:
    app, record = ollama(NUM_CTX, ps)

    async def go() -> tuple[list[Any], list[dict[str, Any]]]:
        async with gateway(tmp_path, app, window=GUESSED, **settings) as (client, _):
            return await _drive(client, turns, stream=stream, history=history)

    responses, status = asyncio.run(go())
    return responses, status, record


def _first_truncated(record: OllamaRecord) -> int:
    turns = record.turns()
    cut = [i for i, p in enumerate(turns) if p.truncated]
    assert cut, f"the conversation never passed the upstream's context: {turns}"
    return cut[0]


def test_a_truncated_turn_is_retried_compacted_in_the_context_ollama_serves(
    tmp_path: Path,
) -> None:
    responses, status, record = _run(tmp_path, "loaded", stream=False)
    first = _first_truncated(record)
    turns = record.turns()
    # The truncated request was sent again at once, compacted, and that one fit: every reply
    # the client got answers a whole prompt (one more request than turns: the retry).
    assert len(turns) == len(responses) + 1
    retry = turns[first + 1]
    assert not retry.truncated and retry.tokens <= NUM_CTX
    assert [p for p in turns if p.truncated] == [turns[first]]  # nothing later over the context
    assert not any(p.truncated for p in record.prompts[first + 1 :])  # summaries included
    # The window adopted is exactly the context /api/ps lists, asked once, with no client key.
    answered = responses[first]  # the turn that was truncated, answered after its retry
    assert answered.headers["x-ctxbudget-window"] == str(NUM_CTX)
    assert answered.headers["x-ctxbudget-compacted"] == "1"
    assert status[first]["window"] == NUM_CTX
    assert [s["window"] for s in status[:first]] == [GUESSED] * first
    assert all(int(r.headers["x-ctxbudget-window"]) == NUM_CTX for r in responses[first:])
    assert len(record.ps_headers) == 1
    assert "authorization" not in record.ps_headers[0]
    assert record.chat_headers[0]["authorization"] == CLIENT_KEY  # forwarded on the API's path


def test_a_streamed_truncation_adopts_the_context_ollama_serves(tmp_path: Path) -> None:
    # A streamed reply has gone to the client by the time its usage shows the truncation: the
    # window is adopted for the requests that follow, none of which is over it.
    responses, status, record = _run(tmp_path, "loaded", stream=True)
    first = _first_truncated(record)
    turns = record.turns()
    assert len(turns) == len(responses)  # nothing was resent
    assert [p for p in turns if p.truncated] == [turns[first]]
    assert not any(p.truncated for p in record.prompts[first + 1 :])
    assert status[first]["window"] == NUM_CTX
    assert all(int(r.headers["x-ctxbudget-window"]) == NUM_CTX for r in responses[first + 1 :])
    assert len(record.ps_headers) == 1


def test_the_upstream_key_goes_to_api_ps_only_when_configured(tmp_path: Path) -> None:
    secret = "sk-proxy-in-front-of-ollama"
    _, status, record = _run(tmp_path, "loaded", stream=False, upstream_key=secret)
    _first_truncated(record)
    assert [h.get("authorization") for h in record.ps_headers] == [f"Bearer {secret}"]
    assert status[-1]["window"] == NUM_CTX


@pytest.mark.parametrize("ps", ["stall", "garbage"])
def test_an_api_ps_that_stalls_or_answers_garbage_leaves_the_gateway_serving(
    tmp_path: Path, ps: Ps
) -> None:
    # Without the served context, the library's own reading of the truncation is adopted: a
    # message drop shows only that the window holds the prompt kept.
    responses, status, record = _run(tmp_path, ps, stream=False, request_timeout=1.0)
    first = _first_truncated(record)
    turns = record.turns()
    assert len(record.ps_headers) == 1  # asked, once
    assert all(r.status_code == 200 for r in responses)
    assert status[first]["window"] == turns[first].kept < NUM_CTX
    assert not turns[first + 1].truncated  # the retry fit that guess
    assert [p for p in turns if p.truncated] == [turns[first]]


def test_a_conversation_already_over_the_context_at_its_first_request_is_caught(
    tmp_path: Path,
) -> None:
    # Its first request through the gateway is truncated already (a harness's long history, a
    # large first request), so no earlier report matched the count: the usage trust alone
    # passes the gap over, and every request was truncated. /api/ps shows it.
    responses, status, record = _run(tmp_path, "loaded", stream=False, turns=4, history=6)
    turns = record.turns()
    assert turns[0].truncated and turns[0].tokens > NUM_CTX
    assert [p.truncated for p in record.prompts[1:]] == [False] * (len(record.prompts) - 1)
    assert len(turns) == len(responses) + 1  # the first turn, retried compacted
    assert all(int(r.headers["x-ctxbudget-window"]) == NUM_CTX for r in responses)
    assert status[0]["window"] == NUM_CTX
    # The summary written for that compaction was held to the context just adopted too.
    assert any(p.summary for p in record.prompts)
    assert max(p.tokens for p in record.prompts if p.summary) <= NUM_CTX
    assert len(record.ps_headers) == 1


def test_a_server_that_states_no_window_is_asked_once_and_the_window_kept(
    tmp_path: Path,
) -> None:
    # The same conversation in front of a server whose /api/ps says nothing usable: its short
    # reports are passed over (they may be no whole counts), and it is not asked again.
    responses, status, record = _run(tmp_path, "garbage", stream=False, turns=4, history=6)
    assert len(record.ps_headers) == 1
    assert all(r.status_code == 200 for r in responses)
    assert [s["window"] for s in status] == [GUESSED] * len(responses)


def test_served_windows_never_raise_and_never_block_the_event_loop(tmp_path: Path) -> None:
    from ctxbudget.gateway.discover import ServedWindows  # new: imported here, not at the top

    app, record = ollama(NUM_CTX)

    async def go() -> tuple[Any, ...]:
        import httpx

        upstream = Upstream(config(tmp_path, window=GUESSED), httpx.ASGITransport(app=app))
        try:
            served = ServedWindows(upstream)
            on_loop = served.served_window(MODEL)  # would deadlock if it waited here
            found = await asyncio.to_thread(served.served_window, MODEL)
            other = await asyncio.to_thread(served.served_window, "llama3.2")
            tagged = served.reader(f"{MODEL}:latest")
            assert tagged is not None
            return on_loop, found, other, served.reader(None), await asyncio.to_thread(tagged)
        finally:
            await upstream.aclose()

    on_loop, found, other, no_model, tagged = asyncio.run(go())
    assert (on_loop, found, other, no_model, tagged) == (None, NUM_CTX, None, None, NUM_CTX)
    assert len(record.ps_headers) == 3


def test_an_ollama_with_no_model_loaded_is_named_at_start_up(tmp_path: Path) -> None:
    app, record = ollama(NUM_CTX, "idle")
    with loopback(app) as url, pytest.raises(ConfigError) as raised:
        _discovered(config(tmp_path, upstream=f"{url}/v1"))
    message = str(raised.value)
    assert "Ollama with no model loaded" in message
    assert "--window" in message and "ollama run" in message
    assert "\n" not in message
    assert record.ps_headers  # it was asked
