"""`GatewayConfig`: every setting of one gateway, as a frozen value the CLI builds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctxbudget.messages.jsondepth import MAX_JSON_DEPTH
from ctxbudget.providers.limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "MOCK_UPSTREAM",
    "GatewayConfig",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8788
"""Unused by the common servers (llama.cpp 8080, vLLM 8000, Ollama 11434, LM Studio 1234)."""
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest request body read: a 200K-token conversation is ~1 MB of JSON; images as data
URLs make it larger, 64 MiB is far above any real one and far below the machine's memory."""
MOCK_UPSTREAM = "mock"
"""``--upstream mock``: the embedded mock model answers, no server needed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """One gateway's settings. ``upstream`` is the upstream's base URL (with its ``/v1``, as
    an OpenAI client's ``base_url``) or `MOCK_UPSTREAM`."""

    upstream: str
    window: int | None = None
    """The upstream's window in tokens; None: discovered from the server at start-up."""
    tokenizer: str | None = None
    """A counter name (``qwen3``, ``o200k_base``...) or ``hf:PATH``; None: chosen from the
    conversation's model name (`counter_name_for_model`: the calibrated estimator
    ``ctxbudget`` when the name says nothing)."""
    policy: str = "ctxbudget"
    strategy: str = "layered"
    max_output_tokens: int | None = None
    """The reply room reserved when the client names none; None: a share of the window."""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    state: Path | str | None = None
    """The state store (`open_store`): a SQLite file, or a ``redis://`` URL that several
    gateway instances share; None: ``state.sqlite3`` in the user cache folder."""
    archive_dir: Path | None = None
    """Where each conversation's archive goes; None: ``archives/`` next to the state file."""
    client_key: str | None = field(default=None, repr=False)
    """The key clients must present (``Authorization: Bearer`` or ``x-api-key``); None: none.
    Kept out of ``repr`` so it is never logged."""
    upstream_key: str | None = field(default=None, repr=False)
    """The key sent upstream (``Authorization: Bearer``); None: the client's own header is
    forwarded. Kept out of ``repr`` so it is never logged."""
    summary_model: str | None = None
    """The model that writes summaries; None: the model the request names."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = MAX_JSON_DEPTH
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """The longest silence from the upstream (before the first byte or between two)."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    """The longest one upstream exchange may take, a streamed reply included."""
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """The largest upstream reply read (a stream's total included)."""
    max_live_conversations: int = 1024
    """Conversations kept in memory; older ones are saved and reloaded from the store."""
    log_messages: bool = False
    """``--log-messages``: each request's log line holds the conversation as forwarded (off:
    numbers and names only, see `ctxbudget.gateway.logs`)."""

    @property
    def is_mock(self) -> bool:
        """True when the embedded mock model is the upstream."""
        return self.upstream == MOCK_UPSTREAM
