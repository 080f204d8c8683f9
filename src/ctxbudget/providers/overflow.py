"""The documented table of real context-overflow error messages, and the classifier built on it.

Throttling that mentions tokens (Bedrock's "Too many tokens", per-minute limits) is not overflow.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ctxbudget.errors import ContextOverflowError

__all__ = [
    "OVERFLOW_MESSAGES",
    "THROTTLING_MESSAGES",
    "KnownMessage",
    "classify_error",
    "is_throttling",
    "overflow_limit",
    "server_error_text",
]

_N = r"\d[\d,]*"  # a token count, possibly with thousands separators ("40,000")
_PI = "Pi packages/ai/src/utils/overflow.ts (badlogic/pi-mono)"


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownMessage:
    """A provider's error message: the pattern we match, a real example and where it is from.

    Named groups ``limit`` (the real window) and ``prompt`` (the prompt's size) capture the
    numbers when the message states them.
    """

    provider: str
    pattern: re.Pattern[str]
    example: str
    source: str


def _entry(provider: str, regex: str, example: str, source: str) -> KnownMessage:
    pattern = re.compile(regex, re.IGNORECASE | re.DOTALL)
    return KnownMessage(provider=provider, pattern=pattern, example=example, source=source)


# Order matters: entries that capture numbers come before looser entries matching the same text.
OVERFLOW_MESSAGES: tuple[KnownMessage, ...] = (
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, you requested "
        rf"{_N} tokens \((?P<prompt>{_N}) in the messages",
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "(4000 in the messages, 1000 in the completion). Please reduce the length of the "
        "messages or completion.",
        "vLLM serving_engine.py (older releases); DeepSeek sends the same text",
    ),
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, your request has "
        rf"(?P<prompt>{_N}) input tokens",
        "This model's maximum context length is 32768 tokens. However, your request has 40000 "
        "input tokens. Please reduce the length of the input messages.",
        "vLLM serving_engine.py _validate_input (newer releases)",
    ),
    _entry(
        "vllm",
        rf"maximum context length is (?P<limit>{_N}) tokens and your request has "
        rf"(?P<prompt>{_N}) input tokens",
        "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
        "context length is 4096 tokens and your request has 3500 input tokens "
        "(1000 > 4096 - 3500).",
        "vLLM serving_engine.py: prompt fits but prompt + max_tokens does not",
    ),
    _entry(
        "openai",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, your messages "
        rf"resulted in (?P<prompt>{_N}) tokens",
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130000 tokens. Please reduce the length of the messages.",
        "OpenAI chat completions, error code context_length_exceeded",
    ),
    _entry(
        "openrouter",
        rf"maximum context length is (?P<limit>{_N}) tokens\. However, you requested about "
        rf"{_N} tokens \((?P<prompt>{_N}) of text input",
        "This endpoint's maximum context length is 8192 tokens. However, you requested about "
        "12000 tokens (10000 of text input, 2000 in the output). Please reduce the length of "
        'either one, or use the "middle-out" transform to compress your prompt automatically.',
        f"OpenRouter errors (all backends); {_PI}",
    ),
    _entry(
        "openai-compatible",
        rf"maximum context length is (?P<limit>{_N}) tokens",
        "This model's maximum context length is 131072 tokens",
        f"OpenAI, vLLM, OpenRouter, DeepSeek; {_PI}",
    ),
    _entry(
        "anthropic",
        rf"prompt is too long(?::\s*(?P<prompt>{_N}) tokens\s*>\s*(?P<limit>{_N}) maximum)?",
        "prompt is too long: 213462 tokens > 200000 maximum",
        f"Anthropic Messages API invalid_request_error; {_PI}",
    ),
    _entry(
        "anthropic",
        r"request_too_large",
        '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the '
        'maximum allowed number of bytes."}}',
        "Anthropic API errors: HTTP 413 request_too_large",
    ),
    _entry(
        "bedrock",
        r"input is too long for requested model",
        "ValidationException: Input is too long for requested model.",
        f"AWS Bedrock ValidationException; {_PI}",
    ),
    _entry(
        "openai",
        r"exceeds the context window",
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        f"OpenAI Responses and Completions APIs; {_PI}",
    ),
    _entry(
        "gemini",
        rf"input token count(?: \((?P<prompt>{_N})\))?.{{0,40}}?exceeds the maximum"
        rf"(?: number of tokens allowed \((?P<limit>{_N})\))?",
        "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).",
        f"Google Gemini INVALID_ARGUMENT; {_PI}",
    ),
    _entry(
        "xai",
        rf"maximum prompt length is (?P<limit>{_N})(?: but the request contains "
        rf"(?P<prompt>{_N}) tokens)?",
        "This model's maximum prompt length is 131072 but the request contains 537812 tokens.",
        f"xAI Grok; {_PI}",
    ),
    _entry(
        "groq",
        r"reduce the length of the messages",
        "Please reduce the length of the messages or completion.",
        f"Groq (code context_length_exceeded); {_PI}",
    ),
    _entry(
        "copilot",
        rf"(?:prompt token count of (?P<prompt>{_N}) )?exceeds the limit of (?P<limit>{_N})",
        "prompt token count of 130000 exceeds the limit of 128000",
        f"GitHub Copilot; {_PI}",
    ),
    _entry(
        "llamacpp",
        rf"request \((?P<prompt>{_N}) tokens\) exceeds the available context size "
        rf"\((?P<limit>{_N}) tokens\)",
        "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
        "llama.cpp server, error type exceed_context_size_error (with n_prompt_tokens, n_ctx)",
    ),
    _entry(
        "llamacpp",
        r"exceeds the available context size|exceed_context_size_error",
        "the request exceeds the available context size, try increasing it",
        f"llama.cpp server (older releases); {_PI}",
    ),
    _entry(
        "lmstudio",
        r"greater than the context length",
        "The number of tokens to keep from the initial prompt is greater than the context "
        "length. Try to load the model with a larger context length, or provide a shorter input",
        f"LM Studio; {_PI}",
    ),
    _entry(
        "minimax",
        r"context window exceeds limit",
        "invalid params, context window exceeds limit (2013)",
        f"MiniMax; {_PI}",
    ),
    _entry(
        "kimi",
        rf"exceeded model token limit(?::\s*(?P<limit>{_N})\s*\(requested:\s*(?P<prompt>{_N})\))?",
        "Your request exceeded model token limit: 262144 (requested: 300000)",
        f"Kimi For Coding (Moonshot); {_PI}",
    ),
    _entry(
        "mistral",
        rf"(?:prompt contains (?P<prompt>{_N}) tokens.{{0,60}}?)?too large for model with "
        rf"(?P<limit>{_N}) maximum context length",
        "Prompt contains 300000 tokens, too large for model with 131072 maximum context length",
        f"Mistral; {_PI}",
    ),
    _entry(
        "together",
        rf"input \((?P<prompt>{_N}) tokens\) is longer than the model'?s context length "
        rf"\((?P<limit>{_N}) tokens\)",
        "The input (210000 tokens) is longer than the model's context length (200000 tokens)",
        "Together AI; listed in later revisions of Pi's overflow table",
    ),
    _entry(
        "zai",
        r"model_context_window_exceeded",
        "model_context_window_exceeded",
        f"z.ai: a non-standard finish_reason on an overflowing request; {_PI}",
    ),
    _entry(
        "ollama",
        # "by N tokens" is the excess, not the window, so no limit can be read from it.
        r"prompt too long; exceeded (?:max )?context length",
        "prompt too long; exceeded max context length by 4096 tokens",
        "Ollama OpenAI-compatible API (num_ctx exceeded with truncation off)",
    ),
    _entry(
        "dashscope",
        # N is DashScope's largest input, a little under the window; adopting it is safe.
        rf"range of input length should be \[\s*1\s*,\s*(?P<limit>{_N})\s*\]",
        "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]",
        "Alibaba Cloud Model Studio (DashScope) error codes",
    ),
    _entry(
        "openai",
        r"context[_ ]length[_ ]exceeded",
        '{"error": {"message": "Input too long.", "type": "invalid_request_error", '
        '"param": "messages", "code": "context_length_exceeded"}}',
        f"OpenAI and Groq error code; generic fallback in {_PI}",
    ),
    _entry(
        "generic",
        r"too many tokens",
        "Request has too many tokens for this model",
        f"generic fallback in {_PI}",
    ),
    _entry(
        "generic",
        r"token limit exceeded",
        "token limit exceeded",
        f"generic fallback in {_PI}",
    ),
)

# Checked before the overflow table: a match here is never an overflow.
THROTTLING_MESSAGES: tuple[KnownMessage, ...] = (
    _entry(
        "bedrock",
        r"throttl",
        "ThrottlingException: Too many tokens, please wait before trying again.",
        "AWS Bedrock throttling; Pi's NON_OVERFLOW_PATTERNS",
    ),
    _entry(
        "openai",
        r"rate[ _-]?limit",
        "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
        "Limit 30000, Used 25000, Requested 8000. Please try again in 6s.",
        "OpenAI 429 rate_limit_exceeded",
    ),
    _entry(
        "anthropic",
        r"rate_limit_error",
        '{"type":"error","error":{"type":"rate_limit_error","message":"Number of request '
        'tokens has exceeded your per-minute rate limit"}}',
        "Anthropic 429 rate_limit_error",
    ),
    _entry(
        "groq",
        r"tokens per (?:min(?:ute)?|hour|day)|\bTP[MD]\b",
        "Request too large for model `llama-3.1-8b-instant` in organization `org_01` service "
        "tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 7000, please "
        "reduce your message size and try again.",
        "Groq 413 for a request over the per-minute token budget, not the window",
    ),
    _entry(
        "generic",
        r"too many requests",
        "Too Many Requests",
        "HTTP 429 reason phrase; Pi's NON_OVERFLOW_PATTERNS",
    ),
    _entry(
        "openai",
        r"quota|insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details.",
        "OpenAI 429 insufficient_quota",
    ),
    _entry(
        "gemini",
        r"resource[ _]exhausted",
        '{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", '
        '"status": "RESOURCE_EXHAUSTED"}}',
        "Google Gemini 429",
    ),
    _entry(
        "generic",
        r"service[ _]?unavailable",
        "ServiceUnavailableException: Too many connections, please wait before trying again.",
        "AWS Bedrock 503; Pi's NON_OVERFLOW_PATTERNS",
    ),
)


def is_throttling(text: str) -> bool:
    """True when the text reads as rate limiting or quota, which no compaction can cure."""
    return any(entry.pattern.search(text) for entry in THROTTLING_MESSAGES)


def classify_error(
    status: int | None, body_text: str, *, provider: str | None = None
) -> ContextOverflowError | None:
    """The overflow error a failed response stands for, or None when it is something else.

    ``body_text`` is the response body as sent (JSON or not). HTTP 429 and any throttling
    text are never overflow. HTTP 413 always is, and so is a body-less 400/413 from Cerebras.
    """
    text = body_text or ""
    if status == 429 or is_throttling(text):
        return None
    limit, prompt = _numbers(text)
    if _match(text) is None and not _overflow_status(status, text, provider):
        return None
    return ContextOverflowError(
        _overflow_message(provider, limit, prompt, text),
        status=status,
        limit=limit,
        prompt_tokens=prompt,
    )


def overflow_limit(text: str) -> int | None:
    """The real context window an overflow message states, or None when it states none."""
    return _numbers(text)[0]


def server_error_text(body_text: str, max_chars: int = 200) -> str:
    """The server's own error sentence from a body of any common error shape, on one line."""
    message = _json_message(body_text)
    text = " ".join((message if message is not None else body_text).split())
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return text or "(empty body)"


def _match(text: str) -> re.Match[str] | None:
    for entry in OVERFLOW_MESSAGES:
        found = entry.pattern.search(text)
        if found is not None:
            return found
    return None


def _overflow_status(status: int | None, text: str, provider: str | None) -> bool:
    if status == 413:
        return True
    # Cerebras answers an overflow with a bare 400 or 413 and no body (Pi overflow.ts).
    return provider == "cerebras" and status in (400, 413) and not text.strip()


def _numbers(text: str) -> tuple[int | None, int | None]:
    """(limit, prompt tokens) from the first table entry that states them, else from JSON."""
    limit = prompt = None
    for entry in OVERFLOW_MESSAGES:
        found = entry.pattern.search(text)
        if found is None:
            continue
        groups = found.groupdict()
        limit = limit if limit is not None else _int(groups.get("limit"))
        prompt = prompt if prompt is not None else _int(groups.get("prompt"))
        if limit is not None:
            break
    fields = _llamacpp_fields(text)
    return (
        limit if limit is not None else fields.get("n_ctx"),
        prompt if prompt is not None else fields.get("n_prompt_tokens"),
    )


def _int(digits: str | None) -> int | None:
    """A stated count; a stated 0 is no window at all, so it reads as unknown."""
    return (int(digits.replace(",", "")) or None) if digits else None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _llamacpp_fields(text: str) -> dict[str, int]:
    """llama.cpp's exceed_context_size_error carries ``n_ctx`` and ``n_prompt_tokens``."""
    body = _loads(text)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return {}
    return {
        key: value
        for key in ("n_ctx", "n_prompt_tokens")
        if isinstance(value := error.get(key), int) and not isinstance(value, bool) and value > 0
    }


def _json_message(text: str) -> str | None:
    """``error.message``, ``error`` (Ollama), ``message`` (vLLM) or ``detail``, when present."""
    body = _loads(text)
    if isinstance(body, list) and body:
        body = body[0]  # Gemini wraps its error in a one-element list on some endpoints
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    for candidate in (error, body.get("message"), body.get("detail")):
        if isinstance(candidate, str) and candidate.strip():
            return candidate
    return None


def _overflow_message(
    provider: str | None, limit: int | None, prompt: int | None, text: str
) -> str:
    numbers = [f"window {limit:,} tokens"] if limit is not None else []
    numbers += [f"prompt {prompt:,} tokens"] if prompt is not None else []
    detail = f" ({', '.join(numbers)})" if numbers else ""
    server = provider or "model"
    return (
        f"context overflow: the {server} server rejected the request as longer than its "
        f"context window{detail}: {server_error_text(text)}"
    )
