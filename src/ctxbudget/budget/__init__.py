"""The budget: provider usage, usage-first context size, trigger rules and the prompt floor."""

from __future__ import annotations

from ctxbudget.budget.context import (
    ContextEstimate,
    RequestCounterLike,
    context_tokens,
    last_usage_index,
    usage_tokens,
)
from ctxbudget.budget.floor import (
    check_prompt_floor,
    floor_parts,
    is_ollama,
    ollama_context_length,
    request_floor_parts,
)
from ctxbudget.budget.rules import (
    DEFAULT_COMPACTION_RESERVE,
    DEFAULT_REPLY_RESERVE,
    POLICY_NAMES,
    REPLY_RESERVE_CAP,
    Checkpoint,
    CodexPolicy,
    CoreCoderPolicy,
    CtxbudgetPolicy,
    LettaPolicy,
    OpenCodePolicy,
    PiPolicy,
    Policy,
    get_policy,
    validate_window,
)
from ctxbudget.budget.usage import (
    usage_from_anthropic,
    usage_from_any,
    usage_from_deepseek,
    usage_from_gemini,
    usage_from_ollama,
    usage_from_openai,
    usage_from_openai_responses,
)

__all__ = [
    "DEFAULT_COMPACTION_RESERVE",
    "DEFAULT_REPLY_RESERVE",
    "POLICY_NAMES",
    "REPLY_RESERVE_CAP",
    "Checkpoint",
    "CodexPolicy",
    "ContextEstimate",
    "CoreCoderPolicy",
    "CtxbudgetPolicy",
    "LettaPolicy",
    "OpenCodePolicy",
    "PiPolicy",
    "Policy",
    "RequestCounterLike",
    "check_prompt_floor",
    "context_tokens",
    "floor_parts",
    "get_policy",
    "is_ollama",
    "last_usage_index",
    "ollama_context_length",
    "request_floor_parts",
    "usage_from_anthropic",
    "usage_from_any",
    "usage_from_deepseek",
    "usage_from_gemini",
    "usage_from_ollama",
    "usage_from_openai",
    "usage_from_openai_responses",
    "usage_tokens",
    "validate_window",
]
