"""Where a provider lives: its URL, its short name, its API key, and keeping secrets out of text."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
from urllib.parse import urlsplit

from ctxbudget.errors import ConfigError
from ctxbudget.messages import Message, TextPart

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "NO_API_KEY",
    "RedactingFilter",
    "StreamRedactor",
    "api_key_from_env",
    "checked_url",
    "is_local_url",
    "provider_name_for",
    "public_url",
    "redact",
    "redacted_message",
    "url_secrets",
]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
NO_API_KEY = "not-needed"
"""Sent as the key to local servers that need none (the SDK insists on some key)."""

# Known hosts first, then the default ports of local servers.
_HOSTS = (
    ("api.openai.com", "openai"),
    ("openrouter.ai", "openrouter"),
    ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"),
    ("api.x.ai", "xai"),
    ("api.mistral.ai", "mistral"),
    ("api.cerebras.ai", "cerebras"),
    ("api.together.xyz", "together"),
    ("api.moonshot", "kimi"),
    ("dashscope", "dashscope"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("api.z.ai", "zai"),
    ("bigmodel.cn", "zai"),
    ("minimax", "minimax"),
)
# 11434: Ollama; 8000: vLLM (`vllm serve`); 8080: llama.cpp's llama-server; 1234: LM Studio.
_PORTS = {11434: "ollama", 8000: "vllm", 8080: "llamacpp", 1234: "lmstudio"}
_BEARER = re.compile(r"(bearer\s+)\S+", re.IGNORECASE)
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}")
# A tail of streamed text that may be the start of an ``sk-`` key or a ``Bearer`` token.
# A tail of streamed text that may be the start of an ``sk-`` key or a ``Bearer`` token.
_OPEN_TAIL = re.compile(
    r"(?:\b(?:s|sk|sk-[A-Za-z0-9_\-]*)|b(?:e(?:a(?:r(?:er?)?)?)?)?|bearer\s*\S*)\Z", re.IGNORECASE
)
_TAIL_WINDOW = 256
"""Characters searched for an open key at the cut: no key or token we redact is longer."""
_MAX_CUTS = 8


def provider_name_for(base_url: str) -> str:
    """A short provider name guessed from the URL: host table, then local default ports.

    Falls back to ``openai-compatible``.
    """
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    for fragment, name in _HOSTS:
        if fragment in host:
            return name
    try:
        port = parts.port
    except ValueError:
        port = None
    return _PORTS.get(port or 0, "openai-compatible")


def api_key_from_env(env: str | None, base_url: str) -> str:
    """The key in ``$env``; ``NO_API_KEY`` when ``env`` is None or a local server has none.

    A remote server without a key is a ``ConfigError`` that names the variable, never a value.
    """
    if env is None:
        return NO_API_KEY
    value = os.environ.get(env, "").strip()
    if value:
        return value
    if is_local_url(base_url):
        return NO_API_KEY
    raise ConfigError(
        f"no API key for {public_url(base_url)}: set the environment variable {env}, "
        "or pass api_key_env=None for a server that needs none"
    )


def is_local_url(base_url: str) -> bool:
    """True for localhost, ``*.local`` and loopback or private addresses (a LAN vLLM box)."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_unspecified


def checked_url(base_url: object) -> str:
    """The base URL without a trailing slash; anything but an http(s) URL is a ``ConfigError``.

    The message never quotes a password or query the URL may hold.
    """
    example = "an http(s) URL such as http://localhost:11434/v1"
    if not isinstance(base_url, str):
        raise ConfigError(f"base_url must be {example}, got {type(base_url).__name__}")
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 -- raises for a port out of range or not a number
    except ValueError as exc:
        raise ConfigError(
            f"base_url {_shown(base_url)} is not a valid URL ({exc}); pass {example}"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"base_url must be {example}, got {_shown(base_url)}")
    return base_url.rstrip("/")


def _shown(url: str) -> str:
    """The URL for a message, without ``user:password@``, query or fragment (works on bad URLs)."""
    return repr(re.sub(r"//[^/?#]*@", "//", url).split("?")[0].split("#")[0])


def public_url(base_url: str) -> str:
    """The URL without user:password, query or fragment, for messages and logs."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def url_secrets(base_url: str) -> tuple[str, ...]:
    """Parts of the URL that may hold credentials (password, query), to redact from messages."""
    parts = urlsplit(base_url)
    return tuple(s for s in (parts.password, parts.query) if s)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """The text with each secret, any ``Bearer`` token and any ``sk-...`` key replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _SK_KEY.sub("sk-[redacted]", _BEARER.sub(r"\1[redacted]", text))


class RedactingFilter(logging.Filter):
    """A log filter that applies `redact` to every record it passes (``--verbose`` logs).

    Our own messages never hold a key; this also covers other libraries' debug logs.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage(), self.secrets)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            # The traceback text is formatted later from exc_info; fix it now, redacted.
            formatter = logging.Formatter()
            record.exc_text = redact(formatter.formatException(record.exc_info), self.secrets)
            record.exc_info = None
        return True


def redacted_message(message: Message, secrets: tuple[str, ...]) -> Message:
    """The message with `redact` applied to its text, reasoning and tool-call arguments.

    A server may echo a key back in a successful reply; the reply is shown and archived.
    """
    if isinstance(message.content, str):
        content: str | tuple[object, ...] = redact(message.content, secrets)
    else:
        content = tuple(
            TextPart(redact(p.text, secrets)) if isinstance(p, TextPart) else p
            for p in message.content
        )
    calls = tuple(
        dataclasses.replace(c, arguments=redact(c.arguments, secrets)) for c in message.tool_calls
    )
    reasoning = None if message.reasoning is None else redact(message.reasoning, secrets)
    return dataclasses.replace(
        message,
        content=content,  # type: ignore[arg-type]
        tool_calls=calls,
        reasoning=reasoning,
    )


class StreamRedactor:
    """`redact` over text that arrives in pieces: a key split across two deltas is still caught.

    ``feed`` returns what is safe to show now and holds back a tail that could be the start of
    a secret; ``flush`` returns the rest at the end of the stream. Secrets are replaced first,
    as `redact` does, so the patterns see the same text as on the whole reply.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = tuple(s for s in secrets if s)
        self._held = ""

    def feed(self, text: str) -> str:
        if not text:
            return ""
        held = self._held + text
        for secret in self.secrets:
            held = held.replace(secret, "[redacted]")
        cut = len(held)
        for _ in range(_MAX_CUTS):  # the text before the cut must end in no open secret
            earlier = min(self._open_secret(held, cut), self._open_pattern(held, cut))
            if earlier == cut:
                break
            cut = earlier
        self._held = held[cut:]
        return redact(held[:cut])  # the secrets are already replaced above

    def flush(self) -> str:
        held, self._held = self._held, ""
        return redact(held)  # feed replaced the secrets in what it held

    def _open_secret(self, text: str, end: int) -> int:
        """Where a proper prefix of a secret starts, ending at ``end`` (else ``end``)."""
        cut = end
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, end), 0, -1):
                if secret.startswith(text[end - size : end]):
                    cut = min(cut, end - size)
                    break
        return cut

    @staticmethod
    def _open_pattern(text: str, end: int) -> int:
        match = _OPEN_TAIL.search(text, max(0, end - _TAIL_WINDOW), end)
        return end if match is None else match.start()
