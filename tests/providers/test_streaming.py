"""Streamed replies: assembled into the same Completion, cut streams retried, errors in streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.errors import ContextOverflowError, ProviderError
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider
from ctxbudget.providers.retry import RetryPolicy
from ctxbudget.providers.streaming import StreamAssembly, sse_events

from . import bodies
from .fakeserver import FakeServer, Reply
from .test_openai_compat import FAST, KEY_ENV, REQUEST, SECRET

OPENAI_TEXT = "Hello! How can I assist you today?"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


class Screen:
    """What a terminal would show: the deltas, and each restart notice."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.restarts: list[str] = []


def streaming(url: str, screen: Screen | None = None, **kw: Any) -> OpenAICompatibleProvider:
    options: dict[str, Any] = {
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "retry": FAST,
        "connect_timeout": 0.3,
        "read_timeout": 0.3,
        "stream": True,
        "sleep": lambda _s: None,
    }
    if screen is not None:
        options["on_delta"] = screen.deltas.append
        options["on_restart"] = screen.restarts.append
    return OpenAICompatibleProvider(base_url=url, **(options | kw))


def plain(url: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(base_url=url, model="test-model", api_key_env=KEY_ENV)


# --- assembly -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunks", "whole"),
    [
        (bodies.OPENAI_STREAM, bodies.OPENAI_CHAT),
        (bodies.VLLM_TOOL_STREAM, bodies.VLLM_TOOL_CALL),
    ],
)
def test_a_streamed_reply_is_the_same_completion_as_a_whole_one(
    server: FakeServer, chunks: tuple[dict[str, Any], ...], whole: dict[str, Any]
) -> None:
    server.enqueue(Reply(chunks=chunks), Reply(body=whole))
    streamed = streaming(server.base_url).complete(REQUEST)
    reference = plain(server.base_url).complete(REQUEST)
    assert streamed.message.text == reference.message.text
    assert streamed.message.reasoning == reference.message.reasoning
    assert streamed.message.tool_calls == reference.message.tool_calls
    assert streamed.stop_reason == reference.stop_reason
    assert streamed.usage.input_tokens == reference.usage.input_tokens > 0
    assert streamed.usage.output_tokens == reference.usage.output_tokens
    assert streamed.usage.cache_read_tokens == reference.usage.cache_read_tokens
    assert streamed.usage.reasoning_tokens == reference.usage.reasoning_tokens


def test_the_stream_request_asks_for_usage(server: FakeServer) -> None:
    server.enqueue(Reply(chunks=bodies.OPENAI_STREAM))
    streaming(server.base_url).complete(REQUEST)
    body = server.requests[0].json()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_deltas_arrive_in_order(server: FakeServer) -> None:
    screen = Screen()
    server.enqueue(Reply(chunks=bodies.OPENAI_STREAM))
    done = streaming(server.base_url, screen).complete(REQUEST)
    assert "".join(screen.deltas) == OPENAI_TEXT == done.message.text
    assert len(screen.deltas) == 4 and "" not in screen.deltas
    assert screen.restarts == []


def test_parallel_tool_calls_are_assembled_by_index() -> None:
    assembly = StreamAssembly()
    calls = [
        {"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y"'}},
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
    ]
    for delta in (
        {"tool_calls": calls},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]},
    ):
        assembly.feed({"choices": [{"delta": delta}]})
    assembly.feed({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})
    made = assembly.body()["choices"][0]
    assert [(c["id"], c["function"]["name"]) for c in made["message"]["tool_calls"]] == [
        ("a", "f"),
        ("b", "g"),
    ]
    assert [json.loads(c["function"]["arguments"]) for c in made["message"]["tool_calls"]] == [
        {"x": 1},
        {"y": 2},
    ]
    assert made["finish_reason"] == "tool_calls"
    assert not assembly.complete, "a finish reason without usage or [DONE] may be cut short"
    assembly.done = True
    assert assembly.complete


def test_tool_call_deltas_without_index_follow_their_ids() -> None:
    assembly = StreamAssembly()
    for call in (
        {"id": "a", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "function": {"name": "g", "arguments": '{"k"'}},
        {"function": {"arguments": ": 1}"}},
    ):
        assembly.feed({"choices": [{"delta": {"tool_calls": [call]}}]})
    made = assembly.body()["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in made] == [("a", "{}"), ("b", '{"k": 1}')]


def test_reasoning_field_of_ollama_and_openrouter_is_read(server: FakeServer) -> None:
    chunks = (
        {"choices": [{"delta": {"role": "assistant", "reasoning": "think"}}]},
        {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]},
    )
    server.enqueue(Reply(chunks=chunks))
    done = streaming(server.base_url).complete(REQUEST)
    assert (done.message.reasoning, done.message.text) == ("think", "ok")
    assert done.usage.is_zero, "no usage chunk: zero, as for a whole reply without usage"


def test_a_server_that_ignores_stream_is_read_whole(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.OPENAI_CHAT))
    assert streaming(server.base_url).complete(REQUEST).message.text == OPENAI_TEXT


def test_a_finish_reason_without_done_is_a_complete_stream(server: FakeServer) -> None:
    server.enqueue(Reply(chunks=bodies.OPENAI_STREAM, done=False, chunked=False))
    done = streaming(server.base_url).complete(REQUEST)
    assert done.message.text == OPENAI_TEXT and len(server.requests) == 1


def test_silent_overflow_in_a_stream(server: FakeServer) -> None:
    chunks = (
        {"choices": [{"delta": {"content": ""}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 4095, "completion_tokens": 0}},
    )
    server.enqueue(Reply(chunks=chunks))
    with pytest.raises(ContextOverflowError) as caught:
        streaming(server.base_url, window=4096).complete(REQUEST)
    assert caught.value.prompt_tokens == 4095


# --- cut streams --------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize(("cut", "shown"), [(0, False), (1, False), (3, True), (6, True)])
def test_a_cut_stream_is_retried(server: FakeServer, chunked: bool, cut: int, shown: bool) -> None:
    screen = Screen()
    server.enqueue(
        Reply(chunks=bodies.OPENAI_STREAM, cut_after=cut, chunked=chunked),
        Reply(chunks=bodies.OPENAI_STREAM, chunked=chunked),
    )
    done = streaming(server.base_url, screen).complete(REQUEST)
    assert done.message.text == OPENAI_TEXT
    assert done.usage.input_tokens == 19, "usage of the complete stream, not the cut one"
    assert len(server.requests) == 2
    assert len(screen.restarts) == (1 if shown else 0)
    if shown:
        assert f"stream ended early after {cut} chunks" in screen.restarts[0]
        # What was shown before the cut, then the whole reply again.
        assert "".join(screen.deltas).endswith(OPENAI_TEXT)


def test_a_stream_cut_every_time_is_one_clear_error(server: FakeServer) -> None:
    server.enqueue(*[Reply(chunks=bodies.OPENAI_STREAM, cut_after=3)] * (FAST.max_retries + 1))
    with pytest.raises(ProviderError) as caught:
        streaming(server.base_url).complete(REQUEST)
    message = str(caught.value)
    assert "stream ended early after 3 chunks" in message
    assert f"gave up after {FAST.max_retries + 1} attempts" in message
    assert "\n" not in message and not isinstance(caught.value, ContextOverflowError)
    assert len(server.requests) == FAST.max_retries + 1


def test_a_stream_that_stalls_is_a_read_timeout(server: FakeServer) -> None:
    server.enqueue(
        Reply(chunks=bodies.OPENAI_STREAM, chunk_delay=0.4), Reply(chunks=bodies.OPENAI_STREAM)
    )
    screen = Screen()
    done = streaming(server.base_url, screen, read_timeout=0.15).complete(REQUEST)
    assert done.message.text == OPENAI_TEXT
    assert len(server.requests) == 2


def test_retries_of_a_stream_are_bounded(server: FakeServer) -> None:
    policy = RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.01)
    server.enqueue(*[Reply(chunks=bodies.OPENAI_STREAM, cut_after=2)] * 2)
    with pytest.raises(ProviderError, match="after 2 chunks"):
        streaming(server.base_url, retry=policy).complete(REQUEST)
    assert len(server.requests) == 2


# --- errors -------------------------------------------------------------------------------


def test_overflow_before_the_stream_is_a_context_overflow(server: FakeServer) -> None:
    server.enqueue(Reply(status=400, body=bodies.VLLM_OVERFLOW))
    with pytest.raises(ContextOverflowError) as caught:
        streaming(server.base_url, name="vllm").complete(REQUEST)
    assert (caught.value.limit, caught.value.prompt_tokens) == (4096, 4488)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("error", "limit"),
    [
        (bodies.OPENAI_OVERFLOW, 128000),
        (bodies.LLAMACPP_OVERFLOW, 4096),
        ({"error": bodies.VLLM_OVERFLOW}, 4096),
    ],
)
def test_overflow_inside_the_stream_is_a_context_overflow(
    server: FakeServer, error: dict[str, Any], limit: int
) -> None:
    server.enqueue(Reply(chunks=(bodies.OPENAI_STREAM[0], error)))
    with pytest.raises(ContextOverflowError) as caught:
        streaming(server.base_url).complete(REQUEST)
    assert caught.value.limit == limit
    assert len(server.requests) == 1


def test_a_server_error_inside_the_stream_is_retried(server: FakeServer) -> None:
    screen = Screen()
    server.enqueue(
        Reply(chunks=(*bodies.OPENAI_STREAM[:3], bodies.VLLM_STREAM_ERROR)),
        Reply(chunks=bodies.OPENAI_STREAM),
    )
    assert streaming(server.base_url, screen).complete(REQUEST).message.text == OPENAI_TEXT
    (restart,) = screen.restarts
    assert "stream carrying an error: The engine crashed" in restart


def test_a_client_error_inside_the_stream_is_final(server: FakeServer) -> None:
    error = {"error": {"message": f"bad tool schema (key {SECRET})", "code": 400}}
    server.enqueue(Reply(chunks=(error,)))
    with pytest.raises(ProviderError) as caught:
        streaming(server.base_url).complete(REQUEST)
    assert "stream carrying an error: bad tool schema" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert len(server.requests) == 1


def test_a_chunk_that_is_not_json_is_retried(server: FakeServer) -> None:
    server.enqueue(Reply(chunks=("{not json",)), Reply(chunks=bodies.OPENAI_STREAM))
    assert streaming(server.base_url).complete(REQUEST).message.text == OPENAI_TEXT


# --- the event decoder --------------------------------------------------------------------


def test_sse_events_skip_comments_and_join_data_lines() -> None:
    raw = b": keep-alive\r\n\r\ndata: a\r\ndata: b\r\n\r\nevent: x\ndata:c\n\ndata: cut"
    assert list(sse_events([raw])) == ["a\nb", "c"]


@settings(max_examples=60)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_sse_events_do_not_depend_on_how_bytes_are_split(cuts: list[int]) -> None:
    raw = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in bodies.VLLM_TOOL_STREAM)
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    decoded = [json.loads(e) for e in sse_events(pieces)]
    assert decoded == list(bodies.VLLM_TOOL_STREAM)
