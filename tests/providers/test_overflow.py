"""The overflow table and classifier: every real overflow message, every throttling message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.errors import ContextOverflowError, RequestOverRateLimitError
from ctxbudget.providers.overflow import (
    OVERFLOW_MESSAGES,
    THROTTLING_MESSAGES,
    KnownMessage,
    classify_error,
    is_throttling,
    overflow_limit,
    server_error_text,
)


def _id(entry: KnownMessage) -> str:
    return f"{entry.provider}:{entry.example[:40]}"


@pytest.mark.parametrize("entry", OVERFLOW_MESSAGES, ids=_id)
def test_every_overflow_example_is_an_overflow(entry: KnownMessage) -> None:
    assert entry.pattern.search(entry.example), "the entry's own regex must match its example"
    error = classify_error(400, entry.example, provider=entry.provider)
    assert isinstance(error, ContextOverflowError)
    assert error.status == 400
    assert "\n" not in str(error)


@pytest.mark.parametrize("entry", OVERFLOW_MESSAGES, ids=_id)
def test_every_overflow_example_is_found_inside_a_json_error_body(entry: KnownMessage) -> None:
    body = json.dumps({"error": {"message": entry.example, "type": "invalid_request_error"}})
    assert isinstance(classify_error(400, body), ContextOverflowError)


@pytest.mark.parametrize("entry", THROTTLING_MESSAGES, ids=_id)
@pytest.mark.parametrize("status", [400, 413, 429, 503, None])
def test_no_throttling_message_is_an_overflow(entry: KnownMessage, status: int | None) -> None:
    assert is_throttling(entry.example)
    assert classify_error(status, entry.example, provider=entry.provider) is None


@pytest.mark.parametrize("throttle", THROTTLING_MESSAGES, ids=_id)
def test_throttling_wins_over_overflow_words_in_the_same_text(throttle: KnownMessage) -> None:
    text = f"{throttle.example} (too many tokens; token limit exceeded)"
    assert classify_error(400, text) is None


@pytest.mark.parametrize(
    "text",
    [
        "ThrottlingException: Too many tokens, please wait before trying again.",
        "Throttling error: Too many tokens, please wait before trying again.",
        "429: rate limit exceeded",
        "Rate limit exceeded: free-models-per-day",
        "Requests rate limit exceeded",
        "You exceeded your current quota, please check your plan and billing details.",
    ],
)
def test_real_throttling_texts_are_not_overflow(text: str) -> None:
    assert classify_error(400, text) is None


@pytest.mark.parametrize(
    ("text", "limit", "prompt"),
    [
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion). Please reduce the length of "
            "the messages or completion.",
            4096,
            4000,
        ),
        (
            "This model's maximum context length is 32768 tokens. However, your request has "
            "40000 input tokens. Please reduce the length of the input messages.",
            32768,
            40000,
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
            "context length is 4096 tokens and your request has 3500 input tokens "
            "(1000 > 4096 - 3500).",
            4096,
            3500,
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens. Please reduce the length of the messages.",
            128000,
            130000,
        ),
        (
            "This endpoint's maximum context length is 8192 tokens. However, you requested about "
            "12000 tokens (10000 of text input, 2000 in the output).",
            8192,
            10000,
        ),
        ("prompt is too long: 213462 tokens > 200000 maximum", 200000, 213462),
        ("prompt is too long: 213,462 tokens > 200,000 maximum", 200000, 213462),
        (
            "The input token count (1196265) exceeds the maximum number of tokens allowed "
            "(1048575).",
            1048575,
            1196265,
        ),
        (
            "This model's maximum prompt length is 131072 but the request contains 537812 tokens.",
            131072,
            537812,
        ),
        ("prompt token count of 130000 exceeds the limit of 128000", 128000, 130000),
        (
            "request (4476 tokens) exceeds the available context size (4096 tokens), try "
            "increasing it",
            4096,
            4476,
        ),
        ("Your request exceeded model token limit: 262144 (requested: 300000)", 262144, 300000),
        (
            "Prompt contains 300000 tokens, too large for model with 131072 maximum context length",
            131072,
            300000,
        ),
        (
            "The input (210000 tokens) is longer than the model's context length (200000 tokens)",
            200000,
            210000,
        ),
        ("Range of input length should be [1, 129024]", 129024, None),
        ("prompt too long; exceeded max context length by 4096 tokens", None, None),
        ("Your input exceeds the context window of this model.", None, None),
        ("the request exceeds the available context size, try increasing it", None, None),
    ],
)
def test_the_stated_window_and_prompt_are_read(
    text: str, limit: int | None, prompt: int | None
) -> None:
    error = classify_error(400, text)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.prompt_tokens) == (limit, prompt)
    assert overflow_limit(text) == limit


def test_real_vllm_error_body() -> None:
    body = json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4200 in the messages, 800 in the completion). Please reduce "
            "the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    )
    error = classify_error(400, body, provider="vllm")
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.prompt_tokens) == (4096, 4200)
    assert "vllm server" in str(error) and "4,096" in str(error)


def test_llamacpp_body_numbers_come_from_its_fields() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9001,
                "n_ctx": 8192,
            }
        }
    )
    error = classify_error(400, body, provider="llamacpp")
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.prompt_tokens) == (8192, 9001)


def test_ollama_error_shape() -> None:
    body = json.dumps({"error": "prompt too long; exceeded max context length by 17 tokens"})
    error = classify_error(400, body, provider="ollama")
    assert isinstance(error, ContextOverflowError)
    assert error.limit is None, "17 is the excess, not the window"
    assert str(error).endswith("prompt too long; exceeded max context length by 17 tokens")


def test_openai_error_code_alone_is_an_overflow() -> None:
    body = json.dumps(
        {
            "error": {
                "message": "Input too long.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    )
    assert isinstance(classify_error(400, body, provider="openai"), ContextOverflowError)


@pytest.mark.parametrize(
    "body", ["", "Request Entity Too Large", '{"error":{"type":"request_too_large"}}']
)
def test_http_413_is_an_overflow(body: str) -> None:
    error = classify_error(413, body)
    assert isinstance(error, ContextOverflowError)
    assert error.status == 413


def test_cerebras_bodyless_400_is_an_overflow_only_for_cerebras() -> None:
    assert isinstance(classify_error(400, "", provider="cerebras"), ContextOverflowError)
    assert classify_error(400, "", provider="openai") is None
    assert classify_error(400, "") is None


_DEEP_BODIES = ["[" * 5000 + "]" * 5000, '{"error":' * 3000 + "1" + "}" * 3000]


@pytest.mark.parametrize("body", _DEEP_BODIES, ids=["list", "object"])
def test_deeply_nested_bodies_read_as_unparseable_text(body: str) -> None:
    assert classify_error(400, "{not json") is None  # what an unparseable body classifies as
    assert classify_error(400, body) is None
    assert isinstance(classify_error(413, body), ContextOverflowError)


def test_http_429_is_never_an_overflow() -> None:
    assert classify_error(429, "prompt is too long: 10 tokens > 5 maximum") is None


@pytest.mark.parametrize(
    "text",
    [
        '{"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}}',
        '{"error": "model \\"qwen3:8b\\" not found, try pulling it first"}',
        "messages[0].content is required",
        "Internal Server Error",
        "",
    ],
)
def test_unrelated_errors_are_not_overflow(text: str) -> None:
    assert classify_error(400, text) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"error": {"message": "bad thing", "type": "x"}}', "bad thing"),
        ('{"error": "ollama says no"}', "ollama says no"),
        ('{"object": "error", "message": "vllm says no", "code": 400}', "vllm says no"),
        ('{"detail": "not found"}', "not found"),
        ('[{"error": {"code": 400, "message": "gemini says no"}}]', "gemini says no"),
        (
            "<html>\n<body>502 Bad Gateway</body>\n</html>",
            "<html> <body>502 Bad Gateway</body> </html>",
        ),
        ("", "(empty body)"),
    ],
)
def test_server_error_text_reads_common_shapes(body: str, expected: str) -> None:
    assert server_error_text(body) == expected


def test_server_error_text_is_short() -> None:
    text = server_error_text("x" * 10_000, max_chars=50)
    assert len(text) == 50 and text.endswith("...")


# Random text, and text made of the words the classifier reads numbers from.
ERROR_TEXT = st.text(max_size=300) | st.from_regex(
    r"(Requested|Limit|TPM|tokens|maximum|exceeds|>|,| |\d{1,7}){1,16}", fullmatch=True
)


@settings(max_examples=200)
@given(status=st.none() | st.integers(100, 599), text=ERROR_TEXT)
def test_classifier_never_fails_and_stays_on_one_line(status: int | None, text: str) -> None:
    error = classify_error(status, text)
    assert error is None or isinstance(error, ContextOverflowError | RequestOverRateLimitError)
    if error is not None:
        assert "\n" not in str(error)
        assert error.limit is None or error.limit > 0


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        (
            {
                "error": {
                    "message": "Prompt tokens (9000) exceeds context size (8192)",
                    "type": "context_exceeded",
                    "n_prompt_tokens": 9000,
                    "n_ctx": 8192,
                }
            },
            8192,
        ),
        ({"error": {"message": "bad request", "type": "context_exceeded", "n_ctx": 4096}}, 4096),
        ({"code": "1261", "message": "请求参数错误"}, None),
        (
            {
                "error": {
                    "code": 400,
                    "message": "Request contains 2000000 tokens; the model accepts 1048576.",
                    "status": "INVALID_ARGUMENT",
                }
            },
            None,
        ),
    ],
    ids=["ds4-type-and-n_ctx", "type-alone", "zhipu-code-1261", "gemini-invalid-argument"],
)
def test_error_codes_and_structured_bodies_are_overflow(body: object, limit: int | None) -> None:
    text = json.dumps(body, ensure_ascii=False)
    error = classify_error(400, text)
    assert isinstance(error, ContextOverflowError)
    assert error.limit == limit


@pytest.mark.parametrize(
    "body",
    [
        {"code": "1210", "message": "API 调用参数有误，请检查文档。"},
        {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}},
        {
            "error": {
                "code": 400,
                "message": "max_output_tokens must be less than 65537 tokens",
                "status": "INVALID_ARGUMENT",
            }
        },
    ],
    ids=["zhipu-bad-params", "gemini-bad-key", "gemini-output-limit"],
)
def test_other_codes_and_invalid_arguments_are_not_overflow(body: object) -> None:
    assert classify_error(400, json.dumps(body, ensure_ascii=False)) is None


@pytest.mark.parametrize(
    ("text", "overflow"),
    [
        (
            "Invalid 'messages[17].content': string too long. Expected a string with maximum "
            "length 1048576, but got a string with length 1744259 instead.",
            True,
        ),
        (
            "Invalid 'tools[0].function.name': string too long. Expected a string with maximum "
            "length 64, but got a string with length 80 instead.",
            False,
        ),
        (
            "Invalid 'user': string too long. Expected a string with maximum length 64, but got "
            "a string with length 70 instead.",
            False,
        ),
    ],
)
def test_a_string_too_long_is_an_overflow_only_in_the_messages(text: str, overflow: bool) -> None:
    # litellm excludes the 'user' parameter for the same reason: compaction cannot shorten it.
    assert isinstance(classify_error(400, text), ContextOverflowError) is overflow
