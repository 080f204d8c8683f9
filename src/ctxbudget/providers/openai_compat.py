"""A provider for any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, llama.cpp).

Streamed or not, a reply becomes the same ``Completion``. Retries are ours (bounded, logged); the
openai SDK's own are switched off.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai

from ctxbudget.budget.usage import usage_from_openai
from ctxbudget.errors import (
    ConfigError,
    ContextOverflowError,
    CtxbudgetError,
    InvalidWindowError,
    ProviderError,
)
from ctxbudget.messages import Message, Request, Usage
from ctxbudget.messages.jsondepth import JsonTooDeep
from ctxbudget.messages.openai import message_from_openai, request_to_openai
from ctxbudget.providers.base import Completion, Provider
from ctxbudget.providers.endpoint import (
    DEFAULT_API_KEY_ENV,
    NO_API_KEY,
    StreamRedactor,
    api_key_from_env,
    checked_url,
    provider_name_for,
    public_url,
    redact,
    redacted_message,
    url_secrets,
)
from ctxbudget.providers.limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    checked_bytes,
    checked_seconds,
    text_cap,
)
from ctxbudget.providers.openai_replies import (
    cause,
    is_quota,
    is_transport_error,
    json_object,
    normalised_message,
    safe_text,
    short,
    stop_reason,
)
from ctxbudget.providers.overflow import classify_error, server_error_text
from ctxbudget.providers.retry import (
    DEFAULT_RETRY,
    RetryPolicy,
    backoff_delay,
    is_retryable_status,
    retry_after_seconds,
)
from ctxbudget.providers.served import (
    SERVED_BODY_BYTES,
    SERVED_TIMEOUT,
    ps_url,
    served_context_length,
)
from ctxbudget.providers.streaming import (
    DONE,
    DeadlineExceeded,
    ReplyLimitError,
    StreamAssembly,
    sse_events,
)
from ctxbudget.providers.transport import deadline_scope, http_client, seconds_left

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "NO_API_KEY",
    "DeltaSink",
    "OpenAICompatibleProvider",
    "provider_name_for",
]

log = logging.getLogger(__name__)

SILENT_OVERFLOW_FILL = 0.99
"""A length stop with no output and the prompt at 99% of the window or more is an overflow
(the server truncated or filled the window); 99% is the margin Pi uses for the same check."""

DeltaSink = Callable[[str], None]
"""Receives text as a streamed reply arrives (``on_delta``) or the reason a shown reply restarts."""


class OpenAICompatibleProvider(Provider):
    """A chat-completions server reached through the official ``openai`` SDK.

    The API key is read from the environment variable ``api_key_env``; a local server (a
    loopback or private address) may have none, and ``api_key_env=None`` sends no real key at
    all. Overflow errors become ``ContextOverflowError`` (with the real window when stated);
    429, 408, 5xx, timeouts, resets and unreadable bodies are retried under ``retry``; every
    other failure is a one-line ``ProviderError`` that never contains the key.

    With ``stream=True`` the reply is streamed (with ``stream_options.include_usage``) and
    ``on_delta`` receives its content as it arrives. A stream that ends before ``[DONE]`` (or a
    finish reason and the usage) is retried under the same ``retry`` policy, since nothing has
    been returned yet; if ``on_delta`` already showed part of it, ``on_restart`` is called with
    the reason before the retry, so a display can say that the reply starts over (the text it
    showed is not part of the conversation). When the retries run out: ``ProviderError``
    "stream ended early after N chunks".

    Bounds: the whole call, retries and waits included, ends within ``request_timeout``
    seconds (a trickle of bytes or keep-alives cannot hold it open); connecting takes at most
    ``connect_timeout``, and a silence (before the first byte or between two) ``read_timeout``.
    A body over ``max_reply_bytes``, a stream line over ``MAX_SSE_LINE_BYTES`` or a reply text
    longer than ``max_tokens`` allows is a final ``ProviderError``; error bodies are read up to
    ``ERROR_BODY_BYTES``. Secrets echoed in a reply are redacted before it is shown or returned.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = DEFAULT_API_KEY_ENV,
        window: int | None = None,
        name: str | None = None,
        tokenizer: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        retry: RetryPolicy = DEFAULT_RETRY,
        resend_reasoning: bool = False,
        stream: bool = False,
        on_delta: DeltaSink | None = None,
        on_restart: DeltaSink | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = checked_url(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a non-empty model name, e.g. model='qwen3:8b'")
        self.model = model
        self.window = _check_window(window)
        self.name = name or provider_name_for(base_url)
        self.tokenizer = tokenizer
        self.api_key_env = api_key_env
        self.retry = retry
        self.resend_reasoning = resend_reasoning
        self.stream = bool(stream)
        self.on_delta = on_delta
        self.on_restart = on_restart
        self._sleep = sleep
        key = api_key_from_env(api_key_env, self.base_url)
        self._secrets = tuple(s for s in (key, *url_secrets(base_url)) if s and s != NO_API_KEY)
        self._connect_timeout = checked_seconds(connect_timeout, "connect_timeout")
        self._read_timeout = checked_seconds(read_timeout, "read_timeout")
        self._request_timeout = checked_seconds(request_timeout, "request_timeout")
        self._max_reply_bytes = checked_bytes(max_reply_bytes, "max_reply_bytes")
        self._served_http: Any = None
        """The client for `served_window`, made on first use (its body cap is small)."""
        self._client = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            max_retries=0,  # ours are the only retries
            timeout=openai.Timeout(self._read_timeout, connect=self._connect_timeout),
            http_client=http_client(self._max_reply_bytes),
        )

    def __repr__(self) -> str:
        url = public_url(self.base_url)
        return (
            f"OpenAICompatibleProvider(name={self.name!r}, base_url={url!r}, model={self.model!r})"
        )

    def complete(self, request: Request) -> Completion:
        """Send the request; retry transient failures within ``retry``; parse the reply.

        The whole call, retries and waits included, ends within ``request_timeout`` seconds.
        """
        body = request_to_openai(request, include_reasoning=self.resend_reasoning)
        body["model"] = request.model or self.model
        with deadline_scope(self._request_timeout):
            return self._complete(body, request.max_output_tokens)

    def served_window(self) -> int | None:
        """The ``context_length`` Ollama's ``GET /api/ps`` lists for this model (the context it is
        loaded with), or None: another server, the model not loaded, any failure.

        Sent through the same capped HTTP client as the chat requests, within ``SERVED_TIMEOUT``
        (and ``connect_timeout``), once, with no retry and no API key: Ollama needs none.
        """
        url = ps_url(self.base_url)
        seconds = min(SERVED_TIMEOUT, self._request_timeout)
        try:
            with deadline_scope(seconds):
                if self._served_http is None:
                    self._served_http = http_client(SERVED_BODY_BYTES)
                timeout = openai.Timeout(seconds, connect=min(seconds, self._connect_timeout))
                response = self._served_http.get(url, timeout=timeout)
                text = response.read().decode("utf-8", errors="replace")
        except Exception as err:  # a closed port, a deadline, a body over the cap: not known
            log.debug("%s: %s not read: %s", self.name, public_url(url), short(str(err), 120))
            return None
        if response.status_code != 200:
            log.debug("%s: %s answered HTTP %d", self.name, public_url(url), response.status_code)
            return None
        return served_context_length(text, self.model)

    def _complete(self, body: dict[str, Any], max_tokens: int | None) -> Completion:
        slept = 0.0
        for attempt in range(self.retry.max_retries + 1):
            log.debug(
                "%s: POST chat/completions model=%s attempt=%d",
                self.name,
                body["model"],
                attempt + 1,
            )
            try:
                return self._attempt(body, max_tokens)
            except _Transient as failure:
                delay = backoff_delay(self.retry, attempt, retry_after=failure.retry_after)
                if delay is None or slept + delay > self.retry.max_total_sleep:
                    raise self._give_up(failure, attempt, delay) from None
                left = seconds_left()
                if left is not None and delay >= left:
                    raise self._deadline_error(failure.error) from None
                log.warning(
                    "%s: %s; retry %d of %d in %.2f s",
                    self.name,
                    failure.error,
                    attempt + 1,
                    self.retry.max_retries,
                    delay,
                )
                if failure.shown and self.on_restart is not None:
                    self.on_restart(str(failure.error))
                self._sleep(delay)
                slept += delay
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, body: dict[str, Any], max_tokens: int | None) -> Completion:
        left = seconds_left()
        if left is not None and left <= 0:
            raise self._deadline_error(None)
        timeout = self._attempt_timeout(left)
        try:
            if self.stream:
                return self._streamed(body, timeout, max_tokens)
            raw = self._client.chat.completions.with_raw_response.create(**body, timeout=timeout)
            return self._completion(raw.text, max_tokens)
        except JsonTooDeep as err:
            raise self._error(f"HTTP 200 with {err}") from None
        except ReplyLimitError as err:
            raise self._limit_error(err) from None
        except openai.APIStatusError as err:
            raise self._status_failure(err) from None
        except openai.APITimeoutError as err:
            raise _Transient(self._error(self._timeout_text(err))) from None
        except openai.APIConnectionError as err:
            if isinstance(err.__cause__, ReplyLimitError):
                raise self._limit_error(err.__cause__) from None
            raise _Transient(self._error(f"connection failed: {cause(err)}")) from None

    def _attempt_timeout(self, left: float | None) -> openai.Timeout:
        """This attempt's timeouts: the configured ones, shortened to the time left."""
        read, connect = self._read_timeout, self._connect_timeout
        if left is not None:
            read, connect = min(read, left), min(connect, left)
        return openai.Timeout(read, connect=connect)

    def _streamed(
        self, body: dict[str, Any], timeout: openai.Timeout, max_tokens: int | None
    ) -> Completion:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assembly = StreamAssembly()
        create = self._client.chat.completions.with_streaming_response.create
        with create(**body, timeout=timeout) as raw:
            if "event-stream" not in raw.headers.get("content-type", ""):
                # A server that ignores "stream" answers with one JSON body: take it as is.
                text = raw.read().decode("utf-8", errors="replace")
                return self._completion(text, max_tokens)
            try:
                self._read_stream(raw.iter_bytes(), assembly, max_tokens)
            except Exception as err:  # reset, timeout, chunked body cut short
                if not is_transport_error(err):
                    raise
                raise self._cut(
                    assembly, f": {type(err).__name__}: {short(str(err), 80)}"
                ) from None
        if not assembly.complete:
            raise self._cut(assembly, "")
        log.debug("%s: stream complete after %d chunks", self.name, assembly.chunks)
        return self._completion_body(assembly.body(), max_tokens)

    def _read_stream(
        self, pieces: Iterator[bytes], assembly: StreamAssembly, max_tokens: int | None
    ) -> None:
        redactor = StreamRedactor(self._secrets)
        for data in sse_events(pieces):
            if data.strip() == DONE:
                assembly.done = True
                break
            chunk = json_object(data)
            if chunk is None:
                raise _Transient(
                    self._error(f"stream chunk that is not a JSON object: {short(data)}"),
                    shown=self._shown(assembly),
                )
            if "error" in chunk:
                raise self._body_error(chunk, "stream", shown=self._shown(assembly))
            text = redactor.feed(assembly.feed(chunk))
            self._check_text_size(assembly.text_chars, max_tokens)
            if text and self.on_delta is not None:
                self.on_delta(text)
        rest = redactor.flush()
        if rest and self.on_delta is not None:
            self.on_delta(rest)

    def _check_text_size(self, chars: int, max_tokens: int | None) -> None:
        """A reply longer than ``max_tokens`` can hold is a server ignoring it: stop reading."""
        cap = text_cap(max_tokens)
        if cap is not None and chars > cap:
            raise self._error(
                f"the reply passed {cap:,} characters, more than max_tokens={max_tokens:,} "
                "allows; stopped reading (the server ignores max_tokens?)"
            )

    def _limit_error(self, err: ReplyLimitError) -> ProviderError:
        if isinstance(err, DeadlineExceeded):
            return self._deadline_error(None)
        return self._error(str(err))

    def _deadline_error(self, last: ProviderError | None) -> ProviderError:
        after = f" (last failure: {_after_host(str(last))})" if last is not None else ""
        return self._error(
            f"no complete reply within {self._request_timeout:g} s, the request deadline"
            f"{after}; raise request_timeout (--request-timeout) if the model is just slow"
        )

    def _shown(self, assembly: StreamAssembly) -> bool:
        return self.on_delta is not None and any(assembly.content)

    def _cut(self, assembly: StreamAssembly, detail: str) -> _Transient:
        n = assembly.chunks
        what = f"stream ended early after {n} chunk{'' if n == 1 else 's'}{detail}"
        return _Transient(self._error(what), shown=self._shown(assembly))

    def _timeout_text(self, err: openai.APITimeoutError) -> str:
        left = seconds_left()
        if left is not None and left <= 0.05:
            return f"no complete reply within {self._request_timeout:g} s (request deadline)"
        if "connect" in type(err.__cause__).__name__.lower():
            return f"could not connect within {self._connect_timeout:g} s (connect timeout)"
        return f"no reply within {self._read_timeout:g} s (read timeout)"

    def _status_failure(self, err: openai.APIStatusError) -> Exception:
        status = err.status_code
        text = self._redact(safe_text(err.response))
        overflow = classify_error(status, text, provider=self.name)
        if overflow is not None:
            return overflow
        error = self._error(f"HTTP {status}: {server_error_text(text)}", status=status)
        if status in (401, 403) and self.api_key_env:
            error = self._error(
                f"HTTP {status}: {server_error_text(text)}; check the key in ${self.api_key_env}",
                status=status,
            )
        if is_retryable_status(status) and not is_quota(text):
            return _Transient(error, retry_after_seconds(err.response.headers))
        return error

    def _completion(self, text: str, max_tokens: int | None) -> Completion:
        body = json_object(text)
        if body is None:
            raise _Transient(
                self._error(
                    f"HTTP 200 with a body that is not a JSON object: {short(self._redact(text))}"
                )
            )
        if "error" in body:  # some gateways report failures inside a 200
            raise self._body_error(body, "HTTP 200")
        return self._completion_body(body, max_tokens)

    def _body_error(self, body: dict[str, Any], where: str, *, shown: bool = False) -> Exception:
        """An error object inside a 200 or a stream: an overflow, a retryable fault, or final."""
        failure = self._redact(json.dumps(body, ensure_ascii=False))
        overflow = classify_error(None, failure, provider=self.name)
        if overflow is not None:
            return overflow
        error = self._error(f"{where} carrying an error: {server_error_text(failure)}")
        inner = body.get("error")
        code = inner.get("code") if isinstance(inner, dict) else None
        # vLLM puts the HTTP status it would have sent in "code" of an error inside a stream.
        if isinstance(code, int) and not isinstance(code, bool) and is_retryable_status(code):
            return _Transient(error, shown=shown)
        return error

    def _completion_body(self, body: dict[str, Any], max_tokens: int | None) -> Completion:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error("HTTP 200 with no choices in the reply")
        usage = self._usage(body.get("usage"))
        choice = choices[0]
        finish = choice.get("finish_reason")
        self._check_silent_overflow(finish, usage)
        message = self._message(choice.get("message"), usage)
        self._check_text_size(_text_chars(message), max_tokens)
        return Completion(message=message, usage=usage, stop_reason=stop_reason(finish, message))

    def _usage(self, raw: object) -> Usage:
        if raw is None:
            log.debug("%s: reply without usage", self.name)
            return Usage(timestamp=time.time())
        try:
            usage = usage_from_openai(raw)
        except CtxbudgetError as err:
            log.warning("%s: unreadable usage ignored: %s", self.name, err)
            return Usage(timestamp=time.time())
        return dataclasses.replace(usage, timestamp=time.time())

    def _check_silent_overflow(self, finish: object, usage: Usage) -> None:
        if isinstance(finish, str):
            overflow = classify_error(None, finish, provider=self.name)
            if overflow is not None:  # z.ai's finish_reason "model_context_window_exceeded"
                raise ContextOverflowError(
                    str(overflow), limit=overflow.limit, prompt_tokens=usage.input_tokens or None
                )
        window = self.window
        if finish != "length" or usage.output_tokens != 0 or window is None:
            return
        if usage.input_tokens >= window * SILENT_OVERFLOW_FILL:
            raise ContextOverflowError(
                f"context overflow: the {self.name} server stopped for length with no output and "
                f"a {usage.input_tokens:,}-token prompt in a {window:,}-token window",
                prompt_tokens=usage.input_tokens,
            )

    def _message(self, raw: object, usage: Usage) -> Message:
        if not isinstance(raw, dict):
            raise self._error("HTTP 200 with a choice that has no message")
        try:
            message = message_from_openai(normalised_message(raw), "choices[0].message")
        except CtxbudgetError as err:
            raise self._error(
                f"HTTP 200 with an unreadable message: {short(self._redact(str(err)))}"
            ) from None
        return redacted_message(
            Message(
                role="assistant",
                content=message.content,
                tool_calls=message.tool_calls,
                name=message.name,
                reasoning=message.reasoning,
                usage=usage,
            ),
            self._secrets,
        )

    def _give_up(self, failure: _Transient, attempt: int, delay: float | None) -> ProviderError:
        error = failure.error
        if delay is None and failure.retry_after is not None and attempt < self.retry.max_retries:
            why = (
                f"the server asked to wait {failure.retry_after:.0f} s, "
                f"over the {self.retry.max_delay:.0f} s cap"
            )
        else:
            why = f"gave up after {attempt + 1} attempt{'s' if attempt else ''}"
        return ProviderError(f"{error} ({why})", status=error.status)

    def _error(self, what: str, *, status: int | None = None) -> ProviderError:
        where = public_url(self.base_url)
        return ProviderError(self._redact(f"{self.name} server at {where}: {what}"), status=status)

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)


class _Transient(Exception):
    """A failure worth retrying; carries the error to raise when the retries run out."""

    def __init__(
        self, error: ProviderError, retry_after: float | None = None, *, shown: bool = False
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.shown = shown
        """True when ``on_delta`` already showed part of the failed reply."""


def _check_window(window: object) -> int | None:
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise InvalidWindowError(f"window must be a positive number of tokens, got {window!r}")
    return window


def _text_chars(message: Message) -> int:
    calls = sum(len(c.arguments) for c in message.tool_calls)
    return len(message.text) + len(message.reasoning or "") + calls


def _after_host(text: str) -> str:
    """A provider error without its "NAME server at URL: " prefix."""
    return text.split(": ", 1)[1] if ": " in text else text
