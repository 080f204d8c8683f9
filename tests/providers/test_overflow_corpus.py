"""Every real message of tests/data/overflow/corpus.jsonl, the structural fallback, the TPM kind."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.conftest import data_file

from ctxbudget.errors import ContextOverflowError, ProviderError, RequestOverRateLimitError
from ctxbudget.messages import Message, Request
from ctxbudget.providers import OpenAICompatibleProvider, RetryPolicy
from ctxbudget.providers.overflow import (
    LOCALIZED_OVERFLOW,
    OVERFLOW_MESSAGES,
    classify_error,
    is_structural_overflow,
    is_throttling,
)

from .fakeserver import FakeServer, Reply

ROWS: list[dict[str, Any]] = [
    json.loads(line)
    for line in data_file("overflow", "corpus.jsonl").read_text(encoding="utf-8").splitlines()
]
OVERFLOW = [row for row in ROWS if row["expected"] == "overflow"]
NOT_OVERFLOW = [row for row in ROWS if row["expected"] != "overflow"]
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+(?:@[0-9a-f]{40}:\S+|#\d+)$")


def _id(row: dict[str, Any]) -> str:
    return f"{row['id']}-{row['provider']}"


def test_the_corpus_is_big_enough_and_every_line_names_its_source() -> None:
    assert len(ROWS) >= 120 and len(OVERFLOW) >= 70 and len(NOT_OVERFLOW) >= 40
    assert len({row["id"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert SOURCE.match(row["source"]), row["id"]
        assert row["expected"] in ("overflow", "none", "rate_request_too_large"), row["id"]


@pytest.mark.parametrize("row", OVERFLOW, ids=_id)
def test_every_overflow_in_the_corpus_is_read_with_its_limit(row: dict[str, Any]) -> None:
    error = classify_error(row["status"], row["message"], provider=row["provider"])
    assert isinstance(error, ContextOverflowError)
    assert error.limit == row["limit"]
    assert error.status == row["status"]
    assert "\n" not in str(error)


@pytest.mark.parametrize("row", NOT_OVERFLOW, ids=_id)
def test_no_other_error_in_the_corpus_is_an_overflow(row: dict[str, Any]) -> None:
    error = classify_error(row["status"], row["message"], provider=row["provider"])
    assert not isinstance(error, ContextOverflowError)
    if row["expected"] == "rate_request_too_large":
        assert isinstance(error, RequestOverRateLimitError)
        assert (error.requested, error.limit) == (row["requested"], row["limit"])
    else:
        assert error is None


@pytest.mark.parametrize("row", NOT_OVERFLOW, ids=_id)
def test_the_structural_fallback_never_fires_on_the_other_errors(row: dict[str, Any]) -> None:
    assert not is_structural_overflow(row["message"])


def test_vllms_parenthesised_window_and_prompt_are_read() -> None:
    # vllm-project/vllm#6514: the whole message, with the sentence about image inputs
    text = next(row["message"] for row in ROWS if row["id"] == "c209")
    error = classify_error(400, text, provider="vllm")
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.prompt_tokens) == (8096, 14424)
    assert "window 8,096 tokens, prompt 14,424 tokens" in str(error)


# Wordings no table entry names, each in the shape real servers use.
PARAPHRASES: list[tuple[str, int | None]] = [
    ("Error: prompt too long (9000 tokens, max 8192)", 8192),
    ("The conversation has 140,000 tokens, which exceeds the 128,000 token limit.", 128000),
    ("Input is longer than the model's maximum of 32768 tokens.", 32768),
    ("Total prompt tokens 70000 > 65536", 65536),
    ("Your messages exceed the model limit: 210000 tokens requested, maximum 200000.", 200000),
    ("Context overflow: 50,100 tokens is more than this deployment allows (limit: 50,000)", 50000),
    ("Token count (12000) exceeded the maximum context (8192).", 8192),
    ("The prompt is too large for the selected model; shorten it and try again.", None),
    ("Current prompt length is 90000 while limit is 65536", 65536),
    ("Context length of the request is greater than the configured window", None),
    ("messages too long for this model: 131073 tokens exceeds 131072", 131072),
    ("Prompt exceeds the maximum number of input tokens this endpoint accepts", None),
    ("Prompt of 9000 tokens is too long for this server (context size 8192).", 8192),
]


@pytest.mark.parametrize(("text", "limit"), PARAPHRASES)
def test_the_fallback_reads_wordings_no_table_names(text: str, limit: int | None) -> None:
    assert not any(entry.pattern.search(text) for entry in OVERFLOW_MESSAGES + LOCALIZED_OVERFLOW)
    assert is_structural_overflow(text)
    error = classify_error(400, text)
    assert isinstance(error, ContextOverflowError)
    assert error.limit == limit


@pytest.mark.parametrize(
    "text",
    [
        "Too many tokens per minute: limit 30000, retry after 20s",
        "max_tokens exceeds the maximum of 8192 output tokens for this model",
        "The context window is too small for this request (minimum 4096 tokens)",
        "Image exceeds the maximum size of 5 MB",
        "Prompt longer than 2000 characters is not allowed on the free plan: payment required",
    ],
)
def test_the_fallback_is_vetoed_by_throttling_billing_and_output_limits(text: str) -> None:
    assert not is_structural_overflow(text)
    assert not isinstance(classify_error(400, text), ContextOverflowError)


def test_a_service_unavailable_class_name_does_not_hide_the_overflow_it_wraps() -> None:
    text = (
        "Error: 503 litellm.ServiceUnavailableError: litellm.MidStreamFallbackError: "
        "litellm.APIConnectionError: OpenAIException - Requested token count exceeds the "
        "model's maximum context length of 131072 tokens."
    )
    assert not is_throttling(text)
    error = classify_error(503, text, provider="litellm")
    assert isinstance(error, ContextOverflowError) and error.limit == 131072
    # The phrase itself, and Bedrock's exception, still read as throttling.
    assert is_throttling("ServiceUnavailableException: Too many connections")
    assert classify_error(503, "Service unavailable: too many tokens in flight") is None


def test_a_request_bigger_than_the_per_minute_limit_is_its_own_error() -> None:
    error = classify_error(429, "Requested 342389 > 30000 TPM", provider="openai")
    assert isinstance(error, RequestOverRateLimitError)
    assert not isinstance(error, ContextOverflowError)
    assert (error.requested, error.limit, error.status) == (342389, 30000, 429)
    message = str(error)
    assert "\n" not in message and "342,389" in message and "30,000" in message
    assert "per minute" in message and "shrink the request" in message
    assert "raise the limit" in message


def test_groq_413_for_a_per_minute_limit_is_not_an_overflow() -> None:
    body = json.dumps(
        {
            "error": {
                "message": "Request too large for model `llama-3.1-8b-instant` on tokens per "
                "minute (TPM): Limit 6000, Requested 7000, please reduce your message size.",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        }
    )
    error = classify_error(413, body, provider="groq")
    assert isinstance(error, RequestOverRateLimitError)
    assert (error.requested, error.limit) == (7000, 6000)


def test_a_request_that_fits_the_minute_is_plain_throttling() -> None:
    text = (
        "Rate limit reached on tokens per minute (TPM): Limit 6000, Used 5034, Requested 1443. "
        "Please try again in 4.77s."
    )
    assert classify_error(429, text) is None


def test_the_over_rate_limit_error_is_never_retried() -> None:
    body = {
        "error": {
            "message": "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, "
            "Requested 342389. The input or output tokens must be reduced in order to run "
            "successfully.",
            "type": "tokens",
            "code": "rate_limit_exceeded",
        }
    }
    request = Request(messages=(Message(role="user", content="hello"),), max_output_tokens=16)
    sleeps: list[float] = []
    with FakeServer(Reply(status=429, body=body), Reply(status=429, body=body)) as server:
        model = OpenAICompatibleProvider(
            base_url=server.base_url,
            model="test-model",
            retry=RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05),
            sleep=sleeps.append,
        )
        with pytest.raises(ProviderError) as caught:
            model.complete(request)
        assert len(server.requests) == 1 and sleeps == []
    assert isinstance(caught.value, RequestOverRateLimitError)
    assert caught.value.requested == 342389 and caught.value.limit == 30000


@pytest.mark.parametrize("entry", LOCALIZED_OVERFLOW, ids=lambda entry: entry.provider)
def test_every_localised_example_is_an_overflow(entry: Any) -> None:
    assert entry.pattern.search(entry.example)
    assert isinstance(classify_error(400, entry.example), ContextOverflowError)


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("请求的 token 数 (300000) 超过了模型最大上下文长度 (262144 tokens)", 262144),
        ("コンテキスト長の上限を超えました", None),
        ("Die Eingabe überschreitet die maximale Kontextlänge des Modells (8192 Token).", 8192),
        ("Le prompt dépasse la fenêtre de contexte de 32768 tokens.", None),
        ("La solicitud excede la longitud máxima de contexto del modelo (8192 tokens).", 8192),
        ("A solicitação excede o comprimento máximo de contexto do modelo (8192 tokens).", 8192),
    ],
)
def test_other_languages_are_read(text: str, limit: int | None) -> None:
    error = classify_error(400, text)
    assert isinstance(error, ContextOverflowError)
    assert error.limit == limit


@pytest.mark.parametrize(
    "text",
    [
        "请求过于频繁，请稍后再试：超出每分钟 token 限制",
        "レート制限: 1分あたりのトークン数の上限を超えました",
        "Ratenlimit überschritten: zu viele Token pro Minute",
        "Limite de débit dépassée : trop de tokens par minute",
        "Límite de tasa excedido: demasiados tokens por minuto",
        "Limite de taxa excedido: tokens por minuto acima do permitido",
    ],
)
def test_throttling_in_other_languages_is_not_an_overflow(text: str) -> None:
    assert classify_error(400, text) is None
