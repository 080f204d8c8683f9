"""Which failed responses are context overflows: the documented tables, then a structural fallback.

Throttling, billing and output-limit errors that mention tokens are never overflow; a request
larger than a per-minute token limit is its own error, which no wait can cure.
"""

from __future__ import annotations

import re
from typing import Any

from ctxbudget.errors import ContextOverflowError, RequestOverRateLimitError
from ctxbudget.messages.jsondepth import load_json
from ctxbudget.providers.overflow_table import (
    BILLING_MESSAGES,
    LOCALIZED_OVERFLOW,
    OVERFLOW_MESSAGES,
    RATE_WINDOW,
    THROTTLING_MESSAGES,
    KnownMessage,
    N,
)

__all__ = [
    "LOCALIZED_OVERFLOW",
    "OVERFLOW_MESSAGES",
    "THROTTLING_MESSAGES",
    "KnownMessage",
    "classify_error",
    "is_structural_overflow",
    "is_throttling",
    "overflow_limit",
    "server_error_text",
]

_FLAGS = re.IGNORECASE | re.DOTALL
_NUM = rf"(?<![\d,.])({N})"  # a whole count, never the tail of a longer number

# Error codes and types that mean overflow wherever they sit in a JSON body. llama.cpp's
# exceed_context_size_error and DS4's context_exceeded carry n_ctx; 1261 is Zhipu's code.
_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",
        "exceed_context_size_error",
        "context_exceeded",
        "request_too_large",
        "model_context_window_exceeded",
        "context_window_exceeded",
        "1261",
    }
)

# The structural fallback: an overflow subject and an overflow shape in one sentence.
_SUBJECT = re.compile(r"\b(?:tokens?|context|prompt|inputs?|messages?|length)\b", _FLAGS)
_SHAPE = re.compile(
    r"\bexceed(?:s|ed|ing)?\b|\btoo (?:long|large|big|many)\b"
    r"|\b(?:more|greater|larger|longer) than\b|\bmax(?:imum)?\b|\blimits?\b|\boverflow(?:s|ed)?\b"
    r"|\d\s*>\s*\d",
    _FLAGS,
)
# Vetoes for the fallback only: a too-large max_tokens, a window too small for the client, an
# image too big, Go's "context deadline exceeded" (a timeout): compaction cures none of them.
_NOT_OVERFLOW = re.compile(
    r"max_(?:new_|completion_|output_)?tokens|maxoutputtokens|\boutput tokens?\b"
    r"|\bcompletion tokens?\b|too small|\bminimum\b|\bimages?\b|\bpixels?\b|\bupload\b"
    r"|\bdeadline\b|\btimed? ?out\b|invalid '(?!(?:messages|input)\b)",
    _FLAGS,
)
_SENTENCE_END = re.compile(r"(?<!\d)[.;!?](?!\d)|\n")

# The stated window, for messages no table entry reads: "X > Y", "X exceeds ... Y",
# "while limit is Y", "maximum ... Y tokens", "(context length Y)". "by N tokens" is an excess,
# never a window.
_TOKENS_WORD = re.compile(r"\btokens?\b|トークン|토큰", _FLAGS)
_OTHER_UNITS = re.compile(r"\b(?:characters?|chars|bytes|strings?|pixels?|[kmg]i?b)\b", _FLAGS)
_NOT_TOKENS = r"(?!\s*(?:bytes|characters|chars|pixels|[kmg]i?b)\b)"
_LIMIT = rf"(?<!by )(?<!by \(){_NUM}{_NOT_TOKENS}"
_STATED_LIMITS = tuple(
    re.compile(regex, _FLAGS)
    for regex in (
        rf"{_NUM}(?:\s*tokens?)?(?:\s*\+\s*{N})?\s*>\s*{_LIMIT}",
        rf"{_NUM}[^0-9]{{0,25}}?(?:exceeds?|exceeded|is (?:more|greater|larger|longer) than)\b"
        rf"[^0-9]{{0,60}}?\(?{_LIMIT}",
        rf"\blimit (?:is|of)\s*{_LIMIT}",
        rf"(?:\bmax(?:imum|imal|imale|imo|ima)?\b|\bmáxim[ao]\b|\blimite?\b|límite|上限|最大)"
        rf"[^0-9().,;:]{{0,40}}?\(?{_LIMIT}",
        # A window stated in parentheses after the overflow: "... too long (context length N)".
        rf"\(\s*(?:the\s+)?(?:model'?s?\s+)?context (?:length|size|window)\s*(?:of|is|=|:)?\s*"
        rf"{_LIMIT}(?:\s*tokens?)?\s*\)",
    )
)

# A request bigger than a rate limit: per-minute (or hour/day) words and Requested > Limit.
_RATE_WINDOW = re.compile(RATE_WINDOW, _FLAGS)
_REQUESTED = re.compile(rf"\brequested\b[:\s]*{_NUM}", _FLAGS)
_RATE_LIMIT = re.compile(rf"\blimit\b[:\s]*{_NUM}", _FLAGS)
_OVER_RATE = re.compile(rf"{_NUM}\s*>\s*{_NUM}\s*T[PR][MD]\b", _FLAGS)
_TOO_LARGE = re.compile(r"\brequest too large\b", _FLAGS)

# Error sentences are short; a huge body is an echo or an HTML page. Reading its head and tail
# keeps the work per response bounded (each regex is linear, but there are dozens).
_HEAD, _TAIL = 24_576, 8_192


def _bounded(text: str) -> str:
    return text if len(text) <= _HEAD + _TAIL else f"{text[:_HEAD]}\n{text[-_TAIL:]}"


def is_throttling(text: str) -> bool:
    """True when the text reads as rate limiting or quota, which no compaction can cure."""
    return _any(THROTTLING_MESSAGES, _bounded(text))


def is_structural_overflow(text: str) -> bool:
    """True when one sentence speaks of tokens/context/length with an exceeds/too-long shape.

    The fallback for wordings no table names; throttling, billing, output-limit and image
    errors never pass it.
    """
    text = _bounded(text)
    if is_throttling(text) or _any(BILLING_MESSAGES, text):
        return False
    return _structural(text)


def _structural(text: str) -> bool:
    """`is_structural_overflow` without its veto, for callers that already ran it."""
    message = _json_message(text) or text
    for sentence in _SENTENCE_END.split(message):
        if _SUBJECT.search(sentence) and _SHAPE.search(sentence):
            return _NOT_OVERFLOW.search(message) is None
    return False


def classify_error(
    status: int | None, body_text: str, *, provider: str | None = None
) -> ContextOverflowError | RequestOverRateLimitError | None:
    """The overflow or over-rate-limit error a failed response stands for, else None.

    ``body_text`` is the response body as sent (JSON or not). A request larger than a
    per-minute token limit is a `RequestOverRateLimitError` (never retried). Otherwise HTTP
    402/429, throttling and billing text are never overflow; a documented message, an overflow
    error code, a localised phrasing, the structural fallback, HTTP 413 or a body-less
    400/413 from Cerebras is a `ContextOverflowError`.
    """
    text = _bounded(body_text or "")
    over_rate = _over_rate_limit(status, text, provider)
    if over_rate is not None:
        return over_rate
    if status in (402, 429) or is_throttling(text) or _any(BILLING_MESSAGES, text):
        return None
    if not _is_overflow(status, text, provider):
        return None
    limit, prompt = _numbers(text)
    return ContextOverflowError(
        _overflow_message(provider, limit, prompt, text),
        status=status,
        limit=limit,
        prompt_tokens=prompt,
    )


def overflow_limit(text: str) -> int | None:
    """The real context window an overflow message states, or None when it states none."""
    return _numbers(_bounded(text))[0]


def server_error_text(body_text: str, max_chars: int = 200) -> str:
    """The server's own error sentence from a body of any common error shape, on one line."""
    message = _json_message(body_text)
    text = " ".join((message if message is not None else body_text).split())
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return text or "(empty body)"


def _any(entries: tuple[KnownMessage, ...], text: str) -> bool:
    return any(entry.pattern.search(text) for entry in entries)


def _is_overflow(status: int | None, text: str, provider: str | None) -> bool:
    return (
        _any(OVERFLOW_MESSAGES, text)
        or _any(LOCALIZED_OVERFLOW, text)
        or _structured_overflow(text)
        or _structural(text)  # classify_error has already run the veto
        or status == 413
        # Cerebras answers an overflow with a bare 400 or 413 and no body (Pi overflow.ts).
        or (provider == "cerebras" and status in (400, 413) and not text.strip())
    )


def _over_rate_limit(
    status: int | None, text: str, provider: str | None
) -> RequestOverRateLimitError | None:
    window = _RATE_WINDOW.search(text)
    if window is None:
        return None
    requested, limit = _first_int(_REQUESTED, text), _first_int(_RATE_LIMIT, text)
    over = _OVER_RATE.search(text)
    if over is not None:
        requested, limit = _int(over.group(1)), _int(over.group(2))
    bigger = requested is not None and limit is not None and requested > limit
    if not bigger and (_TOO_LARGE.search(text) is None or requested is not None):
        return None  # the request fits the budget: plain throttling, worth a wait
    period = _period(window)
    sizes = f" ({requested:,} tokens requested, {limit:,} allowed {period})" if bigger else ""
    return RequestOverRateLimitError(
        f"request too large for the {provider or 'model'} server's token rate limit{sizes}; "
        "waiting will not help: shrink the request (compact the conversation, lower max_tokens) "
        f"or raise the limit with the provider: {server_error_text(text)}",
        status=status,
        requested=requested,
        limit=limit,
    )


def _period(window: re.Match[str]) -> str:
    unit = (window.group(1) or window.group(2) or "m").lower()
    return {"h": "per hour", "d": "per day"}.get(unit[0], "per minute")


def _structured_overflow(text: str) -> bool:
    """An overflow code or type in the JSON body, or Gemini's INVALID_ARGUMENT about tokens."""
    fields = _error_fields(_loads(text))
    if any(str(fields.get(key, "")).lower() in _OVERFLOW_CODES for key in ("code", "type")):
        return True
    message = str(fields.get("message", ""))
    return fields.get("status") == "INVALID_ARGUMENT" and bool(
        _TOKENS_WORD.search(message) and not _NOT_OVERFLOW.search(message)
    )


def _numbers(text: str) -> tuple[int | None, int | None]:
    """(limit, prompt tokens): JSON fields (llama.cpp, DS4), then the tables, then the shape."""
    fields = _error_fields(_loads(text))
    limit, prompt = _positive(fields.get("n_ctx")), _positive(fields.get("n_prompt_tokens"))
    for entry in OVERFLOW_MESSAGES:
        found = entry.pattern.search(text)
        if found is None:
            continue
        groups = found.groupdict()
        limit = limit if limit is not None else _int(groups.get("limit"))
        prompt = prompt if prompt is not None else _int(groups.get("prompt"))
        if limit is not None:
            break
    if limit is None and (_TOKENS_WORD.search(text) or not _OTHER_UNITS.search(text)):
        limit = next(filter(None, (_last_int(regex, text) for regex in _STATED_LIMITS)), None)
    return limit, prompt


def _first_int(regex: re.Pattern[str], text: str) -> int | None:
    found = regex.search(text)
    return _int(found.group(1)) if found else None


def _last_int(regex: re.Pattern[str], text: str) -> int | None:
    found = regex.search(text)
    return _int(found.groups()[-1]) if found else None


def _int(digits: str | None) -> int | None:
    """A stated count; a stated 0 is no window at all, so it reads as unknown."""
    return (int(digits.replace(",", "")) or None) if digits else None


def _positive(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok and isinstance(value, int) else None


def _loads(text: str) -> Any:
    # Depth-capped: a deeply nested body is not JSON to us, never a RecursionError.
    try:
        return load_json(text)
    except ValueError:
        return None


def _error_fields(body: Any, depth: int = 0) -> dict[str, Any]:
    """The error object of a body: ``error`` (possibly JSON inside a string), else the body."""
    if isinstance(body, list) and body:
        body = body[0]  # Gemini wraps its error in a one-element list on some endpoints
    if not isinstance(body, dict):
        return {}
    error = body.get("error")
    if isinstance(error, dict):
        inner = _loads(error["message"]) if isinstance(error.get("message"), str) else None
        nested = _error_fields(inner, depth + 1) if depth < 2 else {}
        return nested or error
    return body


def _json_message(text: str) -> str | None:
    """``error.message``, ``error`` (Ollama), ``message`` (vLLM) or ``detail``, when present."""
    body = _loads(text)
    if isinstance(body, list) and body:
        body = body[0]
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
