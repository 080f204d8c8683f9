"""The ctxbudget error tree: every failure a user can cause or meet is one of these.

    CtxbudgetError                 base; the CLI prints its message on one line, exit code 2
     ├── InputError                bad input data: a malformed message, request, trace or file
     │    ├── MessageFormatError   a chat message or request of the wrong shape (names the place)
     │    └── TraceFormatError     a session file that is empty, binary or of no known format
     ├── ConfigError               a bad argument from the calling developer
     │    ├── UnknownNameError     an unknown tokenizer, estimator, policy, strategy or format
     │    └── InvalidWindowError   a window or limit that is zero, negative or not a number
     ├── MissingDependencyError    an optional package (a vocabulary, a browser) is not installed
     ├── PromptFloorExceeded       system prompt + tools + reply reserve cannot fit the window
     ├── CompactionError           compaction could not bring the request under the window
     ├── ArchiveError              the session archive cannot be read, locked or appended
     └── ProviderError             a model server failed (after bounded retries)
          ├── ContextOverflowError the server rejected the request as too long for its window
          └── RequestOverRateLimitError  the request alone exceeds a per-minute token limit
                                   (never retried: waiting cannot help)

Each message says what is wrong and, where there is one, how to fix it.
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "CompactionError",
    "ConfigError",
    "ContextOverflowError",
    "CtxbudgetError",
    "InputError",
    "InvalidWindowError",
    "MessageFormatError",
    "MissingDependencyError",
    "PromptFloorExceeded",
    "ProviderError",
    "RequestOverRateLimitError",
    "TraceFormatError",
    "UnknownNameError",
]


class CtxbudgetError(Exception):
    """Base of every error ctxbudget raises on purpose."""


class InputError(CtxbudgetError):
    """Raised when input data (a message, request, trace or file) is malformed."""


class MessageFormatError(InputError):
    """Raised when a chat message or request has the wrong shape.

    The message starts with the JSON path of the offending value, for example
    ``messages[3].tool_calls[0].function.arguments: expected a JSON string, got dict``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class TraceFormatError(InputError):
    """Raised when a recorded session cannot be read as any known format."""


class ConfigError(CtxbudgetError):
    """Raised when the calling developer passes a bad argument."""


class UnknownNameError(ConfigError, KeyError):
    """Raised for an unknown tokenizer, estimator, policy, strategy or format name."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(known)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class InvalidWindowError(ConfigError, ValueError):
    """Raised when a context window or token limit is zero, negative or not a number."""


class MissingDependencyError(CtxbudgetError, ImportError):
    """Raised when an optional package is needed but not installed; names the package."""

    def __init__(self, what: str, package: str) -> None:
        self.package = package
        super().__init__(f"{what} needs the package {package!r}: pip install {package}")


class PromptFloorExceeded(CtxbudgetError):
    """Raised before any request when system prompt + tools + reply reserve exceed the window."""

    def __init__(
        self,
        message: str,
        *,
        floor: int,
        reserve: int,
        window: int,
        largest: list[tuple[str, int]] | None = None,
    ) -> None:
        self.floor = floor
        self.reserve = reserve
        self.window = window
        self.largest = largest or []
        super().__init__(message)


class CompactionError(CtxbudgetError):
    """Raised when no compaction can bring the request under the window."""


class ArchiveError(CtxbudgetError):
    """Raised when the session archive cannot be read, locked or appended."""


class ProviderError(CtxbudgetError):
    """Raised when a model server fails after bounded retries; says what happened."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ContextOverflowError(ProviderError):
    """Raised when the server rejects a request as longer than its context window.

    ``limit`` is the real window when the server's message states it (vLLM, OpenAI,
    Anthropic, llama.cpp, Ollama); the agent adopts it for the rest of the session. Without it,
    the agent adopts the refused request's size plus its reply room (the server holds less).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        limit: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        self.limit = limit
        self.prompt_tokens = prompt_tokens
        super().__init__(message, status=status)


class RequestOverRateLimitError(ProviderError):
    """Raised when one request is larger than the provider's token rate limit (e.g. TPM).

    Not an overflow and not a throttle: the request would be refused after any wait, so it is
    never retried. ``requested`` and ``limit`` are the counts the server states, when it does.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        requested: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.requested = requested
        self.limit = limit
        super().__init__(message, status=status)
