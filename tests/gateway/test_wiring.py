"""The gateway's parts wired together: all three APIs by default, Anthropic's streamed usage
merged, ``count_tokens``, the reply-limit clamp, the client's query string, metrics, the ops
routes and one log line per request. Against a recording upstream that speaks each API
(`tests.gateway.recording_upstream`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from starlette.testclient import TestClient
from tests.gateway.recording_upstream import TOKENIZER, WINDOW, Upstream

from ctxbudget.counting import RequestCounter
from ctxbudget.gateway.app import DEFAULT_APIS, Gateway, create_app
from ctxbudget.gateway.config import GatewayConfig
from ctxbudget.gateway.conversations import Conversation
from ctxbudget.gateway.logs import GATEWAY_LOGGER
from ctxbudget.gateway.messages_api import MESSAGES

CLAUDE_CODE_MAX_TOKENS = 128_000
"""What Claude Code asks for on every request."""


def _config(tmp_path: Path, **changes: Any) -> GatewayConfig:
    settings: dict[str, Any] = {
        "upstream": "http://upstream.invalid/v1",
        "window": WINDOW,
        "tokenizer": TOKENIZER,
        "state": tmp_path / "state.sqlite3",
        "archive_dir": tmp_path / "archives",
    }
    return GatewayConfig(**{**settings, **changes})


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


def _client(tmp_path: Path, upstream: Upstream, **changes: Any) -> TestClient:
    app = create_app(
        _config(tmp_path, **changes), transport=httpx.ASGITransport(app=upstream.app())
    )
    return TestClient(app)


def _gateway(client: TestClient) -> Gateway:
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    assert isinstance(gateway, Gateway)
    return gateway


def _conversation(client: TestClient, conversation_id: str) -> Conversation:
    conversations = _gateway(client)._conversations
    assert conversations is not None
    (found,) = (c for c in conversations._live.values() if c.id == conversation_id)
    return found


def _claude_body(text: str = "Fix the failing test.", **changes: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1_000,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [{"role": "user", "content": text}],
        **changes,
    }


# -- which APIs ------------------------------------------------------------------------------------


def test_all_three_apis_are_guarded_by_default(tmp_path: Path, upstream: Upstream) -> None:
    assert {api.name for api in DEFAULT_APIS} == {"chat", "responses", "messages"}
    bodies = {
        "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"model": "m", "input": "hi"},
        "/v1/messages": _claude_body("hi"),
    }
    with _client(tmp_path, upstream) as client:
        for path, body in bodies.items():
            reply = client.post(path, json=body)
            assert reply.status_code == 200, reply.text
            assert "x-ctxbudget-passthrough" not in reply.headers
            assert int(reply.headers["x-ctxbudget-tokens"]) > 0  # counted: guarded


# -- Anthropic's usage in parts --------------------------------------------------------------------


def test_a_streamed_anthropic_reply_keeps_its_prompt_tokens(
    tmp_path: Path, upstream: Upstream
) -> None:
    # message_start carries the prompt (input + cache read), message_delta only the output:
    # the session must record both, not the last part alone.
    with _client(tmp_path, upstream) as client:
        reply = client.post("/v1/messages", json=_claude_body(stream=True))
        assert reply.status_code == 200 and "message_stop" in reply.text
        conversation = _conversation(client, reply.headers["x-ctxbudget-conversation"])
    usage = conversation.memory.usage
    assert usage is not None
    assert usage.input_tokens == int(reply.headers["x-ctxbudget-tokens"])  # exact count
    assert usage.output_tokens == 7
    assert conversation.session.largest_reply == 7


# -- the query string ------------------------------------------------------------------------------


def test_the_guarded_path_keeps_the_clients_query_string(
    tmp_path: Path, upstream: Upstream
) -> None:
    with _client(tmp_path, upstream) as client:
        reply = client.post("/v1/messages?beta=true", json=_claude_body())
    assert reply.status_code == 200 and "x-ctxbudget-conversation" in reply.headers
    assert [(path, query) for path, query, _ in upstream.calls] == [("/v1/messages", "beta=true")]


# -- the reply-limit clamp -------------------------------------------------------------------------

CLAMP_BODIES: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": (
        "/v1/chat/completions",
        {
            "model": "m",
            "max_tokens": CLAUDE_CODE_MAX_TOKENS,
            "messages": [{"role": "user", "content": "Fix the failing test."}],
        },
        "max_tokens",
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "max_output_tokens": CLAUDE_CODE_MAX_TOKENS, "input": "Fix the test."},
        "max_output_tokens",
    ),
    "messages": (
        "/v1/messages",
        _claude_body(max_tokens=CLAUDE_CODE_MAX_TOKENS, stream=True),
        "max_tokens",
    ),
}


@pytest.mark.parametrize("name", list(CLAMP_BODIES))
def test_a_reply_limit_over_the_window_is_clamped_and_the_request_succeeds(
    tmp_path: Path, upstream: Upstream, name: str
) -> None:
    path, body, limit_field = CLAMP_BODIES[name]
    with _client(tmp_path, upstream) as client:
        reply = client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    tokens = int(reply.headers["x-ctxbudget-tokens"])
    clamped = int(reply.headers["x-ctxbudget-max-tokens-clamped"])
    ((_, _, forwarded),) = upstream.calls
    assert forwarded[limit_field] == clamped == WINDOW - tokens
    assert forwarded["messages" if name != "responses" else "input"] == body.get(
        "messages", body.get("input")
    )


def test_a_limit_that_fits_is_not_clamped_and_the_body_goes_as_sent(
    tmp_path: Path, upstream: Upstream
) -> None:
    body = _claude_body(max_tokens=2_000, metadata={"user_id": "u"})
    with _client(tmp_path, upstream) as client:
        reply = client.post("/v1/messages", json=body)
    assert reply.status_code == 200
    assert "x-ctxbudget-max-tokens-clamped" not in reply.headers
    assert upstream.calls[0][2] == body


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_stopped_at_the_clamp_is_not_a_silent_cut(tmp_path: Path, stream: bool) -> None:
    # The server fills the clamped limit and counts the prompt a little under our exact count:
    # prompt + reply stays under the window. Read against the client's 128,000 that would look
    # like a server whose window ended there (a silent cut: overflow counted, window lowered).
    upstream = Upstream(fill_limit=True, undercount=5)
    body = _claude_body(max_tokens=CLAUDE_CODE_MAX_TOKENS, stream=stream)
    with _client(tmp_path, upstream) as client:
        first = client.post("/v1/messages", json=body)
        assert first.status_code == 200, first.text
        clamped = int(first.headers["x-ctxbudget-max-tokens-clamped"])
        conversation = _conversation(client, first.headers["x-ctxbudget-conversation"])
        assert conversation.session.overflows == 0
        assert conversation.session.window == WINDOW
        answer = {"role": "assistant", "content": [{"type": "text", "text": "Fine."}]}
        more = [*body["messages"], answer, {"role": "user", "content": "Go on."}]
        second = client.post("/v1/messages", json={**body, "messages": more})
    assert second.status_code == 200 and second.headers["x-ctxbudget-window"] == str(WINDOW)
    assert upstream.calls[0][2]["max_tokens"] == clamped
    assert conversation.session.overflows == 0


# -- count_tokens ----------------------------------------------------------------------------------


def _long_conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + "explain this. " * 60})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "it works. " * 40})
    messages.append({"role": "user", "content": "And the last question?"})
    return messages


def test_count_tokens_counts_what_would_be_forwarded(tmp_path: Path) -> None:
    upstream = Upstream(window=2_048)
    with _client(tmp_path, upstream, window=2_048) as client:
        # A new conversation: its own exact count, and nothing sent upstream.
        sdk = anthropic.Anthropic(
            base_url=str(client.base_url), api_key="sk-none", max_retries=0, http_client=client
        )
        fresh = _claude_body("hi")
        del fresh["max_tokens"]
        counted = sdk.messages.count_tokens(**fresh)
        expected = RequestCounter(TOKENIZER).count(MESSAGES.parse(fresh).request).total
        assert counted.input_tokens == expected
        assert upstream.calls == []
        # A conversation the gateway compacted: the count of the view it would forward.
        body = _claude_body(max_tokens=300)
        body["messages"] = _long_conversation(8)
        reply = client.post("/v1/messages", json=body)
        assert reply.status_code == 200 and reply.headers["x-ctxbudget-compacted"] == "1"
        assert upstream.summaries >= 1  # one compaction: its fold may take several calls
        calls = len(upstream.calls)
        del body["max_tokens"]
        counted = sdk.messages.count_tokens(**body)
        whole = RequestCounter(TOKENIZER).count(MESSAGES.parse(body).request).total
    assert counted.input_tokens == int(reply.headers["x-ctxbudget-tokens"]) < whole
    assert len(upstream.calls) == calls  # counting sends nothing


def test_count_tokens_refuses_a_bad_body_in_anthropics_shape(
    tmp_path: Path, upstream: Upstream
) -> None:
    with _client(tmp_path, upstream) as client:
        reply = client.post("/v1/messages/count_tokens", json={"model": "m"})
    assert reply.status_code == 400
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "invalid_request_error"


# -- metrics, ops routes, logs ---------------------------------------------------------------------


@pytest.fixture
def gateway_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger=GATEWAY_LOGGER):
        yield caplog


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        dict(r.fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == GATEWAY_LOGGER and r.getMessage() == "request"
    ]


def test_metrics_ops_routes_and_a_log_line_per_request(
    tmp_path: Path, upstream: Upstream, gateway_log: pytest.LogCaptureFixture
) -> None:
    with _client(tmp_path, upstream) as client:
        ok = client.post("/v1/messages", json=_claude_body(stream=True))
        bad = client.post("/v1/chat/completions", content=b"{not json")
        metrics = client.get("/metrics").text
        health = client.get("/healthz")
        page = client.get("/")
        status = client.get("/ctxbudget/status").json()
    assert ok.status_code == 200 and bad.status_code == 400
    assert 'ctxbudget_requests_total{api="messages",outcome="ok"} 1.0' in metrics
    assert 'ctxbudget_requests_total{api="chat",outcome="client_error"} 1.0' in metrics
    assert f"ctxbudget_upstream_window_tokens {float(WINDOW)}" in metrics
    assert health.json()["status"] == "ok"
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert len(upstream.calls) == 1  # none of the ops routes reached the upstream
    (conversation,) = status["conversations"]
    assert conversation["floor_tokens"] > 0 and conversation["requests"] == 1
    lines = _request_lines(gateway_log)
    assert [(line["api"], line["status"], line["outcome"]) for line in lines] == [
        ("messages", 200, "ok"),
        ("chat", 400, "client_error"),
    ]
    first = lines[0]
    assert first["conversation"] == ok.headers["x-ctxbudget-conversation"]
    assert first["tokens_forwarded"] == int(ok.headers["x-ctxbudget-tokens"])
    assert first["stream"] is True and first["window"] == WINDOW
    assert "messages" not in first


def test_the_forwarded_conversation_is_logged_only_with_log_messages(
    tmp_path: Path, upstream: Upstream, gateway_log: pytest.LogCaptureFixture
) -> None:
    body = _claude_body("the launch code is 0000")
    with _client(tmp_path, upstream, log_messages=True) as client:
        assert client.post("/v1/messages", json=body).status_code == 200
    (line,) = _request_lines(gateway_log)
    assert line["messages"] == body["messages"]
