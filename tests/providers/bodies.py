"""Real response bodies of OpenAI-compatible servers, as they send them, for the fake server."""

from __future__ import annotations

from typing import Any

# OpenAI API reference, "Create chat completion" example response (cached_tokens set to a
# non-zero value so the cache accounting is exercised).
OPENAI_CHAT: dict[str, Any] = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I assist you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 8, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 4,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
}

# vLLM with a reasoning parser (qwen3) answering with a tool call.
VLLM_TOOL_CALL: dict[str, Any] = {
    "id": "chatcmpl-8c5b0d",
    "object": "chat.completion",
    "created": 1745000000,
    "model": "Qwen/Qwen3-8B",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "reasoning_content": "The user wants the file; read it first.",
                "content": None,
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-1a2b",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 812, "total_tokens": 851, "completion_tokens": 39},
    "prompt_logprobs": None,
}

# llama.cpp's llama-server reports all-zero usage in some builds and modes.
LLAMACPP_ZERO_USAGE: dict[str, Any] = {
    "choices": [
        {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": "ok"}}
    ],
    "created": 1745000000,
    "model": "gpt-3.5-turbo",
    "object": "chat.completion",
    "usage": {"completion_tokens": 0, "prompt_tokens": 0, "total_tokens": 0},
    "id": "chatcmpl-x",
}

VLLM_OVERFLOW: dict[str, Any] = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 "
    "tokens (4488 in the messages, 512 in the completion). Please reduce the length of the "
    "messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}

OLLAMA_OVERFLOW: dict[str, Any] = {
    "error": "prompt too long; exceeded max context length by 312 tokens"
}

LLAMACPP_OVERFLOW: dict[str, Any] = {
    "error": {
        "code": 400,
        "message": "request (4476 tokens) exceeds the available context size (4096 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4476,
        "n_ctx": 4096,
    }
}

OPENAI_OVERFLOW: dict[str, Any] = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 131000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}

OPENROUTER_OVERFLOW: dict[str, Any] = {
    "error": {
        "message": "This endpoint's maximum context length is 32768 tokens. However, you "
        "requested about 40000 tokens (39000 of text input, 1000 in the output). Please reduce "
        'the length of either one, or use the "middle-out" transform to compress your prompt '
        "automatically.",
        "code": 400,
    }
}

ANTHROPIC_413: dict[str, Any] = {
    "type": "error",
    "error": {
        "type": "request_too_large",
        "message": "Request exceeds the maximum allowed number of bytes.",
    },
}

OPENAI_RATE_LIMIT: dict[str, Any] = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-abc on tokens per min "
        "(TPM): Limit 30000, Used 25000, Requested 8000. Please try again in 6s.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}

OPENAI_QUOTA: dict[str, Any] = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}

BEDROCK_THROTTLE: dict[str, Any] = {
    "error": {"message": "ThrottlingException: Too many tokens, please wait before trying again."}
}


# --- streamed replies (chat.completion.chunk), in the shapes the servers send ---------------


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def _usage_chunk(usage: dict[str, Any]) -> dict[str, Any]:
    # stream_options.include_usage: a last chunk with no choices and the whole request's usage.
    return _chunk({}) | {"choices": [], "usage": usage}


# OpenAI API reference, "Create chat completion" streaming example, split into more pieces,
# with include_usage on (null usage on every chunk but the last, as OpenAI sends it).
OPENAI_STREAM: tuple[dict[str, Any], ...] = (
    _chunk({"role": "assistant", "content": "", "refusal": None}, usage=None),
    _chunk({"content": "Hello"}, usage=None),
    _chunk({"content": "! How can"}, usage=None),
    _chunk({"content": " I assist you"}, usage=None),
    _chunk({"content": " today?"}, usage=None),
    _chunk({}, "stop", usage=None),
    _usage_chunk(OPENAI_CHAT["usage"]),
)

# vLLM with the qwen3 reasoning parser and the hermes tool parser: reasoning first, then one
# tool call whose arguments arrive in pieces (index-based deltas), then the usage chunk.
VLLM_TOOL_STREAM: tuple[dict[str, Any], ...] = (
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "The user wants the file;"}),
    _chunk({"reasoning_content": " read it first."}),
    _chunk(
        {
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-1a2b",
                    "type": "function",
                    "index": 0,
                    "function": {"name": "read_file"},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"src/app.py"}'}}]}),
    _chunk({"content": None}, "tool_calls"),
    _usage_chunk(VLLM_TOOL_CALL["usage"]),
)

# vLLM reports a failure that happens after the stream started as an error event.
VLLM_STREAM_ERROR: dict[str, Any] = {
    "error": {
        "object": "error",
        "message": "The engine crashed; please retry.",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
}
