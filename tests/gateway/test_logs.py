"""The gateway's logs: one JSON object a line, no conversation text unless asked, never a key,
and uvicorn's own lines (on a real uvicorn process) in the same format without query strings."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.gateway.ops_server import running

from ctxbudget.errors import ConfigError
from ctxbudget.gateway.logs import (
    GATEWAY_LOGGER,
    RequestLog,
    configure_logging,
    log_request,
    uvicorn_log_config,
)

SECRET_TEXT = "the launch code is 0000"
ENTRY = RequestLog(
    api="chat",
    path="/v1/chat/completions",
    status=200,
    outcome="compacted",
    conversation="c-1f2e",
    model="qwen3-8b",
    stream=True,
    tokens_received=31_000,
    tokens_forwarded=9_500,
    window=16_384,
    compacted=True,
    overhead_ms=1.25,
)


def logged(log_format: str, log_messages: bool, emit: Any) -> str:
    """What ``emit()`` writes through the gateway's logger, configured so."""
    out = io.StringIO()
    names = (GATEWAY_LOGGER, "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    propagate = [logger.propagate for logger, _ in saved]
    handler = configure_logging(log_format, log_messages=log_messages, stream=out)
    try:
        emit()
    finally:  # leave logging as the other tests expect it
        for (logger, level), before in zip(saved, propagate, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = before
    return out.getvalue()


def a_request() -> None:
    log_request(ENTRY, messages=[{"role": "user", "content": SECRET_TEXT}])
    logging.getLogger(GATEWAY_LOGGER).info(
        "upstream", extra={"fields": {"authorization": "Bearer sk-123", "summary": SECRET_TEXT}}
    )


def test_a_json_line_has_the_numbers_and_no_conversation_text() -> None:
    lines = logged("json", False, a_request).splitlines()
    assert len(lines) == 2
    request, upstream = (json.loads(line) for line in lines)
    assert request["event"] == "request" and request["level"] == "info"
    assert request["logger"] == GATEWAY_LOGGER and request["ts"].endswith("Z")
    for key in ("api", "path", "status", "outcome", "conversation", "tokens_forwarded"):
        assert request[key] == getattr(ENTRY, key)
    assert "upstream_ms" not in request  # None fields are left out
    assert "messages" not in request and "summary" not in upstream
    assert "authorization" not in upstream
    whole = "\n".join(lines)
    assert SECRET_TEXT not in whole and "sk-123" not in whole


def test_the_conversation_is_logged_only_when_asked() -> None:
    lines = [json.loads(line) for line in logged("json", True, a_request).splitlines()]
    assert lines[0]["messages"] == [{"role": "user", "content": SECRET_TEXT}]
    assert lines[1]["summary"] == SECRET_TEXT
    assert "authorization" not in lines[1]  # a key never, even then


def test_an_exception_keeps_its_stack_and_loses_its_message() -> None:
    def fail() -> None:
        try:
            raise ValueError(f"cannot parse {SECRET_TEXT}")
        except ValueError:
            logging.getLogger(GATEWAY_LOGGER).exception("request failed")

    quiet = json.loads(logged("json", False, fail))
    assert quiet["exc_type"] == "ValueError" and "test_logs.py" in quiet["stack"]
    assert SECRET_TEXT not in json.dumps(quiet)
    loud = json.loads(logged("json", True, fail))
    assert SECRET_TEXT in loud["exc_message"]


def test_the_text_format_carries_the_same_fields() -> None:
    text = logged("text", False, a_request)
    first = text.splitlines()[0]
    assert " INFO ctxbudget.gateway: request " in first
    assert 'outcome="compacted"' in first and "tokens_received=31000" in first
    assert SECRET_TEXT not in text and "sk-123" not in text


def test_an_unknown_format_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="--log-format must be one of text, json"):
        configure_logging("yaml")
    with pytest.raises(ConfigError, match="not 'xml'"):
        uvicorn_log_config("xml")


def test_uvicorn_writes_json_lines_without_query_strings(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"upstream": {"url": "x"}, "conversations": []}))
    with running(status, "--log-format", "json") as server:
        reply = httpx.get(server.url + "/stream?n=2&delay=0&key=sk-in-query", timeout=10)
        assert reply.status_code == 200
        assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
        server.stop()
        server.wait(timeout=15)
        text = server.log.read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]  # every line is JSON
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert [(a["method"], a["path"], a["status"]) for a in access] == [
        ("GET", "/stream", 200),
        ("GET", "/healthz", 200),
    ]
    assert "sk-in-query" not in text
    assert any(line["event"] == "request" and line["api"] == "chat" for line in lines)
    assert any(line["logger"] == "uvicorn.error" for line in lines)  # start-up, shutdown
