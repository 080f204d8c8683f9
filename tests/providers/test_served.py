"""The window a server serves, asked of it: Ollama's GET /api/ps on a loopback scripted server."""

from __future__ import annotations

import json
import time

import pytest

import ctxbudget.providers.openai_compat as openai_compat
from ctxbudget.providers.openai_compat import OpenAICompatibleProvider
from ctxbudget.providers.served import SERVED_BODY_BYTES, ps_url, served_context_length

from .fakeserver import FakeServer, Reply, closed_port

# The shape of ollama/ollama api/types.go ProcessResponse, two models loaded.
PS = {
    "models": [
        {"name": "qwen3:latest", "model": "qwen3:latest", "size_vram": 1, "context_length": 4096},
        {"name": "llama3.2:1b", "model": "llama3.2:1b", "size_vram": 1, "context_length": 8192},
    ]
}


def _provider(base_url: str, model: str = "qwen3") -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(base_url=base_url, model=model, api_key_env=None)


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/api/ps"),
        ("http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434/api/ps"),
        ("https://host/ollama/v1?key=x", "https://host/ollama/api/ps"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/api/ps"),
    ],
)
def test_ps_url_is_on_the_server_of_the_base_url(base_url: str, url: str) -> None:
    assert ps_url(base_url) == url


@pytest.mark.parametrize(
    ("model", "window"),
    [("qwen3", 4096), ("qwen3:latest", 4096), ("llama3.2:1b", 8192), ("llama3.2", None)],
)
def test_only_the_models_own_entry_is_read(model: str, window: int | None) -> None:
    assert served_context_length(json.dumps(PS), model) == window


@pytest.mark.parametrize(
    "body",
    ["", "not json", "[]", '{"models": {}}', '{"models": [{"name": "qwen3", "context_length": 0}]}',
     '{"models": [{"name": "qwen3", "context_length": true}]}', '{"models": ["qwen3"]}'],
)  # fmt: skip
def test_a_body_without_a_window_is_none(body: str) -> None:
    assert served_context_length(body, "qwen3") is None


def test_the_provider_asks_api_ps_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVED_TEST_KEY", "sk-served-secret-123456")
    with FakeServer(Reply(body=PS)) as server:
        provider = OpenAICompatibleProvider(
            base_url=server.base_url, model="qwen3", api_key_env="SERVED_TEST_KEY"
        )
        assert provider.served_window() == 4096
        (asked,) = server.requests
    assert (asked.method, asked.path) == ("GET", "/api/ps")
    assert "sk-served" not in str(asked.headers)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(status=404, body="404 page not found"), id="not-ollama"),
        pytest.param(Reply(body={"models": []}), id="not-loaded"),
        pytest.param(Reply(body="<html>proxy</html>"), id="not-json"),
        pytest.param(Reply(body=b"x" * (SERVED_BODY_BYTES + 1)), id="over-the-cap"),
        pytest.param(Reply(action="reset"), id="reset"),
    ],
)
def test_any_failure_is_no_window(reply: Reply) -> None:
    with FakeServer(reply) as server:
        assert _provider(server.base_url).served_window() is None
        assert len(server.requests) == 1  # never retried


def test_a_closed_port_is_no_window() -> None:
    assert _provider(f"http://127.0.0.1:{closed_port()}/v1").served_window() is None


def test_a_slow_server_is_no_window_within_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "SERVED_TIMEOUT", 0.3)
    with FakeServer(Reply(body=PS, delay=3.0)) as server:
        started = time.monotonic()
        assert _provider(server.base_url).served_window() is None
        assert time.monotonic() - started < 2.0
