"""Provider usage readers, tested on response bodies from the providers' documentation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbudget.budget.usage import (
    FAR_BELOW_MIN_TOKENS,
    FAR_BELOW_SHARE,
    prompt_gap,
    usage_from_anthropic,
    usage_from_any,
    usage_from_deepseek,
    usage_from_gemini,
    usage_from_ollama,
    usage_from_openai,
    usage_from_openai_responses,
)
from ctxbudget.errors import MessageFormatError
from ctxbudget.messages.usage import Usage

# OpenAI prompt-caching guide (Chat Completions): prompt_tokens includes the cached 1,920.
OPENAI_CHAT: dict[str, Any] = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
}

# OpenAI reasoning guide (Responses API): 1,024 of the 1,186 output tokens are reasoning.
OPENAI_RESPONSES: dict[str, Any] = {
    "object": "response",
    "status": "completed",
    "usage": {
        "input_tokens": 75,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1186,
        "output_tokens_details": {"reasoning_tokens": 1024},
        "total_tokens": 1261,
    },
}

# Anthropic prompt-caching docs (mixed 5m/1h TTL example): input_tokens excludes the cache.
ANTHROPIC: dict[str, Any] = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "ok"}],
    "usage": {
        "input_tokens": 2048,
        "cache_read_input_tokens": 1800,
        "cache_creation_input_tokens": 248,
        "output_tokens": 503,
        "cache_creation": {"ephemeral_5m_input_tokens": 148, "ephemeral_1h_input_tokens": 100},
    },
}

# Google's Gemini 3 Flash example: total 890 = prompt 34 + candidates 418 + thoughts 438.
GEMINI: dict[str, Any] = {
    "candidates": [{"content": {"parts": [{"text": "ok"}], "role": "model"}, "index": 0}],
    "usageMetadata": {
        "promptTokenCount": 34,
        "candidatesTokenCount": 418,
        "totalTokenCount": 890,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 34}],
        "thoughtsTokenCount": 438,
    },
    "modelVersion": "gemini-3-flash-preview",
}

# Ollama docs, API usage page: a non-streaming /api/generate response.
OLLAMA: dict[str, Any] = {
    "model": "gemma3",
    "created_at": "2025-10-17T23:14:07.414671Z",
    "response": "Hello! How can I help you today?",
    "done": True,
    "done_reason": "stop",
    "total_duration": 174560334,
    "load_duration": 101397084,
    "prompt_eval_count": 11,
    "prompt_eval_duration": 13074791,
    "eval_count": 18,
    "eval_duration": 52479709,
}

# DeepSeek API docs, chat completion example: prompt_tokens = hit + miss.
DEEPSEEK: dict[str, Any] = {
    "object": "chat.completion",
    "model": "deepseek-chat",
    "usage": {
        "prompt_tokens": 10,
        "completion_tokens": 11,
        "total_tokens": 21,
        "prompt_tokens_details": {"cached_tokens": 0},
        "prompt_cache_hit_tokens": 0,
        "prompt_cache_miss_tokens": 10,
    },
}


def test_openai_prompt_tokens_already_include_the_cache() -> None:
    u = usage_from_openai(OPENAI_CHAT)
    assert u.input_tokens == 2006  # not 2006 + 1920: the Pi/OpenCode double count
    assert u.cache_read_tokens == 1920
    assert u.output_tokens == 300
    assert u.reasoning_tokens == 0
    assert u.total_tokens == OPENAI_CHAT["usage"]["total_tokens"]


def test_openai_responses_reads_reasoning_as_part_of_output() -> None:
    u = usage_from_openai_responses(OPENAI_RESPONSES)
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens) == (75, 1186, 1024)
    assert u.total_tokens == OPENAI_RESPONSES["usage"]["total_tokens"]


def test_anthropic_adds_cache_writes_and_reads_back_in() -> None:
    u = usage_from_anthropic(ANTHROPIC)
    assert u.input_tokens == 2048 + 1800 + 248
    assert u.cache_read_tokens == 1800
    assert u.cache_write_tokens == 248  # missing these makes compaction too late
    assert u.output_tokens == 503


def test_gemini_output_is_candidates_plus_thoughts() -> None:
    u = usage_from_gemini(GEMINI)
    assert u.input_tokens == 34
    assert u.output_tokens == 418 + 438
    assert u.reasoning_tokens == 438
    assert u.total_tokens == GEMINI["usageMetadata"]["totalTokenCount"]


def test_gemini_cached_content_is_inside_the_prompt_count() -> None:
    body = {"promptTokenCount": 5000, "cachedContentTokenCount": 4200, "candidatesTokenCount": 30}
    u = usage_from_gemini(body)
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (5000, 4200, 30)


def test_ollama_reads_eval_counts() -> None:
    u = usage_from_ollama(OLLAMA)
    assert (u.input_tokens, u.output_tokens) == (11, 18)


def test_deepseek_reads_cache_hits() -> None:
    u = usage_from_deepseek(DEEPSEEK)
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (10, 0, 11)
    hit = {"prompt_cache_hit_tokens": 1000, "prompt_cache_miss_tokens": 24, "completion_tokens": 5}
    u = usage_from_deepseek(hit)
    assert (u.input_tokens, u.cache_read_tokens) == (1024, 1000)


def test_bare_usage_object_reads_like_the_response_body() -> None:
    assert usage_from_openai(OPENAI_CHAT["usage"]) == usage_from_openai(OPENAI_CHAT)
    assert usage_from_anthropic(ANTHROPIC["usage"]) == usage_from_anthropic(ANTHROPIC)


@pytest.mark.parametrize(
    ("body", "reader"),
    [
        (OPENAI_CHAT, usage_from_openai),
        (OPENAI_RESPONSES, usage_from_openai_responses),
        (ANTHROPIC, usage_from_anthropic),
        (GEMINI, usage_from_gemini),
        (OLLAMA, usage_from_ollama),
        (DEEPSEEK, usage_from_deepseek),
    ],
)
def test_usage_from_any_detects_each_shape(body: dict[str, Any], reader: Any) -> None:
    assert usage_from_any(body) == reader(body)


@pytest.mark.parametrize("body", [{}, {"usage": {}}, {"usage": {"tokens": 3}}])
def test_usage_from_any_rejects_unknown_shapes(body: dict[str, Any]) -> None:
    with pytest.raises(MessageFormatError, match="no known usage shape"):
        usage_from_any(body)


@pytest.mark.parametrize(
    ("reader", "body", "field"),
    [
        (usage_from_openai, {"prompt_tokens": -1}, "usage.prompt_tokens"),
        (usage_from_openai, {"prompt_tokens": "12"}, "usage.prompt_tokens"),
        (usage_from_openai, {"prompt_tokens": True}, "usage.prompt_tokens"),
        (usage_from_openai, {"prompt_tokens": 1.5}, "usage.prompt_tokens"),
        (usage_from_openai, {"completion_tokens": 3}, "usage.prompt_tokens"),
        (
            usage_from_openai,
            {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}},
            "usage.prompt_tokens_details.cached_tokens",
        ),
        (
            usage_from_openai,
            {"prompt_tokens": 5, "prompt_tokens_details": [1]},
            "usage.prompt_tokens_details",
        ),
        (
            usage_from_openai_responses,
            {
                "input_tokens": 5,
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            "usage.output_tokens_details.reasoning_tokens",
        ),
        (
            usage_from_anthropic,
            {"input_tokens": 5, "cache_read_input_tokens": -3},
            "usage.cache_read_input_tokens",
        ),
        (usage_from_anthropic, {"usage": [1, 2]}, "usage"),
        (usage_from_gemini, {"promptTokenCount": None}, "usageMetadata.promptTokenCount"),
        (
            usage_from_gemini,
            {"promptTokenCount": 3, "thoughtsTokenCount": "x"},
            "usageMetadata.thoughtsTokenCount",
        ),
        (usage_from_ollama, {"eval_count": -2}, "response.eval_count"),
        (usage_from_ollama, "not a dict", "response"),
        (usage_from_deepseek, {"completion_tokens": 1}, "usage.prompt_tokens"),
        (
            usage_from_deepseek,
            {"prompt_tokens": 4, "prompt_cache_hit_tokens": 9},
            "usage.prompt_cache_hit_tokens",
        ),
    ],
)
def test_malformed_usage_names_the_field(reader: Any, body: Any, field: str) -> None:
    with pytest.raises(MessageFormatError) as info:
        reader(body)
    assert info.value.path == field
    assert "\n" not in str(info.value)


@settings(max_examples=60)
@given(
    uncached=st.integers(0, 10**6),
    write=st.integers(0, 10**6),
    read=st.integers(0, 10**6),
    output=st.integers(0, 10**5),
)
def test_anthropic_and_openai_agree_on_the_same_prompt(
    uncached: int, write: int, read: int, output: int
) -> None:
    """The same prompt reported both ways gives the same context size."""
    anthropic = usage_from_anthropic(
        {
            "input_tokens": uncached,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "output_tokens": output,
        }
    )
    openai = usage_from_openai(
        {
            "prompt_tokens": uncached + write + read,
            "completion_tokens": output,
            "prompt_tokens_details": {"cached_tokens": read},
        }
    )
    assert anthropic.context_tokens == openai.context_tokens
    assert anthropic.cache_read_tokens == openai.cache_read_tokens
    assert isinstance(anthropic, Usage)


def test_a_prompt_is_far_below_only_under_the_share_and_the_tokens() -> None:
    gap = prompt_gap(1_000, 3_000)  # a word count of a 3,000-token prompt
    assert gap is not None and (gap.reported, gap.counted) == (1_000, 3_000)
    assert "1,000-token prompt" in gap.reason and "3,000" in gap.reason
    share = int(3_000 * FAR_BELOW_SHARE)
    assert prompt_gap(share, 3_000) is None  # 90% is close enough
    assert prompt_gap(share - 1, 3_000) is not None
    assert prompt_gap(3_001, 3_000) is None  # a server's BOS on top
    assert prompt_gap(2_999, 3_000) is None  # ...or left out
    # a tiny prompt's slack: under 90%, yet too few tokens short to be a gap
    assert prompt_gap(100 - FAR_BELOW_MIN_TOKENS + 1, 100) is None
    assert prompt_gap(100 - FAR_BELOW_MIN_TOKENS - 1, 100) is not None
    assert prompt_gap(0, 3_000) is None and prompt_gap(1_000, 0) is None  # no count at all
