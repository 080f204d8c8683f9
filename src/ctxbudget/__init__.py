"""ctxbudget: keep LLM agent conversations inside the model's context window.

The layers, each a sub-package, depend one way: ``messages`` -> ``tokens`` -> ``counting`` ->
``budget`` -> ``compaction`` -> ``providers`` / ``agent``; ``replay`` and ``cli`` sit on top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxbudget.agent import Agent, CompactionRecord, LoopEvent, SessionSummary, ToolExecutor
from ctxbudget.budget import (
    POLICY_NAMES,
    Checkpoint,
    ContextEstimate,
    Policy,
    check_prompt_floor,
    context_tokens,
    get_policy,
    usage_from_anthropic,
    usage_from_any,
    usage_from_deepseek,
    usage_from_gemini,
    usage_from_ollama,
    usage_from_openai,
    usage_from_openai_responses,
    validate_window,
)
from ctxbudget.compaction import (
    STRATEGY_NAMES,
    Archive,
    ArchiveState,
    CompactionResult,
    Summarizer,
    compact,
    compaction_target,
    cut_point,
    load_archive,
)
from ctxbudget.counting import RequestCount, RequestCounter, count_request
from ctxbudget.errors import (
    ArchiveError,
    CompactionError,
    ConfigError,
    ContextOverflowError,
    CtxbudgetError,
    InputError,
    InvalidWindowError,
    MessageFormatError,
    MissingDependencyError,
    PromptFloorExceeded,
    ProviderError,
    RequestOverRateLimitError,
    TraceFormatError,
    UnknownNameError,
)
from ctxbudget.messages import (
    ContentPart,
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
    request_from_anthropic,
    request_from_json,
    request_from_openai,
    request_to_openai,
)
from ctxbudget.providers import (
    OVERFLOW_MESSAGES,
    Completion,
    MockProvider,
    Provider,
    RetryPolicy,
    classify_error,
)
from ctxbudget.replay import (
    Call,
    ReplayResult,
    Trace,
    load_trace,
    render_html,
    replay_file,
    replay_trace,
    write_html,
    write_json,
    write_plot,
)
from ctxbudget.tokens import (
    TOKENIZER_NAMES,
    ExactTokenizer,
    TokenCounter,
    counter_for_model,
    get_counter,
    get_tokenizer,
    tokenizer_for_model,
)
from ctxbudget.tokens.calibrated import ESTIMATORS, estimate

if TYPE_CHECKING:
    from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

__version__ = "0.1.0"

__all__ = [
    "ESTIMATORS",
    "OVERFLOW_MESSAGES",
    "POLICY_NAMES",
    "STRATEGY_NAMES",
    "TOKENIZER_NAMES",
    "Agent",
    "Archive",
    "ArchiveError",
    "ArchiveState",
    "Call",
    "Checkpoint",
    "CompactionError",
    "CompactionRecord",
    "CompactionResult",
    "Completion",
    "ConfigError",
    "ContentPart",
    "ContextEstimate",
    "ContextOverflowError",
    "CtxbudgetError",
    "ExactTokenizer",
    "ImagePart",
    "InputError",
    "InvalidWindowError",
    "LoopEvent",
    "Message",
    "MessageFormatError",
    "MissingDependencyError",
    "MockProvider",
    "OpenAICompatibleProvider",
    "Policy",
    "PromptFloorExceeded",
    "Provider",
    "ProviderError",
    "ReplayResult",
    "Request",
    "RequestCount",
    "RequestCounter",
    "RequestOverRateLimitError",
    "RetryPolicy",
    "SessionSummary",
    "Summarizer",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "ToolExecutor",
    "ToolSpec",
    "Trace",
    "TraceFormatError",
    "UnknownNameError",
    "Usage",
    "__version__",
    "check_prompt_floor",
    "classify_error",
    "compact",
    "compaction_target",
    "context_tokens",
    "count_request",
    "counter_for_model",
    "cut_point",
    "estimate",
    "get_counter",
    "get_policy",
    "get_tokenizer",
    "load_archive",
    "load_trace",
    "render_html",
    "replay_file",
    "replay_trace",
    "request_from_anthropic",
    "request_from_json",
    "request_from_openai",
    "request_to_openai",
    "tokenizer_for_model",
    "usage_from_anthropic",
    "usage_from_any",
    "usage_from_deepseek",
    "usage_from_gemini",
    "usage_from_ollama",
    "usage_from_openai",
    "usage_from_openai_responses",
    "validate_window",
    "write_html",
    "write_json",
    "write_plot",
]


def __getattr__(name: str) -> Any:
    # The openai SDK takes about a second to import: load it only when it is asked for.
    if name == "OpenAICompatibleProvider":
        from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
