"""OpenAICompatibleProvider against a scripted local server: replies, overflows, faults, secrets."""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ctxbudget.errors import ConfigError, ContextOverflowError, InvalidWindowError, ProviderError
from ctxbudget.messages import Message, Request, ToolSpec
from ctxbudget.providers.openai_compat import (
    NO_API_KEY,
    OpenAICompatibleProvider,
    provider_name_for,
)
from ctxbudget.providers.retry import RetryPolicy

from . import bodies
from .fakeserver import Blackhole, FakeServer, Reply, closed_port

SECRET = "sk-test-SECRET-1234567890"
KEY_ENV = "CTXBUDGET_TEST_API_KEY"
FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05, max_total_sleep=1.0)
REQUEST = Request(
    system="You are terse.",
    tools=(ToolSpec("read_file", "Read a file", {"type": "object"}),),
    messages=(Message(role="user", content="hello"),),
    max_output_tokens=256,
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.fixture
def sleeps() -> list[float]:
    return []


def provider(url: str, sleeps: list[float] | None = None, **kw: Any) -> OpenAICompatibleProvider:
    options: dict[str, Any] = {
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "retry": FAST,
        "connect_timeout": 0.3,
        "read_timeout": 0.3,
    }
    if sleeps is not None:
        options["sleep"] = sleeps.append
    return OpenAICompatibleProvider(base_url=url, **(options | kw))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


# --- replies ------------------------------------------------------------------------------


def test_openai_reply_becomes_a_completion(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.OPENAI_CHAT))
    done = provider(server.base_url).complete(REQUEST)
    assert done.message.role == "assistant"
    assert done.message.text == "Hello! How can I assist you today?"
    assert done.stop_reason == "stop"
    usage = done.usage
    assert (usage.input_tokens, usage.cache_read_tokens) == (19, 8), "cached is part of prompt"
    assert (usage.output_tokens, usage.reasoning_tokens) == (10, 4)
    assert usage.timestamp is not None and abs(usage.timestamp - time.time()) < 60
    assert done.message.usage == usage


def test_request_body_and_auth_header_are_sent(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.OPENAI_CHAT))
    provider(server.base_url).complete(REQUEST)
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    body = sent.json()
    assert body["model"] == "test-model"
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["messages"][1]["content"] == "hello"
    assert body["tools"][0]["function"]["name"] == "read_file"
    assert body["max_tokens"] == 256
    assert "stream" not in body or body["stream"] is False


def test_request_model_overrides_the_default(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.OPENAI_CHAT))
    provider(server.base_url).complete(Request(model="other", messages=REQUEST.messages))
    assert server.requests[0].json()["model"] == "other"


def test_reasoning_is_not_resent_unless_asked(server: FakeServer) -> None:
    earlier = Message(role="assistant", content="hi", reasoning="secret thoughts")
    request = REQUEST.with_messages((*REQUEST.messages, earlier, Message(role="user", content="?")))
    server.enqueue(Reply(body=bodies.OPENAI_CHAT), Reply(body=bodies.OPENAI_CHAT))
    provider(server.base_url).complete(request)
    provider(server.base_url, resend_reasoning=True).complete(request)
    plain, resent = (r.json()["messages"][2] for r in server.requests)
    assert "reasoning_content" not in plain
    assert resent["reasoning_content"] == "secret thoughts"


def test_tool_call_and_reasoning_are_read(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.VLLM_TOOL_CALL))
    done = provider(server.base_url).complete(REQUEST)
    assert done.stop_reason == "tool_calls"
    (call,) = done.message.tool_calls
    assert (call.id, call.name, call.parsed_arguments()) == (
        "chatcmpl-tool-1a2b",
        "read_file",
        {"path": "src/app.py"},
    )
    assert done.message.reasoning == "The user wants the file; read it first."
    assert done.message.text == ""
    assert (done.usage.input_tokens, done.usage.output_tokens) == (812, 39)


def test_arguments_sent_as_an_object_are_kept_as_json_text(server: FakeServer) -> None:
    body = bodies.VLLM_TOOL_CALL | {
        "choices": [
            {
                "message": {
                    "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {"a": 1}}}]
                },
                "finish_reason": None,
            }
        ]
    }
    server.enqueue(Reply(body=body))
    done = provider(server.base_url).complete(REQUEST)
    assert done.message.tool_calls[0].parsed_arguments() == {"a": 1}
    assert done.stop_reason == "tool_calls"


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", "stop"), ("length", "length"), ("content_filter", "content_filter"), ("x", "other")],
)
def test_stop_reasons(server: FakeServer, finish: str, stop: str) -> None:
    body = bodies.OPENAI_CHAT | {
        "choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": finish}]
    }
    server.enqueue(Reply(body=body))
    assert provider(server.base_url).complete(REQUEST).stop_reason == stop


def test_all_zero_usage_is_kept_as_zero(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.LLAMACPP_ZERO_USAGE))
    done = provider(server.base_url, window=4096).complete(REQUEST)
    assert done.usage.is_zero
    assert done.message.text == "ok"


@pytest.mark.parametrize("usage", [None, "absent", {"prompt_tokens": -5}, "garbage"])
def test_missing_or_unreadable_usage_reads_as_zero(server: FakeServer, usage: object) -> None:
    body = {k: v for k, v in bodies.OPENAI_CHAT.items() if k != "usage"}
    if usage != "absent":
        body["usage"] = usage
    server.enqueue(Reply(body=body))
    done = provider(server.base_url).complete(REQUEST)
    assert done.usage.is_zero
    assert done.message.text.startswith("Hello")


# --- overflow -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "url_port", "name", "limit", "prompt"),
    [
        (400, bodies.VLLM_OVERFLOW, None, "vllm", 4096, 4488),
        (400, bodies.OLLAMA_OVERFLOW, None, "ollama", None, None),
        (400, bodies.LLAMACPP_OVERFLOW, None, "llamacpp", 4096, 4476),
        (400, bodies.OPENAI_OVERFLOW, None, "openai", 128000, 131000),
        (400, bodies.OPENROUTER_OVERFLOW, None, "openrouter", 32768, 39000),
        (413, bodies.ANTHROPIC_413, None, "anthropic", None, None),
    ],
)
def test_each_servers_overflow_is_a_context_overflow(
    server: FakeServer,
    status: int,
    body: dict[str, Any],
    url_port: int | None,
    name: str,
    limit: int | None,
    prompt: int | None,
) -> None:
    server.enqueue(Reply(status=status, body=body))
    with pytest.raises(ContextOverflowError) as caught:
        provider(server.base_url, name=name).complete(REQUEST)
    error = caught.value
    assert (error.status, error.limit, error.prompt_tokens) == (status, limit, prompt)
    assert f"{name} server" in str(error)
    assert len(server.requests) == 1, "an overflow is never retried"


def test_overflow_inside_a_200_error_body(server: FakeServer) -> None:
    server.enqueue(Reply(body=bodies.VLLM_OVERFLOW | {"error": bodies.VLLM_OVERFLOW["message"]}))
    with pytest.raises(ContextOverflowError) as caught:
        provider(server.base_url).complete(REQUEST)
    assert caught.value.limit == 4096


def test_silent_overflow_length_stop_with_nothing_out_at_the_window(server: FakeServer) -> None:
    body = bodies.LLAMACPP_ZERO_USAGE | {
        "choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4090, "completion_tokens": 0, "total_tokens": 4090},
    }
    server.enqueue(Reply(body=body), Reply(body=body))
    with pytest.raises(ContextOverflowError) as caught:
        provider(server.base_url, window=4096).complete(REQUEST)
    assert caught.value.prompt_tokens == 4090
    # Without a known window the same reply is only a length stop.
    assert provider(server.base_url).complete(REQUEST).stop_reason == "length"


@pytest.mark.parametrize(("prompt", "output"), [(3000, 0), (4090, 5)])
def test_a_length_stop_below_the_window_or_with_output_is_not_overflow(
    server: FakeServer, prompt: int, output: int
) -> None:
    body = bodies.LLAMACPP_ZERO_USAGE | {
        "choices": [{"message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output},
    }
    server.enqueue(Reply(body=body))
    assert provider(server.base_url, window=4096).complete(REQUEST).stop_reason == "length"


def test_zai_overflow_finish_reason(server: FakeServer) -> None:
    body = bodies.OPENAI_CHAT | {
        "choices": [
            {
                "message": {"role": "assistant", "content": ""},
                "finish_reason": "model_context_window_exceeded",
            }
        ]
    }
    server.enqueue(Reply(body=body))
    with pytest.raises(ContextOverflowError) as caught:
        provider(server.base_url, name="zai").complete(REQUEST)
    assert caught.value.prompt_tokens == 19


# --- retries ------------------------------------------------------------------------------


def test_429_with_retry_after_seconds_is_obeyed(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(
        Reply(status=429, body=bodies.OPENAI_RATE_LIMIT, headers={"Retry-After": "0.04"}),
        Reply(body=bodies.OPENAI_CHAT),
    )
    done = provider(server.base_url, sleeps).complete(REQUEST)
    assert done.message.text.startswith("Hello")
    assert sleeps == [0.04]
    assert len(server.requests) == 2


def test_429_with_retry_after_date(server: FakeServer, sleeps: list[float]) -> None:
    when = email.utils.formatdate(time.time() - 5, usegmt=True)  # already past: no wait
    server.enqueue(
        Reply(status=429, body=bodies.BEDROCK_THROTTLE, headers={"Retry-After": when}),
        Reply(body=bodies.OPENAI_CHAT),
    )
    provider(server.base_url, sleeps).complete(REQUEST)
    assert sleeps == [0.0]


def test_429_without_retry_after_backs_off(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(
        *[Reply(status=429, body=bodies.OPENAI_RATE_LIMIT)] * 2, Reply(body=bodies.OPENAI_CHAT)
    )
    provider(server.base_url, sleeps).complete(REQUEST)
    assert len(sleeps) == 2
    assert 0.005 <= sleeps[0] <= 0.01 and 0.01 <= sleeps[1] <= 0.02


def test_real_sleeps_are_short_and_bounded(server: FakeServer) -> None:
    server.enqueue(*[Reply(status=503, body="Service Unavailable")] * 4)
    start = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url).complete(REQUEST)
    assert time.monotonic() - start < 2.0
    assert caught.value.status == 503
    assert len(server.requests) == FAST.max_retries + 1


def test_retry_after_over_the_cap_stops_at_once(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(
        Reply(status=429, body=bodies.OPENAI_RATE_LIMIT, headers={"Retry-After": "3600"})
    )
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert sleeps == [] and len(server.requests) == 1
    assert "3600 s" in str(caught.value) and "HTTP 429" in str(caught.value)
    assert not isinstance(caught.value, ContextOverflowError)


def test_total_sleep_is_capped(server: FakeServer, sleeps: list[float]) -> None:
    policy = RetryPolicy(max_retries=10, base_delay=0.01, max_delay=0.05, max_total_sleep=0.1)
    server.enqueue(*[Reply(status=429, headers={"Retry-After": "0.04"})] * 11)
    with pytest.raises(ProviderError):
        provider(server.base_url, sleeps, retry=policy).complete(REQUEST)
    assert sleeps == [0.04, 0.04]
    assert len(server.requests) == 3


def test_quota_429_is_not_retried(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(Reply(status=429, body=bodies.OPENAI_QUOTA))
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert sleeps == [] and caught.value.status == 429
    assert "exceeded your current quota" in str(caught.value)


def test_bedrock_throttling_is_retried_not_compacted(
    server: FakeServer, sleeps: list[float]
) -> None:
    server.enqueue(Reply(status=429, body=bodies.BEDROCK_THROTTLE), Reply(body=bodies.OPENAI_CHAT))
    assert provider(server.base_url, sleeps).complete(REQUEST).message.text
    assert len(sleeps) == 1


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retried_then_succeeds(server: FakeServer, sleeps: list[float], status: int) -> None:
    server.enqueue(
        Reply(status=status, body="<html>Bad Gateway</html>"), Reply(body=bodies.OPENAI_CHAT)
    )
    assert provider(server.base_url, sleeps).complete(REQUEST).message.text
    assert len(sleeps) == 1


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_until_the_retries_run_out(
    server: FakeServer, sleeps: list[float], status: int
) -> None:
    server.enqueue(*[Reply(status=status, body={"error": "upstream down"})] * 4)
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    message = str(caught.value)
    assert caught.value.status == status
    assert f"HTTP {status}: upstream down" in message and "gave up after 4 attempts" in message
    assert "\n" not in message
    assert len(sleeps) == 3 and len(server.requests) == 4


def test_the_sdk_does_not_retry_on_its_own(server: FakeServer) -> None:
    server.enqueue(Reply(status=500, body={"error": "boom"}), Reply(body=bodies.OPENAI_CHAT))
    with pytest.raises(ProviderError):
        provider(server.base_url, retry=RetryPolicy(max_retries=0)).complete(REQUEST)
    assert len(server.requests) == 1


def test_client_errors_are_not_retried(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(Reply(status=404, body={"error": 'model "test-model" not found'}))
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert sleeps == [] and caught.value.status == 404
    assert str(caught.value).startswith(
        f"openai-compatible server at http://127.0.0.1:{server.port}/v1"
    )
    assert 'HTTP 404: model "test-model" not found' in str(caught.value)


def test_retries_are_logged(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.enqueue(Reply(status=502, body="Bad Gateway"), Reply(body=bodies.OPENAI_CHAT))
    with caplog.at_level(logging.WARNING, logger="ctxbudget"):
        provider(server.base_url, []).complete(REQUEST)
    (record,) = [r for r in caplog.records if r.name.startswith("ctxbudget")]
    assert "HTTP 502" in record.getMessage() and "retry 1 of 3" in record.getMessage()


# --- transport faults ---------------------------------------------------------------------


def test_read_timeout(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(*[Reply(body=bodies.OPENAI_CHAT, delay=0.5)] * 2)
    with pytest.raises(ProviderError) as caught:
        provider(
            server.base_url, sleeps, read_timeout=0.1, retry=RetryPolicy(max_retries=1)
        ).complete(REQUEST)
    assert "no reply within 0.1 s (read timeout)" in str(caught.value)
    assert len(sleeps) == 1


def test_read_timeout_then_success(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(Reply(body=bodies.OPENAI_CHAT, delay=0.5), Reply(body=bodies.OPENAI_CHAT))
    done = provider(server.base_url, sleeps, read_timeout=0.1).complete(REQUEST)
    assert done.message.text


def test_connect_timeout(sleeps: list[float]) -> None:
    with Blackhole() as hole, pytest.raises(ProviderError) as caught:
        provider(
            hole.base_url, sleeps, connect_timeout=0.1, retry=RetryPolicy(max_retries=1)
        ).complete(REQUEST)
    assert "could not connect within 0.1 s (connect timeout)" in str(caught.value)


def test_connection_refused(sleeps: list[float]) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(ProviderError) as caught:
        provider(url, sleeps).complete(REQUEST)
    assert "connection failed: ConnectError" in str(caught.value)
    assert "gave up after 4 attempts" in str(caught.value)
    assert len(sleeps) == 3


def test_reset_connection_is_retried(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(Reply(action="reset"), Reply(body=bodies.OPENAI_CHAT))
    assert provider(server.base_url, sleeps).complete(REQUEST).message.text
    assert len(server.requests) == 2


def test_reset_every_time_is_a_provider_error(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(*[Reply(action="reset")] * 4)
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert "connection failed" in str(caught.value)
    assert len(server.requests) == 4


def test_body_cut_in_the_middle_is_retried(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(
        Reply(body=bodies.OPENAI_CHAT, action="close_mid_body"), Reply(body=bodies.OPENAI_CHAT)
    )
    assert provider(server.base_url, sleeps).complete(REQUEST).usage.input_tokens == 19
    assert len(sleeps) == 1


def test_malformed_json_is_retried_then_reported(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(*[Reply(body='{"choices": [ {"message": ')] * 4)
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert "not a JSON object" in str(caught.value)
    assert len(server.requests) == 4


def test_malformed_json_once_then_success(server: FakeServer, sleeps: list[float]) -> None:
    server.enqueue(Reply(body="<html>proxy error</html>"), Reply(body=bodies.OPENAI_CHAT))
    assert provider(server.base_url, sleeps).complete(REQUEST).message.text


@pytest.mark.parametrize(
    "body",
    [
        bodies.OPENAI_CHAT | {"choices": []},
        {k: v for k, v in bodies.OPENAI_CHAT.items() if k != "choices"},
        bodies.OPENAI_CHAT | {"choices": ["nope"]},
        bodies.OPENAI_CHAT | {"choices": [{"finish_reason": "stop"}]},
    ],
)
def test_no_usable_choice_is_a_provider_error(
    server: FakeServer, sleeps: list[float], body: dict[str, Any]
) -> None:
    server.enqueue(Reply(body=body))
    with pytest.raises(ProviderError) as caught:
        provider(server.base_url, sleeps).complete(REQUEST)
    assert "HTTP 200 with" in str(caught.value)
    assert sleeps == [], "a well-formed reply without a choice will not improve on retry"


def test_unreadable_message_is_a_provider_error(server: FakeServer) -> None:
    body = bodies.OPENAI_CHAT | {
        "choices": [{"message": {"role": "assistant", "content": 42}, "finish_reason": "stop"}]
    }
    server.enqueue(Reply(body=body))
    with pytest.raises(ProviderError, match="unreadable message"):
        provider(server.base_url).complete(REQUEST)


# --- secrets ------------------------------------------------------------------------------


def test_the_key_never_appears_in_errors_or_logs(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {SECRET}. Bearer {SECRET}"}}
    replies = [
        Reply(status=401, body=echo),
        Reply(status=400, body={"error": {"message": f"prompt is too long (key {SECRET})"}}),
        Reply(status=500, body=echo),
        Reply(status=500, body=echo),
        Reply(body=f"not json {SECRET}"),
        Reply(body=f"not json {SECRET}"),
        Reply(body={"error": f"upstream said Authorization: Bearer {SECRET}"}),
        Reply(action="reset"),
        Reply(action="reset"),
    ]
    server.enqueue(*replies)
    seen: list[str] = []
    one_retry = RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.01)
    with caplog.at_level(logging.DEBUG):
        for _ in range(6):
            with pytest.raises(ProviderError) as caught:
                provider(server.base_url, retry=one_retry).complete(REQUEST)
            seen += [str(caught.value), repr(caught.value), repr(caught.value.args)]
    assert all(SECRET in r.headers["authorization"] for r in server.requests), "key was sent"
    assert len(server.requests) == len(replies)
    assert "check the key in $CTXBUDGET_TEST_API_KEY" in seen[0]
    everything = "\n".join([*seen, caplog.text, *(r.getMessage() for r in caplog.records)])
    assert SECRET not in everything
    assert "SECRET-1234567890" not in everything
    assert "[redacted]" in everything


def test_credentials_in_the_url_stay_out_of_repr_and_errors() -> None:
    url = f"http://user:hunter2@127.0.0.1:{closed_port()}/v1"
    made = provider(url, [])
    with pytest.raises(ProviderError) as caught:
        made.complete(REQUEST)
    for text in (repr(made), str(caught.value)):
        assert "hunter2" not in text and SECRET not in text
        assert "127.0.0.1" in text


# --- configuration ------------------------------------------------------------------------


def test_local_server_without_a_key_gets_a_placeholder(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    server.enqueue(Reply(body=bodies.OPENAI_CHAT), Reply(body=bodies.OPENAI_CHAT))
    provider(server.base_url).complete(REQUEST)
    provider(server.base_url, api_key_env=None).complete(REQUEST)
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {NO_API_KEY}"] * 2


def test_remote_server_without_a_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"set the environment variable {KEY_ENV}"):
        provider("https://api.openai.com/v1")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"base_url": "ftp://example.com"}, ConfigError),
        ({"base_url": "localhost:11434"}, ConfigError),
        ({"model": ""}, ConfigError),
        ({"window": 0}, InvalidWindowError),
        ({"window": -5}, InvalidWindowError),
        ({"window": True}, InvalidWindowError),
        ({"read_timeout": 0}, ConfigError),
        ({"connect_timeout": float("nan")}, ConfigError),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], error: type[Exception]) -> None:
    url = kwargs.pop("base_url", "http://127.0.0.1:8000/v1")
    with pytest.raises(error):
        provider(url, **kwargs)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("http://localhost:11434/v1", "ollama"),
        ("http://127.0.0.1:8000/v1", "vllm"),
        ("http://127.0.0.1:8080/v1", "llamacpp"),
        ("http://localhost:1234/v1", "lmstudio"),
        ("https://api.openai.com/v1", "openai"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://api.deepseek.com", "deepseek"),
        ("https://api.cerebras.ai/v1", "cerebras"),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("http://gpu-box:9000/v1", "openai-compatible"),
    ],
)
def test_provider_names(url: str, name: str) -> None:
    assert provider_name_for(url) == name
    assert provider(url).name == name


def test_explicit_name_wins() -> None:
    assert provider("http://127.0.0.1:9999/v1", name="ollama").name == "ollama"
