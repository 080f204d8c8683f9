"""Count a request the way a llama.cpp server will: ask the server itself.

llama.cpp renders chat templates with its own Jinja engine, which does not print every value as
Python's Jinja does (``tool | string`` on a mapping: llama.cpp's ``value_object_t::as_string``
in ``common/jinja/value.h`` quotes a string that holds ``'`` as JSON and leaves other quotes and
escapes as they are). In front of a llama.cpp upstream the count can therefore come from the
server: ``POST /apply-template`` renders the request with the GGUF's own template (the route is
the chat-completions parse without the inference, ``server-context.cpp`` ``post_apply_template``),
and ``POST /tokenize`` with ``add_special`` and ``parse_special`` tokenises it as a completion
does (``handle_completions_impl``: ``tokenize_input_prompts(..., true, true)``, BOS included
when the GGUF asks for one). The count equals ``usage.prompt_tokens``, with no local files. A
recent server does both in one call, ``POST /v1/chat/completions/input_tokens``
(``handle_count_tokens``); it is asked first, and the two routes are the fallback.

HTTP goes through the providers' transport (`ctxbudget.providers.transport`): a deadline per
count, capped bodies, no retries (a count is cheap to ask again; a failing server is reported).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import OrderedDict
from typing import Any

import openai

from ctxbudget.counting.result import RequestCount
from ctxbudget.errors import CtxbudgetError, ProviderError
from ctxbudget.messages.jsondepth import JsonTooDeep
from ctxbudget.messages.model import Request
from ctxbudget.messages.openai import request_to_openai
from ctxbudget.providers.endpoint import checked_url, public_url, redact, url_secrets
from ctxbudget.providers.limits import checked_bytes, checked_seconds
from ctxbudget.providers.openai_replies import json_object, safe_text, short
from ctxbudget.providers.overflow import server_error_text
from ctxbudget.providers.streaming import DeadlineExceeded, ReplyLimitError
from ctxbudget.providers.transport import deadline_scope, http_client

__all__ = ["LLAMACPP_COUNTER_PREFIX", "LlamaCppCounter"]

LLAMACPP_COUNTER_PREFIX = "llama.cpp:"
"""``RequestCount.counter`` of a server count: this prefix and the server's URL."""

DEFAULT_COUNT_TIMEOUT = 30.0
"""Seconds for one count, all its calls together (a render and a tokenisation take
milliseconds on loopback; a busy server answers these routes between decode steps)."""
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
"""``/tokenize`` answers a JSON list of ids: ~8 bytes a token, so 64 MiB is millions of tokens."""
MAX_CACHED_PREFIXES = 4096
"""Prefix counts kept for breakdowns (``count``): an agent loop re-asks only its new messages."""

INPUT_TOKENS_ROUTE = "/v1/chat/completions/input_tokens"
"""A recent llama-server's own count of a chat request (``handle_count_tokens``: the same parse,
render and ``tokenize_mixed(prompt, true, true)`` as a completion), in one call."""
_MISSING_ROUTE = (404, 405, 501)
_NEEDS_JINJA = "requires --jinja"


class LlamaCppCounter:
    """Counts requests by asking a llama.cpp server (``llama-server --jinja``) to render and
    tokenise them: exact for any GGUF the server runs, with no local tokenizer or template.

    ``count_tokens(request)`` is what the server's ``usage.prompt_tokens`` will be: one call to
    ``/v1/chat/completions/input_tokens`` where the server has it, else ``/apply-template`` and
    ``/tokenize`` (an older server; found on the first count; ``one_call=False`` always uses them).
    ``count(request)`` is the same total with a breakdown (``RequestCounterLike``, so it can
    stand wherever the budget code takes a counter): each message owns what the prompt grows by
    when it is added, so ``sum(per_message[i + 1:])`` is exactly what follows message ``i``. The
    prefixes cost a count each (a call or two), once: they are kept by content, so a loop step
    that appends a message asks for two new ones (the new prefix and the whole request). A
    prefix that ends on an assistant message is rendered by the server as a reply to continue
    (``--no-prefill-assistant`` turns that off), which can shift a closing token or two from
    that message to the next; totals are unaffected.

    ``base_url`` is the server's root or its OpenAI ``/v1`` URL. Failures are one-line
    ``ProviderError``s that say what to do: no server, no such routes (not llama.cpp or too
    old), a server started without ``--jinja``, a reply that is not the expected JSON.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_COUNT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        one_call: bool = True,
    ) -> None:
        url = checked_url(base_url)
        self.base_url = url[: -len("/v1")] if url.endswith("/v1") else url
        self.name = LLAMACPP_COUNTER_PREFIX + public_url(self.base_url)
        self._timeout = checked_seconds(timeout, "timeout")
        self._connect_timeout = checked_seconds(connect_timeout, "connect_timeout")
        self._secrets = url_secrets(base_url)
        self._client = http_client(checked_bytes(max_reply_bytes, "max_reply_bytes"))
        self._prefixes: OrderedDict[bytes, int] = OrderedDict()
        self._one_call: bool | None = None if one_call else False
        """Whether the server counts in one call: unknown (None) until it answers."""

    def __repr__(self) -> str:
        return f"LlamaCppCounter({public_url(self.base_url)!r})"

    def close(self) -> None:
        """Close the HTTP connections (the counter is not usable afterwards)."""
        self._client.close()

    # -- what the server is asked -------------------------------------------------------

    def prompt(self, request: Request) -> str:
        """The prompt text the server renders for ``request`` (``POST /apply-template``)."""
        with deadline_scope(self._timeout):
            return self._render(_body(request))

    def count_tokens(self, request: Request) -> int:
        """The server's ``usage.prompt_tokens`` for ``request``: its render, tokenised (one call,
        or two on a server without the one-call route)."""
        with deadline_scope(self._timeout):
            return self._total(_body(request))

    def count(self, request: Request) -> RequestCount:
        """The server's count of ``request`` (``kind="exact"``) with a breakdown by growth."""
        body = _body(request)
        messages: list[dict[str, Any]] = body["messages"]
        system = 1 if request.system else 0
        with deadline_scope(self._timeout):
            total = self._total(body)
            head = self._head(body, messages[:system], with_tools=True)
            bare = self._head(body, messages[:system], with_tools=False) if request.tools else head
            grown = [head]
            key = _key(b"", {k: v for k, v in body.items() if k != "messages"}, messages[:system])
            for i in range(system, len(messages) - 1):
                key = _key(key, messages[i])
                grown.append(self._prefix_tokens(key, body, messages[: i + 1], grown[-1]))
        if head == 0:
            bare = 0  # the head did not render alone: all of it goes to the first message
        if not request.messages:  # nothing to lend the rest to: the head owns it all
            bare = total - (head - bare)
            head, grown = total, []
        per_message = tuple(b - a for a, b in itertools.pairwise([*grown, total]))
        return RequestCount(
            counter=self.name,
            kind="exact",
            total=total,
            system=bare,
            tools=head - bare,
            messages=total - head,
            per_message=per_message,
            floor=head,
        )

    # -- pieces -----------------------------------------------------------------------------

    def _head(self, body: dict[str, Any], head: list[dict[str, Any]], *, with_tools: bool) -> int:
        """The system prompt (and the tools) rendered alone; 0 where the template needs a
        message to render (its framing then goes to the first message)."""
        part = {k: v for k, v in body.items() if k != "messages" and (with_tools or k != "tools")}
        key = _key(b"head", part, head)
        cached = self._prefixes.get(key)
        if cached is not None:
            return cached
        try:
            tokens = self._total({**part, "messages": head}, generation=False)
        except ProviderError as err:
            if err.status is None or err.status in _MISSING_ROUTE:
                raise
            tokens = 0
        self._remember(key, tokens)
        return tokens

    def _prefix_tokens(
        self, key: bytes, body: dict[str, Any], messages: list[dict[str, Any]], before: int
    ) -> int:
        cached = self._prefixes.get(key)
        if cached is not None:
            self._prefixes.move_to_end(key)
            return cached
        try:
            tokens = self._total({**body, "messages": messages}, generation=False)
        except ProviderError as err:
            if err.status is None or err.status in _MISSING_ROUTE:
                raise
            tokens = before  # the template refuses this prefix: the next message owns its part
        self._remember(key, tokens)
        return tokens

    def _remember(self, key: bytes, tokens: int) -> None:
        self._prefixes[key] = tokens
        if len(self._prefixes) > MAX_CACHED_PREFIXES:
            self._prefixes.popitem(last=False)

    def _total(self, body: dict[str, Any], *, generation: bool = True) -> int:
        """Tokens of ``body`` as the server will prompt it: one call to the server's own count
        where it has one, else its render tokenised (two calls)."""
        sent = body if generation else {**body, "add_generation_prompt": False}
        if self._one_call is not False:
            try:
                reply = self._post(INPUT_TOKENS_ROUTE, sent)
            except ProviderError as err:
                if self._one_call is not None or err.status not in _MISSING_ROUTE:
                    raise
                self._one_call = False  # an older server: the two routes from now on
            else:
                self._one_call = True
                tokens = reply.get("input_tokens")
                if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                    raise self._error(
                        f"{INPUT_TOKENS_ROUTE} answered no count: {short(str(reply))}"
                    )
                return tokens
        return self._tokens(self._render(sent))

    def _render(self, body: dict[str, Any], *, generation: bool = True) -> str:
        sent = body if generation else {**body, "add_generation_prompt": False}
        reply = self._post("/apply-template", sent)
        prompt = reply.get("prompt")
        if not isinstance(prompt, str):
            raise self._error(f"/apply-template answered without a prompt: {short(str(reply))}")
        return prompt

    def _tokens(self, prompt: str) -> int:
        # As a completion tokenises its prompt: BOS where the GGUF adds one, and special-token
        # text (<|im_start|>) read as the special token.
        reply = self._post(
            "/tokenize", {"content": prompt, "add_special": True, "parse_special": True}
        )
        tokens = reply.get("tokens")
        if not isinstance(tokens, list):
            raise self._error(f"/tokenize answered without tokens: {short(str(reply))}")
        return len(tokens)

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._client.post(
                self.base_url + route,
                content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                headers={"Content-Type": "application/json"},
                timeout=_timeouts(self._connect_timeout, self._timeout),
            )
            text = response.text
        except (ReplyLimitError, DeadlineExceeded) as err:
            raise self._error(f"{route}: {err}; is the server overloaded?") from None
        except CtxbudgetError:
            raise
        except Exception as err:  # the HTTP library's connect, read and protocol errors
            raise self._error(
                f"cannot reach the server ({type(err).__name__}: {short(str(err), 80)}); "
                "start llama-server there or fix the URL"
            ) from None
        status = response.status_code
        if status in _MISSING_ROUTE:
            raise self._error(
                f"{route} answered HTTP {status}: not a llama.cpp server, or one too old for "
                "this route; count with a local tokenizer instead (--tokenizer hf:PATH)",
                status=status,
            )
        if status >= 400:
            said = server_error_text(safe_text(response))
            fix = "; start llama-server with --jinja" if _NEEDS_JINJA in said else ""
            raise self._error(f"{route} answered HTTP {status}: {said}{fix}", status=status)
        try:
            reply = json_object(text)
        except JsonTooDeep as err:
            raise self._error(f"{route}: {err}") from None
        if reply is None:
            raise self._error(f"{route} answered a body that is not a JSON object: {short(text)}")
        return reply

    def _error(self, what: str, *, status: int | None = None) -> ProviderError:
        where = public_url(self.base_url)
        return ProviderError(
            redact(f"llama.cpp server at {where}: {what}", self._secrets), status=status
        )


def _body(request: Request) -> dict[str, Any]:
    """The chat-completions body the request is sent as, without what does not render."""
    body = request_to_openai(request)
    for key in ("model", "max_tokens"):
        body.pop(key, None)
    return body


def _key(before: bytes, *parts: Any) -> bytes:
    """A digest chained over a prefix: ``O(new part)`` per message, not ``O(prefix)``."""
    digest = hashlib.blake2b(before, digest_size=16)
    for part in parts:
        # Keys in their order: llama.cpp prints a mapping in the order it was sent.
        digest.update(json.dumps(part, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\x00")
    return digest.digest()


def _timeouts(connect: float, total: float) -> Any:
    """Connect and read limits for the SDK's HTTP library; the deadline bounds the rest."""
    return openai.Timeout(total, connect=connect)
