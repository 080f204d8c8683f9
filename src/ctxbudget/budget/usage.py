"""Read the usage report of each provider's response into one `Usage` value.

Every reader accepts either the usage object itself or the whole response body around it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxbudget.errors import MessageFormatError
from ctxbudget.messages.usage import Usage

__all__ = [
    "FAR_BELOW_MIN_TOKENS",
    "FAR_BELOW_SHARE",
    "PromptGap",
    "prompt_gap",
    "usage_from_anthropic",
    "usage_from_any",
    "usage_from_deepseek",
    "usage_from_gemini",
    "usage_from_ollama",
    "usage_from_openai",
    "usage_from_openai_responses",
]


FAR_BELOW_SHARE = 0.9
"""A reported prompt under 90% of our exact count of the same request is far below it.

Exact counts match llama.cpp's and vLLM's to the token (tests/server), so an honest report is
never 10% short: a server's BOS token or the reply primer our count of an earlier request leaves
out are a few tokens, and a cached prefix reported in full is no gap at all. Reports that are
not a count of the whole prompt miss by far more: pydantic-ai's ``FunctionModel`` counts words
(about a third of the tokens of code and logs), a report of the uncached part alone misses the
whole cached prefix. One bound for every reader of such a gap (``context_tokens``, the loop's
truncation check), so none of them sees a gap the others miss."""
FAR_BELOW_MIN_TOKENS = 32
"""...and at least this many tokens short, so a tiny prompt's few-token template slack (a
server that adds or drops a BOS, say) never counts as a gap."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptGap:
    """A usage report whose prompt is far below our exact count of the request it reports on."""

    reported: int
    """The prompt tokens the report states."""
    counted: int
    """Our exact count of the same request."""

    @property
    def reason(self) -> str:
        """One line for the user: what was reported, what was counted, what ctxbudget does."""
        return (
            f"a usage report gave a {self.reported:,}-token prompt where ctxbudget counted "
            f"{self.counted:,} exactly for the same request: such a report is not the whole "
            "prompt (a word count, or only its uncached part), so ctxbudget counts the request "
            "itself wherever a report is that far below (said once per session)"
        )


def prompt_gap(reported: int, counted: int) -> PromptGap | None:
    """The gap when a reported prompt is far below ``counted``, our exact count of the same
    request (`FAR_BELOW_SHARE`, `FAR_BELOW_MIN_TOKENS`); None when it is not, or when either
    is not a count at all (0)."""
    if reported <= 0 or counted <= 0:
        return None
    if reported >= counted * FAR_BELOW_SHARE or counted - reported < FAR_BELOW_MIN_TOKENS:
        return None
    return PromptGap(reported=reported, counted=counted)


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MessageFormatError(path, f"expected a JSON object, got {type(value).__name__}")
    return value


def _unwrap(d: object, key: str) -> tuple[Mapping[str, Any], str]:
    """The usage object and its path: ``d[key]`` when ``d`` is a whole response body."""
    body = _mapping(d, key)
    inner = body.get(key)
    if inner is None:
        return body, key
    return _mapping(inner, key), key


def _count(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> int:
    """A token count at ``obj[key]``: a non-negative integer; missing or null reads as 0."""
    where = f"{path}.{key}"
    value = obj.get(key)
    if value is None:
        if required:
            raise MessageFormatError(where, "missing; expected a non-negative integer")
        return 0
    # bool is an int in Python but never a token count in JSON.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MessageFormatError(
            where, f"expected a non-negative integer, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise MessageFormatError(where, f"expected a non-negative integer, got {value!r}")
    if value < 0:
        raise MessageFormatError(where, f"expected a non-negative integer, got {int(value)}")
    return int(value)


def _detail(obj: Mapping[str, Any], details: str, key: str, path: str) -> int:
    """A count nested one level down, e.g. ``prompt_tokens_details.cached_tokens``."""
    inner = obj.get(details)
    if inner is None:
        return 0
    return _count(_mapping(inner, f"{path}.{details}"), key, f"{path}.{details}")


def _part_of(part: int, part_path: str, whole: int, whole_path: str) -> None:
    if part > whole:
        raise MessageFormatError(part_path, f"{part} is more than {whole_path} ({whole})")


def _openai_shape(
    d: object, prompt: str, completion: str, prompt_details: str, completion_details: str
) -> Usage:
    usage, path = _unwrap(d, "usage")
    input_tokens = _count(usage, prompt, path, required=True)
    output_tokens = _count(usage, completion, path)
    cached = _detail(usage, prompt_details, "cached_tokens", path)
    reasoning = _detail(usage, completion_details, "reasoning_tokens", path)
    _part_of(cached, f"{path}.{prompt_details}.cached_tokens", input_tokens, f"{path}.{prompt}")
    _part_of(
        reasoning,
        f"{path}.{completion_details}.reasoning_tokens",
        output_tokens,
        f"{path}.{completion}",
    )
    return Usage(
        input_tokens=input_tokens,
        cache_read_tokens=cached,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning,
    )


def usage_from_openai(d: object) -> Usage:
    """OpenAI chat completions: ``prompt_tokens`` already includes the cached part.

    Adding ``cached_tokens`` on top of it is the "cache counted twice" bug that made Pi and
    OpenCode compact at 16% fill.
    """
    return _openai_shape(
        d,
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    )


def usage_from_openai_responses(d: object) -> Usage:
    """OpenAI Responses API: ``input_tokens`` includes ``input_tokens_details.cached_tokens``."""
    return _openai_shape(
        d, "input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details"
    )


def usage_from_anthropic(d: object) -> Usage:
    """Anthropic Messages: ``input_tokens`` counts only the tokens after the last cache breakpoint.

    The prompt the server saw is input + cache_creation + cache_read (letta-code's CLAUDE.md:
    "Getting this wrong breaks summarizer triggering"); dropping the cache writes is the
    "compaction too late" bug.
    """
    usage, path = _unwrap(d, "usage")
    uncached = _count(usage, "input_tokens", path, required=True)
    write = _count(usage, "cache_creation_input_tokens", path)
    read = _count(usage, "cache_read_input_tokens", path)
    output = _count(usage, "output_tokens", path)
    return Usage(
        input_tokens=uncached + write + read,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
    )


def usage_from_gemini(d: object) -> Usage:
    """Gemini ``usageMetadata``: ``candidatesTokenCount`` excludes thoughts.

    Google documents ``totalTokenCount`` as prompt + candidates + tool-use prompt + thoughts, so
    the output (reasoning included) is candidates + thoughts. ``promptTokenCount`` already
    includes ``cachedContentTokenCount``.
    """
    usage, path = _unwrap(d, "usageMetadata")
    prompt = _count(usage, "promptTokenCount", path, required=True)
    cached = _count(usage, "cachedContentTokenCount", path)
    candidates = _count(usage, "candidatesTokenCount", path)
    thoughts = _count(usage, "thoughtsTokenCount", path)
    _part_of(cached, f"{path}.cachedContentTokenCount", prompt, f"{path}.promptTokenCount")
    return Usage(
        input_tokens=prompt,
        cache_read_tokens=cached,
        output_tokens=candidates + thoughts,
        reasoning_tokens=thoughts,
    )


def usage_from_ollama(d: object) -> Usage:
    """Ollama native API: ``prompt_eval_count`` and ``eval_count`` at the top of the body.

    Ollama may omit ``prompt_eval_count`` when the whole prompt came from its cache; that reads
    as 0 here, and `context_tokens` ignores usage with an empty prompt.
    """
    body = _mapping(d, "response")
    return Usage(
        input_tokens=_count(body, "prompt_eval_count", "response"),
        output_tokens=_count(body, "eval_count", "response"),
    )


def usage_from_deepseek(d: object) -> Usage:
    """DeepSeek: OpenAI's shape plus ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens``.

    ``prompt_tokens`` is hit + miss; when it is absent the sum stands in for it.
    """
    usage, path = _unwrap(d, "usage")
    hit = _count(usage, "prompt_cache_hit_tokens", path)
    miss = _count(usage, "prompt_cache_miss_tokens", path)
    if usage.get("prompt_tokens") is None:
        if "prompt_cache_hit_tokens" not in usage and "prompt_cache_miss_tokens" not in usage:
            raise MessageFormatError(f"{path}.prompt_tokens", "missing; expected an integer")
        prompt = hit + miss
    else:
        prompt = _count(usage, "prompt_tokens", path)
    _part_of(hit, f"{path}.prompt_cache_hit_tokens", prompt, f"{path}.prompt_tokens")
    output = _count(usage, "completion_tokens", path)
    reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens", path)
    _part_of(
        reasoning,
        f"{path}.completion_tokens_details.reasoning_tokens",
        output,
        f"{path}.completion_tokens",
    )
    return Usage(
        input_tokens=prompt, cache_read_tokens=hit, output_tokens=output, reasoning_tokens=reasoning
    )


_SHAPES = (
    "OpenAI (prompt_tokens), OpenAI Responses (input_tokens_details), Anthropic "
    "(input_tokens), Gemini (usageMetadata), Ollama (prompt_eval_count), "
    "DeepSeek (prompt_cache_hit_tokens)"
)


def usage_from_any(d: object) -> Usage:
    """Detect the provider's shape from its field names and read it.

    A bare ``{"input_tokens", "output_tokens"}`` reads the same as Anthropic or Responses, so
    the ambiguity does not matter.
    """
    body = _mapping(d, "response")
    if "usageMetadata" in body or "promptTokenCount" in body:
        return usage_from_gemini(body)
    if "prompt_eval_count" in body or "eval_count" in body:
        return usage_from_ollama(body)
    usage, _ = _unwrap(body, "usage")
    if "prompt_cache_hit_tokens" in usage or "prompt_cache_miss_tokens" in usage:
        return usage_from_deepseek(usage)
    if "prompt_tokens" in usage:
        return usage_from_openai(usage)
    if "input_tokens_details" in usage or "output_tokens_details" in usage:
        return usage_from_openai_responses(usage)
    if "input_tokens" in usage:
        return usage_from_anthropic(usage)
    raise MessageFormatError("usage", f"no known usage shape; expected one of: {_SHAPES}")
