"""Model servers: the ``Provider`` interface, the embedded mock model, OpenAI-compatible servers."""

from typing import TYPE_CHECKING, Any

from ctxbudget.providers.base import Completion, Provider, StopReason
from ctxbudget.providers.mock import MockProvider, vllm_overflow_message
from ctxbudget.providers.overflow import (
    OVERFLOW_MESSAGES,
    THROTTLING_MESSAGES,
    KnownMessage,
    classify_error,
    is_throttling,
    overflow_limit,
)
from ctxbudget.providers.retry import DEFAULT_RETRY, RetryPolicy
from ctxbudget.providers.scenarios import SCENARIO_NAMES, ChatScenario, CodingScenario, get_scenario

if TYPE_CHECKING:
    from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

__all__ = [
    "DEFAULT_RETRY",
    "OVERFLOW_MESSAGES",
    "SCENARIO_NAMES",
    "THROTTLING_MESSAGES",
    "ChatScenario",
    "CodingScenario",
    "Completion",
    "KnownMessage",
    "MockProvider",
    "OpenAICompatibleProvider",
    "Provider",
    "RetryPolicy",
    "StopReason",
    "classify_error",
    "get_scenario",
    "is_throttling",
    "overflow_limit",
    "vllm_overflow_message",
]


def __getattr__(name: str) -> Any:
    # The openai SDK takes about a second to import: load it only when it is asked for.
    if name == "OpenAICompatibleProvider":
        from ctxbudget.providers.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
